# A Lock on the primary that Sentinel names; WAIT; a Redlock over three Sentinel services.
from redis.sentinel import Sentinel

from lockguide import BadArgument, Lock, Redlock

sentinel = Sentinel([("localhost", 26379), ("localhost", 26380), ("localhost", 26381)])
primary = sentinel.master_for("mymaster", socket_timeout=10.0)

lock = Lock(primary, "lock:nightly-report", ttl_ms=30_000)
print("acquired:", lock.acquire(blocking=False))
#> acquired: True

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

# Three services are three masters: a Redlock tells them apart by service name...
masters = [sentinel.master_for(name) for name in ("mymaster", "solo-1", "solo-2")]
with Redlock(masters, "lock:nightly-report", ttl_ms=30_000) as redlock:
    print("Redlock granted by", redlock.last_attempt.granted, "of", len(masters))
    #> Redlock granted by 3 of 3

# ...and refuses one service given twice: one failure would count as two votes.
try:
    Redlock([masters[0], sentinel.master_for("mymaster")], "lock:x", ttl_ms=30_000)
except BadArgument as error:
    print(str(error).split("; ")[0])  # the first part of the message
    #> masters[0] and masters[1] are the same Redis server
