# A Lock on the primary that Sentinel names; each grant counts once a replica has it.
from redis.sentinel import Sentinel

from lockguide import Lock

sentinel = Sentinel([("localhost", 26379), ("localhost", 26380), ("localhost", 26381)])
primary = sentinel.master_for("mymaster", socket_timeout=10.0)

# replicas=1: WAIT 1 goes with the SET, on the same connection, in the same round trip.
# A grant no replica acknowledged within replicas_timeout_ms is deleted, and the try
# fails (last_error: NotReplicated); a blocking acquire tries again until its deadline.
lock = Lock(primary, "lock:nightly-report", ttl_ms=30_000, replicas=1, replicas_timeout_ms=100)
print("acquired:", lock.acquire(blocking=False))
#> acquired: True
holder = lock.holder()  # on call at 3 am: who holds it, since when, for how much longer
print("held by this thread:", holder.name.endswith(":MainThread"), holder.ttl_ms > 25_000)
#> held by this thread: True True
lock.release()

# Do not build a Redlock over Sentinel services: a failover behind one of them hands
# its vote to a replica that may lack the key, which the checklist forbids. To stay
# safe through failover, fence the writes or use a consensus lock.
