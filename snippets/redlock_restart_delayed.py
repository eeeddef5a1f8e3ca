# Fixed by a delayed restart: the crashed master comes back only after the
# largest TTL in use has passed, so every lease it knew about is over.
import time

import redis

from lockguide import Redlock

masters = [redis.Redis(port=port) for port in range(6379, 6384)]
KEY = "lock:ledger"
MAX_TTL_MS = 300  # the longest TTL any client uses

for m in masters[3:]:
    m.set(KEY, "an earlier holder", px=30_000)
a = Redlock(masters, KEY, ttl_ms=MAX_TTL_MS)
print("A acquires:", a.acquire(blocking=False), "with", a.last_attempt.granted, "masters")
#> A acquires: True with 3 masters
for m in masters[3:]:
    m.delete(KEY)

# Master 2 crashes. While it is down it grants nothing, so B cannot win. (Here
# it answers "no" with A's old key; a master that is down does not answer at
# all. Either way B gets no vote from it.)
b = Redlock(masters, KEY, ttl_ms=10_000)
print("B acquires while master 2 is down:", b.acquire(blocking=False))
#> B acquires while master 2 is down: False

time.sleep(MAX_TTL_MS / 1000 + 0.05)  # the restart waits out the largest TTL ...
masters[2].flushall()  # ... and then the master comes back empty

print("B acquires after the delayed restart:", b.acquire(blocking=False))
#> B acquires after the delayed restart: True
print("A's lease was already over:", a.validity_remaining_ms() == 0.0)
#> A's lease was already over: True
