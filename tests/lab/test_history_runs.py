"""Every Redis and Redlock scenario records its history; the models judge it.

Each scenario runs both ways on fakeredis (virtual clock) and on real
``redis-server`` processes. Its history goes through the lease-service model
(the lock's grants) and the fenced-resource model (the resource's writes).
The verdicts must name the clients the story is about, and agree with the
outcome the timeline reads from its events: the two judges are independent
(one replays the events, the other searches for an order of operations).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from lockguide_lab.history import parse
from lockguide_lab.history.judge import Judgement, judge
from lockguide_lab.scenarios import (
    SCENARIOS,
    BareDelAfterExpiry,
    ClockJumpOnOneNode,
    FailoverLosesLock,
    LeaderFailover,
    PartitionedLeader,
    PausedHolder,
    PausedLeader,
    RedlockRestartForgetsLock,
    RestartForgetsLock,
    Scenario,
    SplitVote,
    Timeline,
    WorkOutlastsTtl,
)

#: (the lock's grants overlap: the pair, or None; the resource took a stale write: the pair)
#: for each broken run. The first of a pair came first; the second is the one that clashed.
BROKEN: dict[type[Scenario], tuple[tuple[str, str] | None, tuple[str, str] | None]] = {
    # The lease ran out before B's grant: the lock kept its word, the resource did not.
    PausedHolder: (None, ("B", "A")),
    WorkOutlastsTtl: (None, ("B", "A")),
    # A's bare DEL removed B's key: C was granted inside B's window.
    BareDelAfterExpiry: (("B", "C"), ("C", "B")),
    FailoverLosesLock: (("A", "B"), ("B", "A")),
    RestartForgetsLock: (("A", "B"), ("B", "A")),
    ClockJumpOnOneNode: (("A", "B"), ("B", "A")),
    RedlockRestartForgetsLock: (("A", "B"), ("B", "A")),
    # Liveness, not safety: nobody acquired, so nothing overlaps.
    SplitVote: (None, None),
    # A leader's lease ended before B's term: the late write, by a deposed leader, is caught.
    PausedLeader: (None, ("B", "A")),
    PartitionedLeader: (None, ("B", "A")),
    # Two leaders in one term, until A renews.
    LeaderFailover: (("A", "B"), ("B", "A")),
}

#: The fixed runs whose fix is at the resource: the lock still grants overlapping windows.
FIXED_AT_THE_RESOURCE = {
    FailoverLosesLock: ("A", "B"),
    ClockJumpOnOneNode: ("A", "B"),
    LeaderFailover: ("A", "B"),
}


Runs = Callable[[type[Scenario], str], Timeline]
Judged = Callable[[type[Scenario], str], tuple[Timeline, Judgement]]


@pytest.fixture(scope="module")
def judged(runs: Runs) -> Judged:
    """Each run of ``runs`` (conftest.py) with the models' judgement of its history."""
    cache: dict[tuple[type[Scenario], str], tuple[Timeline, Judgement]] = {}

    def run(scenario: type[Scenario], way: str) -> tuple[Timeline, Judgement]:
        if (scenario, way) not in cache:
            timeline = runs(scenario, way)
            cache[scenario, way] = (timeline, judge(timeline.history))
        return cache[scenario, way]

    return run


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.__name__)
def test_a_broken_run_fails_the_models_with_the_clashing_pair_named(
    judged: Judged, scenario: type[Scenario]
) -> None:
    timeline, judgement = judged(scenario, "broken")
    lease_pair, fenced_pair = BROKEN[scenario]
    assert judgement.lease.ok is (lease_pair is None), judgement.lease.report()
    assert judgement.pair(judgement.lease) == lease_pair
    assert judgement.fenced.ok is (fenced_pair is None), judgement.fenced.report()
    assert judgement.pair(judgement.fenced) == fenced_pair
    # The checker and the timeline's own outcome agree on what reached the data.
    assert judgement.fenced.ok is timeline.outcome.safe


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.__name__)
def test_a_fixed_run_passes_the_fenced_resource_model(
    judged: Judged, scenario: type[Scenario]
) -> None:
    timeline, judgement = judged(scenario, "fixed")
    assert judgement.fenced.ok, judgement.fenced.report()
    assert timeline.outcome.safe
    overlap = FIXED_AT_THE_RESOURCE.get(scenario)
    assert judgement.lease.ok is (overlap is None), judgement.lease.report()
    assert judgement.pair(judgement.lease) == overlap


def test_a_run_records_every_grant_write_and_the_final_read(judged: Judged) -> None:
    timeline, _ = judged(PausedHolder, "fixed")
    ops = parse(timeline.history)
    seen = [(op.invoke.extra["client"] if op.invoke else "", op.f, str(op.status)) for op in ops]
    assert seen == [
        ("A", "acquire", "ok"),
        ("B", "acquire", "ok"),
        ("B", "write", "ok"),
        ("A", "write", "fail"),  # the fenced store refused A's token
        ("A", "release", "info"),  # refused: A's key was gone
        ("B", "release", "ok"),
        ("observer", "read", "ok"),
    ]
    tokens = [op.value["token"] for op in ops if op.f == "write"]
    assert tokens[0] > tokens[1]  # B's token is the newer one


def test_renewals_are_recorded_as_grants_that_extend_the_window(judged: Judged) -> None:
    _, judgement = judged(WorkOutlastsTtl, "fixed")
    renewals = [op for op in judgement.operations if op.f == "renew" and op.required]
    assert renewals, "the watchdog renewed at least once"
    ends = [op.value["window"][1] for op in renewals]
    assert ends == sorted(ends)


def test_the_cli_judges_a_saved_run_key_by_key(judged: Judged, tmp_path: Path) -> None:
    timeline, _ = judged(BareDelAfterExpiry, "broken")
    path = tmp_path / "bare-del.jsonl"
    path.write_text(timeline.history, encoding="utf-8")

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "lockguide_lab.history", "check", *args, str(path)]
        return subprocess.run(command, capture_output=True, text=True, check=False)

    lease = cli("--model", "lease", "--key", "lock")
    assert lease.returncode == 1
    assert "could not place: process 2 acquire" in lease.stdout  # C, the third client
    fenced = cli("--model", "fenced", "--key", "resource")
    assert fenced.returncode == 1
    whole = cli("--model", "lease")  # the writes are not the lease model's operations
    assert whole.returncode == 2
    assert "unknown f 'write'" in whole.stderr
