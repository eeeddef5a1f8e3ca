# A Lock on the primary that Sentinel names, and WAIT for a replica to have the key.
from redis.sentinel import Sentinel

from lockguide import Lock

sentinel = Sentinel([("localhost", 26379), ("localhost", 26380), ("localhost", 26381)])
primary = sentinel.master_for("mymaster", socket_timeout=10.0)

lock = Lock(primary, "lock:nightly-report", ttl_ms=30_000)
print("acquired:", lock.acquire(blocking=False))
#> acquired: True
holder = lock.holder()  # on call at 3 am: who holds it, since when, for how much longer
print("held by this thread:", holder.name.endswith(":MainThread"), holder.ttl_ms > 25_000)
#> held by this thread: True True

# WAIT counts the replicas that have this connection's writes so far; the lock's
# SET went on the lock's own connection, so write after it, and WAIT on the same
# connection (a pipeline sends both on one): that covers the SET before it.
with primary.pipeline(transaction=False) as pipe:
    pipe.set("report:started", "1")
    pipe.wait(1, 5_000)  # returns as soon as one replica has it (at most 5 s)
    _, replicas = pipe.execute()
print("replicas that have the key:", replicas)
#> replicas that have the key: 1
lock.release()

# Do not build a Redlock over Sentinel services: a failover behind one of them hands
# its vote to a replica that may lack the key, which the checklist forbids. To stay
# safe through failover, fence the writes or use a consensus lock.
