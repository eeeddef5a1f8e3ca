# Broken: a master restarts at once, without its data, while A holds the lock.
# A won a bare majority (0, 1, 2); after the restart B wins 2, 3 and 4.
import redis

from lockguide import Redlock

masters = [redis.Redis(port=port) for port in range(6379, 6384)]
KEY = "lock:ledger"

for m in masters[3:]:
    m.set(KEY, "an earlier holder", px=30_000)  # busy while A acquires ...
a = Redlock(masters, KEY, ttl_ms=10_000)
print("A acquires:", a.acquire(blocking=False), "with", a.last_attempt.granted, "masters")
#> A acquires: True with 3 masters
for m in masters[3:]:
    m.delete(KEY)  # ... released right after

# Master 2 crashes and comes straight back, empty: no AOF, or an fsync policy
# that had not written the key yet. (FLUSHALL leaves it in the same state.)
masters[2].flushall()

b = Redlock(masters, KEY, ttl_ms=10_000)
print("B acquires:", b.acquire(blocking=False), "with", b.last_attempt.granted, "masters")
#> B acquires: True with 3 masters
print("A still inside its validity:", a.validity_remaining_ms() > 9_000)
#> A still inside its validity: True
