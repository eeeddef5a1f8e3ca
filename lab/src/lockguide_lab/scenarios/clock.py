"""The clocks a scenario runs on: real time, or virtual time on fakeredis.

A scenario is a script with times in it ("at 250 ms, B tries the lock"). The
clock decides how the script gets there:

* :class:`RealClock` waits. It works against any server, and a scenario that
  uses it takes as long as its script says, so real-server runs use short TTLs
  (hundreds of milliseconds) with margins of tens of milliseconds around every
  expiry the outcome depends on.
* :class:`VirtualClock` stands still between the scenario's steps and jumps
  when told to. It only works with servers it controls (the in-process
  fakeredis servers of :class:`~lockguide_lab.scenarios.FakeBench`), and then a
  35-second pause costs nothing and every run lands on the same milliseconds.

How the jump reaches everything that reads time, in this process:

* fakeredis stamps every command with ``time.time()`` and expires keys against
  that stamp (``Database.time``). The fake servers of ``FakeBench`` replace
  their databases with ones that take the stamp from the virtual clock instead
  (plus a skew of their own, for a clock that jumps on one server only).
  Nothing global is patched.
* ``lockguide.Lock`` keeps its deadline on ``time.monotonic()``. While
  :meth:`VirtualClock.installed` is active, the ``time`` module seen by the
  modules in :data:`CLIENT_CLOCK_MODULES` is replaced by one whose
  ``monotonic()`` reads the virtual clock, so a holder's own deadline sees the
  pause too, as it would after a real one.

Threads still run in real time: a jump is a moment in which no thread of this
process ran, which is exactly what a stop-the-world pause is. Work that must
let a thread run (a renewal watchdog) runs in :meth:`Clock.real_time`.
"""

from __future__ import annotations

import contextlib
import importlib
import sys
import time
import types
from collections.abc import Iterator
from typing import Any
from unittest import mock

__all__ = [
    "CLIENT_CLOCK_MODULES",
    "Clock",
    "RealClock",
    "VirtualClock",
]

#: What a :class:`VirtualClock` moves while installed: ``"module"`` replaces the
#: module's ``time`` (its ``time.monotonic()`` calls), ``"module:name"`` replaces a
#: monotonic clock function the module keeps under ``name``. Modules that are not
#: installed are skipped. A lock that keeps a deadline elsewhere adds itself here.
CLIENT_CLOCK_MODULES: list[str] = ["lockguide.lock", "lockguide.redlock:_now"]


class Clock:
    """Scenario time in milliseconds, and a way to move it forward.

    Subclasses decide whether moving forward waits (:class:`RealClock`) or
    jumps (:class:`VirtualClock`).
    """

    name = "clock"

    def __init__(self) -> None:
        self._origin = time.perf_counter()
        self._real_time_depth = 0

    def now_ms(self) -> float:
        """Milliseconds since this clock was made."""
        return (time.perf_counter() - self._origin) * 1000.0

    def advance_to(self, t_ms: float) -> None:
        """Move to ``t_ms`` (on this clock); nothing happens if it is already later."""
        left = t_ms - self.now_ms()
        if left > 0:
            time.sleep(left / 1000.0)

    def tick(self, ms: float) -> None:
        """One client action took ``ms``: nothing to do on a real clock (it took what it took)."""

    @contextlib.contextmanager
    def real_time(self) -> Iterator[None]:
        """Inside the block, time passes for real, so threads get to run."""
        yield

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        """Make this clock the one the code under test reads (nothing to do for real time)."""
        yield

    @property
    def virtual(self) -> bool:
        """Whether time can jump on this clock."""
        return False


class RealClock(Clock):
    """Real time: :meth:`advance_to` sleeps. Works with any server."""

    name = "real time"


class VirtualClock(Clock):
    """Time that stands still until the scenario moves it, then jumps.

    Every client action takes exactly the scenario's step (``Scenario.step_ms``), and
    :meth:`advance_to` jumps, so a run lands on the same milliseconds every
    time. Inside :meth:`real_time` the clock flows with real time instead (for
    a renewal thread that has to run). Only servers made with this clock
    (``FakeBench``'s) and the modules in :data:`CLIENT_CLOCK_MODULES` (while
    :meth:`installed`) read it; anything else in the process keeps real time.

    While installed and not in :meth:`real_time`, a lock's *blocking* acquire
    would wait forever for a deadline on a clock that does not move: scenarios
    make single attempts (``blocking=False``).
    """

    name = "virtual clock"

    def __init__(self) -> None:
        super().__init__()
        self._wall_origin = time.time()
        self._monotonic_origin = time.monotonic()
        self._virtual_ms = 0.0
        self._flowing_since: float | None = None

    @property
    def virtual(self) -> bool:
        return True

    def now_ms(self) -> float:
        flowing = self._flowing_since
        if flowing is None:
            return self._virtual_ms
        return self._virtual_ms + (time.perf_counter() - flowing) * 1000.0

    def advance_to(self, t_ms: float) -> None:
        left = t_ms - self.now_ms()
        if left <= 0:
            return
        if self._flowing_since is not None:
            time.sleep(left / 1000.0)
        else:
            self._virtual_ms += left

    def tick(self, ms: float) -> None:
        if self._flowing_since is None:
            self._virtual_ms += ms

    @contextlib.contextmanager
    def real_time(self) -> Iterator[None]:
        if self._flowing_since is not None:
            yield
            return
        self._flowing_since = time.perf_counter()
        try:
            yield
        finally:
            self._virtual_ms = self.now_ms()
            self._flowing_since = None

    def wall(self) -> float:
        """``time.time()`` as this clock sees it, in seconds."""
        return self._wall_origin + self.now_ms() / 1000.0

    def monotonic(self) -> float:
        """``time.monotonic()`` as this clock sees it, in seconds."""
        return self._monotonic_origin + self.now_ms() / 1000.0

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        """Let lockguide's locks read this clock's ``monotonic()`` inside the block."""
        shifted = _ShiftedTime(self)
        with contextlib.ExitStack() as stack:
            for entry in CLIENT_CLOCK_MODULES:
                name, _, attribute = entry.partition(":")
                try:
                    module = sys.modules.get(name) or importlib.import_module(name)
                except ModuleNotFoundError:
                    continue
                if attribute:
                    if hasattr(module, attribute):
                        stack.enter_context(mock.patch.object(module, attribute, self.monotonic))
                else:
                    stack.enter_context(mock.patch.object(module, "time", shifted))
            yield


class _ShiftedTime(types.ModuleType):
    """A stand-in for the ``time`` module whose clocks read a :class:`VirtualClock`."""

    def __init__(self, clock: VirtualClock) -> None:
        super().__init__("time")
        self._clock = clock

    def monotonic(self) -> float:
        return self._clock.monotonic()

    def time(self) -> float:
        return self._clock.wall()

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)
