"""One small hierarchy of errors, each saying what the caller should do next.

Everything the library raises on purpose is a :class:`LockError`, so one
``except LockError`` catches it all; the subclasses say which story happened.
"""

from __future__ import annotations


class LockError(Exception):
    """Base class of every error this library raises on purpose."""


class BadArgument(LockError, ValueError):
    """An argument was rejected before anything was sent to Redis.

    Raised while constructing a lock (or calling one of its methods) with a value
    that cannot work: a TTL that is not a positive whole number of milliseconds,
    an empty key, a negative timeout. Fix the call; retrying it will not help.
    """


class BadArgumentType(BadArgument, TypeError):
    """An argument had the wrong type (for example a TTL given as ``1.5`` or ``"30s"``).

    It is also a :class:`BadArgument` and a :class:`TypeError`.
    """


class NotAcquired(LockError):
    """The lock could not be acquired: somebody else holds it.

    Raised by ``with lock:`` when the attempt ends without the lock
    (:meth:`Lock.acquire` returns ``False`` instead). The critical section
    did **not** run. Retry later, give up, or raise ``timeout_ms`` if waiting
    longer is acceptable.
    """

    def __init__(self, key: str, waited_ms: float) -> None:
        self.key = key
        self.waited_ms = waited_ms
        super().__init__(
            f"lock {key!r} is held by another owner; gave up after {waited_ms:.0f} ms. "
            "The protected work did not run: retry later or wait longer (timeout_ms)."
        )


class NotOwned(LockError):
    """This lock object does not hold the lock, so it cannot release or extend it.

    It was never acquired, or it was already released. This is a bug in the
    calling code (a double release, or a release without an acquire).
    """

    def __init__(self, key: str, action: str) -> None:
        self.key = key
        super().__init__(
            f"cannot {action} lock {key!r}: this Lock object does not hold it "
            "(never acquired, or already released). Check the acquire/release pairing."
        )


class WrongOwner(NotOwned):
    """Another thread than the one that acquired the lock tried to release or extend it.

    A lock object belongs to the thread that acquired it (and to the renewal
    watchdog started on it). Sharing one object between threads would let any
    of them delete the holder's key while the holder still works. Give each
    thread its own lock object; nothing was sent.
    """

    def __init__(self, key: str, action: str) -> None:
        self.key = key
        LockError.__init__(
            self,
            f"cannot {action} lock {key!r} from this thread: another thread acquired it, "
            "and only that thread may release or extend it. Give each thread its own lock "
            "object.",
        )


class LockLost(NotOwned):
    """The lock was held, but Redis no longer has this holder's value.

    The lease expired (the work outlived the TTL, or the process paused) and the
    key is gone or now belongs to someone else. Nothing was deleted or extended.
    Any write made after the deadline may have overlapped with another holder:
    treat its result as suspect, and protect the resource with a fencing token.
    """

    def __init__(self, key: str, action: str) -> None:
        self.key = key
        LockError.__init__(
            self,
            f"cannot {action} lock {key!r}: its lease expired and the key is gone or "
            "held by someone else. Work done after the deadline may have overlapped "
            "another holder; only a fencing check at the resource can refuse it.",
        )


class AlreadyAcquired(LockError):
    """``acquire`` was called on a lock object that already holds the lock.

    Locks here are not re-entrant: release first, or use a separate object.
    """

    def __init__(self, key: str) -> None:
        self.key = key
        super().__init__(
            f"this Lock object already holds {key!r}; locks are not re-entrant. "
            "Release it first, or create a separate Lock for a separate holder."
        )


class StaleToken(LockError):
    """A fenced resource refused a write because its fencing token is stale.

    The resource has already accepted a write with a token at least as high as
    this one, so a newer holder of the lock exists (this holder's lease expired,
    perhaps during a pause it never noticed). Nothing was written. Stop: do not
    retry with the same token; acquire the lock again for a fresh one if the
    work still needs doing.
    """

    def __init__(self, resource: str, token: int, highest: int) -> None:
        self.resource = resource
        self.token = token
        self.highest = highest
        super().__init__(
            f"write to {resource!r} with fencing token {token} refused: it has already "
            f"accepted token {highest}. A newer lock holder exists; this write must not "
            "happen. Acquire the lock again for a fresh token if the work is still needed."
        )


