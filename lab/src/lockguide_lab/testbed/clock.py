"""The lab's clocks: real time, and one fake clock that can stand still and jump.

A scenario is a script with times in it ("at 250 ms, B tries the lock"), and
the audit needs an acquisition to *seem* to last longer than it did. Both ask a
clock:

* :class:`RealClock` waits. It works against any server.
* :class:`VirtualClock` is the lab's one fake clock. Standing (the default)
  it moves only when told: each client action takes a fixed step and
  :meth:`~VirtualClock.advance_to` jumps, so a 35-second pause costs nothing
  and every run lands on the same milliseconds. Flowing (``flowing=True``, or
  inside :meth:`~Clock.real_time`) it runs with real time, and
  :meth:`~VirtualClock.jump` still moves it ahead at once.

How a virtual clock reaches the code that reads time:

* a lockguide lock takes it as its ``clock=`` argument
  (:meth:`Clock.monotonic`); nothing in ``lockguide`` is patched;
* the fakeredis servers of :mod:`lockguide_lab.testbed.fakeserver` stamp each
  command with :meth:`VirtualClock.wall` and expire keys against it;
* a library that offers no clock argument (the audit's peers) is reached by
  :class:`ProcessClocks`, which makes the ``time`` module's clocks read the
  virtual clock while it is installed. It never rebinds a name in
  ``lockguide``, whose locks get their clock as an argument.

Threads still run in real time: a jump is a moment in which no thread of this
process ran, which is exactly what a stop-the-world pause is.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
import timeit
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["Clock", "ProcessClocks", "RealClock", "VirtualClock", "real_now"]

# Real clocks, captured before anything can patch them.
_perf = time.perf_counter
_monotonic = time.monotonic
_wall = time.time
_sleep = time.sleep


def real_now() -> float:
    """Seconds on the real performance counter (never patched by :class:`ProcessClocks`)."""
    return _perf()


class Clock:
    """Lab time in milliseconds, and a way to move it forward.

    Subclasses decide whether moving forward waits (:class:`RealClock`) or
    jumps (:class:`VirtualClock`).
    """

    name = "clock"

    def __init__(self) -> None:
        self._origin = _perf()
        self._wall_origin = _wall()
        self._monotonic_origin = _monotonic()

    def now_ms(self) -> float:
        """Milliseconds since this clock was made."""
        return (_perf() - self._origin) * 1000.0

    def advance_to(self, t_ms: float) -> None:
        """Move to ``t_ms`` (on this clock); nothing happens if it is already later."""
        left = t_ms - self.now_ms()
        if left > 0:
            _sleep(left / 1000.0)

    def tick(self, ms: float) -> None:
        """One client action took ``ms``: nothing to do on a real clock (it took what it took)."""

    @contextlib.contextmanager
    def real_time(self) -> Iterator[None]:
        """Inside the block, time passes for real, so threads get to run."""
        yield

    def monotonic(self) -> float:
        """``time.monotonic()`` as this clock sees it, in seconds: a lock's ``clock=``."""
        return self._monotonic_origin + self.now_ms() / 1000.0

    def wall(self) -> float:
        """``time.time()`` as this clock sees it, in seconds."""
        return self._wall_origin + self.now_ms() / 1000.0

    @property
    def virtual(self) -> bool:
        """Whether time can jump on this clock."""
        return False


class RealClock(Clock):
    """Real time: :meth:`advance_to` sleeps. Works with any server."""

    name = "real time"


class VirtualClock(Clock):
    """The lab's fake clock: time that stands still until moved, or flows and jumps.

    Standing (the default), every client action takes exactly the step it is
    given (:meth:`tick`) and :meth:`advance_to` jumps, so a run lands on the
    same milliseconds every time. Inside :meth:`real_time` (or for a clock made
    with ``flowing=True``) it flows with real time, and only :meth:`jump`
    moves it ahead.

    While a :meth:`held` block is active, every reader of the clock waits
    until it ends, so that no reading falls between an event and the jump
    that belongs to it.

    A standing clock never reaches a lock's deadline by itself: a *blocking*
    acquire on it would wait forever, so scenarios on a standing clock make
    single attempts (``blocking=False``).
    """

    name = "virtual clock"

    def __init__(self, *, flowing: bool = False) -> None:
        super().__init__()
        self._virtual_ms = 0.0
        self._flowing_since: float | None = _perf() if flowing else None
        self._holding = False
        self._released = threading.Condition()

    @property
    def virtual(self) -> bool:
        return True

    def now_ms(self) -> float:
        if self._holding:
            with self._released:
                while self._holding:
                    self._released.wait()
        flowing = self._flowing_since
        if flowing is None:
            return self._virtual_ms
        return self._virtual_ms + (_perf() - flowing) * 1000.0

    def ahead_s(self) -> float:
        """How far this clock is ahead of real time, in seconds (what jumps added)."""
        return self.now_ms() / 1000.0 - (_perf() - self._origin)

    def advance_to(self, t_ms: float) -> None:
        left = t_ms - self.now_ms()
        if left <= 0:
            return
        if self._flowing_since is not None:
            _sleep(left / 1000.0)
        else:
            self._virtual_ms += left

    def jump(self, ms: float) -> None:
        """Move ahead by ``ms`` at once (at least 0), flowing or not."""
        self._virtual_ms += max(0.0, ms)

    def tick(self, ms: float) -> None:
        if self._flowing_since is None:
            self._virtual_ms += ms

    @contextlib.contextmanager
    def real_time(self) -> Iterator[None]:
        if self._flowing_since is not None:
            yield
            return
        self._flowing_since = _perf()
        try:
            yield
        finally:
            self._virtual_ms = self.now_ms()
            self._flowing_since = None

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """Make readers of this clock wait until the ``with`` block ends."""
        with self._released:
            self._holding = True
        try:
            yield
        finally:
            with self._released:
                self._holding = False
                self._released.notify_all()


