"""One small hierarchy of errors, each saying what the caller should do next.

Everything the library raises on purpose is a :class:`LockError`, so one
``except LockError`` catches it all; the subclasses say which story happened.
"""

from __future__ import annotations


class LockError(Exception):
    """Base class of every error this library raises on purpose."""


class BadArgument(LockError, ValueError):
    """An argument that cannot work (an empty key, a negative TTL), refused before any request."""


class BadArgumentType(BadArgument, TypeError):
    """An argument of the wrong type (a TTL of ``1.5`` or ``"30s"``); also a ``TypeError``."""


class NotAcquired(LockError):
    """``with lock:`` did not get the lock (:meth:`Lock.acquire` returns ``False``)."""

    def __init__(self, key: str, waited_ms: float) -> None:
        self.key, self.waited_ms = key, waited_ms
        super().__init__(
            f"lock {key!r} is held by another owner; gave up after {waited_ms:.0f} ms. "
            "The protected work did not run: retry later or wait longer (timeout_ms)."
        )


class NotOwned(LockError):
    """Release or extend by a lock object that does not hold the lock: a bug in the caller."""

    _message = (
        "cannot {action} lock {key!r}: this Lock object does not hold it "
        "(never acquired, or already released). Check the acquire/release pairing."
    )

    def __init__(self, key: str, action: str) -> None:
        self.key = key
        super().__init__(self._message.format(key=key, action=action))


class WrongOwner(NotOwned):
    """Release or extend from a thread or task that did not acquire (the lock's watchdog may)."""

    _message = (
        "cannot {action} lock {key!r} from this thread or task: another one acquired it, "
        "and only that thread or asyncio task may release or extend it. Give each thread "
        "or task its own lock object."
    )


class LockLost(NotOwned):
    """The lease expired: Redis no longer has this holder's value. Nothing was changed."""

    _message = (
        "cannot {action} lock {key!r}: its lease expired and the key is gone or "
        "held by someone else. Work done after the deadline may have overlapped "
        "another holder; only a fencing check at the resource can refuse it."
    )


class AlreadyAcquired(LockError):
    """``acquire`` on a lock object that already holds the lock; locks are not re-entrant."""

    def __init__(self, key: str) -> None:
        self.key = key
        super().__init__(
            f"this Lock object already holds {key!r}; locks are not re-entrant. "
            "Release it first, or create a separate Lock for a separate holder."
        )


class StaleToken(LockError):
    """A fenced resource refused a write: it already accepted a token at least as high.

    This holder's lease expired, perhaps in a pause it never noticed: do not retry it.
    """

    def __init__(self, resource: str, token: int, highest: int) -> None:
        self.resource, self.token, self.highest = resource, token, highest
        super().__init__(
            f"write to {resource!r} with fencing token {token} refused: it has already "
            f"accepted token {highest}. A newer lock holder exists; this write must not "
            "happen. Acquire the lock again for a fresh token if the work is still needed."
        )


class VersionConflict(LockError):
    """An optimistic update gave up: another writer changed the version before every attempt."""

    def __init__(self, key: str, attempts: int) -> None:
        self.key, self.attempts = key, attempts
        super().__init__(
            f"update of {key!r} gave up after {attempts} attempt(s): another writer "
            "changed the version each time. Nothing was written by the last attempt; "
            "retry later or allow more retries."
        )


class RenewalFailed(LockLost):
    """The watchdog found the key lost, or could not reach Redis in time, and stopped renewing."""

    def __init__(self, key: str, reason: str) -> None:
        self.key, self.reason = key, reason
        LockError.__init__(
            self,
            f"lease on {key!r} was not renewed: {reason}. The lock may be held by "
            "someone else now; do not write to the resource, and treat work done "
            "since the last successful renewal as suspect.",
        )


class MasterError(LockError):
    """A Redlock master answered with an error no retry can fix (credentials, permissions).

    It stopped at once, releasing what it was granted; ``error`` (also ``__cause__``) is redis-py's.
    """

    def __init__(self, key: str, master: int, address: str, error: Exception) -> None:
        self.key, self.master, self.error = key, master, error
        super().__init__(
            f"lock {key!r}: masters[{master}] ({address}) answered {type(error).__name__}: "
            f"{error}. No retry can fix that: correct the master's configuration or the "
            "client's credentials."
        )


class NoQuorum(NotAcquired):
    """A :class:`~lockguide.Redlock` could not win a majority of its masters in time.

    The counts are the last try's (``failed``: an error or no answer within the per-node
    timeout). Whatever was granted has been released on every master.
    """

    def __init__(
        self,
        key: str,
        waited_ms: float,
        *,
        granted: int,
        refused: int,
        failed: int,
        needed: int,
        causes: tuple[str, ...] = (),
    ) -> None:
        self.key, self.waited_ms, self.causes = key, waited_ms, causes
        self.granted, self.refused, self.failed, self.needed = granted, refused, failed, needed
        why = f" ({'; '.join(causes)})" if causes else ""
        LockError.__init__(
            self,
            f"lock {key!r}: no majority after {waited_ms:.0f} ms (last try: {granted} granted, "
            f"{refused} refused, {failed} failed or did not answer{why}; {needed} needed, with "
            "validity left). The protected work did not run: retry later, wait longer "
            "(timeout_ms), or bring the failed masters back.",
        )


class MajorityLost(LockLost):
    """Fewer than a majority of masters (``confirmed``) still held this Redlock holder's value.

    From :meth:`Redlock.release` or :meth:`Redlock.extend`; others' masters were left untouched.
    """

    def __init__(self, key: str, action: str, *, confirmed: int, needed: int, masters: int) -> None:
        self.key, self.confirmed, self.needed, self.masters = key, confirmed, needed, masters
        LockError.__init__(
            self,
            f"cannot {action} lock {key!r}: only {confirmed} of {masters} masters still held "
            f"this holder's value ({needed} needed). The lease expired, a master lost the key, "
            "or masters did not answer; another client may hold the lock. Work done under it "
            "may have overlapped another holder: only a fencing check at the resource can "
            "refuse it.",
        )


class ExtensionLimitReached(LockError):
    """A Redlock was extended ``max_extensions`` times already (a bound against stuck holders)."""

    def __init__(self, key: str, max_extensions: int) -> None:
        self.key, self.max_extensions = key, max_extensions
        super().__init__(
            f"lock {key!r} has already been extended {max_extensions} times (max_extensions); "
            "it stays held until its current validity runs out. Release it when the work is "
            "done, or allow more extensions."
        )


class ClusterUnavailable(NotAcquired):
    """A consensus lock (``EtcdLock``, ``ZooKeeperLock``) got no answer from a quorum in time.

    From ``acquire``: nobody was granted the lock, since a cluster that cannot reach a
    majority refuses everyone (safety over liveness). From ``release``: the lease may
    still be there; it ends with its TTL or session, or retry. ``cause`` is the last error.
    """

    def __init__(self, key: str, waited_ms: float, cause: str) -> None:
        self.key, self.waited_ms, self.cause = key, waited_ms, cause
        LockError.__init__(
            self,
            f"lock {key!r}: the cluster did not answer within {waited_ms:.0f} ms "
            f"(last error: {cause}). A majority of its members may be down, or this client "
            "cut off from them; nothing was granted. Retry later, or bring the members back.",
        )
