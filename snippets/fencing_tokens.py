# Fixed: every acquisition carries a token, and the resource refuses old ones.
import time

import redis

from lockguide import FencedLock, FencedStore

r = redis.Redis()

a = FencedLock(r, "lock:ledger", ttl_ms=100)
a.acquire(blocking=False)

time.sleep(0.15)  # the same pause, past the same 100 ms lease

b = FencedLock(r, "lock:ledger", ttl_ms=10_000)
b.acquire(blocking=False)
print(f"tokens: A={a.token}, B={b.token}")
#> tokens: A=1, B=2

store = FencedStore(r, "ledger:balance", lock=b)
print("B writes with token 2: accepted =", store.try_write(b.token, "written by B").accepted)
#> B writes with token 2: accepted = True

# A wakes up, still believing it holds the lock, and writes with its token:
late = store.try_write(a.token, "written by A")
print("A writes with token 1: accepted =", late.accepted, "| highest seen:", late.highest)
#> A writes with token 1: accepted = False | highest seen: 2
print("the resource holds:", store.read())
#> the resource holds: Stored(value='written by B', token=2)
