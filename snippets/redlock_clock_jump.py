# A forward clock jump on one master, modelled as what it does: that master
# expires A's key early. A held a bare majority (masters 0, 1, 2), so B can now
# win masters 2, 3 and 4 while A is well inside its validity.
import redis

from lockguide import Redlock

masters = [redis.Redis(port=port) for port in range(6379, 6384)]
KEY = "lock:ledger"

# Another client still holds masters 3 and 4 while A acquires ...
for m in masters[3:]:
    m.set(KEY, "an earlier holder", px=30_000)
a = Redlock(masters, KEY, ttl_ms=10_000)
print("A acquires:", a.acquire(blocking=False), "with", a.last_attempt.granted, "masters")
#> A acquires: True with 3 masters
# ... and releases them right after.
for m in masters[3:]:
    m.delete(KEY)

# Master 2's clock jumps ahead by more than the TTL: for Redis, A's key is
# now expired there. (PEXPIRE 1 makes the same thing happen without touching
# the server's clock.)
masters[2].pexpire(KEY, 1)
while masters[2].exists(KEY):
    pass

b = Redlock(masters, KEY, ttl_ms=10_000)
print("B acquires:", b.acquire(blocking=False), "with", b.last_attempt.granted, "masters")
#> B acquires: True with 3 masters
print("A's validity left (ms) > 9000:", a.validity_remaining_ms() > 9_000)
#> A's validity left (ms) > 9000: True
