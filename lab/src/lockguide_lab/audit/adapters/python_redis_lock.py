"""Adapter for python-redis-lock's ``redis_lock.Lock`` (one Redis instance)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import redis

from lockguide_lab.audit.adapter import DEFAULT, NO_EXPIRY, Server, TtlSpec, Unsupported
from lockguide_lab.audit.adapters import seconds, version_of


class PythonRedisLockHolder:
    def __init__(self, lock: Any, refused: type[Exception]) -> None:
        self.lock = lock
        self.refused = refused

    def acquire(self, wait_ms: float = 0) -> bool:
        if wait_ms <= 0:
            return bool(self.lock.acquire(blocking=False))
        try:
            return bool(self.lock.acquire(blocking=True, timeout=seconds(int(wait_ms))))
        except self.refused as error:  # said, not replaced by a shorter wait it accepts
            raise Unsupported(f"a wait longer than its expire ({error})") from error

    def acquire_default(self) -> bool:
        return bool(self.lock.acquire())

    def release(self) -> bool | None:
        self.lock.release()
        return None

    def extend(self, ttl_ms: int) -> bool | None:
        self.lock.extend(expire=seconds(ttl_ms))
        return None

    def token(self) -> int | None:
        return None

    def lost(self) -> bool | None:
        return None  # no public signal; the renewal thread keeps its failures to itself


class PythonRedisLockAdapter:
    name = "python-redis-lock"
    version = version_of("python-redis-lock")
    multi_master = False
    ttl_required = False

    def __init__(self, servers: Sequence[Server]) -> None:
        import redis_lock  # a development dependency, imported on use

        self._lock = redis_lock.Lock
        self._refused = redis_lock.TimeoutTooLarge
        self.client: redis.Redis = servers[0].connect()

    def holder(
        self, key: str, ttl_ms: TtlSpec = DEFAULT, *, renew: bool = False
    ) -> PythonRedisLockHolder:
        expire = None if ttl_ms in (DEFAULT, NO_EXPIRY) else seconds(int(ttl_ms))
        lock = self._lock(self.client, key, expire=expire, auto_renewal=renew)
        return PythonRedisLockHolder(lock, self._refused)

    def close(self) -> None:
        self.client.close()


def adapter(servers: Sequence[Server]) -> PythonRedisLockAdapter:
    """``lockguide-audit lockguide_lab.audit.adapters.python_redis_lock:adapter``"""
    return PythonRedisLockAdapter(servers)
