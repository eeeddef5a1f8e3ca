"""What :class:`~lockguide.Lock` and :class:`~lockguide.Redlock` share, written once.

Both keep the same state for one lease (the key, the TTL, this holder's random
value while it holds the lock, and its deadline on the process's monotonic
clock), show it through the same read-only properties, and wrap their own
acquire loops in the same rules: a held lock is not acquired again, the wait
defaults to the constructor's, and each retry waits a random pause that never
runs past the end of the wait.

What stays in each class on purpose: one try, release and extend; the error
``with`` raises when it cannot get the lock; and every reading of the clock
(``validity_remaining_ms`` too), because each reads it through its own module
(``lockguide.lock``'s ``time``, ``lockguide.redlock``'s ``_now``), which is where
the scenarios' virtual clock reaches them.

:class:`ReleasedOnExit` is the ``with`` protocol's exit, which the renewal
watchdog shares too: leaving the block releases.
"""

from __future__ import annotations

from collections.abc import Callable
from types import TracebackType

from lockguide import _validate
from lockguide.errors import AlreadyAcquired, NotOwned

__all__ = ["LeaseBase", "ReleasedOnExit"]

# The default of ``acquire(timeout_ms=...)``: use the constructor's ``timeout_ms``.
_UNSET: float = -1.0


class ReleasedOnExit:
    """Leaving a ``with`` block calls :meth:`release`, whether or not it raised."""

    def release(self) -> object:
        """Release what ``__enter__`` took; every subclass defines it."""
        raise NotImplementedError

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()


class LeaseBase(ReleasedOnExit):
    """The state of one lease and its read-only facts.

    A subclass's ``__init__`` sets every attribute annotated here; ``_value`` is
    ``None`` whenever the lock is not held.
    """

    _key: str
    _ttl_ms: int
    _timeout_ms: float | None
    _retry_delay_ms: tuple[float, float]
    _value: str | None
    _deadline: float

    @property
    def key(self) -> str:
        """The Redis key this lock uses (on a Redlock, the same key on every master)."""
        return self._key

    @property
    def ttl_ms(self) -> int:
        """The lease requested on every acquire, in milliseconds (on a Redlock, on each master)."""
        return self._ttl_ms

    @property
    def value(self) -> str | None:
        """This holder's random value while the lock is held, else ``None``."""
        return self._value

    @property
    def held(self) -> bool:
        """Whether this object acquired the lock and has not released or lost it.

        This is the holder's *belief*: the lease may have expired meanwhile.
        :meth:`validity_remaining_ms` says how much of it this process's clock
        still allows.
        """
        return self._value is not None

    def _wait_ms(self, timeout_ms: float | None) -> float | None:
        """How long this ``acquire`` may keep trying (``None``: no limit); refuses a held lock."""
        if self._value is not None:
            raise AlreadyAcquired(self._key)
        if timeout_ms == _UNSET:
            return self._timeout_ms
        return _validate.check_duration_ms(timeout_ms, "timeout_ms", allow_none=True)

    def _pause_s(
        self, draw: Callable[[float, float], float], now: float, give_up_at: float | None
    ) -> float | None:
        """The random pause before the next try, cut to the wait left; ``None`` once none is.

        ``draw`` and ``now`` come from the subclass: each keeps its own random
        source and reads its own clock.
        """
        pause = draw(*self._retry_delay_ms) / 1000.0
        if give_up_at is None:
            return pause
        left = give_up_at - now
        if left <= 0:
            return None
        return min(pause, left)

    def _take_value(self, action: str) -> str:
        """Forget this holder's value and return it; :class:`NotOwned` if there is none."""
        value = self._value
        if value is None:
            raise NotOwned(self._key, action)
        self._value = None
        return value
