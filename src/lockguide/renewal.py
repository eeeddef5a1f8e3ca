"""A watchdog that keeps a held lease alive, and says so when it cannot.

1. A holds ``lock:report`` with a 30 s lease; the report takes 10 s, 40 s on a bad day.
2. A watchdog thread extends the lease every 10 s while the key still holds A's value
   (compare-and-pexpire): the slow day overlaps nobody.
3. A loses the key anyway (a failover, a ``DEL``) and B acquires. The next extension
   finds B's value; the watchdog flags the loss, which A checks before each write.
4. A's whole process pauses for 40 s, watchdog included, and may write before it runs
   again. **Renewal cannot fix a pause**: only a fencing token can refuse that write.

So the watchdog is for slow work, not pauses. It renews until the holder releases;
``max_total_ms``, if given, bounds how long it keeps a lease alive in all.
"""

from __future__ import annotations

import contextlib
import threading
import time
from types import TracebackType
from typing import Protocol

from redis.exceptions import RedisError

from lockguide._core import (
    BadArgument,
    BadArgumentType,
    LeaseState,
    LockError,
    LockLost,
    NotOwned,
    RenewalFailed,
    check_ms,
)
from lockguide.lock import Lock
from lockguide.redlock import Redlock

__all__ = ["Watchdog"]


def check_renewal(
    ttl_ms: int, every_ms: object, max_total_ms: object
) -> tuple[float, float | None]:
    """The interval in seconds (a third of the TTL by default), and the bound in seconds."""
    every_ms = ttl_ms / 3 if every_ms is None else every_ms
    interval = check_ms(every_ms, "every_ms")
    if not 0 < interval < ttl_ms:
        raise BadArgument(
            f"every_ms must be > 0 and below the TTL ({ttl_ms} ms), got {every_ms!r}: "
            "a renewal after the lease has run out comes too late"
        )
    if max_total_ms is None:
        return interval / 1000.0, None
    return interval / 1000.0, check_ms(max_total_ms, "max_total_ms", positive=True) / 1000.0


class Flag(Protocol):
    """What a watchdog's loss signal is: a ``threading.Event`` or an ``asyncio.Event``."""

    def is_set(self) -> bool: ...  # pragma: no cover - protocol
    def set(self) -> None: ...  # pragma: no cover - protocol


class WatchdogState:
    """What a watchdog knows and how it reports a loss, for the thread and the task alike.

    Subclasses set ``_lock`` and ``_lost``.
    """

    _lock: LeaseState
    _lost: Flag
    _error: RenewalFailed | None = None
    _renewals: int = 0
    _reported: bool = False  # the holder has been told the lease is lost

    @property
    def lost(self) -> bool:
        """Whether the lease was found lost (or could not be renewed in time)."""
        return self._lost.is_set()

    @property
    def error(self) -> RenewalFailed | None:
        """The failure, once there is one."""
        return self._error

    @property
    def renewals(self) -> int:
        """How many renewals have succeeded so far."""
        return self._renewals

    def check(self) -> None:
        """Raise if the holder must not write now; call it before each write.

        Raises:
            RenewalFailed: a renewal failed, or the lease ran out (after
                ``max_total_ms``, or while the whole process was paused).
        """
        if self._error is None and self._lock.validity_remaining_ms() > 0:
            return
        self._reported = True
        raise self._error or RenewalFailed(  # the watchdog may not have noticed yet
            self._lock.key,
            "the lease has run out on this process's clock (the renewal bound was "
            "reached, or the process was paused and the watchdog with it)",
        )

    def _fail(self, reason: str) -> None:
        """Record the first failure and wake whoever waits on ``lost_event``."""
        if self._error is None:
            self._error = RenewalFailed(self._lock.key, reason)
        self._lost.set()


