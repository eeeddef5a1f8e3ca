"""The consensus runs on the real clusters, against the timelines the site draws.

Each scenario of :mod:`lockguide_lab.scenarios.consensus` runs broken and fixed
on the session's three-member etcd cluster and ZooKeeper ensemble. The test
checks what each way must show, then compares the verdicts with the timelines
recorded in ``docs/lab/recorded/`` (which the site draws with no cluster
installed): a difference fails, and ``pytest --update-recorded`` rewrites them.

The same runs (made once per session, shared by the tests here) record their
histories, which the history tests judge with the lease-service and
fenced-resource models (:mod:`lockguide_lab.history`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest

from lockguide_lab.history import parse
from lockguide_lab.history.judge import judge
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
from lockguide_lab.testbed.consensus import ConsensusCluster
from tests.lab.recorded import matches_recorded

RECORDED = Path(__file__).resolve().parents[2] / "docs" / "lab" / "recorded"

pytestmark = pytest.mark.consensus


Runs = Callable[[str, ConsensusScenario], tuple[Timeline, Timeline]]


SYSTEMS = {"etcd": "etcd_cluster", "zookeeper": "zookeeper_ensemble"}


@pytest.fixture(scope="module")
def consensus_runs(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Runs]:
    """Each scenario's broken and fixed runs on one system, run once and kept for the module.

    The first call starts every run: the etcd cluster's in one thread and the ZooKeeper
    ensemble's in another, each system's scenarios one after another as before (a run
    kills and restarts members of its cluster; the two clusters share nothing). The runs
    mostly wait on leases, sessions and timeouts, so the two systems wait at the same time
    instead of in turn. A test waits for the runs it reads.
    """
    started: dict[tuple[str, str], Future[tuple[Timeline, Timeline]]] = {}
    unavailable: dict[str, BaseException] = {}
    pools: list[ThreadPoolExecutor] = []

    def start() -> None:
        for system, fixture in SYSTEMS.items():
            try:  # in this thread: fixtures are not made from others
                cluster: ConsensusCluster = request.getfixturevalue(fixture)
            except (Exception, pytest.skip.Exception, pytest.fail.Exception) as error:
                unavailable[system] = error  # raised by each test that asks for it
                continue
            pools.append(ThreadPoolExecutor(max_workers=1, thread_name_prefix=system))
            for scenario in CONSENSUS_SCENARIOS:  # one after another on this cluster
                name = type(scenario).__name__
                workdir = tmp_path_factory.mktemp(name)
                started[system, name] = pools[-1].submit(scenario.both, cluster, workdir)

    def run(system: str, scenario: ConsensusScenario) -> tuple[Timeline, Timeline]:
        if not started and not unavailable:
            start()
        if system in unavailable:
            raise unavailable[system]
        return started[system, type(scenario).__name__].result()

    yield run
    for pool in pools:  # a run no test read is not started
        pool.shutdown(wait=True, cancel_futures=True)


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
    system: str, scenario: ConsensusScenario, request: pytest.FixtureRequest, consensus_runs: Runs
) -> None:
    broken, fixed = consensus_runs(system, scenario)
    expect(scenario, broken, fixed, system)
    matches_recorded(
        request, recorded_path(system, scenario), broken, fixed, f"the {system} cluster"
    )


#: The broken runs whose late write lands: the fenced-resource model names (B, A), B's write
#: accepted first with the newer token, A's stale one after it. Every other run passes both.
STALE_WRITE = (ConsensusPausedHolder, ConsensusCutOffHolder, ConsensusDelayedWrite)


@pytest.mark.parametrize("scenario", CONSENSUS_SCENARIOS, ids=lambda s: type(s).__name__)
@pytest.mark.parametrize("system", ["etcd", "zookeeper"])
def test_a_consensus_run_history_is_judged_by_both_models(
    system: str, scenario: ConsensusScenario, consensus_runs: Runs
) -> None:
    broken, fixed = consensus_runs(system, scenario)
    for timeline in (broken, fixed):
        judgement = judge(timeline.history)
        # The cluster never granted two windows that overlap, broken or fixed: what a
        # broken run gets wrong is the resource (unlike Redis failover or a clock jump,
        # where the lock itself double-grants and only the resource's fix saves the data).
        assert judgement.lease.ok, judgement.lease.report() + "\n" + timeline.history
        stale = timeline is broken and isinstance(scenario, STALE_WRITE)
        assert judgement.fenced.ok is not stale, judgement.fenced.report()
        assert judgement.pair(judgement.fenced) == (("B", "A") if stale else None)
        # The checker and the timeline's own outcome agree on what reached the data.
        assert judgement.fenced.ok is timeline.outcome.safe, timeline.table()


@pytest.mark.parametrize("system", ["etcd", "zookeeper"])
def test_a_consensus_run_records_grants_releases_writes_and_the_read(
    system: str, consensus_runs: Runs
) -> None:
    _, fixed = consensus_runs(system, ConsensusPausedHolder())
    ops = parse(fixed.history)
    seen = [(op.invoke.extra["client"] if op.invoke else "", op.f, str(op.status)) for op in ops]
    assert seen == [
        ("A", "acquire", "ok"),  # recorded when the cluster was seen to end it
        ("B", "write", "ok"),
        ("A", "write", "fail"),  # the fenced store refused A's older token
        ("A", "release", "info"),  # refused: A's lease had ended
        ("B", "acquire", "ok"),  # recorded at B's release, its window complete
        ("B", "release", "ok"),
        ("observer", "read", "ok"),
    ], fixed.history
    grants = [op.value["window"] for op in ops if op.f == "acquire"]
    assert grants[0][1] <= grants[1][0]  # A's window ended before B's began
    tokens = [op.value["token"] for op in ops if op.f == "write"]
    assert tokens[0] > tokens[1]  # B's token (revision, zxid) is the newer one
    assert ops[-1].value == "B's update"
