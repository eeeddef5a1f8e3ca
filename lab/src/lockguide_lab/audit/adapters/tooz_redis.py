"""Adapter for tooz's Redis driver: ``coordinator.get_lock(name)`` on one Redis instance.

What the code (tooz 9.1.0, ``tooz/drivers/redis.py`` and ``tooz/coordination.py``) gives a user:
a coordinator made from a URL (``tooz.coordination.get_coordinator("redis://host:port",
member_id)``), started with ``start(start_heart=True)`` for a thread that heartbeats;
``get_lock(name)`` wraps redis-py's ``Lock`` on the key ``_tooz_<name>_lock`` with the
coordinator's ``lock_timeout`` (whole seconds, 30 by default) as its TTL. Each heartbeat
(every half of the shorter of ``lock_timeout`` and ``membership_timeout``) resets the TTL of
every lock the coordinator holds; a heartbeat that fails is logged, and the holder is not told.
``acquire()`` blocks with no deadline by default.

Each holder gets a coordinator of its own, as each process of a service has one;
``renew=True`` starts its heart.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from lockguide_lab.audit.adapter import DEFAULT, NO_EXPIRY, Server, TtlSpec, Unsupported
from lockguide_lab.audit.adapters import seconds, version_of


class ToozHolder:
    def __init__(self, coordinator: Any, key: str) -> None:
        self.coordinator = coordinator
        self.lock: Any = coordinator.get_lock(key.encode())

    def acquire(self, wait_ms: float = 0) -> bool:
        if wait_ms <= 0:
            return bool(self.lock.acquire(blocking=False))
        return bool(self.lock.acquire(blocking=True, timeout=wait_ms / 1000.0))

    def acquire_default(self) -> bool:
        return bool(self.lock.acquire())

    def release(self) -> bool | None:
        return bool(self.lock.release())  # False (and a log line) when the key was not ours

    def extend(self, ttl_ms: int) -> bool | None:
        # tooz renews with heartbeat(), to the coordinator's lock_timeout: no other length.
        return bool(self.lock.heartbeat())

    def token(self) -> int | None:
        return None

    def lost(self) -> bool | None:
        return None  # is_still_owner() asks Redis; a failed heartbeat is only logged

    def stop(self) -> None:
        self.coordinator.stop()


class ToozAdapter:
    name = "tooz (Redis driver)"
    version = version_of("tooz")
    multi_master = False
    ttl_required = False

    def __init__(self, servers: Sequence[Server]) -> None:
        from tooz import coordination  # a development dependency, imported on use

        address = servers[0].address
        if address is None:
            raise Unsupported("tooz connects by URL: it needs a real server")
        self._coordination = coordination
        self.url = f"redis://{address[0]}:{address[1]}"
        self.holders: list[ToozHolder] = []

    def holder(self, key: str, ttl_ms: TtlSpec = DEFAULT, *, renew: bool = False) -> ToozHolder:
        if ttl_ms == NO_EXPIRY:
            raise Unsupported("every lock has the coordinator's lock_timeout")
        options: dict[str, Any] = {}
        if ttl_ms != DEFAULT:
            options["lock_timeout"] = str(seconds(int(ttl_ms)))
        coordinator = self._coordination.get_coordinator(
            self.url, f"audit-{uuid.uuid4().hex}".encode(), **options
        )
        coordinator.start(start_heart=renew)
        made = ToozHolder(coordinator, key)
        self.holders.append(made)
        return made

    def close(self) -> None:
        for made in self.holders:
            made.stop()
        self.holders.clear()


def adapter(servers: Sequence[Server]) -> ToozAdapter:
    """``lockguide-audit lockguide_lab.audit.adapters.tooz_redis:adapter``"""
    return ToozAdapter(servers)
