# Broken: a failover loses the lock *and* the last increments of the token
# counter. The new holder draws a lower token than a stale holder still has,
# and the stale holder's write, arriving later, is accepted on top.
import redis

from lockguide import FencedLock, FencedStore

r = redis.Redis()
store = FencedStore(r, "ledger:balance")
r.set("{lock:ledger}:fence", 3)  # tokens 1 to 3 were drawn long ago, and replicated
store.write(3, "balance after token 3")

# On the primary, two more grants, which the replica has not received yet:
p = FencedLock(r, "lock:ledger", ttl_ms=10_000)
p.acquire(blocking=False)
p.release()  # P drew token 4, found nothing to do, released
a = FencedLock(r, "lock:ledger", ttl_ms=10_000)
a.acquire(blocking=False)
a_token = a.token  # A draws token 5; its write is slow to arrive
print("A's token:", a_token)
#> A's token: 5

# Failover: the promoted replica has no lock key, and its counter says 3.
r.delete("lock:ledger")
r.set("{lock:ledger}:fence", 3)

b = FencedLock(r, "lock:ledger", ttl_ms=10_000)
b.acquire(blocking=False)
print("B holds the lock now, with token", b.token)
#> B holds the lock now, with token 4
print("B writes:", store.try_write(b.token, "balance after B").accepted)
#> B writes: True
print("A's write arrives:", store.try_write(a_token, "balance after A").accepted)
#> A's write arrives: True
print(store.read())
#> Stored(value='balance after A', token=5)