class ProcessClocks:
    """Make the ``time`` module's clocks read a flowing :class:`VirtualClock`.

    For libraries that take no clock argument: while :meth:`installed`, each of
    ``time.time``, ``time.monotonic``, ``time.perf_counter`` (their ``_ns``
    forms, and ``timeit.default_timer``) returns the real reading plus how far
    ``clock`` is ahead (:meth:`VirtualClock.ahead_s`), and so does every
    module-level copy of one of them (``from time import monotonic``,
    ``_now = time.monotonic``) outside the standard library, the lab and
    ``lockguide`` (whose locks take ``clock=`` instead). ``wall_only=True``
    moves only ``time.time`` / ``time.time_ns``: a library whose answer
    changes then is timing itself with the wall clock.

    A library that hides a clock elsewhere (a default argument, an attribute
    of an object) escapes; the audit's drift check detects that with a control
    run and says so.
    """

    _WALL = ("time", "time_ns")
    _ALL = ("time", "time_ns", "monotonic", "monotonic_ns", "perf_counter", "perf_counter_ns")

    def __init__(self, clock: VirtualClock, *, wall_only: bool = False) -> None:
        self.clock = clock
        self._names = self._WALL if wall_only else self._ALL
        self._wall_only = wall_only

    @contextlib.contextmanager
    def installed(self) -> Iterator[VirtualClock]:
        """Patch the clocks for the duration of the ``with`` block; yield the clock."""
        originals: dict[str, Any] = {name: getattr(time, name) for name in self._names}
        original_timer = timeit.default_timer
        copies = _copies(originals)
        clock = self.clock

        def make(name: str) -> Callable[[], Any]:
            real = originals[name]
            if name.endswith("_ns"):
                return lambda: real() + int(clock.ahead_s() * 1e9)
            return lambda: real() + clock.ahead_s()

        patched = {name: make(name) for name in self._names}
        try:
            for name in self._names:
                setattr(time, name, patched[name])
            if not self._wall_only:
                timeit.default_timer = patched["perf_counter"]
            for namespace, attr, name in copies:
                namespace[attr] = patched[name]
            yield clock
        finally:
            # A module imported meanwhile may have copied a patched clock: put
            # the real one there too, or its clock would stay patched for good.
            copies += _copies(patched, everywhere=True)
            for namespace, attr, name in copies:
                namespace[attr] = originals[name]
            for name, func in originals.items():
                setattr(time, name, func)
            timeit.default_timer = original_timer


#: Top-level packages whose module-level clock copies :class:`ProcessClocks` leaves alone:
#: the lab times itself on real clocks, and lockguide's locks take ``clock=`` instead.
_UNTOUCHED = frozenset({"lockguide", "lockguide_lab"})


def _copies(
    clocks: dict[str, Any], *, everywhere: bool = False
) -> list[tuple[dict[str, Any], str, str]]:
    """``(module namespace, name, clock)`` for each module-level copy of a clock.

    Unless ``everywhere``, the standard library, the lab and lockguide are skipped.
    """
    by_id = {id(func): name for name, func in clocks.items()}
    found = []
    for module_name, module in list(sys.modules.items()):
        top = module_name.partition(".")[0]
        skipped = top in sys.stdlib_module_names or top in _UNTOUCHED
        namespace = getattr(module, "__dict__", None)
        if (skipped and not everywhere) or not isinstance(namespace, dict):
            continue
        for attr, value in list(namespace.items()):
            name = by_id.get(id(value))
            if name is not None and clocks[name] is value:
                found.append((namespace, attr, name))
    return found
