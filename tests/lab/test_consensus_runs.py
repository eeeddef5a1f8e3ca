"""The consensus runs on the real clusters, against the timelines the site draws.

Each scenario of :mod:`lockguide_lab.scenarios.consensus` runs broken and fixed
on the session's three-member etcd cluster and ZooKeeper ensemble. The test
checks what each way must show, then compares the verdicts with the timelines
recorded in ``docs/lab/recorded/`` (which the site draws with no cluster
installed): a difference fails, and ``pytest --update-recorded`` rewrites them.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from lockguide_lab.scenarios import Kind, Timeline
from lockguide_lab.scenarios.consensus import (
    CONSENSUS_SCENARIOS,
    ConsensusCutOffHolder,
    ConsensusDelayedWrite,
    ConsensusLeaderKilled,
    ConsensusLostReply,
    ConsensusMajorityDown,
    ConsensusPausedHolder,
    ConsensusScenario,
    ConsensusWaiterOutwaits,
    ConsensusWipedMember,
)
from lockguide_lab.scenarios.recorded import load, save, verdicts
from lockguide_lab.testbed.consensus import ConsensusCluster

RECORDED = Path(__file__).resolve().parents[2] / "docs" / "lab" / "recorded"

pytestmark = pytest.mark.consensus


def recorded_path(system: str, scenario: ConsensusScenario) -> Path:
    return RECORDED / f"{system}-{type(scenario).__name__.removeprefix('Consensus').lower()}.json"


def expect(
    scenario: ConsensusScenario, broken: Timeline, fixed: Timeline, system: str = ""
) -> None:
    """What each run must show, whatever was recorded."""
    if isinstance(scenario, ConsensusLostReply):
        for run in (broken, fixed):
            assert run.outcome.safe, run.table()
        # Fixed: B gets the lock (etcd: after A, which found its own key and held it).
        assert fixed.of("B", Kind.ACQUIRED), fixed.table()
        if system == "etcd":
            assert fixed.of("A", Kind.ACQUIRED), fixed.table()
            assert broken.of("B", Kind.ACQUIRED), broken.table()  # once the orphan lease ends
        else:  # the orphan node lives as long as A's session: B is kept out
            assert not broken.of("B", Kind.ACQUIRED), broken.table()
    elif isinstance(scenario, ConsensusWaiterOutwaits):
        assert fixed.of("B", Kind.ACQUIRED), fixed.table()
        got = bool(broken.of("B", Kind.ACQUIRED))
        assert got == (system == "zookeeper"), broken.table()  # etcd's one-lease waiter: never
    elif isinstance(scenario, ConsensusWipedMember):
        for run in (broken, fixed):  # no second holder; A writes, then B
            assert run.outcome.safe, run.table()
            assert run.outcome.progress, run.table()
            assert not any("second holder" in e.detail for e in run.events), run.table()
            assert run.of("A", Kind.WRITE_ACCEPTED), run.table()
    if isinstance(scenario, ConsensusPausedHolder | ConsensusCutOffHolder | ConsensusDelayedWrite):
        # Broken: the paused holder's late write lands over the new holder's.
        assert not broken.outcome.mutual_exclusion, broken.table()
        assert not broken.outcome.data_intact, broken.table()
        # Fixed: the same overlap, refused by the fence.
        assert fixed.outcome.safe, fixed.table()
        assert fixed.of("A", Kind.WRITE_REFUSED), fixed.table()
    elif isinstance(scenario, ConsensusLeaderKilled):
        for run in (broken, fixed):  # no double grant: B never acquires
            assert run.outcome.safe, run.table()
            assert run.outcome.progress, run.table()
            assert not run.of("B", Kind.ACQUIRED), run.table()
    elif isinstance(scenario, ConsensusMajorityDown):
        for run in (broken, fixed):  # nobody acquires without a majority
            assert run.outcome.safe, run.table()
            assert not run.outcome.progress, run.table()


@pytest.mark.parametrize("scenario", CONSENSUS_SCENARIOS, ids=lambda s: type(s).__name__)
@pytest.mark.parametrize("system", ["etcd", "zookeeper"])
def test_consensus_run_matches_its_recorded_timeline(
    system: str,
    scenario: ConsensusScenario,
    request: pytest.FixtureRequest,
    tmp_path: Path,
) -> None:
    fixture = "etcd_cluster" if system == "etcd" else "zookeeper_ensemble"
    cluster: ConsensusCluster = request.getfixturevalue(fixture)
    broken, fixed = scenario.both(cluster, tmp_path)
    expect(scenario, broken, fixed, system)
    path = recorded_path(system, scenario)
    if request.config.getoption("--update-recorded") or not path.exists():
        save(path, broken, fixed)
        return
    kept = load(path)
    assert [verdicts(t) for t in kept] == [verdicts(broken), verdicts(fixed)], (
        f"{path.name} no longer matches what the {system} cluster does; rerun with "
        "--update-recorded if the change is intended"
    )
