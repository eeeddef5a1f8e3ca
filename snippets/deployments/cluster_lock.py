# Lock and FencedLock on a Redis Cluster; Redlock refuses it.
from redis.cluster import RedisCluster

from lockguide import BadArgument, FencedLock, Redlock

rc = RedisCluster(host="localhost", port=7000)

lock = FencedLock(rc, "lock:invoice-42", ttl_ms=30_000)
print("counter:", lock.counter_key)
#> counter: {lock:invoice-42}:fence
print("same slot:", rc.keyslot(lock.key) == rc.keyslot(lock.counter_key))
#> same slot: True
print("acquired:", lock.acquire(blocking=False), "| token:", lock.token)
#> acquired: True | token: 1
lock.release()

try:
    Redlock([rc], "lock:invoice-42", ttl_ms=30_000)
except BadArgument as error:
    print(str(error).split(": ")[0])  # the first part of the message
    #> masters[0] is a Redis Cluster, and its masters are not independent
