"""The failure scenarios, run both ways on both testbeds, judged by their outcomes.

``testbed`` runs each test twice: on fakeredis with a virtual clock (no server),
and on real ``redis-server`` processes started for the session, where the
failover is a real primary and replica (``REPLICAOF``) and the restart a
``SIGKILL`` and a fresh start. Every assertion is about what the run recorded
and what the resource ended with, never about how long anything took.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest
import redis

from lockguide import Lock, Redlock
from lockguide.errors import BadArgument, BadArgumentType
from lockguide_lab.errors import ScenarioError
from lockguide_lab.scenarios import (
    SCENARIOS,
    BareDelAfterExpiry,
    ClientTestbed,
    ClockJumpOnOneNode,
    FailoverLosesLock,
    FakeTestbed,
    Kind,
    LeaderFailover,
    PartitionedLeader,
    PausedHolder,
    PausedLeader,
    RedlockRestartForgetsLock,
    RestartForgetsLock,
    Scenario,
    SplitVote,
    Testbed,
    Timeline,
    VersionedResource,
    WorkOutlastsTtl,
)

#: What the ``runs`` fixture (conftest.py) returns: each run of the module's ``testbed``.
Runs = Callable[[type[Scenario], str], Timeline]


# -- each scenario, both ways ---------------------------------------------------------------


SAFETY = [s for s in SCENARIOS if not s.liveness]
LIVENESS = [s for s in SCENARIOS if s.liveness]


@pytest.mark.parametrize("scenario", SAFETY, ids=lambda s: s.__name__)
def test_broken_way_is_caught_breaking_exclusion_and_losing_data(
    runs: Runs, scenario: type[Scenario]
) -> None:
    timeline = runs(scenario, "broken")
    outcome = timeline.outcome
    assert not outcome.mutual_exclusion, timeline.table()
    assert not outcome.data_intact, timeline.table()
    assert outcome.reasons
    assert len(outcome.overlapping) >= 2


@pytest.mark.parametrize("scenario", LIVENESS, ids=lambda s: s.__name__)
def test_broken_way_is_caught_making_no_progress(runs: Runs, scenario: type[Scenario]) -> None:
    timeline = runs(scenario, "broken")
    outcome = timeline.outcome
    assert not outcome.progress, timeline.table()
    assert outcome.safe, timeline.table()


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.__name__)
def test_fixed_way_keeps_exclusion_and_data(runs: Runs, scenario: type[Scenario]) -> None:
    timeline = runs(scenario, "fixed")
    outcome = timeline.outcome
    assert outcome.mutual_exclusion, timeline.table()
    assert outcome.data_intact, timeline.table()
    assert outcome.progress
    assert not outcome.reasons


def _kinds(timeline: Timeline, actor: str) -> list[Kind]:
    return [e.kind for e in timeline.of(actor)]


def test_paused_holder_fencing_refuses_the_stale_write_while_the_lock_still_overlaps(
    runs: Runs,
) -> None:
    broken, fixed = runs(PausedHolder, "broken"), runs(PausedHolder, "fixed")
    assert broken.final_value == "A's write"
    assert Kind.EXPIRED in _kinds(broken, "A")
    assert fixed.final_value == "B's write"
    assert Kind.WRITE_REFUSED in _kinds(fixed, "A")
    assert fixed.outcome.overlapping == ("A", "B")


def test_a_pause_shorter_than_the_lease_breaks_nothing_even_unfenced(testbed: Testbed) -> None:
    timeline = PausedHolder(ttl_ms=300, pause_ms=100).run(testbed, "broken")
    assert timeline.outcome.safe, timeline.table()
    assert timeline.outcome.overlapping == ()
    assert _kinds(timeline, "B")[0] is Kind.NOT_ACQUIRED


def test_bare_del_lets_a_third_client_in_and_compare_and_delete_does_not(runs: Runs) -> None:
    broken, fixed = runs(BareDelAfterExpiry, "broken"), runs(BareDelAfterExpiry, "fixed")
    assert Kind.RELEASED_OTHERS in _kinds(broken, "A")
    assert Kind.LOST in _kinds(broken, "B")
    assert broken.outcome.overlapping == ("A", "B", "C")
    assert Kind.RELEASE_REFUSED in _kinds(fixed, "A")
    assert _kinds(fixed, "C")[0] is Kind.NOT_ACQUIRED
    assert fixed.outcome.overlapping == ("A", "B")


def test_watchdog_keeps_the_slow_holder_alone_and_fencing_covers_a_stall(
    testbed: Testbed, runs: Runs
) -> None:
    fixed = runs(WorkOutlastsTtl, "fixed")
    assert Kind.RENEWED in _kinds(fixed, "A")
    assert _kinds(fixed, "B")[0] is Kind.NOT_ACQUIRED
    assert fixed.outcome.overlapping == ()

    stalled = WorkOutlastsTtl(stall_ms=400).run(testbed, "fixed")
    assert stalled.outcome.safe, stalled.table()
    assert Kind.WRITE_REFUSED in _kinds(stalled, "A")
    assert Kind.RELEASE_REFUSED in _kinds(stalled, "A")
    assert stalled.outcome.overlapping == ("A", "B")


def test_failover_hands_the_lock_to_a_second_holder_with_the_same_token(runs: Runs) -> None:
    broken, fixed = runs(FailoverLosesLock, "broken"), runs(FailoverLosesLock, "fixed")
    assert Kind.LOST in _kinds(broken, "A")
    assert Kind.ACQUIRED in _kinds(broken, "B")
    tokens = [e.detail for e in fixed.events if e.kind is Kind.ACQUIRED]
    assert tokens == ["lease 10000 ms, fencing token 34"] * 2
    assert Kind.WRITE_REFUSED in _kinds(fixed, "A")


def test_restart_without_persistence_forgets_the_lock_and_aof_keeps_it(runs: Runs) -> None:
    broken, fixed = runs(RestartForgetsLock, "broken"), runs(RestartForgetsLock, "fixed")
    assert Kind.LOST in _kinds(broken, "A")
    assert _kinds(fixed, "B")[0] is Kind.NOT_ACQUIRED
    assert Kind.LOST not in _kinds(fixed, "A")


def test_a_clock_jump_on_one_master_hands_b_a_second_majority_and_the_version_refuses_a(
    runs: Runs,
) -> None:
    broken, fixed = runs(ClockJumpOnOneNode, "broken"), runs(ClockJumpOnOneNode, "fixed")
    for timeline in (broken, fixed):
        assert Kind.LOST in _kinds(timeline, "A"), timeline.table()
        assert _kinds(timeline, "B")[0] is Kind.ACQUIRED
        assert timeline.outcome.overlapping == ("A", "B")
        assert Kind.RELEASE_REFUSED in _kinds(timeline, "A")  # 2 of 5 confirmed, 2 silent
    assert broken.final_value == "A's write"
    assert Kind.WRITE_REFUSED in _kinds(fixed, "A")
    assert fixed.final_value == "B's write"


def test_a_clock_jump_shorter_than_the_lease_left_breaks_nothing(testbed: Testbed) -> None:
    timeline = ClockJumpOnOneNode(jump_ms=5_000).run(testbed, "broken")
    assert timeline.outcome.safe, timeline.table()
    assert _kinds(timeline, "B")[0] is Kind.NOT_ACQUIRED
    assert timeline.outcome.overlapping == ()


def test_a_redlock_master_restarting_empty_gives_b_a_majority_and_aof_keeps_it_out(
    runs: Runs,
) -> None:
    broken = runs(RedlockRestartForgetsLock, "broken")
    fixed = runs(RedlockRestartForgetsLock, "fixed")
    assert Kind.LOST in _kinds(broken, "A")
    assert _kinds(broken, "B")[0] is Kind.ACQUIRED
    assert _kinds(fixed, "B")[:2] == [Kind.NOT_ACQUIRED, Kind.ACQUIRED]
    assert Kind.LOST not in _kinds(fixed, "A")
    assert fixed.outcome.overlapping == ()


def test_a_delayed_restart_keeps_the_second_majority_out_until_the_lease_is_over(
    testbed: Testbed,
) -> None:
    scenario = RedlockRestartForgetsLock(ttl_ms=300, restart_delay_ms=400)
    timeline = scenario.run(testbed, "fixed")
    assert timeline.outcome.safe, timeline.table()
    assert timeline.outcome.overlapping == ()
    assert "stays down" in timeline.approach
    b_acquired = timeline.of("B", Kind.ACQUIRED)
    restarted = [e for e in timeline.events if e.kind is Kind.SERVER and "restarts" in e.detail]
    assert _kinds(timeline, "B")[0] is Kind.NOT_ACQUIRED
    assert len(b_acquired) == 1
    assert b_acquired[0].t_ms > restarted[0].t_ms
    assert timeline.of("A", Kind.WRITE_ACCEPTED)


def test_split_votes_repeat_with_a_constant_delay_and_resolve_with_a_random_one(
    runs: Runs,
) -> None:
    broken, fixed = runs(SplitVote, "broken"), runs(SplitVote, "fixed")
    for name in "ABC":
        tries = broken.of(name, Kind.NOT_ACQUIRED)
        assert len(tries) >= 3, broken.table()
        assert all("no majority" in e.detail for e in tries)
        assert _kinds(broken, name)[-1] is Kind.GAVE_UP
    assert {e.actor for e in fixed.of("A") + fixed.of("B") + fixed.of("C")} == set("ABC")
    assert len([e for e in fixed.events if e.kind is Kind.ACQUIRED]) == 3, fixed.table()
    assert fixed.outcome.overlapping == ()


# -- a leader over Redis ---------------------------------------------------------------------


def _first(timeline: Timeline, actor: str, kind: Kind) -> float:
    return timeline.of(actor, kind)[0].t_ms


def test_a_paused_leader_writes_after_its_term_and_only_the_token_refuses_it(
    runs: Runs,
) -> None:
    broken, fixed = runs(PausedLeader, "broken"), runs(PausedLeader, "fixed")
    for timeline in (broken, fixed):
        assert Kind.RENEWED in _kinds(timeline, "A"), timeline.table()
        assert _first(timeline, "A", Kind.EXPIRED) < _first(timeline, "B", Kind.ACQUIRED)
        assert _first(timeline, "B", Kind.ACQUIRED) < _first(timeline, "A", Kind.RESUMED)
        assert timeline.outcome.overlapping == ("A", "B")  # A believed all along
    assert broken.final_value == "A's write"
    assert Kind.WRITE_REFUSED in _kinds(fixed, "A")
    assert fixed.final_value == "B's write"
    tokens = [e.detail for e in fixed.events if e.kind is Kind.ACQUIRED]
    assert tokens == ["lease 1000 ms, fencing token 1", "lease 1000 ms, fencing token 2"]


def test_a_leader_cut_off_stops_at_its_renew_deadline_before_redis_frees_the_role(
    runs: Runs,
) -> None:
    broken, fixed = runs(PartitionedLeader, "broken"), runs(PartitionedLeader, "fixed")
    scenario = PartitionedLeader()
    stopped = _first(fixed, "A", Kind.STOPPED)
    expired = _first(fixed, "A", Kind.EXPIRED)
    # The margin is lease - renew deadline (400 ms), less what the last renewal took.
    margin = scenario.lease_ms - scenario.renew_deadline_ms
    assert margin - scenario.retry_period_ms < expired - stopped <= margin + 50, fixed.table()
    assert expired <= _first(fixed, "B", Kind.ACQUIRED)
    assert _kinds(fixed, "B")[0] is Kind.NOT_ACQUIRED  # half a lease after the cut
    assert all(e.t_ms < stopped for e in fixed.of("A", Kind.WRITE_ACCEPTED))
    assert fixed.outcome.overlapping == ()
    assert Kind.STOPPED not in _kinds(broken, "A")
    b_wrote = _first(broken, "B", Kind.WRITE_ACCEPTED)
    assert any(e.t_ms > b_wrote for e in broken.of("A", Kind.WRITE_ACCEPTED))


def test_a_leaders_redis_fails_over_and_elects_b_in_the_same_term_until_a_renews(
    runs: Runs,
) -> None:
    broken, fixed = runs(LeaderFailover, "broken"), runs(LeaderFailover, "fixed")
    for timeline in (broken, fixed):
        assert _kinds(timeline, "B")[0] is Kind.ACQUIRED, timeline.table()
        assert timeline.outcome.overlapping == ("A", "B")
        elected = _first(timeline, "B", Kind.ACQUIRED)
        # A stops at its next renewal: within a retry period (and some slack for the machine).
        assert _first(timeline, "A", Kind.STOPPED) - elected < 150 + 250
    tokens = [e.detail for e in fixed.events if e.kind is Kind.ACQUIRED]
    assert tokens == ["lease 1000 ms, fencing token 34"] * 2
    assert broken.final_value == "A's write"
    assert Kind.WRITE_REFUSED in _kinds(fixed, "A")
    assert fixed.final_value == "B's write"


def test_leader_scenarios_refuse_a_timing_client_go_would_refuse() -> None:
    with pytest.raises(BadArgument):
        PausedLeader(lease_ms=1000, renew_deadline_ms=1000)
    with pytest.raises(BadArgument):
        PartitionedLeader(renew_deadline_ms=100, retry_period_ms=100)
    with pytest.raises(BadArgument):
        PausedLeader(pause_ms=900)
    with pytest.raises(BadArgument):
        LeaderFailover(earlier_grants=-1)


# -- the testbeds ---------------------------------------------------------------------------


def test_failover_pair_promotes_a_replica_with_what_was_synced_and_nothing_after(
    testbed: Testbed,
) -> None:
    with testbed.running():
        pair = testbed.failover_pair()
        client = pair.client()
        client.set("before", "1")
        pair.sync()
        pair.lag()
        client.set("after", "1")
        pair.fail_over()
        assert client.get("before") == b"1"
        assert client.get("after") is None
        assert pair.client().get("before") == b"1"


@pytest.mark.parametrize("persistent", [False, True], ids=["no-persistence", "aof-always"])
def test_crash_and_restart_keeps_keys_only_when_persistent(
    testbed: Testbed, persistent: bool
) -> None:
    with testbed.running():
        server = testbed.server(persistent=persistent)
        client = server.client()
        client.set("lock:ledger", "A", px=10_000)
        server.crash_and_restart()
        assert (client.get("lock:ledger") == b"A") is persistent
        if persistent:
            assert 0 < int(client.pttl("lock:ledger")) <= 10_000


def test_a_clock_jump_on_one_server_expires_its_keys_and_no_others(testbed: Testbed) -> None:
    with testbed.running():
        first, second = testbed.servers(2)
        for server in (first, second):
            server.client().set("lock:ledger", "A", px=10_000)
            server.client().set("other", "x", px=30_000)
        first.jump_clock(15_000)
        assert first.client().get("lock:ledger") is None
        assert 0 < int(first.client().pttl("other")) <= 15_000
        assert second.client().get("lock:ledger") == b"A"


def test_a_crashed_server_refuses_commands_until_it_restarts_with_what_it_persisted(
    testbed: Testbed,
) -> None:
    with testbed.running():
        kept, lost = testbed.server(persistent=True), testbed.server()
        for server in (kept, lost):
            client = server.client()
            client.set("lock:ledger", "A", px=10_000)
            server.crash()
            with pytest.raises(redis.ConnectionError):
                client.get("lock:ledger")
            server.restart()
        assert kept.client().get("lock:ledger") == b"A"
        assert lost.client().get("lock:ledger") is None


def test_a_slow_link_delivers_its_request_after_a_near_clients_later_one(testbed: Testbed) -> None:
    with testbed.running():
        server = testbed.server()
        far, near = server.link(60), server.link(0)
        for client in (far, near):
            client.ping()  # connections open before the race
        sent = threading.Event()

        def far_first() -> None:
            sent.set()
            far.set("lock:ledger", "far", nx=True, px=10_000)

        racer = threading.Thread(target=far_first)
        racer.start()
        sent.wait()
        near.set("lock:ledger", "near", nx=True, px=10_000)
        racer.join()
        assert server.client().get("lock:ledger") == b"near"


def test_an_unreachable_client_fails_every_command_with_a_connection_error(
    testbed: Testbed,
) -> None:
    client = testbed.unreachable_client()
    with pytest.raises(redis.ConnectionError):
        client.set("lock:ledger", "A", nx=True, px=1_000)


def test_virtual_clock_lands_every_run_on_the_same_milliseconds() -> None:
    with FakeTestbed() as testbed:
        scenario = PausedHolder(ttl_ms=30_000, pause_ms=35_000)
        first, second = scenario.run(testbed, "fixed"), scenario.run(testbed, "fixed")
    assert first.events == second.events
    times = {(e.actor, e.kind): e.t_ms for e in first.events}
    assert times["A", Kind.ACQUIRED] == 0
    assert times["A", Kind.EXPIRED] == 30_000
    assert times["B", Kind.ACQUIRED] == 32_500
    assert times["A", Kind.RESUMED] == 35_000


def test_virtual_clock_moves_the_holders_own_deadline_too() -> None:
    from lockguide_lab.scenarios import Run, Way

    with FakeTestbed() as testbed, testbed.running():
        run = Run(testbed, PausedHolder(), Way.BROKEN)
        client = testbed.server().client()
        locks: list[Lock | Redlock] = [
            run.lock(client, "lock:one", ttl_ms=10_000),
            run.fenced_lock(client, "lock:fenced", ttl_ms=10_000),
            run.redlock([client], "lock:many", ttl_ms=10_000),
        ]
        for lock in locks:
            assert lock.acquire(blocking=False)
            assert lock.validity_remaining_ms() > 9_000
        testbed.clock.advance_to(testbed.clock.now_ms() + 20_000)
        assert [lock.validity_remaining_ms() for lock in locks] == [0.0, 0.0, 0.0]


def test_client_testbed_runs_on_a_given_server_and_deletes_only_its_own_keys(
    r: redis.Redis,
) -> None:
    r.set("not-ours", "keep")
    testbed = ClientTestbed(r)
    broken = BareDelAfterExpiry().run(testbed, "broken")
    assert not broken.outcome.safe
    assert r.keys("*") == [b"not-ours"]
    with pytest.raises(ScenarioError):
        FailoverLosesLock().run(testbed, "broken")


# -- arguments and the outcome --------------------------------------------------------------


def test_bad_scenario_arguments_are_refused_before_anything_runs() -> None:
    with pytest.raises(BadArgument):
        PausedHolder(ttl_ms=0)
    with pytest.raises(BadArgumentType):
        PausedHolder(ttl_ms=1.5)  # type: ignore[arg-type]
    with pytest.raises(BadArgument):
        BareDelAfterExpiry(pause_ms=-1)
    with pytest.raises(BadArgument):
        WorkOutlastsTtl(ttl_ms=200, renew_every_ms=200)
    with pytest.raises(BadArgument):
        FailoverLosesLock(earlier_grants=-1)
    with pytest.raises(BadArgument):
        ClockJumpOnOneNode(jump_ms=0)
    with pytest.raises(BadArgument):
        RedlockRestartForgetsLock(ttl_ms=300, restart_delay_ms=300)
    with pytest.raises(BadArgument):
        SplitVote(contenders=2)
    with pytest.raises(BadArgument):
        SplitVote(retry_low_ms=100, retry_high_ms=100)
    with pytest.raises(BadArgument):
        SplitVote(far_ms=30, ttl_ms=100)
    with FakeTestbed() as testbed:
        with pytest.raises(BadArgument):
            PausedHolder().run(testbed, "sideways")
        with pytest.raises(BadArgumentType):
            PausedHolder().run("fakeredis", "broken")  # type: ignore[arg-type]


def _timeline(*events: tuple[float, str, Kind, str | None], final: str | None) -> Timeline:
    from lockguide_lab.scenarios import Event

    return Timeline(
        scenario="hand-made",
        way="broken",
        approach="",
        testbed="none",
        events=tuple(Event(t, who, kind, "", value) for t, who, kind, value in events),
        final_value=final,
    )


def test_outcome_flags_a_write_after_the_writers_lease_ended() -> None:
    timeline = _timeline(
        (0, "A", Kind.ACQUIRED, None),
        (100, "A", Kind.EXPIRED, None),
        (150, "A", Kind.WRITE_ACCEPTED, "A's write"),
        final="A's write",
    )
    outcome = timeline.outcome
    assert not outcome.mutual_exclusion
    assert not outcome.data_intact  # no valid write was made, yet the resource changed
    assert "after A's lease had ended" in outcome.reasons[0]


def test_outcome_accepts_writes_inside_the_lease_and_judges_the_final_value() -> None:
    timeline = _timeline(
        (0, "A", Kind.ACQUIRED, None),
        (10, "A", Kind.WRITE_ACCEPTED, "A's write"),
        (20, "A", Kind.RELEASED, None),
        (30, "B", Kind.ACQUIRED, None),
        (40, "B", Kind.WRITE_REFUSED, "B's write"),
        final="A's write",
    )
    assert timeline.outcome.safe
    assert timeline.outcome.overlapping == ()
    lost = _timeline(*[(e.t_ms, e.actor, e.kind, e.value) for e in timeline.events], final="x")
    assert not lost.outcome.data_intact


def test_outcome_reports_no_progress_when_nobody_acquired() -> None:
    timeline = _timeline((0, "A", Kind.NOT_ACQUIRED, None), final=None)
    assert not timeline.outcome.progress
    assert "nobody acquired" in timeline.outcome.summary()


def test_a_versioned_resource_refuses_a_write_from_a_client_that_has_not_read_it() -> None:
    with FakeTestbed() as testbed, testbed.running():
        from lockguide_lab.scenarios import Run, Way

        run = Run(testbed, ClockJumpOnOneNode(), Way.FIXED)
        client = testbed.server().client()
        a = run.actor("A", run.lock(client, "lock:ledger", 1_000), [client])
        resource = VersionedResource(testbed.resource_client(), "ledger:balance")
        with pytest.raises(BadArgument):
            a.write(resource)
        assert a.read(resource) == 0
        assert a.write(resource)
        assert resource.read() == "A's write"


def test_figure_titles_a_run_nobody_won_as_such() -> None:
    from lockguide_lab.scenarios.plot import figure

    timeline = _timeline((0, "A", Kind.NOT_ACQUIRED, None), final=None)
    title = figure(timeline).axes[0].get_title(loc="left")
    assert "nobody acquired the lock" in title


def test_figure_draws_one_panel_per_timeline_with_a_legend() -> None:
    from lockguide_lab.scenarios.plot import figure, png

    with FakeTestbed() as testbed:
        broken, fixed = RestartForgetsLock().both(testbed)
    fig = figure(broken, fixed)
    assert len(fig.axes) == 2
    assert fig.legends
    assert "BROKEN" in fig.axes[0].get_title(loc="left")
    assert "intact" in fig.axes[1].get_title(loc="left")
    assert png(broken).startswith(b"\x89PNG")
