"""What :class:`~lockguide.etcd.EtcdLock` and ``ZooKeeperLock`` share with the Redis locks.

Both are a :class:`lockguide.lock.Lease` on :class:`lockguide._core.LeaseState`:
the key, the TTL, the value that marks the lock held (an etcd lease id, a
ZooKeeper node's path), the deadline on the lock's clock, who may use it
(``owner="thread"`` or ``"process"``, :meth:`~lockguide._core.LeaseState.hand_over`,
a forked child that holds nothing), the total ``acquire`` deadline and
``with`` all follow the rules every lock in the reference follows, written
once in ``_core``. The lease-loss signal is the watchdog's
(:class:`lockguide.renewal.WatchdogState`): :attr:`~ConsensusLease.lost`,
:attr:`~ConsensusLease.lost_event`, :meth:`~ConsensusLease.check` and the next
``release`` all report a loss seen from a background thread (a keep-alive that
finds the lease gone, a session that expires).

What this module adds is what only the consensus locks have: a **fencing
token** issued by the cluster (a create revision, a ``czxid``), and a ``with``
that, when the wait ran out with the cluster not answering, raises
:class:`~lockguide.ClusterUnavailable` (a ``NotAcquired``) caused by
:attr:`~lockguide._core.LeaseState.last_error`.
"""

from __future__ import annotations

import threading
from typing import Any

from lockguide._core import (
    DEFAULT_TIMEOUT_MS,
    UNSET,
    BadArgument,
    ClusterUnavailable,
    NotAcquired,
    NotOwned,
    RenewalFailed,
    check_ms,
)
from lockguide.fencing import check_token
from lockguide.lock import Lease
from lockguide.renewal import WatchdogState

__all__ = ["DEFAULT_TIMEOUT_MS", "MAX_LOCK_DELAY_MS", "ConsensusLease", "check_lock_delay"]

#: Chubby's bound on a lock-delay (Burrows, OSDI 2006, section 2.4): one minute.
MAX_LOCK_DELAY_MS = 60_000


def check_lock_delay(value: object) -> float:
    """``lock_delay_ms``: a number of milliseconds from 0 (off) to :data:`MAX_LOCK_DELAY_MS`."""
    delay = check_ms(value, "lock_delay_ms")
    if delay > MAX_LOCK_DELAY_MS:
        raise BadArgument(
            f"lock_delay_ms must be at most {MAX_LOCK_DELAY_MS} ms (Chubby's bound: one "
            f"minute; a longer delay is an outage after every crash), got {value!r}"
        )
    return delay


class ConsensusLease(Lease, WatchdogState):
    """A :class:`~lockguide.lock.Lease` whose grant comes with a cluster's fencing token."""

    _token: int | None
    _lost: threading.Event

    def _init_consensus(
        self,
        key: object,
        ttl_ms: object,
        timeout_ms: object,
        retry_delay_ms: object,
        clock: object,
        owner: object,
    ) -> None:
        # No drift allowance: the lease's end is decided by the cluster, and the
        # deadline kept here is only this process's own view of it.
        given = {"timeout_ms": timeout_ms, "retry_delay_ms": retry_delay_ms, "clock": clock}
        self._init_lease(
            key, ttl_ms, {**given, "owner": owner, "drift_factor": 0, "drift_floor_ms": 0}
        )
        self._lock = self  # the watchdog's loss signal, about this lease
        self._token = None
        self._lost = threading.Event()
        self._error = None

    # -- what a holder reads -------------------------------------------------------------

    @property
    def token(self) -> int:
        """The fencing token the cluster issued with this grant.

        Raises:
            NotOwned: this object does not hold the lock (or this is a forked child).
        """
        if self._token is None or not self.held:
            raise NotOwned(self._key, "read the fencing token of")
        return self._token

    @property
    def lost_event(self) -> threading.Event:
        """Set when the lease is lost; wait on it to be woken by the failure."""
        return self._lost

    def check(self) -> None:
        """Raise if the holder must not write now; call it before each write.

        Raises:
            NotOwned: not held (``WrongOwner`` from a caller that may not use it).
            RenewalFailed: the lease was found gone, or this lock cannot vouch for it now.
        """
        self._check_owner("check")
        reason = self._doubt()
        if reason is not None and self._error is None:
            raise RenewalFailed(self._key, reason)
        super().check()  # the loss, once seen; or the lease run out on this process's clock

    def _doubt(self) -> str | None:
        """Why the lease cannot be relied on now, short of being known lost (else ``None``)."""
        return None

    # -- the grant -----------------------------------------------------------------------

    def _won_token(self, value: str, token: int, started: float) -> None:
        """Record a grant: the core's value, deadline and owner, then the token."""
        self._won(value, started)
        self._token = check_token(token)
        self._error = None
        self._lost.clear()

    def _acquire_for_with(self) -> None:
        started = self._clock()
        if self.acquire():
            return
        waited = (self._clock() - started) * 1000.0
        cause = self._last_error
        if cause is not None:
            raise ClusterUnavailable(self._key, waited, repr(cause)) from cause
        raise NotAcquired(self._key, waited)

    def acquire(self, *, blocking: bool = True, timeout_ms: Any = UNSET) -> bool:
        """Take the lock; every consensus lock defines it."""
        raise NotImplementedError

    def __repr__(self) -> str:
        state = f"held, token {self._token}" if self.held else "not held"
        return f"<{type(self).__name__} {self._key!r} {state}>"
