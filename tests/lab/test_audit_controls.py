"""The audit against control locks it has never seen: no false failures, and no misses.

The correct controls (``tests/lab/audit_controls.py``: a single-instance lock with
its clock in a class attribute, one that renews, and a Redlock with its clock in a
class attribute, in a closure, on the instance) must pass every must-have row. Each
broken variant differs from its correct sibling in one rule, the one its row tests
(each row names its controls where it is declared, ``audit_row(..., controls=...)``):
it must fail that row, which the sibling passes (or, when the audit cannot reach
its clock, does not run).

The correct controls run every row; a broken variant runs its own row. That the broken
variant's report differs from its sibling's in *no other* row (each row tests one
rule) takes every row of every variant, minutes more: it runs with
``LOCKGUIDE_FULL_AUDIT=1`` (``make audit-full``), beside the full audit of the libraries.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor

import pytest

from lockguide_lab.audit import CHECKS, Report, Server, Status, audit_all, audit_on
from lockguide_lab.audit.checks import timing
from lockguide_lab.audit.run import AT_ONCE
from lockguide_lab.audit.servers import server_at
from lockguide_lab.testbed import RedisServer
from tests.lab.full_audit import full_audit
from tests.support import start_redis_servers

pytestmark = pytest.mark.real_redis

CONTROLS = "tests.lab.audit_controls"


def five(tmp_path_factory: pytest.TempPathFactory, name: str) -> list[RedisServer]:
    return start_redis_servers(tmp_path_factory.mktemp(name), 5)


def at(started: list[RedisServer]) -> list[Server]:
    return [server_at(f"master-{i}", *s.address) for i, s in enumerate(started)]


_reports: dict[tuple[str, str | None], Report] = {}
#: The broken variants' audits of the rows that only wait (``AT_ONCE``: a contended
#: acquire left to its own deadline, where a broken variant waits the audit's whole limit,
#: 20 s, and loads nothing), begun in the background by ``servers`` on servers of their
#: own (the audit empties its servers between rows), while the other tests run.
_waiting: dict[str, Future[list[Report]]] = {}
#: The correct Redlock controls' drift rows (each holder process is stopped for 1.15 s,
#: then 3.96 s: about 6 s a lock that load nothing), begun in the background by
#: ``servers`` on servers of their own, and taken into those controls' every-row audits.
_drifting: list[Future[list[Report]]] = []


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[Server]]:
    started = five(tmp_path_factory, "control")
    rows = [row for row in AT_ONCE if any(r == row for *_, r in BROKEN)]
    aside = five(tmp_path_factory, "control-waiting") if rows else []
    drifting = five(tmp_path_factory, "control-drift")
    with ThreadPoolExecutor(max_workers=2) as pool:
        for row in rows:
            names = [b for b, _, r in BROKEN if r == row]
            _waiting[row] = pool.submit(audit, names, at(aside), row)
        _drifting.append(pool.submit(audit, REDLOCKS, at(drifting), "drift"))
        yield at(started)
        _waiting.clear()  # (the pool waits for an audit that no test read)
        _drifting.clear()
    for server in [*started, *aside, *drifting]:
        server.stop()


def audit(names: list[str], servers: list[Server], row: str | None) -> list[Report]:
    """The audit of the controls ``names``: on every row (``None``), or on ``row`` alone."""
    return audit_all(
        [f"{CONTROLS}:{n}" for n in names],
        servers,
        backend="redis-server",
        checks=None if row is None else [row],
    )


def run(servers: list[Server], name: str, row: str | None = None) -> Report:
    """The audit of one control, run once: every row (``row=None``), or that row alone.

    The first call for every row audits every control the tests read that way
    (together, so that their wait rows wait at the same time; the correct Redlocks
    after the others, their drift rows taken from ``servers``' background audit); the
    first call for a row audits every broken variant of that row (begun in the background
    by ``servers`` for a row that only waits).
    """
    if (name, row) not in _reports:
        names = AUDITED if row is None else [b for b, _, r in BROKEN if r == row]
        if row is not None and row in _waiting:
            found = _waiting.pop(row).result()
        elif row is None:  # the Redlocks last, with their drift rows from the background
            now = [n for n in names if n not in REDLOCKS]
            found = audit(now, servers, None)
            for n, drift in zip(REDLOCKS, drifted(), strict=True):
                done = {"drift": drift.row("drift")}
                target = f"{CONTROLS}:{n}"
                found.append(audit_on(target, servers, backend="redis-server", done=done))
            names = [*now, *REDLOCKS]
        else:
            found = audit(names, servers, row)
        _reports.update(((n, row), report) for n, report in zip(names, found, strict=True))
    return _reports[name, row]


def drifted() -> list[Report]:
    """The correct Redlocks' drift rows, begun by ``servers`` (waited for)."""
    return _drifting[0].result()


def statuses(report: Report) -> dict[str, Status]:
    return {row.id: row.status for row in report.rows}


REDLOCKS = ["class_clock_redlock", "closure_clock_redlock", "instance_clock_redlock"]
CORRECT = ["single", "fenced", "renewing", "async_single", *REDLOCKS]


@pytest.mark.parametrize("name", CORRECT)
def test_a_correct_lock_passes_every_must_have(servers: list[Server], name: str) -> None:
    report = run(servers, name)
    assert report.exit_code == 0, report.text()
    for row in report.rows:
        assert row.status is not Status.ERROR, row
        if row.must:
            assert row.status in (Status.PASS, Status.NA), row
    assert report.row("unique").status is Status.PASS
    assert report.row("unpredictable").status is Status.PASS
    assert report.row("release").status is Status.PASS
    assert report.row("ttl").status is Status.PASS


def test_a_counter_that_outlives_every_hold_is_not_a_key_without_a_ttl(
    servers: list[Server],
) -> None:
    report = run(servers, "fenced")
    assert report.row("fencing").status is Status.PASS
    assert report.row("ttl").status is Status.PASS, report.row("ttl")


def test_the_renewing_control_is_judged_on_renewal(servers: list[Server]) -> None:
    assert run(servers, "renewing").row("renewal").status is Status.PASS
    assert run(servers, "single").row("renewal").status is Status.NA


@pytest.mark.parametrize("name", REDLOCKS)
def test_a_correct_redlock_passes_the_redlock_rows_wherever_it_keeps_its_clock(
    servers: list[Server], name: str
) -> None:
    got = statuses(run(servers, name))
    for check in ("partial", "retry", "drift", "parallel"):
        assert got[check] is Status.PASS, (check, run(servers, name).row(check))
    # The warp cannot reach a clock captured before the attempt: "not run", never "fail".
    assert got["monotonic"] is Status.NOT_RUN
    assert "could not move the clock" in run(servers, name).row("monotonic").summary


#: (broken variant, its correct sibling, the one row that must differ), from the rows'
#: declarations.
BROKEN = [
    (control.broken, control.sibling, check.id) for check in CHECKS for control in check.controls
]

#: Every control the tests audit on every row.
AUDITED = [*CORRECT, *(name for name, _, _ in BROKEN)] if full_audit() else CORRECT


def test_every_row_with_a_rule_to_break_names_a_broken_control() -> None:
    """The rows without one test what no control can break on its own: any two holders'
    exclusion, the paused holder every timeout lock has, fencing (offered or not)."""
    assert {check.id for check in CHECKS if not check.controls} == {
        "exclusion",
        "pause",
        "fencing",
    }
    assert len({name for name, _, _ in BROKEN}) == len(BROKEN)  # one rule broken per control


@pytest.mark.parametrize(("name", "sibling", "check"), BROKEN)
def test_a_broken_variant_fails_its_row_where_its_sibling_does_not(
    servers: list[Server], name: str, sibling: str, check: str
) -> None:
    report = run(servers, name, check)
    assert [row.id for row in report.rows] == [check]
    assert report.row(check).status is Status.FAIL, report.row(check)
    # Passed, or (the monotonic row of a clock no warp reaches) not run: never failed.
    assert run(servers, sibling).row(check).status in (Status.PASS, Status.NOT_RUN)
    must = report.row(check).must
    assert report.exit_code == (1 if must else 0)


@pytest.mark.skipif(not full_audit(), reason="every row of every variant: LOCKGUIDE_FULL_AUDIT=1")
@pytest.mark.parametrize(("name", "sibling", "check"), BROKEN)
def test_a_broken_variant_differs_from_its_sibling_in_its_row_alone(
    servers: list[Server], name: str, sibling: str, check: str
) -> None:
    report = run(servers, name)
    control = run(servers, sibling)
    assert report.row(check).status is Status.FAIL, report.row(check)
    differs = {row.id for row in report.rows if row.status is not control.row(row.id).status}
    assert differs == {check}, report.text()
    must = report.row(check).must
    assert report.exit_code == (1 if must else 0)
    assert {row.id for row in report.rows if row.failed} == ({check} if must else set())


def test_half_atomic_locks_are_caught_by_the_races(servers: list[Server]) -> None:
    release = run(servers, "two_command_release", "release").row("release")
    assert "two commands" in release.summary
    assert "deleted B's key" in release.summary
    ttl = run(servers, "two_command_ttl", "ttl").row("ttl")
    assert "no TTL" in ttl.summary
    assert "SET" in ttl.summary


def test_an_error_that_reaches_the_caller_is_reported_with_its_type(
    servers: list[Server],
) -> None:
    row = run(servers, "raises_on_error", "partial").row("partial")
    assert "raised BusyLoadingError" in row.summary
    assert "left its key on 4 masters" in row.summary


def test_the_paused_grant_is_what_fails_a_redlock_without_a_validity_check(
    servers: list[Server],
) -> None:
    row = run(servers, "no_validity_check", "drift").row("drift")
    assert "past the whole lease" in row.summary
    assert "acquired True" in row.details[1]


def test_the_pause_must_come_before_the_grant_reaches_the_holder(
    servers: list[Server], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Break the drift check (deliver the grant, then stop the holder): the pause then
    lands after the lock has decided, and even a correct Redlock is failed (or, when the
    holder has already quit, the check errs). The verdict rests on the order it keeps."""
    drifted()  # the background drift rows read the switch: they must be done first
    monkeypatch.setattr(timing, "REPLIES_BEFORE_STOP", True)
    report = audit_on(
        f"{CONTROLS}:class_clock_redlock", servers, backend="redis-server", checks=["drift"]
    )
    assert report.row("drift").status in (Status.FAIL, Status.ERROR), report.row("drift")
    assert report.exit_code == 1


def test_the_correct_controls_pass_the_rows_about_a_holds_edges(servers: list[Server]) -> None:
    """The rows the broken variants fail are passed, not skipped, by their siblings."""
    for name in ("single", "renewing", "async_single"):
        assert run(servers, name).row("wait").status is Status.PASS, name
    renewing = run(servers, "renewing")
    assert renewing.row("renewal-stops").status is Status.PASS
    assert renewing.row("fork").status is Status.PASS
    assert "raised NotHeld" in renewing.row("fork").summary  # refused in the child, nothing sent
    assert run(servers, "async_single").row("cancel").status is Status.PASS
    assert run(servers, "single").row("cancel").status is Status.NA  # no task to cancel


def test_the_new_rows_say_what_went_wrong(servers: list[Server]) -> None:
    wait = run(servers, "waits_forever", "wait").row("wait")
    assert "still waiting after 20 s" in wait.summary
    assert "only when A released" in wait.summary
    stops = run(servers, "renews_after_release", "renewal-stops").row("renewal-stops")
    assert "more command(s) on the key" in stops.summary
    fork = run(servers, "fork_unaware", "fork").row("fork")
    assert "deleted the lock its parent still held" in fork.summary
    cancel = run(servers, "unshielded_release", "cancel").row("cancel")
    assert "never reached Redis" in cancel.summary
    assert "raised CancelledError" in cancel.summary


def test_an_earlier_holders_late_release_is_not_taken_for_the_acquire(
    servers: list[Server],
) -> None:
    """A correct Redlock whose release reaches master 0 only just before its next attempt
    (pottery's, on a loaded machine): the retry row must still learn the acquire's ``SET``
    and judge the pauses before it, not the release's round trip ("a fixed pause of
    about 0 ms", as CI once read pottery)."""
    report = audit_on(
        f"{CONTROLS}:late_release_redlock", servers, backend="redis-server", checks=["retry"]
    )
    row = report.row("retry")
    assert row.status is Status.PASS, row
    # It sleeps 20 to 200 ms after releasing a failed attempt; what the audit adds (a
    # link, a loaded machine) only lengthens a pause. A release taken for the acquire
    # reads the release's own round trip instead: a few ms.
    assert min(row.data["pauses_ms"]) >= 20, row


def test_a_lock_that_cannot_start_gets_rows_that_say_why(servers: list[Server]) -> None:
    report = audit_on(f"{CONTROLS}:unimportable", servers, backend="redis-server")
    assert report.exit_code == 1  # a CI gate must not pass a lock that cannot even start
    assert {row.status for row in report.rows} == {Status.ERROR}
    for row in report.rows:
        assert row.summary.startswith("cannot run on Python 3.")
        assert "raised ModuleNotFoundError: No module named 'lockguide_lab.audit.no_such" in (
            row.summary
        )
