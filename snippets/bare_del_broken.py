# Broken: a hand-written lock released with a bare DEL.
# A stalls past its lease; its DEL then removes B's lock and lets C in.
import secrets
import time

import redis

r = redis.Redis()
KEY = "lock:ledger"

a_value = secrets.token_hex(20)
print("A acquires:", r.set(KEY, a_value, nx=True, px=100))
#> A acquires: True

time.sleep(0.15)  # A pauses (GC, swap, a slow call) for longer than its 100 ms lease

b_value = secrets.token_hex(20)
print("B acquires:", r.set(KEY, b_value, nx=True, px=10_000))
#> B acquires: True

# A wakes up, finishes its work and "releases" in its finally block:
print("A's DEL removed keys:", r.delete(KEY))
#> A's DEL removed keys: 1

c_value = secrets.token_hex(20)
print("C acquires while B still works:", r.set(KEY, c_value, nx=True, px=10_000))
#> C acquires while B still works: True
