# Broken: the check-and-set on the lock's random value, in the order where the
# stale holder marks the resource *after* the new holder. The mark is an
# unconditional write, so the stale holder takes the resource over.
import time

import redis

from lockguide import Lock

r = redis.Redis()
RESOURCE = "report:state"
# Write only if the resource is still marked with the writer's lock value, in one script.
WRITE_IF_MARKED = """
if redis.call('HGET', KEYS[1], 'mark') ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'data', ARGV[2])
return 1
"""


def mark(value):
    r.hset(RESOURCE, "mark", value)  # "set its state to the token": no condition


def write(value, data):
    return r.eval(WRITE_IF_MARKED, 1, RESOURCE, value, data) == 1


a = Lock(r, "lock:report", ttl_ms=100)
a.acquire(blocking=False)
time.sleep(0.15)  # A pauses after acquiring and before marking; its lease runs out

b = Lock(r, "lock:report", ttl_ms=10_000)
print("B acquires:", b.acquire(blocking=False))
#> B acquires: True
mark(b.value)
print("B writes its first step:", write(b.value, "B: step 1"))
#> B writes its first step: True

mark(a.value)  # A resumes where it stopped: it marks the resource
print("A, whose lease is over, writes:", write(a.value, "A's data"))
#> A, whose lease is over, writes: True
print("B, the holder, writes its second step:", write(b.value, "B: step 2"))
#> B, the holder, writes its second step: False
print("the resource holds:", r.hget(RESOURCE, "data").decode())
#> the resource holds: A's data
