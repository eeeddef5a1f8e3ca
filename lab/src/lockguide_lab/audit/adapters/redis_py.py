"""Adapter for redis-py's own ``redis.lock.Lock`` (``client.lock(name)``)."""

from __future__ import annotations

from collections.abc import Sequence

import redis
from redis.lock import Lock

from lockguide_lab.audit.adapter import DEFAULT, NO_EXPIRY, Server, TtlSpec, Unsupported


class RedisPyHolder:
    def __init__(self, lock: Lock) -> None:
        self.lock = lock

    def acquire(self, wait_ms: float = 0) -> bool:
        if wait_ms <= 0:
            return bool(self.lock.acquire(blocking=False))
        return bool(self.lock.acquire(blocking=True, blocking_timeout=wait_ms / 1000.0))

    def acquire_default(self) -> bool:
        return bool(self.lock.acquire())

    def release(self) -> bool | None:
        self.lock.release()
        return None

    def extend(self, ttl_ms: int) -> bool | None:
        return bool(self.lock.extend(ttl_ms / 1000.0, replace_ttl=True))

    def token(self) -> int | None:
        return None

    def lost(self) -> bool | None:
        return None  # owned() exists, but it asks Redis: no signal of its own


class RedisPyAdapter:
    name = "redis-py Lock"
    version = redis.__version__
    multi_master = False
    ttl_required = False

    def __init__(self, servers: Sequence[Server]) -> None:
        self.client: redis.Redis = servers[0].connect()

    def holder(self, key: str, ttl_ms: TtlSpec = DEFAULT, *, renew: bool = False) -> RedisPyHolder:
        if renew:
            raise Unsupported("no automatic renewal: call extend()")
        if ttl_ms in (DEFAULT, NO_EXPIRY):
            return RedisPyHolder(self.client.lock(key))  # timeout=None: no expiry
        assert isinstance(ttl_ms, int)
        return RedisPyHolder(self.client.lock(key, timeout=ttl_ms / 1000.0))

    def close(self) -> None:
        self.client.close()


def adapter(servers: Sequence[Server]) -> RedisPyAdapter:
    """``lockguide-audit lockguide_lab.audit.adapters.redis_py:adapter``"""
    return RedisPyAdapter(servers)
