"""Adapter for redlock-py's ``redlock.Redlock`` over every server the audit gives it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import redis

from lockguide_lab.audit.adapter import DEFAULT, NO_EXPIRY, Server, TtlSpec, Unsupported
from lockguide_lab.audit.adapters import version_of


class RedlockPyHolder:
    def __init__(self, adapter: RedlockPyAdapter, key: str, ttl_ms: int) -> None:
        self.adapter = adapter
        self.key = key
        self.ttl_ms = ttl_ms
        self.held: Any = None

    def acquire(self, wait_ms: float = 0) -> bool:
        # One attempt, or the library's own retry loop (3 attempts, 200 ms apart).
        manager = self.adapter.manager(retry_count=1 if wait_ms <= 0 else None)
        result = manager.lock(self.key, self.ttl_ms)
        if result is False:
            return False
        self.held = result
        return True

    def acquire_default(self) -> bool:
        result = self.adapter.manager().lock(self.key, self.ttl_ms)  # its 3 tries
        if result is False:
            return False
        self.held = result
        return True

    def release(self) -> bool | None:
        if self.held is None:
            raise RuntimeError("not acquired")
        held, self.held = self.held, None
        self.adapter.manager().unlock(held)
        return None

    def extend(self, ttl_ms: int) -> bool | None:
        raise Unsupported("redlock-py has no extend")

    def token(self) -> int | None:
        return None

    def lost(self) -> bool | None:
        return None


class RedlockPyAdapter:
    name = "redlock-py"
    version = version_of("redlock-py")
    multi_master = True
    ttl_required = True

    def __init__(self, servers: Sequence[Server]) -> None:
        import redlock  # a development dependency, imported on use

        self._redlock = redlock.Redlock
        self.clients: list[redis.Redis] = [server.connect() for server in servers]

    def manager(self, retry_count: int | None = None) -> Any:
        return self._redlock(self.clients, retry_count=retry_count)

    def holder(
        self, key: str, ttl_ms: TtlSpec = DEFAULT, *, renew: bool = False
    ) -> RedlockPyHolder:
        if renew:
            raise Unsupported("no automatic renewal")
        if ttl_ms in (DEFAULT, NO_EXPIRY):
            raise Unsupported("the TTL is a required argument of lock()")
        assert isinstance(ttl_ms, int)
        return RedlockPyHolder(self, key, ttl_ms)

    def close(self) -> None:
        for client in self.clients:
            client.close()


def adapter(servers: Sequence[Server]) -> RedlockPyAdapter:
    """``lockguide-audit lockguide_lab.audit.adapters.redlock_py:adapter``"""
    return RedlockPyAdapter(servers)
