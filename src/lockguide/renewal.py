"""A watchdog that keeps a held lease alive, and says so when it cannot.

It extends the lease every ``every_ms`` while the key still holds the holder's value,
until the holder releases (or ``max_total_ms``, if given). It is for slow work, not
pauses: a process paused past its lease, watchdog included, is refused only by fencing.
"""

from __future__ import annotations

import contextlib
import functools
import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import Any, Protocol

from redis.exceptions import RedisError

from lockguide._core import (
    BadArgument,
    BadArgumentType,
    Calls,
    LeaseState,
    LockError,
    LockLost,
    NotOwned,
    RenewalFailed,
    call,
    check_ms,
    drive,
    note_failed_release,
)
from lockguide.lock import Lock
from lockguide.redlock import Redlock

__all__ = ["Watchdog"]

#: Why a watchdog stopped after its ``max_total_ms``.
BOUND_REACHED = "the watchdog stopped renewing after max_total_ms (its bound) and the lease ran out"


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
    """A watchdog's loss signal: a ``threading.Event`` or an ``asyncio.Event``."""

    def is_set(self) -> bool: ...  # pragma: no cover - protocol
    def set(self) -> None: ...  # pragma: no cover - protocol


class WatchdogState:
    """What a watchdog knows and how it reports a loss (the consensus locks' too)."""

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

    def _fail(self, reason: str) -> None:
        """Record the first failure and wake whoever waits on ``lost_event``."""
        if self._error is None:
            self._error = RenewalFailed(self._lock.key, reason)
        self._lost.set()


class Renewer(WatchdogState):
    """The decisions of both watchdogs: this module's thread, and ``lockguide.aio``'s task."""

    _kinds: tuple[type[Any], ...]
    _label: str
    _event: Callable[[], Any]
    _handled: tuple[type[BaseException], ...]  # what a renewal may raise and the loop decides
    _gone: tuple[type[BaseException], ...] = (LockLost,)
    _say_why = False  # a lost key's reason names the error
    _repr_prefix = ""
    _lock: Any
    _runner: Any = None
    _wait: Callable[[float], Any]  # True once stop() is called (awaited in aio)
    _renew_once: Callable[[], Any]  # one extension; the wait before the next (None: stop)

    def _init_watchdog(self, lock: object, every_ms: object, max_total_ms: object) -> None:
        if not isinstance(lock, self._kinds):
            raise BadArgumentType(f"lock must be a {self._label}, not {type(lock).__name__}")
        self._lock = lock
        self._every_s, self._max_total_s = check_renewal(lock.ttl_ms, every_ms, max_total_ms)
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
        self._launch()

    def _spawn(self) -> Any:
        raise NotImplementedError

    def _launch(self) -> None:
        pass

    def _bound_passed(self) -> bool:
        return self._until is not None and time.monotonic() >= self._until

    def _loop_calls(self) -> Calls:
        """Renew every ``every_ms`` (sooner after a Redis error) until stopped, lost or bounded."""
        wait = self._every_s
        while wait is not None and not (yield functools.partial(self._wait, wait)):
            if self._bound_passed():
                left_s = self._lock.validity_remaining_ms() / 1000.0
                if not (yield functools.partial(self._wait, left_s)):
                    self._fail(BOUND_REACHED)
                return
            wait = yield self._renew_once

    def _after(self, error: BaseException | None) -> float | None:
        """The wait before the next renewal after one that raised ``error`` (``None``: stop)."""
        if error is None:
            self._renewals += 1
            return self._every_s
        if isinstance(error, self._gone):
            why = f" ({error})" if self._say_why else ""
            self._fail(f"the key was gone or held by another owner at renewal{why}")
            return None
        if isinstance(error, NotOwned):  # released (or re-acquired) by the holder
            return None
        left_ms = self._lock.validity_remaining_ms()
        if left_ms <= 0:
            self._fail(f"Redis did not answer ({error!r}) before the lease ran out")
            return None
        return min(self._every_s, left_ms / 4000.0)  # type: ignore[no-any-return]

    def _release_calls(self) -> Calls:
        yield self.stop  # type: ignore[attr-defined]
        if self._error is not None:
            if self._lock.held:
                try:
                    yield self._lock.release
                except LockError as error:
                    raise self._error from error
            raise self._error
        yield self._lock.release

    def _exit_calls(self, exc: BaseException | None) -> Calls:
        if exc is not None:
            try:
                yield from self._release_calls()
            except Exception as error:
                note_failed_release(exc, self._lock.key, error)
        elif self._reported or not (self._lock.held or self._error is not None):
            yield self.stop  # type: ignore[attr-defined]
            if self._lock.held:
                with contextlib.suppress(LockError):
                    yield self._lock.release
        else:
            yield from self._release_calls()

    def __repr__(self) -> str:
        state = "lost" if self.lost else ("running" if self.running else "stopped")  # type: ignore[attr-defined]
        return (
            f"<{self._repr_prefix}Watchdog {self._lock.key!r} {state}, {self._renewals} renewals>"
        )


class Watchdog(Renewer):
    """Renew a held ``Lock``, ``FencedLock`` or ``Redlock`` from a background thread.

    Every ``every_ms`` it extends the lease, until the holder releases it, a renewal
    finds the key gone or someone else's, or ``max_total_ms`` has passed. A failure is
    never silent: :attr:`lost`, :attr:`lost_event`, :meth:`check` and :meth:`release`.

    Args:
        lock: the lock to keep alive; ``with Watchdog(lock):`` acquires it if needed.
        every_ms: time between renewals, below the TTL (default: a third of it).
        max_total_ms: if given, renew for at most this long (default: until released).

    Example::

        with Watchdog(FencedLock(r, "lock:report", ttl_ms=30_000)) as dog:
            for part in parts:
                build(part)
                dog.check()  # raises RenewalFailed once the lease is lost
    """

    _kinds, _label, _event = (Lock, Redlock), "Lock, FencedLock or Redlock", threading.Event
    _handled = (NotOwned, RedisError)

    def __init__(
        self,
        lock: Lock | Redlock,
        *,
        every_ms: float | None = None,
        max_total_ms: float | None = None,
    ) -> None:
        self._init_watchdog(lock, every_ms, max_total_ms)
        self._mutex = threading.Lock()

    @property
    def lost_event(self) -> threading.Event:
        """Set when the lease is lost; wait on it to be woken by the failure."""
        return self._lost  # type: ignore[return-value]

    @property
    def running(self) -> bool:
        """Whether the renewal thread is alive."""
        return self._runner is not None and self._runner.is_alive()

    def stop(self) -> None:
        """Stop renewing, without releasing the lock; waits for an extension in flight."""
        self._stop.set()
        with self._mutex:
            pass
        if self._runner is not None and self._runner is not threading.current_thread():
            self._runner.join()

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

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        drive(self._exit_calls(exc), call)

    def _spawn(self) -> threading.Thread:
        name = f"lockguide-watchdog:{self._lock.key}"
        return threading.Thread(target=self._run, name=name, daemon=True)

    def _launch(self) -> None:
        self._runner.start()

    def _wait(self, seconds: float) -> bool:
        return bool(self._stop.wait(seconds))

    def _renew_once(self) -> float | None:
        with self._mutex:  # stop() waits for a renewal in flight
            if self._stop.is_set():
                return None
            try:
                self._lock.extend()
            except self._handled as error:
                return self._after(error)
            return self._after(None)

    def _run(self) -> None:
        try:
            drive(self._loop_calls(), call)
        except BaseException as error:  # never die silently
            self._fail(f"the watchdog thread crashed: {error!r}")
