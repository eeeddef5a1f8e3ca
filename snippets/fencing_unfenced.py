# Broken: the lock alone. A pauses past its lease, B takes over and writes,
# then A wakes up and overwrites B's write. Nothing refuses it.
import time

import redis

from lockguide import Lock

r = redis.Redis()

a = Lock(r, "lock:ledger", ttl_ms=100)
print("A acquires:", a.acquire(blocking=False))
#> A acquires: True

time.sleep(0.15)  # A pauses (GC, a stalled VM) for longer than its 100 ms lease

b = Lock(r, "lock:ledger", ttl_ms=10_000)
print("B acquires:", b.acquire(blocking=False))
#> B acquires: True
r.set("ledger:balance", "written by B")

# A wakes up. It still believes it holds the lock, so it writes:
r.set("ledger:balance", "written by A")
print("the resource holds:", r.get("ledger:balance").decode())
#> the resource holds: written by A
