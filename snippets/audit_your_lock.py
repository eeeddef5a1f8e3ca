import secrets

import redis

from lockguide_lab.audit import DEFAULT, Server, Unsupported, audit_on


class TeamLock:
    """The lock under review: SET NX PX with a random value, released by a bare DEL."""

    def __init__(self, client, key, ttl_ms=30_000):
        self.client, self.key, self.ttl_ms = client, key, ttl_ms

    def acquire(self):
        value = secrets.token_hex(20)
        return bool(self.client.set(self.key, value, nx=True, px=self.ttl_ms))

    def release(self):
        self.client.delete(self.key)


class TeamLockHolder:
    def __init__(self, lock):
        self.lock = lock

    def acquire(self, wait_ms=0):
        return self.lock.acquire()

    def release(self):
        self.lock.release()

    def extend(self, ttl_ms):
        raise Unsupported("TeamLock cannot extend")

    def token(self):
        return None

    def lost(self):
        return None


class TeamLockAdapter:
    name = "TeamLock"
    version = "1.0"
    multi_master = False
    ttl_required = False

    def __init__(self, servers):
        self.client = servers[0].connect()

    def holder(self, key, ttl_ms=DEFAULT, *, renew=False):
        if renew:
            raise Unsupported("no automatic renewal")
        if ttl_ms == DEFAULT:
            return TeamLockHolder(TeamLock(self.client, key))
        if not isinstance(ttl_ms, int):
            raise Unsupported("no option to switch the TTL off")
        return TeamLockHolder(TeamLock(self.client, key, ttl_ms))

    def close(self):
        self.client.close()


server = Server("my-redis", connect=redis.Redis)
checks = ["unique", "unpredictable", "release", "ttl", "pause"]
report = audit_on(TeamLockAdapter, [server], backend="example", checks=checks)
for row in report.rows:
    print(f"{row.status.value:>4}  {row.title}")
    #> pass  unique value (the Redis docs' rule)
    #> pass  unpredictable value (the guide's own rule)
    #> fail  release is compare-and-delete
    #> pass  a TTL is set by default
    #> warn  a pause past the TTL leads to overlap

print(report.row("release").summary)
#> no: A's stale release removed B's lock, and C acquired while B held it
print("exit status:", report.exit_code)
#> exit status: 1
