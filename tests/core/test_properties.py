"""Fencing, proven under random schedules (hypothesis), on fakeredis and a real Redis.

Hypothesis drives a state machine of three clients sharing one lock and one
resource. Each step is one of:

* ``acquire``: a client that does not believe it holds the lock tries it once;
* ``pause``: the current holder stalls for longer than its lease. The server
  really expires its key (``PEXPIRE key 1``, then we wait until Redis has
  removed it), and the client is not told: it still believes it holds the lock;
* ``renew``: a believing holder extends its lease (compare-and-pexpire, the
  script the watchdog uses); a lost lease is noticed here;
* ``write``: a client that believes it holds the lock writes to the resource;
* ``release``: a believing holder releases (compare-and-delete).

Every successful acquisition starts a new *epoch*, numbered by the harness in the
order the acquisitions happened. After every step the checker demands what a
correct system owes its data: no write from an older epoch is accepted after one
from a newer epoch, and the stored value always comes from the newest epoch
accepted. A violation is a lost update: a newer holder's write overwritten by a
stale one.

With :class:`FencedLock` and a fenced store (Redis, or SQLite), the property holds
for every schedule tried. With a plain :class:`Lock` and an unconditional write,
the same machine and checker *find* a violation: the checker can fail.

The pause is modelled deterministically (the harness decides when a lease
expires), but the expiry is the server's own and every step runs the library's
real scripts, so no test waits for a TTL to run out.
"""

from __future__ import annotations

import itertools
import sqlite3
import time
from dataclasses import dataclass, field
from typing import ClassVar, Literal

import pytest
import redis
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from lockguide import FencedLock, FencedStore, Lock, LockLost, NotOwned, SqlFencedStore

Action = Literal["acquire", "pause", "renew", "write", "release"]
Step = tuple[Action, int]
CLIENTS = 3
NAMES = ("A", "B", "C")

#: Schedules tried per property run, and the most steps in one schedule.
EXAMPLES = 60
STEPS = 20
#: The search without fencing stops at its first violation; shorter schedules
#: make the counterexample quick to shrink to its essential five steps.
SEARCH_EXAMPLES = 2000
SEARCH_STEPS = 12

_runs = itertools.count()


class LostUpdate(AssertionError):
    """The checker's verdict: a stale write was accepted after a newer one."""


@dataclass
class History:
    accepted: list[tuple[int, str]] = field(default_factory=list)  # (epoch, value) in order
    refused: list[tuple[int, str]] = field(default_factory=list)

    def check(self, stored: str | None) -> None:
        """Raise :class:`LostUpdate` unless the accepted writes respect epoch order
        and the stored value is the newest epoch's."""
        newest = 0
        for epoch, value in self.accepted:
            if epoch < newest:
                raise LostUpdate(
                    f"lost update: {value!r} from epoch {epoch} was accepted after a "
                    f"write from epoch {newest}"
                )
            newest = epoch
        expected = self.accepted[-1][1] if self.accepted else None
        if stored != expected:
            raise LostUpdate(f"the resource holds {stored!r}, not the newest write {expected!r}")


