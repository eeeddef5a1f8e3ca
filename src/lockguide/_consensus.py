"""What :class:`~lockguide.etcd.EtcdLock` and ``ZooKeeperLock`` share with the Redis locks.

Both are a :class:`~lockguide._base.Lease`: the key, the TTL, the value that
marks the lock held (an etcd lease id, a ZooKeeper node's path), the deadline
on the lock's clock, and who acquired it all follow the rules every lock in
the reference follows (``_won``, ``_check_owner``, ``_wait_ms``, ``_pause_s``,
``with``). What this module adds is what only the consensus locks have:

* a **fencing token** issued by the cluster (a create revision, a ``czxid``);
* a **lease-loss signal** raised from a background thread (a keep-alive that
  finds the lease gone, a session that expires): :attr:`ConsensusLease.lost`,
  :attr:`ConsensusLease.lost_event`, :meth:`ConsensusLease.check`, and the
  next ``release`` all report it, the same contract as the ``Watchdog``;
* ``last_error``: the error of an ``acquire``'s last attempt when the cluster
  did not answer it; ``with`` turns a timed-out wait that ended that way into
  :class:`~lockguide.ClusterUnavailable` (a ``NotAcquired``) caused by it.
"""

from __future__ import annotations

import threading
from typing import Any

from lockguide._base import UNSET, Lease
from lockguide.errors import ClusterUnavailable, NotAcquired, NotOwned, RenewalFailed
from lockguide.fencing import check_token

__all__ = ["DEFAULT_TIMEOUT_MS", "ConsensusLease"]

#: ``acquire``'s default total wait, as for every lock in the reference (10 s).
DEFAULT_TIMEOUT_MS = 10_000.0


class ConsensusLease(Lease):
    """A :class:`~lockguide._base.Lease` whose grant comes with a cluster's fencing token."""

    _token: int | None
    _lost: threading.Event
    _error: RenewalFailed | None
    #: The last attempt's error when the cluster did not answer it (else ``None``).
    last_error: Exception | None

    def _init_consensus(
        self,
        key: object,
        ttl_ms: object,
        timeout_ms: object,
        retry_delay_ms: object,
        clock: object,
    ) -> None:
        # No drift allowance: the lease's end is decided by the cluster, and the
        # deadline kept here is only this process's own view of it.
        self._init_lease(key, ttl_ms, timeout_ms, retry_delay_ms, 0.0, 0.0, clock)
        self._token = None
        self._lost = threading.Event()
        self._error = None
        self.last_error = None

    # -- what a holder reads -------------------------------------------------------------

    @property
    def token(self) -> int:
        """The fencing token the cluster issued with this grant.

        Raises:
            NotOwned: this object does not hold the lock.
        """
        if self._token is None or not self.held:
            raise NotOwned(self._key, "read the fencing token of")
        return self._token

    @property
    def lost(self) -> bool:
        """Whether the lease was found gone (or could not be kept) while held."""
        return self._lost.is_set()

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
        if self._error is not None:
            raise self._error
        reason = self._doubt()
        if reason is not None:
            raise RenewalFailed(self._key, reason)

    def _doubt(self) -> str | None:
        """Why the lease cannot be relied on now, short of being known lost (else ``None``)."""
        return None

    # -- the grant and its end -----------------------------------------------------------

    def _granted(self, value: str, token: int, started: float) -> None:
        """Record a grant: the base's value, deadline and owner, then the token."""
        self._won(value, started)
        self._token = check_token(token)
        self._error = None
        self._lost.clear()

    def _fail(self, reason: str) -> None:
        """Record the first loss and wake whoever waits on :attr:`lost_event`."""
        if self._error is None:
            self._error = RenewalFailed(self._key, reason)
        self._lost.set()

    def _forget(self) -> None:
        """No longer held (released, or found gone)."""
        self._value = None
        self._token = None

    def _acquire_for_with(self) -> None:
        started = self._clock()
        if self.acquire():
            return
        waited = (self._clock() - started) * 1000.0
        cause = self.last_error
        if cause is not None:
            raise ClusterUnavailable(self._key, waited, repr(cause)) from cause
        raise NotAcquired(self._key, waited)

    def acquire(self, *, blocking: bool = True, timeout_ms: Any = UNSET) -> bool:
        """Take the lock; every consensus lock defines it."""
        raise NotImplementedError

    def __repr__(self) -> str:
        state = f"held, token {self._token}" if self.held else "not held"
        return f"<{type(self).__name__} {self._key!r} {state}>"
