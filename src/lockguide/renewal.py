"""A watchdog that keeps a held lease alive, and stops the work when it cannot.

It is for slow work, not pauses: a paused process (watchdog included) is refused only by fencing.
By default it renews for at most ten TTLs (``DEFAULT_BOUND_TTLS``); a leader, which must
renew for as long as it leads, says so with ``max_total_ms=None``.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from redis.exceptions import RedisError

from lockguide._core import (
    UNSET,
    BadArgument,
    BadArgumentType,
    Calls,
    ExtensionLimitReached,
    LeaseState,
    LockError,
    LockLost,
    NotOwned,
    NotReplicated,
    RenewalFailed,
    call,
    check_ms,
    drive,
    note_failed_release,
)
from lockguide.lock import Lock
from lockguide.redlock import Redlock

if TYPE_CHECKING:
    import asyncio

__all__ = ["DEFAULT_BOUND_TTLS", "Watchdog"]

#: How long a watchdog renews by default, in TTLs (``max_total_ms = 10 * ttl_ms``). The Redis
#: documentation asks for a limit on extensions, or a stuck holder keeps the lock for ever (a
#: liveness property lost); ``max_total_ms=None`` renews until released (a leader).
DEFAULT_BOUND_TTLS = 10

#: Called once with the failure when the lease is lost (in the watchdog's thread, or its task).
OnLost = Callable[[RenewalFailed], object]


class WatchdogState:
    """What a watchdog knows and how it reports a loss (the consensus locks' too)."""

    _lock: LeaseState
    _lost: threading.Event | asyncio.Event
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
            RenewalFailed: a renewal failed, or the lease ran out (a bound, or a paused process).
        """
        if self._error is None and self._lock.validity_remaining_ms() > 0:
            return
        self._reported = True
        raise self._error or RenewalFailed(  # the watchdog may not have noticed yet
            self._lock.key,
            "the lease has run out on this process's clock (the renewal bound was "
            "reached, or the process was paused and the watchdog with it)",
        )

    def _fail(self, reason: str, cause: BaseException | None = None) -> None:
        if self._error is None:  # the first failure is the one reported
            self._error = RenewalFailed(self._lock.key, reason)
            self._error.__cause__ = cause
        self._lost.set()


class Renewer(WatchdogState):
    """The decisions of both watchdogs: this module's thread, and ``lockguide.aio``'s task."""

    _kinds: tuple[type[Any], ...]
    _label: str
    _event: Callable[[], Any]
    _repr_prefix = ""
    _lock: Any
    _runner: Any = None
    _spawn: Callable[[], Any]  # the renewing thread (not started yet) or task
    _wait: Callable[[float], Any]  # True once stop() is called (awaited in aio)

    _on_lost: OnLost | None = None
    _bound: str = ""  # how the bound is described when it is reached
    _renewal_error: BaseException | None = None  # the last renewal's, until one succeeds

    def _init_watchdog(
        self, lock: object, every_ms: object, max_total_ms: object, on_lost: object = None
    ) -> None:
        if not isinstance(lock, self._kinds):
            raise BadArgumentType(f"lock must be a {self._label}, not {type(lock).__name__}")
        self._lock = lock
        ttl_ms = lock.ttl_ms
        every_ms = ttl_ms / 3 if every_ms is None else every_ms
        interval = check_ms(every_ms, "every_ms")
        if not 0 < interval < ttl_ms:
            raise BadArgument(
                f"every_ms must be > 0 and below the TTL ({ttl_ms} ms), got {every_ms!r}: "
                "a renewal after the lease has run out comes too late"
            )
        self._every_s = interval / 1000.0
        if on_lost is not None and not callable(on_lost):
            raise BadArgumentType(f"on_lost must be a callable or None, not {on_lost!r}")
        self._on_lost = on_lost
        self._max_total_s: float | None = None  # None: until released (a leader)
        if max_total_ms is UNSET:
            bound_ms = float(DEFAULT_BOUND_TTLS * ttl_ms)
            self._bound = f"{bound_ms:.0f} ms, the default: ten TTLs"
            self._max_total_s = bound_ms / 1000.0
        elif max_total_ms is not None:
            bound_ms = check_ms(max_total_ms, "max_total_ms", positive=True)
            self._bound = f"{bound_ms:.0f} ms"
            self._max_total_s = bound_ms / 1000.0
        self._stop, self._lost = self._event(), self._event()
        self._until: float | None = None

    def start(self) -> None:
        """Start renewing the held lock (``NotOwned`` if it is not held)."""
        if not self._lock.held:
            raise NotOwned(self._lock.key, "start a watchdog on")
        if self._runner is not None:
            raise BadArgument("this Watchdog has already been started; make a new one")
        self._runner = self._spawn()
        self._lock._allow(self._runner)  # the renewing thread or task may extend the lease
        self._until = None if self._max_total_s is None else time.monotonic() + self._max_total_s
        if isinstance(self._runner, threading.Thread):  # a task starts when the caller awaits
            self._runner.start()

    def _loop_calls(self) -> Calls:
        """Renew every ``every_ms`` (sooner after a Redis error) until stopped, lost or bounded."""
        wait: float | None = self._every_s
        while wait is not None and not (yield functools.partial(self._wait, wait)):
            if self._error is not None:  # declared lost meanwhile (the aio deadline)
                return
            if self._bounded():
                left_s = self._lock.validity_remaining_ms() / 1000.0
                if not (yield functools.partial(self._wait, left_s)):
                    self._fail(self._ran_out())
                return
            try:
                yield self._lock.extend
            except (NotOwned, NotReplicated, ExtensionLimitReached, RedisError, OSError) as error:
                wait = self._after(error)
            else:
                self._renewals += 1
                self._renewal_error = None
                self._renewed()
                wait = self._every_s

    def _bounded(self) -> bool:
        """Whether ``max_total_ms`` has passed: no more renewals."""
        return self._until is not None and time.monotonic() >= self._until

    def _ran_out(self) -> str:
        """Why the lease ran out with no renewal: the bound, or Redis silent meanwhile."""
        if self._bounded():
            return (
                f"the watchdog stopped renewing after max_total_ms ({self._bound}) and the "
                "lease ran out; pass a larger max_total_ms for longer work, or None to renew "
                "until released"
            )
        last = "" if self._renewal_error is None else f"; the last: {self._renewal_error!r}"
        return (
            "no renewal was answered before the lease ran out on this process's clock "
            f"(Redis silent or slow, or this process paused{last})"
        )

    def _renewed(self) -> None:
        """After each renewal (the aio watchdog moves its deadline)."""

    def _after(self, error: BaseException) -> float | None:
        """The wait before the next renewal after one that raised ``error`` (``None``: stop)."""
        if isinstance(error, LockLost):
            self._fail("the key was gone or held by another owner at renewal", error)
        elif isinstance(error, ExtensionLimitReached):
            self._fail(f"the lock's max_extensions ({error.max_extensions}) was reached", error)
        elif not isinstance(error, NotOwned):  # (NotOwned: released by the holder)
            self._renewal_error = error
            left_ms = self._lock.validity_remaining_ms()
            if left_ms > 0:
                return min(self._every_s, left_ms / 4000.0)  # type: ignore[no-any-return]
            self._fail(self._ran_out(), error)
        return None

    def _fail(self, reason: str, cause: BaseException | None = None) -> None:
        if self._first_failure(reason, cause):
            self._stop_the_work()  # once, and outside any lock (on_lost may call stop())

    def _first_failure(self, reason: str, cause: BaseException | None) -> bool:
        first = self._error is None
        super()._fail(reason, cause)
        return first

    def _stop_the_work(self) -> None:
        """Tell the holder the lease is lost: ``on_lost`` (the aio watchdog also cancels)."""
        error = self._error
        if self._on_lost is None or error is None:
            return
        try:
            self._on_lost(error)
        except Exception as raised:  # the loss is reported all the same
            error.add_note(f"lockguide: on_lost raised {raised!r}")

    def _release_calls(self) -> Calls:
        yield self.stop  # type: ignore[attr-defined]
        if self._error is not None:
            if self._lock.held:
                try:
                    yield self._lock.release
                except LockError as error:
                    raise self._error from error
                except Exception as error:  # Redis silent again: the loss is the news
                    note_failed_release(self._error, self._lock.key, error)
            raise self._error
        yield self._lock.release

    def _exit_calls(self, exc: BaseException | None) -> Calls:
        """Release; the body's exception wins, and a loss already told is not raised again."""
        told = self._reported or not (self._lock.held or self._error is not None)
        try:
            yield from self._release_calls()
        except Exception as error:
            if exc is not None:
                note_failed_release(exc, self._lock.key, error)
            elif not (told and isinstance(error, LockError)):
                raise

    def __repr__(self) -> str:
        state = "lost" if self.lost else ("running" if self.running else "stopped")  # type: ignore[attr-defined]
        return f"<{self._repr_prefix}Watchdog {self._lock.key!r} {state}, {self.renewals} renewals>"


class Watchdog(Renewer):
    """Renew a held ``Lock``, ``FencedLock`` or ``Redlock`` from a background thread.

    Every ``every_ms`` it extends the lease, until the holder releases it, a renewal
    finds the key gone or someone else's, Redis stays silent until the lease runs out,
    or ``max_total_ms`` has passed. A failure is never silent: ``on_lost`` is called,
    :attr:`lost_event` is set, :meth:`check` raises, and so does :meth:`release`.

    A running thread cannot be stopped from outside (Python has no safe way to), so the
    work stops where it looks: :meth:`check` between steps, a worker waiting on
    :attr:`lost_event`, or ``on_lost`` killing a child process that does the work.
    ``lockguide.aio.Watchdog`` cancels the body of its ``async with`` instead.

    Bounded by default. The Redis documentation, *Distributed Locks with Redis*
    (https://redis.io/docs/latest/develop/clients/patterns/distributed-locks/), asks
    that extensions be limited, or a holder that is stuck, not dead, keeps the lock for
    ever: so a job's watchdog renews for at most ten TTLs (``DEFAULT_BOUND_TTLS``),
    then lets the lease run out and reports it. Work that may run longer passes its own
    bound, above its slowest run measured; a leader, which must renew for as long as it
    leads, passes ``max_total_ms=None``.

    Args:
        lock: the lock to keep alive; ``with Watchdog(lock):`` acquires it if needed.
        every_ms: time between renewals, below the TTL (default: a third of it).
        max_total_ms: renew for at most this long (default: ten TTLs; ``None``: until
            released).
        on_lost: called once, from one of the watchdog's threads (the renewing one, or
            the one that notices the lease's end while a renewal is unanswered), with the
            ``RenewalFailed`` error; an exception it raises becomes a note on it.

    Example::

        with Watchdog(FencedLock(r, "lock:report", ttl_ms=30_000)) as dog:
            for part in parts:
                build(part)
                dog.check()  # raises RenewalFailed once the lease is lost
    """

    _kinds, _label, _event = (Lock, Redlock), "Lock, FencedLock or Redlock", threading.Event

    _deadline: threading.Thread | None = None  # declares the loss at the lease's end

    def __init__(
        self,
        lock: Lock | Redlock,
        *,
        every_ms: float | None = None,
        max_total_ms: float | None = UNSET,
        on_lost: OnLost | None = None,
    ) -> None:
        self._init_watchdog(lock, every_ms, max_total_ms, on_lost)
        self._failing = threading.Lock()

    @property
    def lost_event(self) -> threading.Event:
        """Set when the lease is lost; wait on it to be woken by the failure."""
        return self._lost  # type: ignore[return-value]

    @property
    def running(self) -> bool:
        """Whether the renewal thread is alive."""
        return self._runner is not None and self._runner.is_alive()

    def start(self) -> None:
        """Start renewing the held lock (``NotOwned`` if it is not held)."""
        super().start()
        name = f"lockguide-watchdog-deadline:{self._lock.key}"
        self._deadline = threading.Thread(target=self._watch_deadline, name=name, daemon=True)
        self._deadline.start()

    def stop(self) -> None:
        """Stop renewing, without releasing the lock; waits for an extension in flight."""
        self._stop.set()
        for thread in (self._runner, self._deadline):
            if thread is not None and thread is not threading.current_thread():
                thread.join()

    def release(self) -> None:
        """Stop renewing, then release the lock.

        Raises:
            RenewalFailed: a renewal had failed; the lock was released if still ours.
            LockLost: the lease ran out unnoticed (a paused process); nothing deleted.
        """
        drive(self._release_calls(), call)

    def __enter__(self) -> Watchdog:
        if not self._lock.held:
            self._lock.__enter__()  # acquires, or raises NotAcquired like `with lock:`
        self.start()
        return self

    def __exit__(self, *exc_info: Any) -> None:
        drive(self._exit_calls(exc_info[1]), call)

    def _spawn(self) -> threading.Thread:
        name = f"lockguide-watchdog:{self._lock.key}"
        return threading.Thread(target=self._run, name=name, daemon=True)

    def _wait(self, seconds: float) -> bool:
        return bool(self._stop.wait(seconds))

    def _first_failure(self, reason: str, cause: BaseException | None) -> bool:
        with self._failing:  # the renewal and the deadline may both notice
            return super()._first_failure(reason, cause)

    def _watch_deadline(self) -> None:
        """Declare the loss at the lease's end on this clock, even while a renewal is still
        unanswered (Redis frozen, a request timeout longer than the lease's rest).
        """
        while self._error is None:
            left_s = self._lock.validity_remaining_ms() / 1000.0
            if left_s <= 0:
                if self._lock.held and not self._stop.is_set():  # (not held: released)
                    self._fail(self._ran_out(), self._renewal_error)
                return
            if self._stop.wait(left_s):
                return

    def _run(self) -> None:
        try:
            drive(self._loop_calls(), call)
        except BaseException as error:  # never die silently
            self._fail(f"the watchdog thread crashed: {error!r}")
