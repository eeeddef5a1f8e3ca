"""Adapter for :class:`lockguide.Lock` (one Redis instance)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import redis

from lockguide import Lock
from lockguide.audit.adapter import DEFAULT, NO_EXPIRY, Server, TtlSpec, Unsupported
from lockguide.audit.adapters import version_of


@dataclass
class LockguideHolder:
    lock: Lock

    def acquire(self, wait_ms: float = 0) -> bool:
        return self.lock.acquire(blocking=wait_ms > 0, timeout_ms=wait_ms)

    def release(self) -> bool | None:
        self.lock.release()
        return None

    def extend(self, ttl_ms: int) -> bool | None:
        self.lock.extend(ttl_ms)
        return None

    def token(self) -> int | None:
        return None

    def lost(self) -> bool | None:
        # The lock keeps its own deadline on the monotonic clock.
        return self.lock.validity_remaining_ms() <= 0


class LockguideAdapter:
    name = "lockguide Lock"
    version = version_of("lockguide")
    multi_master = False
    ttl_required = True

    def __init__(self, servers: Sequence[Server]) -> None:
        self.client: redis.Redis = servers[0].connect()

    def holder(
        self, key: str, ttl_ms: TtlSpec = DEFAULT, *, renew: bool = False
    ) -> LockguideHolder:
        if renew:
            raise Unsupported("no automatic renewal: call extend()")
        if ttl_ms in (DEFAULT, NO_EXPIRY):
            raise Unsupported("ttl_ms is a required, positive argument")
        assert isinstance(ttl_ms, int)
        return LockguideHolder(Lock(self.client, key, ttl_ms, retry_delay_ms=(20.0, 80.0)))

    def close(self) -> None:
        self.client.close()


def adapter(servers: Sequence[Server]) -> LockguideAdapter:
    """``python -m lockguide.audit lockguide.audit.adapters.lockguide_lock:adapter``"""
    return LockguideAdapter(servers)