class VersionConflict(LockError):
    """An optimistic update gave up: the version kept changing under it.

    Every attempt read the value, computed a new one, and found at write time
    that somebody else had written in between. Nothing was written by the last
    attempt. Retry later, allow more retries, or reduce contention on the key.
    """

    def __init__(self, key: str, attempts: int) -> None:
        self.key = key
        self.attempts = attempts
        super().__init__(
            f"update of {key!r} gave up after {attempts} attempt(s): another writer "
            "changed the version each time. Nothing was written by the last attempt; "
            "retry later or allow more retries."
        )


class RenewalFailed(LockLost):
    """The watchdog could not renew the lease, so the lock may belong to someone else.

    The key was gone or held another value when the watchdog tried to extend
    it, or Redis could not be reached before the lease ran out. The watchdog
    stopped renewing (it never renews a lock it no longer owns). Do not write
    to the protected resource: another holder may be working on it.
    """

    def __init__(self, key: str, reason: str) -> None:
        self.key = key
        self.reason = reason
        LockError.__init__(
            self,
            f"lease on {key!r} was not renewed: {reason}. The lock may be held by "
            "someone else now; do not write to the resource, and treat work done "
            "since the last successful renewal as suspect.",
        )


class MasterError(LockError):
    """A Redlock master answered with an error that no retry can fix.

    Wrong credentials, a missing permission, a master that is read-only or
    refuses writes: trying again would fail the same way, so the attempt stops
    at once (after releasing whatever it was granted on every master), naming
    the master. ``error`` is redis-py's exception; it is also ``__cause__``.
    """

    def __init__(self, key: str, master: int, address: str, error: Exception) -> None:
        self.key = key
        self.master = master
        self.error = error
        LockError.__init__(
            self,
            f"lock {key!r}: masters[{master}] ({address}) answered {type(error).__name__}: "
            f"{error}. No retry can fix that: correct the master's configuration or the "
            "client's credentials.",
        )


class NoQuorum(NotAcquired):
    """A :class:`~lockguide.Redlock` could not win a majority of its masters in time.

    Raised by ``with redlock:`` when the attempt ends without the lock. The
    counts come from the last try: masters that granted the key, masters that
    refused it (another owner holds it there) and masters that failed: an error,
    or no answer within the per-node timeout. Whatever was granted has already been released
    on every master. The protected work did **not** run.
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
        self.key = key
        self.waited_ms = waited_ms
        self.granted = granted
        self.refused = refused
        self.failed = failed
        self.needed = needed
        self.causes = causes
        why = f" ({'; '.join(causes)})" if causes else ""
        LockError.__init__(
            self,
            f"lock {key!r}: no majority after {waited_ms:.0f} ms (last try: {granted} granted, "
            f"{refused} refused, {failed} failed or did not answer{why}; {needed} needed, with "
            "validity left). The protected work did not run: retry later, wait longer "
            "(timeout_ms), or bring the failed masters back.",
        )


class MajorityLost(LockLost):
    """Fewer than a majority of masters still held this Redlock holder's value.

    Raised by :meth:`Redlock.release` and :meth:`Redlock.extend`. The lease
    expired on enough masters (or they restarted empty, or did not answer) that
    another client may have won a majority meanwhile. ``confirmed`` masters
    still had the value; the rest were left untouched if someone else holds
    them. Treat work done near or after the deadline as suspect.
    """

    def __init__(self, key: str, action: str, *, confirmed: int, needed: int, masters: int) -> None:
        self.key = key
        self.confirmed = confirmed
        self.needed = needed
        self.masters = masters
        LockError.__init__(
            self,
            f"cannot {action} lock {key!r}: only {confirmed} of {masters} masters still held "
            f"this holder's value ({needed} needed). The lease expired, a master lost the key, "
            "or masters did not answer; another client may hold the lock. Work done under it "
            "may have overlapped another holder: only a fencing check at the resource can "
            "refuse it.",
        )


class ExtensionLimitReached(LockError):
    """A Redlock refused to extend its lease again: it was extended ``max_extensions`` times.

    Nothing was sent. The lock is still held until its current validity runs out.
    A bound on extensions keeps a stuck holder from keeping the lock forever:
    finish (or abandon) the work and release, or construct the Redlock with a
    larger ``max_extensions`` if the work legitimately takes longer.
    """

    def __init__(self, key: str, max_extensions: int) -> None:
        self.key = key
        self.max_extensions = max_extensions
        super().__init__(
            f"lock {key!r} has already been extended {max_extensions} times (max_extensions); "
            "it stays held until its current validity runs out. Release it when the work is "
            "done, or allow more extensions."
        )
