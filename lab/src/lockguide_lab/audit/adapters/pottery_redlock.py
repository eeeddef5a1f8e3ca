"""Adapter for pottery's ``Redlock`` over every server the audit gives it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import redis

from lockguide_lab.audit.adapter import DEFAULT, NO_EXPIRY, Server, TtlSpec, Unsupported
from lockguide_lab.audit.adapters import version_of


class PotteryHolder:
    def __init__(self, lock: Any) -> None:
        self.lock = lock

    def acquire(self, wait_ms: float = 0) -> bool:
        if wait_ms <= 0:
            return bool(self.lock.acquire(blocking=False))
        return bool(self.lock.acquire(blocking=True, timeout=wait_ms / 1000.0))

    def acquire_default(self) -> bool:
        return bool(self.lock.acquire())

    def release(self) -> bool | None:
        self.lock.release()
        return None

    def extend(self, ttl_ms: int) -> bool | None:
        self.lock.auto_release_time = ttl_ms / 1000.0
        self.lock.extend()
        return None

    def token(self) -> int | None:
        return None

    def lost(self) -> bool | None:
        return None  # locked() asks the masters: no signal of its own


class PotteryAdapter:
    name = "pottery Redlock"
    version = version_of("pottery")
    multi_master = True
    ttl_required = False

    def __init__(self, servers: Sequence[Server]) -> None:
        from pottery import Redlock  # a development dependency, imported on use

        self._redlock = Redlock
        self.clients: list[redis.Redis] = [server.connect() for server in servers]

    def holder(self, key: str, ttl_ms: TtlSpec = DEFAULT, *, renew: bool = False) -> PotteryHolder:
        if renew:
            raise Unsupported("no automatic renewal: call extend() (capped at 3 by default)")
        if ttl_ms == NO_EXPIRY:
            raise Unsupported("auto_release_time cannot be switched off")
        if ttl_ms == DEFAULT:
            return PotteryHolder(self._redlock(key=key, masters=set(self.clients)))
        assert isinstance(ttl_ms, int)
        return PotteryHolder(
            self._redlock(key=key, masters=set(self.clients), auto_release_time=ttl_ms / 1000.0)
        )

    def close(self) -> None:
        for client in self.clients:
            client.close()


def adapter(servers: Sequence[Server]) -> PotteryAdapter:
    """``lockguide-audit lockguide_lab.audit.adapters.pottery_redlock:adapter``"""
    return PotteryAdapter(servers)
