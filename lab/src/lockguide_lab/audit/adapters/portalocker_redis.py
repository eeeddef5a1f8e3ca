"""Adapter for portalocker's ``RedisLock`` (held by a pub/sub subscription, not a key).

Fencing tokens are opt-in in portalocker (``fencing=True``); the adapter turns
them on, so the fencing row reports what the option does. ``interrupt_on_lost``
is set to ``False`` so that a lost lock does not interrupt the audit's own
main thread with ``KeyboardInterrupt``; the loss is still reported by ``lost``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import redis

from lockguide_lab.audit.adapter import DEFAULT, NO_EXPIRY, Server, TtlSpec, Unsupported
from lockguide_lab.audit.adapters import version_of


class PortalockerHolder:
    def __init__(self, lock: Any, already_locked: type[Exception]) -> None:
        self.lock = lock
        self.already_locked = already_locked

    def acquire(self, wait_ms: float = 0) -> bool:
        try:
            if wait_ms <= 0:
                self.lock.acquire(timeout=0.0, fail_when_locked=True)
            else:
                self.lock.acquire(timeout=wait_ms / 1000.0, fail_when_locked=False)
        except self.already_locked:
            return False
        return True

    def acquire_default(self) -> bool:
        try:
            self.lock.acquire()
        except self.already_locked:
            return False
        return True

    def release(self) -> bool | None:
        self.lock.release()
        return None

    def extend(self, ttl_ms: int) -> bool | None:
        raise Unsupported("no lease to extend: the lock lives as long as its subscription")

    def token(self) -> int | None:
        token = self.lock.fence_token
        return None if token is None else int(token)

    def lost(self) -> bool | None:
        return bool(self.lock.lost)


class PortalockerAdapter:
    name = "portalocker RedisLock"
    version = version_of("portalocker")
    multi_master = False
    ttl_required = False

    def __init__(self, servers: Sequence[Server]) -> None:
        import portalocker  # a development dependency, imported on use
        from portalocker import exceptions

        self._lock = portalocker.RedisLock
        self._already_locked = exceptions.AlreadyLocked
        self.client: redis.Redis = servers[0].connect(decode_responses=True)

    def holder(
        self, key: str, ttl_ms: TtlSpec = DEFAULT, *, renew: bool = False
    ) -> PortalockerHolder:
        if ttl_ms == NO_EXPIRY:
            raise Unsupported("no TTL option: the lock has no lease at all")
        # No TTL to pass: the hold ends with the subscription. ``renew`` needs
        # nothing either: the keep-alive thread always runs.
        lock = self._lock(
            key,
            connection=self.client,
            interrupt_on_lost=False,
            fencing=True,
        )
        return PortalockerHolder(lock, self._already_locked)

    def close(self) -> None:
        self.client.close()


def adapter(servers: Sequence[Server]) -> PortalockerAdapter:
    """``lockguide-audit lockguide_lab.audit.adapters.portalocker_redis:adapter``"""
    return PortalockerAdapter(servers)
