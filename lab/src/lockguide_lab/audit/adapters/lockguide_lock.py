"""Adapter for :class:`lockguide.Lock` (one Redis instance).

``renew=True`` puts the holder's lock under a :class:`lockguide.Watchdog` from
the moment it is acquired; ``lost()`` then reports the watchdog's own flag.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import redis

from lockguide import Lock, Redlock, Watchdog
from lockguide_lab.audit.adapter import DEFAULT, NO_EXPIRY, Server, TtlSpec, Unsupported
from lockguide_lab.audit.adapters import process_clock, version_of


@dataclass
class LockguideHolder:
    """A holder of lockguide's ``Lock`` (optionally renewed) or ``Redlock`` (never renewed)."""

    lock: Lock | Redlock
    renew: bool = False
    watchdog: Watchdog | None = None

    def acquire(self, wait_ms: float = 0) -> bool:
        if wait_ms > 0:
            got = self.lock.acquire(timeout_ms=wait_ms)
        else:
            got = self.lock.acquire(blocking=False)
        return self._renewed(got)

    def acquire_default(self) -> bool:
        # The constructor's timeout_ms, left at lockguide's default by the adapter.
        return self._renewed(self.lock.acquire())

    def _renewed(self, got: bool) -> bool:
        if got and self.renew:
            assert isinstance(self.lock, Lock), "only a Lock is renewed by a Watchdog"
            self.watchdog = Watchdog(self.lock)
            self.watchdog.start()
        return got

    def release(self) -> bool | None:
        watchdog, self.watchdog = self.watchdog, None
        if watchdog is not None:
            watchdog.release()  # stops renewing; raises RenewalFailed after a failure
        else:
            self.lock.release()
        return None

    def extend(self, ttl_ms: int) -> bool | None:
        self.lock.extend(ttl_ms)
        return None

    def token(self) -> int | None:
        return None

    def lost(self) -> bool | None:
        if self.watchdog is not None:
            return self.watchdog.lost  # what the renewal thread found, nothing else
        # Either lock keeps its own deadline on the monotonic clock.
        return self.lock.validity_remaining_ms() <= 0


class LockguideAdapter:
    name = "lockguide Lock"
    version = version_of("lockguide")
    multi_master = False
    ttl_required = True
    holder_class: type[LockguideHolder] = LockguideHolder

    def __init__(self, servers: Sequence[Server]) -> None:
        self.client: redis.Redis = servers[0].connect()

    def make_lock(self, key: str, ttl_ms: int) -> Lock:
        return Lock(
            self.client, key, ttl_ms=ttl_ms, retry_delay_ms=(20.0, 80.0), clock=process_clock
        )

    def holder(
        self, key: str, ttl_ms: TtlSpec = DEFAULT, *, renew: bool = False
    ) -> LockguideHolder:
        if ttl_ms in (DEFAULT, NO_EXPIRY):
            raise Unsupported("ttl_ms is a required, positive argument")
        assert isinstance(ttl_ms, int)
        return self.holder_class(self.make_lock(key, ttl_ms), renew=renew)

    def close(self) -> None:
        self.client.close()


def adapter(servers: Sequence[Server]) -> LockguideAdapter:
    """``lockguide-audit lockguide_lab.audit.adapters.lockguide_lock:adapter``"""
    return LockguideAdapter(servers)
