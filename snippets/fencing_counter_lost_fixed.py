# Fixed: the same failover, with a counter that does not go back. The failover
# loses the lock key, but the next token is still above every token drawn.
import redis

from lockguide import FencedLock, FencedStore

r = redis.Redis()
store = FencedStore(r, "ledger:balance")
r.set("{lock:ledger}:fence", 3)  # tokens 1 to 3 were drawn long ago
store.write(3, "balance after token 3")

p = FencedLock(r, "lock:ledger", ttl_ms=10_000)
p.acquire(blocking=False)
p.release()  # P drew token 4, found nothing to do, released
a = FencedLock(r, "lock:ledger", ttl_ms=10_000)
a.acquire(blocking=False)
a_token = a.token  # A draws token 5; its write is slow to arrive

r.delete("lock:ledger")  # the failover loses A's lock, but not the counter

b = FencedLock(r, "lock:ledger", ttl_ms=10_000)
b.acquire(blocking=False)
print("B holds the lock now, with token", b.token)
#> B holds the lock now, with token 6
print("B writes:", store.try_write(b.token, "balance after B").accepted)
#> B writes: True
print("A's write arrives:", store.try_write(a_token, "balance after A").accepted)
#> A's write arrives: False
print(store.read())
#> Stored(value='balance after B', token=6)
