"""A scenario, and one run of it: the clock, the actors, the events.

A scenario is a short script. It asks its :class:`Run` for clients
(:meth:`Run.actor`, with a lock from :meth:`Run.lock`, :meth:`Run.fenced_lock`
or :meth:`Run.redlock`) and a resource, moves the clock (:meth:`Run.at`), and
makes the clients act. Every action records itself, and the run checks the
servers before each new event, so a lease that expired or vanished in the
meantime appears in the timeline at the moment it ended:

* a lease whose TTL has run out and whose key no longer holds the client's
  value is recorded as *expired* at the end of its TTL;
* a lease whose key is gone (or someone else's) *before* its TTL ran out is
  recorded as *lost* at the moment it was found missing: a failover, a
  restart, another client's ``DEL``.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Sequence
from dataclasses import dataclass, fields
from enum import StrEnum
from typing import Any, ClassVar

import redis

from lockguide.errors import BadArgument, BadArgumentType
from lockguide.fencing import FencedLock
from lockguide.lock import Lock
from lockguide.redlock import Redlock
from lockguide_lab.history.record import RESOURCE_KEY, Recorder
from lockguide_lab.scenarios.actor import Actor
from lockguide_lab.scenarios.locks import (
    Hooks,
    LockLike,
    RecordedFencedLock,
    RecordedLock,
    RecordedRedlock,
)
from lockguide_lab.scenarios.resources import Resource
from lockguide_lab.scenarios.timeline import Event, Kind, Timeline
from lockguide_lab.testbed.base import Testbed

__all__ = ["Run", "Scenario", "Way"]


class Way(StrEnum):
    """How a scenario's code is written."""

    BROKEN = "broken"
    """As most code does it."""
    FIXED = "fixed"
    """With the guide's fix."""


#: Events recorded before the leases they ended (the ``DEL``, the crash came first).
_CAUSES = frozenset({Kind.RELEASED_OTHERS, Kind.SERVER})


class Run:
    """One run of one scenario on one testbed: the clock, the actors, the events."""

    def __init__(self, testbed: Testbed, scenario: Scenario, way: Way) -> None:
        self.testbed = testbed
        self.scenario = scenario
        self.way = way
        self.clock = testbed.clock
        self._t0: float | None = None
        self._events: list[Event] = []
        self._actors: list[Actor] = []
        self.mutex = threading.RLock()
        self.approach = ""
        #: The run's history: every acquire, renewal, release and write, as operations.
        self.history = Recorder(clock=self.now)
        self._epochs = 0

    # -- time ---------------------------------------------------------------------------------

    def begin(self) -> None:
        """Start the run's time here: setting up servers and clients is not part of the story.

        Called by the first event or :meth:`at` if the script does not call it.
        """
        if self._t0 is None:
            self._t0 = self.clock.now_ms()

    def now(self) -> float:
        """Milliseconds since the run began (0 before it has)."""
        if self._t0 is None:
            return 0.0
        return self.clock.now_ms() - self._t0

    def at(self, t_ms: float) -> None:
        """Move the clock to ``t_ms`` after the start (no-op if already later)."""
        self.begin()
        assert self._t0 is not None
        self.clock.advance_to(self._t0 + t_ms)
        self.settle()

    def after(self, ms: float) -> None:
        """Let ``ms`` pass."""
        self.at(self.now() + ms)

    # -- parts ---------------------------------------------------------------------------------

    def actor(self, name: str, lock: LockLike, servers: Sequence[redis.Redis]) -> Actor:
        """A client called ``name`` that uses ``lock``, whose key lives on ``servers``."""
        actor = Actor(self, name, lock, servers)
        self._actors.append(actor)
        return actor

    def lock(self, client: redis.Redis, key: str, ttl_ms: int) -> Lock:
        """A :class:`~lockguide.Lock` on the run's clock, whose renewals (if any) are recorded."""
        return RecordedLock(Hooks(self.now), client, key, ttl_ms=ttl_ms, clock=self.clock.monotonic)

    def fenced_lock(self, client: redis.Redis, key: str, ttl_ms: int) -> FencedLock:
        """A :class:`~lockguide.FencedLock` on the run's clock, its renewals recorded."""
        return RecordedFencedLock(
            Hooks(self.now), client, key, ttl_ms=ttl_ms, clock=self.clock.monotonic
        )

    def redlock(
        self, masters: Sequence[redis.Redis], key: str, ttl_ms: int, **options: Any
    ) -> Redlock:
        """A :class:`~lockguide.Redlock` on the run's clock, every try recorded.

        ``options`` are Redlock's own (``node_timeout_ms``, ``retry_delay_ms``, ``rng``...).
        """
        return RecordedRedlock(
            Hooks(self.now), masters, key, ttl_ms=ttl_ms, clock=self.clock.monotonic, **options
        )

    def server_event(self, detail: str) -> None:
        """Record something the servers did (``actor`` is ``"redis"``), then what it cost."""
        self.record("redis", Kind.SERVER, detail)

    def holds(self, value: bytes) -> bool:
        """Whether ``value`` is the lock value of a client that believes it holds the lock."""
        return any(h.value is not None and h.value.encode("utf-8") == value for h in self._actors)

    def owner_of(self, value: bytes) -> str:
        """The name of the client whose lock value this is."""
        for actor in self._actors:
            if actor.value is not None and actor.value.encode("utf-8") == value:
                return actor.name
        return "another client"

    def next_epoch(self) -> int:
        """Number the next grant of the lock (1, 2, ...: the order the lock granted them)."""
        with self.mutex:
            self._epochs += 1
            return self._epochs

    # -- events --------------------------------------------------------------------------------

    def record(
        self,
        actor: str,
        kind: Kind,
        detail: str = "",
        *,
        value: str | None = None,
        in_passing: bool = False,
        at: float | None = None,
    ) -> None:
        """Add an event now; settle the leases before (what ended meanwhile) and after
        (what this event ended: a ``DEL`` of someone else's key).

        ``in_passing`` events (a renewal, one refused try inside a lock's retry
        loop) are noted from the lock's own thread and change no lease: they
        are appended without settling, so that noting them does not slow the
        client down. ``at`` (in passing only) dates an event noted after it happened.
        """
        self.begin()
        with self.mutex:
            if not in_passing and kind not in _CAUSES:
                self.settle()
            when = self.now() if at is None or not in_passing else at
            self._events.append(Event(round(when, 1), actor, kind, detail, value))
            if not in_passing:
                self.settle()
                self.clock.tick(self.scenario.step_ms)

    def settle(self) -> None:
        """Record the leases that have ended since the last event."""
        with self.mutex:
            for actor in self._actors:
                actor.flush()
            now = self.now()
            for actor in self._actors:
                if actor.lease_end_ms is None or actor.owns():
                    continue
                end = actor.lease_end_ms
                actor.lease_end_ms = None
                if end <= now:
                    self._events.append(
                        Event(round(end, 1), actor.name, Kind.EXPIRED, "its TTL ran out")
                    )
                else:
                    self._events.append(
                        Event(
                            round(now, 1),
                            actor.name,
                            Kind.LOST,
                            f"its key vanished {end - now:.0f} ms before its TTL would have ended",
                        )
                    )

    def finish(self, resource: Resource) -> Timeline:
        """Settle, read the resource, and return the timeline."""
        self.settle()
        op = self.history.invoke("observer", "read", None, key=RESOURCE_KEY)
        final = resource.read()
        op.ok(final)
        params = {f.name: float(getattr(self.scenario, f.name)) for f in fields(self.scenario)}
        return Timeline(
            scenario=self.scenario.title,
            way=str(self.way),
            approach=self.approach,
            testbed=self.testbed.label,
            events=tuple(sorted(self._events, key=lambda e: e.t_ms)),
            final_value=final,
            parameters=params,
            history=self.history.text(),
        )


