"""Adapter for sherlock's Redis backend, ``sherlock.RedisLock``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import redis

from lockguide_lab.audit.adapter import DEFAULT, NO_EXPIRY, Server, TtlSpec, Unsupported
from lockguide_lab.audit.adapters import seconds, version_of


class SherlockHolder:
    def __init__(self, lock: Any, timeout_error: type[Exception]) -> None:
        self.lock = lock
        self.timeout_error = timeout_error

    def acquire(self, wait_ms: float = 0) -> bool:
        if wait_ms <= 0:
            return bool(self.lock.acquire(blocking=False))
        self.lock.timeout = wait_ms / 1000.0
        try:
            return bool(self.lock.acquire(blocking=True))
        except self.timeout_error:
            return False

    def acquire_default(self) -> bool:
        try:
            return bool(self.lock.acquire())
        except self.timeout_error:
            return False

    def release(self) -> bool | None:
        self.lock.release()
        return None

    def extend(self, ttl_ms: int) -> bool | None:
        self.lock.expire = seconds(ttl_ms)
        return bool(self.lock.renew())

    def token(self) -> int | None:
        return None

    def lost(self) -> bool | None:
        return None  # locked() asks Redis whether anyone holds the key


class SherlockAdapter:
    name = "sherlock RedisLock"
    version = version_of("sherlock")
    multi_master = False
    ttl_required = False

    def __init__(self, servers: Sequence[Server]) -> None:
        import sherlock  # a development dependency, imported on use

        self._sherlock = sherlock
        self.client: redis.Redis = servers[0].connect()
        self.locks: list[Any] = []

    def holder(self, key: str, ttl_ms: TtlSpec = DEFAULT, *, renew: bool = False) -> SherlockHolder:
        if renew:
            raise Unsupported("no automatic renewal: call renew()")
        kwargs: dict[str, Any] = {"client": self.client}
        if ttl_ms == NO_EXPIRY:
            kwargs["expire"] = None  # its documented "never expires" option
        elif ttl_ms != DEFAULT:
            kwargs["expire"] = seconds(int(ttl_ms))
        lock = self._sherlock.RedisLock(key, **kwargs)
        self.locks.append(lock)
        return SherlockHolder(lock, self._sherlock.LockTimeoutException)

    def close(self) -> None:
        # sherlock's __del__ releases a lock it believes it owns; forget
        # ownership now, so that it does not run against stopped servers.
        for lock in self.locks:
            lock._owner = None
        self.client.close()


def adapter(servers: Sequence[Server]) -> SherlockAdapter:
    """``lockguide-audit lockguide_lab.audit.adapters.sherlock_redis:adapter``"""
    return SherlockAdapter(servers)
