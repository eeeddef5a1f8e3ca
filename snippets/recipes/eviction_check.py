# At start-up: refuse a Redis whose memory policy can evict a held lock.
import redis

r = redis.Redis()


class UnsafeEviction(RuntimeError):
    """Set maxmemory-policy to noeviction, or move the locks to an instance that has it."""


def check_eviction() -> str:
    """The policy in force, if it cannot evict a lock; 'unknown' if CONFIG is not allowed."""
    try:
        config = r.config_get("maxmemory", "maxmemory-policy")
    except redis.ResponseError:  # CONFIG disabled (many managed services): check the console
        return "unknown"
    policy = config["maxmemory-policy"]
    if policy == "noeviction" or config["maxmemory"] == "0":
        return policy  # no eviction: a full memory makes writes fail, visibly
    if policy.startswith("volatile-"):  # keys with a TTL go first: every lock has one
        raise UnsafeEviction(f"{policy} evicts keys with a TTL, held locks included")
    raise UnsafeEviction(f"{policy} evicts any key: held locks and fencing counters")