@dataclass(frozen=True)
class Scenario:
    """A failure mode as a runnable script, broken or fixed. Subclasses are dataclasses.

    Class attributes:
        title: the failure mode in a few words.
        broken: what the broken run uses ("Lock, unfenced writes").
        fixed: what the fixed run uses.
        real_time: the script needs real time to pass (a thread must run),
            even on a virtual clock.
        liveness: the broken way fails to make progress (nobody acquires)
            rather than letting two writers in.

    On a virtual clock each client action takes :attr:`step_ms`; on a real
    clock it takes what it takes.
    """

    title: ClassVar[str] = ""
    broken: ClassVar[str] = ""
    fixed: ClassVar[str] = ""
    real_time: ClassVar[bool] = False
    liveness: ClassVar[bool] = False

    @property
    def step_ms(self) -> float:
        """How long one client action takes on a virtual clock (the figure's spacing)."""
        return 1.0

    def run(self, testbed: Testbed, way: Way | str = Way.BROKEN) -> Timeline:
        """Run the scenario once on ``testbed`` and return its timeline."""
        if not isinstance(testbed, Testbed):
            raise BadArgumentType(f"testbed must be a Testbed, not {type(testbed).__name__}")
        try:
            chosen = Way(way)
        except ValueError:
            raise BadArgument(f"way must be 'broken' or 'fixed', got {way!r}") from None
        with testbed.running():
            run = Run(testbed, self, chosen)
            run.approach = self.broken if chosen is Way.BROKEN else self.fixed
            with contextlib.ExitStack() as stack:
                if self.real_time:
                    stack.enter_context(testbed.clock.real_time())
                resource = self.script(run, chosen)
            return run.finish(resource)

    def premise_held(self, timeline: Timeline, way: Way | str) -> bool:
        """Whether ``timeline`` is a run of the story this scenario tells. Always, unless
        the story needs real-time conditions a busy machine can break (then such a run
        says nothing either way, and is worth running again)."""
        return True

    def both(self, testbed: Testbed) -> tuple[Timeline, Timeline]:
        """The broken run, then the fixed run."""
        return self.run(testbed, Way.BROKEN), self.run(testbed, Way.FIXED)

    def script(self, run: Run, way: Way) -> Resource:
        """Act the scenario out; return the resource whose final state is judged."""
        raise NotImplementedError
