"""Adapter for :class:`lockguide.Redlock` over every server the audit gives it.

The per-master timeout is the one setting the adapter chooses. The library's
default, 50 ms, is sized for a LAN, where a master answers in well under a
millisecond. The parallel-acquisition check puts a link in front of each
master that holds every request for 30 ms (``LINK_DELAY_S``): on a network
that slow a team would raise the timeout above its round trip, and so does the
adapter, to three delays (90 ms). The check then times the fan-out of the
SETs, not masters that a tight timeout counted as silent. 90 ms is still under
1 % of the 10 s leases most checks use, and leaves validity in the 300 ms lease
of the pause check (300 - 90 - 5 ms drift > 0).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import redis

from lockguide import Redlock
from lockguide.redlock import DEFAULT_NODE_TIMEOUT_MS
from lockguide_lab.audit.adapter import DEFAULT, NO_EXPIRY, Server, TtlSpec, Unsupported
from lockguide_lab.audit.adapters import process_clock, version_of
from lockguide_lab.audit.adapters.lockguide_lock import LockguideHolder
from lockguide_lab.audit.checks import LINK_DELAY_S

#: Per-master timeout: the library's default, or three link delays if that is more.
NODE_TIMEOUT_MS = max(DEFAULT_NODE_TIMEOUT_MS, 3 * LINK_DELAY_S * 1000.0)


class RedlockAdapter:
    name = "lockguide Redlock"
    version = version_of("lockguide")
    multi_master = True
    ttl_required = True
    #: Redlock's options besides the per-master timeout (a subclass may change them).
    options: ClassVar[dict[str, Any]] = {"clock": process_clock}

    def __init__(self, servers: Sequence[Server]) -> None:
        self.clients: list[redis.Redis] = [server.connect() for server in servers]

    def holder(
        self, key: str, ttl_ms: TtlSpec = DEFAULT, *, renew: bool = False
    ) -> LockguideHolder:
        if renew:
            raise Unsupported("no automatic renewal: call extend() (at most max_extensions times)")
        if ttl_ms in (DEFAULT, NO_EXPIRY):
            raise Unsupported("ttl_ms is a required, positive argument")
        assert isinstance(ttl_ms, int)
        return LockguideHolder(self.make_lock(key, ttl_ms))

    def make_lock(self, key: str, ttl_ms: int) -> Redlock:
        """The lock of one holder: the per-master timeout above, and :attr:`options` (the
        process's clock)."""
        return Redlock(
            self.clients, key, ttl_ms=ttl_ms, node_timeout_ms=NODE_TIMEOUT_MS, **self.options
        )

    def close(self) -> None:
        for client in self.clients:
            client.close()


def adapter(servers: Sequence[Server]) -> RedlockAdapter:
    """``lockguide-audit lockguide_lab.audit.adapters.lockguide_redlock:adapter``"""
    return RedlockAdapter(servers)
