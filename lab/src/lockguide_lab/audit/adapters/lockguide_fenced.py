"""Adapter for :class:`lockguide.FencedLock`: a ``Lock`` whose acquisitions carry tokens.

``renew=True`` runs a :class:`lockguide.Watchdog` over it, as for ``Lock``.
"""

from __future__ import annotations

from collections.abc import Sequence

from lockguide import FencedLock, Lock
from lockguide_lab.audit.adapter import Server
from lockguide_lab.audit.adapters import process_clock
from lockguide_lab.audit.adapters.lockguide_lock import LockguideAdapter, LockguideHolder


class FencedHolder(LockguideHolder):
    def token(self) -> int | None:
        assert isinstance(self.lock, FencedLock)
        return self.lock.token  # drawn by the same script that set the key


class FencedAdapter(LockguideAdapter):
    name = "lockguide FencedLock"
    holder_class = FencedHolder

    def make_lock(self, key: str, ttl_ms: int) -> Lock:
        return FencedLock(
            self.client, key, ttl_ms=ttl_ms, retry_delay_ms=(20.0, 80.0), clock=process_clock
        )


def adapter(servers: Sequence[Server]) -> FencedAdapter:
    """``lockguide-audit lockguide_lab.audit.adapters.lockguide_fenced:adapter``"""
    return FencedAdapter(servers)