class World:
    """Three clients, one lock, one resource, one schedule."""

    def __init__(
        self, r: redis.Redis, *, fenced: bool, store: Literal["redis", "sqlite"] = "redis"
    ) -> None:
        run = next(_runs)
        self.r = r
        self.fenced = fenced
        self.lock_key = f"prop{run}:lock"
        self.data_key = f"prop{run}:data"
        lock_class = FencedLock if fenced else Lock
        self.locks: list[Lock] = [
            lock_class(r, self.lock_key, ttl_ms=10_000) for _ in range(CLIENTS)
        ]
        self.epoch_of: dict[int, int] = {}
        self.epochs = 0
        self.writes = 0
        self.history = History()
        self.trace: list[str] = []
        self.steps: list[Step] = []
        self.redis_store = FencedStore(r, self.data_key)
        self.sql_store: SqlFencedStore | None = None
        if store == "sqlite":
            self.sql_store = SqlFencedStore(sqlite3.connect(":memory:"), self.data_key)
            self.sql_store.setup()

    def play(self, schedule: list[Step]) -> History:
        """Replay a recorded schedule, checking after every step."""
        for action, pick in schedule:
            self.step(action, pick)
            self.history.check(self.stored())
        return self.history

    def step(self, action: Action, pick: int) -> None:
        self.steps.append((action, pick))
        getattr(self, action)(pick)

    def choose(self, pick: int, candidates: list[int]) -> int | None:
        """A step names a client among those it makes sense for."""
        return candidates[pick % len(candidates)] if candidates else None

    def believers(self) -> list[int]:
        return [c for c in range(CLIENTS) if self.locks[c].held]

    # -- the steps ---------------------------------------------------------------

    def acquire(self, pick: int) -> None:
        c = self.choose(pick, [c for c in range(CLIENTS) if not self.locks[c].held])
        if c is None:
            return
        lock = self.locks[c]
        if not lock.acquire(blocking=False):
            self.trace.append(f"{NAMES[c]} is refused the lock")
            return
        self.epochs += 1
        self.epoch_of[c] = self.epochs
        self.trace.append(f"{NAMES[c]} acquires (epoch {self.epochs})")
        if isinstance(lock, FencedLock):
            # Tokens strictly increase in the order acquisitions happen.
            assert lock.token == self.epochs, (lock.token, self.epochs)

    def holders(self) -> list[int]:
        """The client whose value the key holds, if any (at most one)."""
        owner = self.r.get(self.lock_key)
        return [c for c in self.believers() if (self.locks[c].value or "").encode() == owner]

    def pause(self, pick: int) -> None:
        c = self.choose(pick, self.holders())
        if c is None:
            return
        self.r.pexpire(self.lock_key, 1)  # the lease runs out while c is stalled
        deadline = time.monotonic() + 2.0
        while self.r.exists(self.lock_key) and time.monotonic() < deadline:
            time.sleep(0.001)
        assert not self.r.exists(self.lock_key), "the server did not expire the key"
        self.trace.append(f"{NAMES[c]} pauses past its lease")

    def renew(self, pick: int) -> None:
        c = self.choose(pick, self.believers())
        if c is None:
            return
        try:
            self.locks[c].extend()
            self.trace.append(f"{NAMES[c]} renews")
        except LockLost:
            self.trace.append(f"{NAMES[c]} fails to renew and stops")

    def write(self, pick: int) -> None:
        c = self.choose(pick, self.believers())
        if c is None:
            return
        lock = self.locks[c]
        self.writes += 1
        epoch = self.epoch_of[c]
        value = f"{NAMES[c]}, epoch {epoch}, write {self.writes}"
        if isinstance(lock, FencedLock):
            store = self.sql_store or self.redis_store
            accepted = store.try_write(lock.token, value).accepted
        else:
            self.r.hset(self.data_key, "value", value)  # no check at the resource
            accepted = True
        (self.history.accepted if accepted else self.history.refused).append((epoch, value))
        self.trace.append(f"{NAMES[c]} writes ({'accepted' if accepted else 'refused'})")

    def release(self, pick: int) -> None:
        c = self.choose(pick, self.believers())
        if c is None:
            return
        try:
            self.locks[c].release()
            self.trace.append(f"{NAMES[c]} releases")
        except (LockLost, NotOwned):
            self.trace.append(f"{NAMES[c]} releases (refused: lease lost)")

    def stored(self) -> str | None:
        if self.sql_store is not None:
            return self.sql_store.read().value
        raw = self.r.hget(self.data_key, "value")
        return raw.decode() if isinstance(raw, bytes) else raw


class RecordingMachine(RuleBasedStateMachine):
    """A state machine that remembers the World of its latest run."""

    last: ClassVar[World | None] = None