class Watchdog(WatchdogState):
    """Renew a held ``Lock``, ``FencedLock`` or ``Redlock`` from a background thread.

    Every ``every_ms`` the thread extends the lease by the TTL, until the holder
    releases it (through the watchdog or directly), a renewal finds the key gone
    or someone else's, or ``max_total_ms`` has passed. A failure is never
    silent: :attr:`lost`, :attr:`lost_event`, :meth:`check` and :meth:`release`
    all report it.

    Args:
        lock: the lock to keep alive. ``with Watchdog(lock):`` acquires it if
            needed; :meth:`start` requires it held.
        every_ms: time between renewals, below the TTL; by default a third of
            it, so one slow or failed renewal leaves time for another.
        max_total_ms: if given, renew for at most this long from :meth:`start`;
            a stuck holder then keeps others out for at most about
            ``max_total_ms + ttl_ms``. By default: until released.

    Example::

        lock = FencedLock(r, "lock:report", ttl_ms=30_000)
        with Watchdog(lock, max_total_ms=600_000) as dog:
            for part in parts:
                build(part)
                dog.check()  # raises RenewalFailed once the lease is lost
                store.write(lock.token, part)  # and the resource still fences
    """

    def __init__(
        self,
        lock: Lock | Redlock,
        *,
        every_ms: float | None = None,
        max_total_ms: float | None = None,
    ) -> None:
        if not isinstance(lock, Lock | Redlock):
            raise BadArgumentType(
                f"lock must be a Lock, FencedLock or Redlock, not {type(lock).__name__}"
            )
        self._lock: Lock | Redlock = lock
        self._every_s, self._max_total_s = check_renewal(lock.ttl_ms, every_ms, max_total_ms)
        self._stop = threading.Event()
        self._lost: threading.Event = threading.Event()
        self._mutex = threading.Lock()
        self._thread: threading.Thread | None = None
        self._until: float | None = None

    @property
    def lost_event(self) -> threading.Event:
        """Set when the lease is lost; wait on it to be woken by the failure."""
        return self._lost

    @property
    def running(self) -> bool:
        """Whether the renewal thread is alive."""
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        """Start renewing the held lock.

        Raises:
            NotOwned: the lock is not held.
        """
        if not self._lock.held:
            raise NotOwned(self._lock.key, "start a watchdog on")
        if self._thread is not None:
            raise BadArgument("this Watchdog has already been started; make a new one")
        self._thread = threading.Thread(
            target=self._run, name=f"lockguide-watchdog:{self._lock.key}", daemon=True
        )
        self._lock._allow(self._thread)  # this thread may extend the lease
        self._until = None if self._max_total_s is None else time.monotonic() + self._max_total_s
        self._thread.start()

    def stop(self) -> None:
        """Stop renewing, without releasing the lock. Waits for the thread to end."""
        self._stop.set()
        with self._mutex:
            pass  # an extension in flight finishes before we return
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()

    def release(self) -> None:
        """Stop renewing, then release the lock.

        Raises:
            RenewalFailed: a renewal had failed; the lock was released if still ours.
            LockLost: the lease ran out unnoticed (a paused process); nothing deleted.
        """
        self.stop()
        if self._error is not None:
            if self._lock.held:
                try:
                    self._lock.release()
                except LockError as error:
                    raise self._error from error
            raise self._error
        self._lock.release()

    def __enter__(self) -> Watchdog:
        if not self._lock.held:
            self._lock.__enter__()  # acquires, or raises NotAcquired like `with lock:`
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Stop renewing and release; the body's own exception always wins.

        A failed release becomes a note on it; after a body that succeeded, a lost
        lease is raised unless :meth:`check` already reported it.
        """
        if exc is not None:
            try:
                self.release()
            except Exception as error:
                exc.add_note(
                    f"lockguide: releasing {self._lock.key!r} on the way out also failed: {error}"
                )
        elif self._reported or not (self._lock.held or self._error is not None):
            self.stop()  # nothing held, or a loss the holder was already told of
            if self._lock.held:
                with contextlib.suppress(LockError):
                    self._lock.release()
        else:
            self.release()

    def __repr__(self) -> str:
        state = "lost" if self.lost else ("running" if self.running else "stopped")
        return f"<Watchdog {self._lock.key!r} {state}, {self._renewals} renewals>"

    def _run(self) -> None:
        """The thread: renew until told to stop; a crash is reported as a failure."""
        try:
            self._loop()
        except BaseException as error:  # never die silently
            self._fail(f"the watchdog thread crashed: {error!r}")

    def _loop(self) -> None:
        """Extend every ``_every_s`` (sooner after a Redis error) until stopped or lost."""
        wait = self._every_s
        while not self._stop.wait(wait):
            wait = self._every_s
            if self._until is not None and time.monotonic() >= self._until:
                if not self._stop.wait(self._lock.validity_remaining_ms() / 1000.0):
                    self._fail(
                        "the watchdog stopped renewing after max_total_ms (its bound) "
                        "and the lease ran out"
                    )
                return
            with self._mutex:
                if self._stop.is_set():
                    return
                try:
                    self._lock.extend()
                except LockLost:
                    self._fail("the key was gone or held by another owner at renewal")
                    return
                except NotOwned:  # released (or re-acquired) by the holder: not ours to renew
                    return
                except RedisError as error:
                    left_ms = self._lock.validity_remaining_ms()
                    if left_ms <= 0:
                        self._fail(f"Redis did not answer ({error!r}) before the lease ran out")
                        return
                    wait = min(self._every_s, left_ms / 4000.0)  # try again sooner
                    continue
                self._renewals += 1
