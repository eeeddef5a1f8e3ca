"""The locks a run hands its actors: lockguide's, recorded; and one broken on purpose.

An :class:`~lockguide_lab.scenarios.actor.Actor` records what its lock does.
Most of it the actor sees itself (it calls ``acquire`` and ``release``); two
things happen inside the lock, and reach the actor through the lock's public
surface:

* renewals, which a :class:`~lockguide.Watchdog` makes by calling the lock's
  public ``extend()`` from its own thread: the recorded ``Lock`` and
  ``FencedLock`` override it to note each renewal, and to wait while their
  actor is paused (its whole process is stopped, watchdog included);
* the tries inside a Redlock's retry loop, which ``Redlock`` reports to its
  ``on_attempt`` callback.

Every lockguide lock a run makes measures its lease on the run's clock
(``clock=``), so on a virtual clock a holder's own deadline sees a pause too.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

import redis

from lockguide.errors import LockLost
from lockguide.fencing import FencedLock
from lockguide.lock import Lock
from lockguide.redlock import Attempt, Redlock

__all__ = [
    "BareDelLock",
    "Hooks",
    "LockLike",
    "RecordedFencedLock",
    "RecordedLock",
    "RecordedRedlock",
]


@runtime_checkable
class LockLike(Protocol):
    """What an :class:`~lockguide_lab.scenarios.actor.Actor` needs from a lock."""

    @property
    def key(self) -> str: ...  # pragma: no cover - protocol

    @property
    def value(self) -> str | None: ...  # pragma: no cover - protocol

    @property
    def ttl_ms(self) -> int: ...  # pragma: no cover - protocol

    def acquire(
        self, *, blocking: bool = True, timeout_ms: float | None = ...
    ) -> bool: ...  # pragma: no cover - protocol

    def release(self) -> object: ...  # pragma: no cover - protocol


class BareDelLock:
    """The lock as most hand-written code has it: ``SET NX PX``, released by a bare ``DEL``.

    Broken on purpose. Acquiring stores 20 random bytes (hex) under ``key``
    with ``SET key value NX PX ttl_ms``; :meth:`release` deletes the key
    without looking at whose it is. A holder whose lease has expired
    therefore deletes the *next* holder's lock.
    """

    def __init__(self, client: redis.Redis, key: str, ttl_ms: int) -> None:
        self.client = client
        self._key = key
        self._ttl_ms = ttl_ms
        self._value: str | None = None

    @property
    def key(self) -> str:
        return self._key

    @property
    def ttl_ms(self) -> int:
        return self._ttl_ms

    @property
    def value(self) -> str | None:
        """The value stored by the current acquisition (``None`` when not held)."""
        return self._value

    def acquire(self, *, blocking: bool = True, timeout_ms: float | None = None) -> bool:
        """``SET key value NX PX ttl``; retried every 50 ms until ``timeout_ms`` if blocking."""
        value = secrets.token_hex(20)
        give_up = time.monotonic() + (timeout_ms or 0) / 1000.0
        while not self.client.set(self._key, value, nx=True, px=self._ttl_ms):
            if not blocking or time.monotonic() >= give_up:
                return False
            time.sleep(0.05)
        self._value = value
        return True

    def release(self) -> None:
        """``DEL key``, whoever holds it now (and whether or not this lock ever did)."""
        self._value = None
        self.client.delete(self._key)


class Hooks:
    """Between a recorded lock and its actor: the pause gate and the recorders.

    ``running`` is clear while the actor is paused; ``on_extend(started, ok)``
    and ``on_try(attempt)`` are set by the actor.
    """

    def __init__(self, now: Callable[[], float]) -> None:
        self.now = now
        self.on_extend: Callable[[float, bool], None] = lambda started, ok: None
        self.on_try: Callable[[Attempt], None] = lambda attempt: None
        self.running = threading.Event()
        self.running.set()
        self.try_started: float | None = None


def _recorded_extend(hooks: Hooks, extend: Callable[[], None]) -> None:
    """Wait while the client is paused (its process is stopped), extend, record the outcome."""
    hooks.running.wait()
    started = hooks.now()
    try:
        extend()
    except LockLost:
        hooks.on_extend(started, False)
        raise
    hooks.on_extend(started, True)


class RecordedLock(Lock):
    """``Lock`` whose extensions are recorded and wait while its actor is paused."""

    def __init__(self, hooks: Hooks, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.hooks = hooks

    def extend(self, ttl_ms: int | None = None) -> None:
        _recorded_extend(self.hooks, lambda: Lock.extend(self, ttl_ms))


class RecordedFencedLock(FencedLock):
    """``FencedLock`` whose extensions are recorded and wait while its actor is paused."""

    def __init__(self, hooks: Hooks, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.hooks = hooks

    def extend(self, ttl_ms: int | None = None) -> None:
        _recorded_extend(self.hooks, lambda: FencedLock.extend(self, ttl_ms))


class RecordedRedlock(Redlock):
    """``Redlock`` whose every try reaches its actor through ``on_attempt``.

    A try that won sets when its lease began (``hooks.try_started``, the run's
    time at the start of the try); one that lost is recorded as *not acquired*,
    with its votes.
    """

    def __init__(self, hooks: Hooks, *args: Any, **kwargs: Any) -> None:
        self.hooks = hooks
        super().__init__(*args, on_attempt=self._attempted, **kwargs)

    def _attempted(self, attempt: Attempt) -> None:
        hooks = self.hooks
        if attempt.acquired:
            hooks.try_started = hooks.now() - attempt.verdict.elapsed_ms
        else:
            hooks.on_try(attempt)
