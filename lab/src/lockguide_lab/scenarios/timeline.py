"""What a scenario run recorded: time-stamped events, and the outcome read from them.

A timeline is the whole story of one run, in the order a reader would tell it:
who acquired the lock, who paused, when each lease really ended on the server,
which writes the resource accepted or refused, who released what. The outcome
is computed from those events and from what the resource holds at the end, never
typed in by the scenario:

* **mutual exclusion** is broken when the resource accepted a write from a
  client whose lease had already ended (expired, lost, or deleted by someone
  else), that is, a write the lock was supposed to have stopped;
* **data** is lost when the resource does not end with the last write that was
  made under a valid lease (someone overwrote it who should not have);
* **overlap** names the clients that believed they held the lock while another
  client believed so too. The lock itself overlaps in most runs, broken or
  fixed; what a fix changes is whether the overlap reaches the data.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

__all__ = ["Event", "Interval", "Kind", "Outcome", "Timeline"]


class Kind(StrEnum):
    """What happened, in the words the guide uses."""

    ACQUIRED = "acquired"
    NOT_ACQUIRED = "not acquired"
    GAVE_UP = "gave up"
    READ = "read"
    PAUSED = "paused"
    RESUMED = "resumed"
    RENEWED = "renewed"
    RENEWAL_FAILED = "renewal failed"
    EXPIRED = "lease expired"
    LOST = "lease lost"
    WRITE_ACCEPTED = "write accepted"
    WRITE_REFUSED = "write refused"
    RELEASED = "released"
    RELEASE_REFUSED = "release refused"
    RELEASED_OTHERS = "released someone else's lock"
    STOPPED = "stopped"  # a leader told it lost its term, before it resigns
    SERVER = "server"


#: Events after which a client no longer believes it holds the lock.
BELIEF_ENDS = frozenset({Kind.RELEASED, Kind.RELEASE_REFUSED, Kind.RELEASED_OTHERS, Kind.STOPPED})
#: Events after which the server no longer holds the client's lease (a refused
#: release still deletes the holder's value wherever it is left).
LEASE_ENDS = frozenset({Kind.EXPIRED, Kind.LOST, Kind.RELEASED, Kind.RELEASE_REFUSED})


@dataclass(frozen=True)
class Event:
    """One thing that happened, ``t_ms`` milliseconds after the run started.

    Attributes:
        t_ms: time since the start of the run, on the testbed's clock.
        actor: the client (``"A"``, ``"B"``, ...) or ``"redis"`` for what the
            servers did (a crash, a promotion, a restart).
        kind: what happened.
        detail: the specifics a reader needs (a token, a TTL, what was deleted).
        value: for writes, the value the client tried to store.
    """

    t_ms: float
    actor: str
    kind: Kind
    detail: str = ""
    value: str | None = None

    def describe(self) -> str:
        """One line: what happened and the detail."""
        text = str(self.kind)
        if self.value is not None:
            text += f" ({self.value!r})"
        return f"{text}: {self.detail}" if self.detail else text


@dataclass(frozen=True)
class Interval:
    """A span of time for one client; ``end_ms`` is the end of the run if still open."""

    actor: str
    start_ms: float
    end_ms: float
    open: bool = False

    def overlaps(self, other: Interval) -> bool:
        """Whether the two spans share some time (touching ends do not count)."""
        return self.start_ms < other.end_ms and other.start_ms < self.end_ms

    def contains(self, t_ms: float) -> bool:
        """Whether ``t_ms`` falls inside the span (its start included, its end not)."""
        return self.start_ms <= t_ms < self.end_ms or (self.open and t_ms == self.end_ms)


@dataclass(frozen=True)
class Outcome:
    """What a run proved.

    Attributes:
        mutual_exclusion: no write was accepted from a client whose lease had
            ended. ``False`` means the lock failed to keep a writer out.
        data_intact: the resource ends with the last write made under a valid
            lease. ``False`` means an update was lost.
        progress: some client acquired the lock (``False``: nobody won).
        overlapping: the clients that believed they held the lock at a moment
            when another client believed so too, in the order they acquired.
        reasons: one sentence per violation found, naming the events.
    """

    mutual_exclusion: bool
    data_intact: bool
    progress: bool
    overlapping: tuple[str, ...]
    reasons: tuple[str, ...] = ()

    @property
    def safe(self) -> bool:
        """Mutual exclusion held at the resource and the data is intact."""
        return self.mutual_exclusion and self.data_intact

    def summary(self) -> str:
        """The outcome in one line."""
        parts = [
            "mutual exclusion " + ("held" if self.mutual_exclusion else "BROKEN"),
            "data " + ("intact" if self.data_intact else "LOST"),
        ]
        if not self.progress:
            parts.append("nobody acquired the lock")
        if self.overlapping:
            who = ", ".join(self.overlapping[:-1]) + " and " + self.overlapping[-1]
            parts.append(f"{who} believed they held the lock at the same time")
        else:
            parts.append("no two clients believed they held the lock at once")
        return "; ".join(parts)


@dataclass(frozen=True)
class Timeline:
    """The events of one run of one scenario, and the outcome they add up to.

    Attributes:
        scenario: the scenario's title.
        way: ``"broken"`` (as most code does it) or ``"fixed"`` (the guide's fix).
        approach: the code under test in a few words (``"Lock, unfenced writes"``).
        testbed: where it ran and on which clock.
        events: everything that happened, in time order.
        final_value: what the resource held at the end.
        parameters: the scenario's settings (TTL, pause, ...), for the record.
        history: the run's operations as a history (JSON lines, Jepsen's shape; see
            :mod:`lockguide_lab.history`): the lock's grants on key ``"lock"``, the
            resource's writes and final read on key ``"resource"``.
    """

    scenario: str
    way: str
    approach: str
    testbed: str
    events: tuple[Event, ...]
    final_value: str | None
    parameters: dict[str, float] = field(default_factory=dict)
    history: str = field(default="", compare=False, repr=False)

    @property
    def end_ms(self) -> float:
        """The time of the last event."""
        return max((e.t_ms for e in self.events), default=0.0)

    @property
    def actors(self) -> tuple[str, ...]:
        """The clients by name (``"A"``, ``"B"``, ...; the servers' actor excluded).

        By name rather than by first appearance, so that clients who start at
        the same moment keep their rows from one run to the next. The servers
        record as ``"redis"`` (or ``"cluster"``), and only server events.
        """
        servers = {e.actor for e in self.events if e.kind is Kind.SERVER} | {"redis"}
        return tuple(sorted({e.actor for e in self.events} - servers))

    def of(self, actor: str, *kinds: Kind) -> list[Event]:
        """The events of one client, optionally only of some kinds."""
        return [e for e in self.events if e.actor == actor and (not kinds or e.kind in kinds)]

    def beliefs(self) -> list[Interval]:
        """When each client believed it held the lock: from acquiring to releasing."""
        return self._spans(BELIEF_ENDS)

    def leases(self) -> list[Interval]:
        """When the server really held each client's lease: from acquiring to its end."""
        return self._spans(LEASE_ENDS)

    def pauses(self) -> list[Interval]:
        """When each client was paused (nothing in its process ran)."""
        spans = []
        started: dict[str, float] = {}
        for event in self.events:
            if event.kind is Kind.PAUSED:
                started[event.actor] = event.t_ms
            elif event.kind is Kind.RESUMED and event.actor in started:
                spans.append(Interval(event.actor, started.pop(event.actor), event.t_ms))
        spans += [Interval(a, t, self.end_ms, open=True) for a, t in started.items()]
        return spans

    def _spans(self, ends: frozenset[Kind]) -> list[Interval]:
        spans = []
        started: dict[str, float] = {}
        for event in self.events:
            if event.kind is Kind.ACQUIRED:
                started[event.actor] = event.t_ms
            elif event.kind in ends and event.actor in started:
                spans.append(Interval(event.actor, started.pop(event.actor), event.t_ms))
        spans += [Interval(a, t, self.end_ms, open=True) for a, t in started.items()]
        return sorted(spans, key=lambda s: s.start_ms)

    @property
    def outcome(self) -> Outcome:
        """Mutual exclusion, data, progress and overlap, read from the events."""
        leases = self.leases()
        reasons = []
        last_valid: Event | None = None
        for event in self.events:
            if event.kind is not Kind.WRITE_ACCEPTED:
                continue
            if any(s.actor == event.actor and s.contains(event.t_ms) for s in leases):
                last_valid = event
            else:
                reasons.append(
                    f"the resource accepted {event.actor}'s write at {event.t_ms:.0f} ms, "
                    f"after {event.actor}'s lease had ended"
                )
        exclusion = not reasons
        expected = last_valid.value if last_valid is not None else None
        intact = self.final_value == expected
        if not intact:
            lost = f"{last_valid.actor}'s write {expected!r}" if last_valid else "its initial state"
            reasons.append(
                f"the resource ends with {self.final_value!r} instead of {lost}, "
                "the last write made under a valid lease"
            )
        beliefs = self.beliefs()
        overlapping = [
            s.actor for s in beliefs if any(o.actor != s.actor and o.overlaps(s) for o in beliefs)
        ]
        return Outcome(
            mutual_exclusion=exclusion,
            data_intact=intact,
            progress=any(e.kind is Kind.ACQUIRED for e in self.events),
            overlapping=tuple(dict.fromkeys(overlapping)),
            reasons=tuple(reasons),
        )

    def table(self) -> str:
        """The events as aligned text, then the outcome."""
        seconds = self.end_ms >= 10_000
        unit = "s" if seconds else "ms"
        lines = [f"{self.scenario}: {self.way} ({self.approach}; {self.testbed})"]
        lines.append(f"{'t (' + unit + ')':>9}  who    what")
        for event in self.events:
            t = f"{event.t_ms / 1000:.3f}" if seconds else f"{event.t_ms:.0f}"
            lines.append(f"{t:>9}  {event.actor:<5}  {event.describe()}")
        lines.append(f"resource ends with: {self.final_value!r}")
        lines.append("outcome: " + self.outcome.summary())
        lines.extend(f"  - {reason}" for reason in self.outcome.reasons)
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()
