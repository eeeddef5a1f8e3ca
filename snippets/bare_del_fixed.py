# Fixed: release is compare-and-delete, so a stale holder cannot touch B's lock.
import time

import redis

from lockguide import Lock, LockLost

r = redis.Redis()
KEY = "lock:ledger"

a = Lock(r, KEY, ttl_ms=100)
print("A acquires:", a.acquire(blocking=False))
#> A acquires: True

time.sleep(0.15)  # the same pause, past the same 100 ms lease

b = Lock(r, KEY, ttl_ms=10_000)
print("B acquires:", b.acquire(blocking=False))
#> B acquires: True

try:
    a.release()
except LockLost:
    print("A's release refused: the key holds B's value now")
    #> A's release refused: the key holds B's value now

c = Lock(r, KEY, ttl_ms=10_000)
print("C acquires while B still works:", c.acquire(blocking=False))
#> C acquires while B still works: False
print("the key still holds B's value:", r.get(KEY) == b.value.encode())
#> the key still holds B's value: True