def machine_for(
    r: redis.Redis, *, fenced: bool, store: Literal["redis", "sqlite"] = "redis"
) -> type[RecordingMachine]:
    """A state machine class whose every run is a fresh World on ``r``."""

    picks = st.integers(0, CLIENTS - 1)

    class Schedule(RecordingMachine):
        def __init__(self) -> None:
            super().__init__()
            self.world = World(r, fenced=fenced, store=store)
            type(self).last = self.world

        @rule(pick=picks)
        def acquire(self, pick: int) -> None:
            self.world.step("acquire", pick)

        # Rules are drawn evenly; the steps that create overlap (acquire, pause,
        # write) get a second rule each so they come up as often as the search needs.
        acquire_again = acquire

        @precondition(lambda self: bool(self.world.believers()))
        @rule(pick=picks)
        def pause(self, pick: int) -> None:
            self.world.step("pause", pick)

        pause_again = pause

        @precondition(lambda self: bool(self.world.believers()))
        @rule(pick=picks)
        def renew(self, pick: int) -> None:
            self.world.step("renew", pick)

        @precondition(lambda self: bool(self.world.believers()))
        @rule(pick=picks)
        def write(self, pick: int) -> None:
            self.world.step("write", pick)

        write_again = write

        @precondition(lambda self: bool(self.world.believers()))
        @rule(pick=picks)
        def release(self, pick: int) -> None:
            self.world.step("release", pick)

        @invariant()
        def no_lost_update(self) -> None:
            self.world.history.check(self.world.stored())

    return Schedule


SETTINGS = settings(
    max_examples=EXAMPLES,
    stateful_step_count=STEPS,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)


SEARCH_SETTINGS = settings(
    SETTINGS,
    max_examples=SEARCH_EXAMPLES,
    stateful_step_count=SEARCH_STEPS,
    phases=[Phase.generate],  # find it; trimmed() below makes it short
)


def test_with_fencing_no_stale_write_is_ever_accepted(r: redis.Redis) -> None:
    run_state_machine_as_test(machine_for(r, fenced=True), settings=SETTINGS)


def test_with_fencing_on_sqlite_no_stale_write_is_ever_accepted(r: redis.Redis) -> None:
    run_state_machine_as_test(machine_for(r, fenced=True, store="sqlite"), settings=SETTINGS)


def violates(r: redis.Redis, steps: list[Step]) -> bool:
    """Replay ``steps`` without fencing; whether the checker finds a lost update."""
    try:
        World(r, fenced=False).play(steps)
    except LostUpdate:
        return True
    return False


def trimmed(r: redis.Redis, steps: list[Step]) -> list[Step]:
    """Drop steps one at a time while the violation remains (a small, cheap stand-in
    for hypothesis's shrinking, which is slow on stateful runs)."""
    changed = True
    while changed:
        changed = False
        for i in reversed(range(len(steps))):
            shorter = steps[:i] + steps[i + 1 :]
            if violates(r, shorter):
                steps, changed = shorter, True
    return steps


def test_without_fencing_the_same_checker_finds_a_lost_update(
    r: redis.Redis, capsys: pytest.CaptureFixture[str]
) -> None:
    machine = machine_for(r, fenced=False)
    first_run = next(_runs)
    with pytest.raises(LostUpdate):
        run_state_machine_as_test(machine, settings=SEARCH_SETTINGS)
    schedules_tried = next(_runs) - first_run - 1
    capsys.readouterr()  # hypothesis's own report of the falsifying steps
    assert machine.last is not None  # the last run is the one that failed
    steps = trimmed(r, machine.last.steps)
    unfenced, fenced = World(r, fenced=False), World(r, fenced=True)
    with pytest.raises(LostUpdate):
        unfenced.play(steps)
    fenced.play(steps)  # the same steps with fencing: no violation
    print(
        f"\nwithout fencing, hypothesis found (after {schedules_tried} schedules): "
        + "; ".join(unfenced.trace)
    )
    print("the same steps with fencing: " + "; ".join(fenced.trace))
    # The counterexample is the guide's story: a holder pauses past its lease,
    # another client acquires and writes, and the first one writes too.
    actions = [action for action, _ in steps]
    assert {"acquire", "pause", "write"} <= set(actions)
    assert actions.count("write") >= 2
    assert fenced.history.refused, "with fencing, the stale write is refused"


def test_the_checker_accepts_ordered_writes_and_rejects_a_stale_one() -> None:
    History(accepted=[(1, "a"), (2, "b"), (2, "c")]).check("c")
    with pytest.raises(LostUpdate, match="epoch 1 was accepted after a write from epoch 2"):
        History(accepted=[(2, "b"), (1, "a")]).check("a")
    with pytest.raises(LostUpdate, match="not the newest write"):
        History(accepted=[(1, "a"), (2, "b")]).check("a")
