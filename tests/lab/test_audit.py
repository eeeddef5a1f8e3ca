"""The audit, run on real redis-server processes against every library it compares.

The libraries' reports are saved beside the comparison page
(``docs/libraries.results.json``, written by ``tools/regenerate_libraries_page.py``):
the tests below assert what those runs found, that the committed page is exactly what
they render, and that a fresh audit of a sample of the libraries finds the same rows
(of every library with ``LOCKGUIDE_FULL_AUDIT=1``: one audit for the session).
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import date
from pathlib import Path
from typing import Any, ClassVar

import pytest

import lockguide
from lockguide_lab.audit import (
    BUILTIN,
    CHECKS,
    Report,
    Server,
    Status,
    audit,
    audit_all,
    audit_on,
)
from lockguide_lab.audit.adapters import process_clock
from lockguide_lab.audit.adapters.lockguide_redlock import RedlockAdapter
from lockguide_lab.audit.checks import CHECKS_BY_ID
from lockguide_lab.audit.page import (
    LIBRARIES,
    VERDICTS,
    StaleVerdict,
    StaleVersion,
    load_results,
    render,
    splice,
)
from lockguide_lab.audit.servers import server_at
from tests.docs.test_docs import ROOT
from tests.lab.full_audit import full_audit
from tests.support import start_redis_server
from tools.regenerate_libraries_page import AUDITED, PAGE, RESULTS

pytestmark = pytest.mark.real_redis


@pytest.fixture(scope="session")
def audit_servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[Server]]:
    started = [start_redis_server(tmp_path_factory.mktemp(f"audit-master-{i}")) for i in range(5)]
    yield [server_at(f"master-{i}", *s.address) for i, s in enumerate(started)]
    for server in started:
        server.stop()


@pytest.fixture(scope="session")
def reports() -> dict[str, Report]:
    """The saved reports: every library on the page, and the broken lock."""
    return load_results(RESULTS)


#: How many libraries a default run audits afresh, in turn by the day; the rest are
#: audited by ``LOCKGUIDE_FULL_AUDIT=1`` (``make audit-full``) and on every regeneration.
SAMPLE_SIZE = 2
#: Names (comma-separated) to audit instead of the day's sample, e.g. to rerun a failure.
SAMPLE_ENV = "LOCKGUIDE_AUDIT_SAMPLE"


def sample() -> list[str]:
    """The libraries this run audits afresh: all of them for a full audit, else
    ``SAMPLE_SIZE`` of them chosen by the date, so that every library comes round."""
    if full_audit():
        return list(AUDITED)
    if chosen := os.environ.get(SAMPLE_ENV):
        return chosen.split(",")
    start = date.today().toordinal() * SAMPLE_SIZE % len(AUDITED)
    return [AUDITED[(start + i) % len(AUDITED)] for i in range(SAMPLE_SIZE)]


@pytest.fixture(scope="session")
def fresh(audit_servers: list[Server]) -> dict[str, Report]:
    """The sample, audited now on every row (once for the session)."""
    names = sample()
    found = audit_all([BUILTIN[name] for name in names], audit_servers, backend="redis-server")
    return dict(zip(names, found, strict=True))


def what_the_page_shows(report: Report) -> list[tuple[str, str, str]]:
    return [(row.id, row.status.value, row.summary) for row in report.rows]


def test_a_fresh_audit_finds_what_the_saved_results_say(
    reports: dict[str, Report], fresh: dict[str, Report]
) -> None:
    for name, report in fresh.items():
        saved = reports[name]
        assert (report.name, report.version) == (saved.name, saved.version), (
            f"{name} was upgraded: tools/regenerate_libraries_page.py --library {name}"
        )
        assert what_the_page_shows(report) == what_the_page_shows(saved), (
            f"{name}'s saved rows are stale (sample {SAMPLE_ENV}={','.join(fresh)}): "
            f"regenerate them with tools/regenerate_libraries_page.py --library {name}, "
            "or one row for every library with --only ROW"
        )


def test_the_saved_results_hold_every_row_of_every_library(reports: dict[str, Report]) -> None:
    assert list(reports) == list(AUDITED)
    for name, report in reports.items():
        missing = [c.id for c in CHECKS if c.id not in {row.id for row in report.rows}]
        assert not missing, (
            f"{name} has no saved row {missing}: tools/regenerate_libraries_page.py --only ROW"
        )
        assert [row.id for row in report.rows] == [c.id for c in CHECKS]
        for row in report.rows:  # the titles and must flags come from the declarations
            check = CHECKS_BY_ID[row.id]
            assert (row.title, row.must) == (check.title, check.must), (name, row.id)


def statuses(report: Report) -> dict[str, Status]:
    return {row.id: row.status for row in report.rows}


#: The rows the audit cannot run on a library, and the reason each row must give.
NOT_RUN = {
    # redlock times its attempt with datetime.utcnow(), which no warp of time.* reaches.
    ("redlock", "monotonic"): "could not move the clock",
    # The adapters drive an asyncio lock from a loop in a thread, which a fork does not copy.
    ("redis-py-asyncio", "fork"): "does not survive a fork",
    ("aioredlock", "fork"): "does not survive a fork",
    ("redlock-ng-asyncio", "fork"): "does not survive a fork",
}


def test_every_library_is_audited_without_a_broken_check(reports: dict[str, Report]) -> None:
    for name, report in reports.items():
        for row in report.rows:
            assert row.status is not Status.ERROR, (name, row)
            if (name, row.id) in NOT_RUN:
                assert row.status is Status.NOT_RUN, (name, row)
                assert NOT_RUN[name, row.id] in row.summary, (name, row)
            else:
                assert row.status is not Status.NOT_RUN, (name, row)


def test_every_library_keeps_compare_and_delete_also_in_the_race(
    reports: dict[str, Report],
) -> None:
    # A lock without a key (portalocker) has no GET to race: the row is still judged.
    for name in LIBRARIES:
        assert reports[name].row("release").status is Status.PASS, (
            name,
            reports[name].row("release"),
        )


def test_broken_lock_fails_with_the_right_rows(reports: dict[str, Report]) -> None:
    report = reports["broken"]
    got = statuses(report)
    assert report.exit_code == 1
    assert got["unique"] is Status.PASS  # host:pid:counter never repeats...
    assert got["unpredictable"] is Status.FAIL  # ...but anyone can produce it
    assert "number" in report.row("unpredictable").summary
    assert got["release"] is Status.FAIL  # bare DEL removed B's lock; C got in
    assert got["ttl"] is Status.FAIL
    assert got["pause"] is Status.FAIL
    assert "never expires" in report.row("pause").summary
    assert got["fencing"] is Status.FAIL
    assert got["exclusion"] is Status.PASS  # SET NX does exclude, while it lasts
    assert {row.id for row in report.rows if row.failed} == {"release", "ttl"}


def test_lockguide_lock_passes_every_must_have(reports: dict[str, Report]) -> None:
    report = reports["lockguide"]
    got = statuses(report)
    assert report.exit_code == 0
    assert got["unique"] is Status.PASS
    assert got["unpredictable"] is Status.PASS
    assert got["release"] is Status.PASS
    assert got["ttl"] is Status.PASS
    assert got["pause"] is Status.WARN  # a timeout lock: only fencing fixes it
    assert "told A its hold was gone" in report.row("pause").summary  # its own deadline


def test_lockguide_redlock_keeps_every_redlock_rule(reports: dict[str, Report]) -> None:
    report = reports["lockguide-redlock"]
    got = statuses(report)
    assert report.exit_code == 0
    assert report.multi_master
    assert report.masters == 5
    for check in ("unique", "unpredictable", "release", "ttl", "exclusion", "partial", "retry"):
        assert got[check] is Status.PASS, (check, report.row(check))
    assert got["parallel"] is Status.PASS
    assert report.row("parallel").data["delays"] < 2.5  # one delayed round trip, not five
    assert got["monotonic"] is Status.PASS
    assert got["drift"] is Status.PASS
    assert "past the lease, it refused" in report.row("drift").summary
    assert got["pause"] is Status.WARN
    assert "told A its hold was gone" in report.row("pause").summary  # its validity deadline


def test_fenced_lock_hands_out_increasing_tokens(reports: dict[str, Report]) -> None:
    report = reports["lockguide-fenced"]
    assert report.exit_code == 0
    assert report.row("fencing").status is Status.PASS
    assert "also after a lease ran out" in report.row("fencing").summary
    assert report.row("pause").status is Status.WARN  # tokens do not stop the overlap itself


@pytest.mark.parametrize("name", ["lockguide", "lockguide-fenced"])
def test_watchdog_tells_the_holder_its_renewal_failed(
    reports: dict[str, Report], name: str
) -> None:
    row = reports[name].row("renewal")
    assert row.status is Status.PASS, row
    assert "the key was still ours: True" in row.details[0]  # it did renew past the lease
    assert "told the holder its hold was lost" in row.summary


class _RedlockWithoutDrift(RedlockAdapter):
    """lockguide's Redlock told to allow no drift at all (its public options).

    Its connections are made before the timed acquire: the check continues the holder
    3 ms inside the 42 ms allowance, and a cold start (a thread per master connecting
    through the links) once took more than the 39 ms left, so the lock refused for want
    of time, not by its arithmetic.
    """

    options: ClassVar[dict[str, Any]] = {
        "clock": process_clock,
        "drift_factor": 0.0,
        "drift_floor_ms": 0.0,
    }

    def make_lock(self, key: str, ttl_ms: int) -> lockguide.Redlock:
        super().make_lock(f"{key}:warm-up", ttl_ms).locked()  # the same pools, connected
        return super().make_lock(key, ttl_ms)


class _RedlockOnTheWallClock(RedlockAdapter):
    """lockguide's Redlock timed with ``time.time`` (looked up at each call)."""

    options: ClassVar[dict[str, Any]] = {"clock": lambda: time.time()}


def test_drift_check_reaches_lockguide_redlock_arithmetic(audit_servers: list[Server]) -> None:
    report = audit_on(_RedlockWithoutDrift, audit_servers, backend="redis-server", checks=["drift"])
    row = report.row("drift")
    assert row.status is Status.FAIL, row  # without the allowance it accepted inside it
    assert "less than the 42 ms drift allowance" in row.summary


def test_monotonic_check_catches_a_redlock_timed_by_the_wall_clock(
    audit_servers: list[Server],
) -> None:
    report = audit_on(
        _RedlockOnTheWallClock, audit_servers, backend="redis-server", checks=["monotonic"]
    )
    assert report.row("monotonic").status is Status.FAIL


def test_every_timeout_lock_overlaps_after_a_pause(reports: dict[str, Report]) -> None:
    for name in LIBRARIES:
        row = reports[name].row("pause")
        assert row.status is Status.WARN, (name, row)
        assert "only a fencing token" in row.summary
        assert row.data["in_process"] is False  # a real SIGSTOP of a real process


def test_redlock_py_is_sequential_predictable_and_on_the_wall_clock(
    reports: dict[str, Report],
) -> None:
    report = reports["redlock-py"]
    assert report.row("parallel").status is Status.FAIL
    assert report.row("parallel").data["delays"] > 4  # five masters, one after another
    assert "random.seed" in report.row("unpredictable").summary
    assert report.row("unique").status is Status.PASS
    assert report.row("monotonic").status is Status.FAIL
    assert report.row("retry").status is Status.FAIL  # a fixed 200 ms
    assert report.row("drift").status is Status.PASS


def test_redlock_py_leaves_the_majority_keys_when_one_master_errors(
    reports: dict[str, Report],
) -> None:
    row = reports["redlock-py"].row("partial")
    assert row.status is Status.FAIL, row
    assert "raised MultipleRedlockException" in row.summary
    assert "its key left on masters []" in row.details[0]  # a refused majority: cleaned up
    assert "left its key on 4 masters" in row.summary  # the error path: not


def test_redlock_ng_keeps_the_must_haves_one_by_one_in_sync_and_on_the_wall_clock(
    reports: dict[str, Report],
) -> None:
    sync, aio = reports["redlock-ng"], reports["redlock-ng-asyncio"]
    for report in (sync, aio):
        assert report.exit_code == 0, report.text()  # every must-have kept
        assert report.row("monotonic").status is Status.FAIL  # time.time() in both
        assert "wall clock" in report.row("monotonic").summary
        assert report.row("ttl").summary.startswith("yes: the TTL is a required argument")
        assert report.row("wait").status is Status.PASS  # retry_count=3, then None
    assert sync.row("parallel").status is Status.FAIL  # a for loop over the masters
    assert sync.row("parallel").data["delays"] > 4
    assert aio.row("parallel").status is Status.PASS  # asyncio.gather
    assert aio.row("cancel").status is Status.FAIL, aio.row("cancel")


def test_tooz_waits_for_ever_renews_silently_and_its_forked_child_deletes_the_lock(
    reports: dict[str, Report],
) -> None:
    report = reports["tooz"]
    assert report.row("ttl").summary == "yes: PTTL 30 s after a default acquire"  # lock_timeout
    assert report.row("wait").status is Status.FAIL  # redis-py's blocking acquire, no deadline
    renewal = report.row("renewal")
    assert renewal.status is Status.FAIL, renewal  # the heartbeat logs a warning, no more
    assert "gave the holder no signal" in renewal.summary
    assert "release afterwards: returned False" in renewal.details[-1]
    assert report.row("renewal-stops").status is Status.PASS
    assert "deleted the lock its parent still held" in report.row("fork").summary
    assert "uuid1" in report.row("unpredictable").summary  # redis-py's Lock underneath


def test_pottery_keeps_the_redlock_rules(reports: dict[str, Report]) -> None:
    got = statuses(reports["pottery"])
    checks = ("unique", "unpredictable", "release", "ttl", "parallel", "partial", "retry", "drift")
    for check in (*checks, "monotonic"):
        assert got[check] is Status.PASS, check
    assert reports["pottery"].row("parallel").data["delays"] < 2.5


def test_sherlock_no_expiry_option_lets_a_second_holder_in(reports: dict[str, Report]) -> None:
    row = reports["sherlock"].row("exclusion")
    assert row.status is Status.FAIL
    assert "no-expiry" in row.summary
    assert "already gone" in row.summary  # the acquire's own EXPIRE -1 deleted the key


def test_python_redis_lock_reports_a_renewal_failure_late(
    reports: dict[str, Report],
) -> None:
    row = reports["python-redis-lock"].row("renewal")
    assert row.status is Status.FAIL
    assert row.summary.startswith("late:")  # not never: its release raises afterwards
    assert "told nothing while it held the lock" in row.summary
    assert "release raised NotAcquired" in row.summary
    assert "NotAcquired" in row.summary.split(";")[0]  # seen dying in its thread


def test_redis_py_lock_has_no_default_ttl_and_a_uuid1_value(reports: dict[str, Report]) -> None:
    report = reports["redis-py"]
    assert report.row("ttl").status is Status.FAIL
    assert report.row("unique").status is Status.PASS  # the Redis docs' rule: kept
    assert report.row("unpredictable").status is Status.FAIL  # the guide's own rule
    assert "uuid1" in report.row("unpredictable").summary


def test_only_fenced_lock_and_portalocker_hand_out_fencing_tokens(
    reports: dict[str, Report],
) -> None:
    offering = [n for n in LIBRARIES if reports[n].row("fencing").status is Status.PASS]
    assert offering == ["lockguide-fenced", "portalocker"]  # portalocker: opt-in fencing=True
    assert reports["portalocker"].row("renewal").status is Status.PASS


def test_a_default_acquire_with_no_deadline_is_caught(reports: dict[str, Report]) -> None:
    waiting = ("redis-py", "redis-py-asyncio", "pottery", "python-redis-lock", "tooz", "broken")
    for name in waiting:
        row = reports[name].row("wait")
        assert row.status is Status.FAIL, (name, row)
        assert "still waiting after 20 s" in row.summary
    for name in ("redlock-py", "redlock", "aioredlock", "redlock-ng", "redlock-ng-asyncio"):
        assert reports[name].row("wait").summary.endswith("within a few seconds (returned False)")
    assert "after about 10 s" in reports["sherlock"].row("wait").summary  # its 10 s default
    # lockguide's default deadline: DEFAULT_TIMEOUT_MS (10 s) once the contract lands,
    # for ever before it.
    expected = Status.PASS if hasattr(lockguide, "DEFAULT_TIMEOUT_MS") else Status.FAIL
    for name in ("lockguide", "lockguide-redlock", "lockguide-fenced"):
        assert reports[name].row("wait").status is expected, (name, reports[name].row("wait"))


def test_a_cancelled_release_is_judged_on_the_asyncio_locks(reports: dict[str, Report]) -> None:
    aio = reports["aioredlock"].row("cancel")
    assert aio.status is Status.FAIL, aio  # unlock awaits its watchdog before the script
    assert "never reached Redis" in aio.summary
    redis_py = reports["redis-py-asyncio"].row("cancel")
    assert redis_py.status is Status.PASS, redis_py
    assert "swallowed the cancellation" in redis_py.summary  # redis-py 8.1 finishes the command
    for name in ("redis-py", "pottery", "lockguide"):
        assert reports[name].row("cancel").status is Status.NA


def test_renewal_stops_at_release_in_every_renewing_library(reports: dict[str, Report]) -> None:
    for name in ("lockguide", "lockguide-fenced", "python-redis-lock", "aioredlock", "tooz"):
        row = reports[name].row("renewal-stops")
        assert row.status is Status.PASS, (name, row)
        assert "command(s) on the key while held" in row.details[0]
        assert int(row.details[0].split(" sent ")[1].split()[0]) >= 1  # it did renew first
    assert reports["redis-py"].row("renewal-stops").status is Status.NA  # no renewal


def test_python_redis_lock_forked_child_deletes_its_parents_lock(
    reports: dict[str, Report],
) -> None:
    row = reports["python-redis-lock"].row("fork")
    assert row.status is Status.FAIL, row
    assert "deleted the lock its parent still held" in row.summary
    for name in ("lockguide", "lockguide-fenced"):  # judged either way, never skipped
        assert reports[name].row("fork").status in (Status.PASS, Status.FAIL)


def test_comparison_page_is_current(reports: dict[str, Report]) -> None:
    fresh = render([reports[name] for name in LIBRARIES])
    assert PAGE == ROOT / "docs" / "libraries.md"
    assert RESULTS == ROOT / "docs" / "libraries.results.json"
    committed = PAGE.read_text("utf-8")
    assert committed == fresh, (
        f"{PAGE} is stale: render it from the saved results with "
        "`.venv/bin/python tools/regenerate_libraries_page.py --render`"
    )


def test_page_renders_the_same_from_saved_json(reports: dict[str, Report]) -> None:
    saved = json.loads(json.dumps([reports[n].to_dict() for n in LIBRARIES]))
    again = [Report.from_dict(d) for d in saved]
    assert render(again) == render([reports[n] for n in LIBRARIES])


def test_the_page_leads_with_a_verdict_on_every_library_and_folds_the_table() -> None:
    page = PAGE.read_text("utf-8")
    verdicts = page.index("## Verdicts")
    moving = page.index("## Moving from another library { #moving-from-another-library }")
    table = page.index("??? abstract")
    assert verdicts < moving < table
    said = [line for line in page[verdicts:moving].splitlines() if line.startswith("- **")]
    assert len(said) == len({v.library for v in VERDICTS}) >= 11
    for anchor in ("from-redlock-py", "from-redis-py", "from-pottery", "from-python-redis-lock"):
        assert f"{{ #{anchor} }}" in page[moving:table]


def test_a_verdict_the_runs_contradict_is_refused(reports: dict[str, Report]) -> None:
    """A rerun that turns a row a verdict states cannot leave the old sentence standing."""
    flipped = dataclasses.replace(
        reports["tooz"],
        rows=[
            dataclasses.replace(row, status=Status.PASS) if row.id == "wait" else row
            for row in reports["tooz"].rows
        ],
    )
    again = [flipped if name == "tooz" else reports[name] for name in LIBRARIES]
    with pytest.raises(StaleVerdict, match="tooz's wait row is fail; the runs say pass"):
        render(again)


def test_one_row_is_spliced_in_its_place_and_an_upgrade_is_refused(
    reports: dict[str, Report],
) -> None:
    saved = {"pottery": reports["pottery"]}
    drift = reports["pottery"].row("drift")
    rerun = dataclasses.replace(
        reports["pottery"], rows=[dataclasses.replace(drift, summary="rerun")]
    )
    merged = splice(saved, {"pottery": rerun})["pottery"]
    assert [row.id for row in merged.rows] == [c.id for c in CHECKS]
    assert merged.row("drift").summary == "rerun"
    assert merged.row("retry") == reports["pottery"].row("retry")
    assert reports["pottery"].row("drift").summary != "rerun"  # the saved one is untouched
    upgraded = dataclasses.replace(rerun, version="99.0")
    with pytest.raises(StaleVersion, match=r"pottery is .* 99\.0 now"):
        splice(saved, {"pottery": upgraded})


#: The console script the lab declares (``[project.scripts]`` in lab/pyproject.toml).
AUDIT_SCRIPT = Path(sys.executable).parent / "lockguide-audit"


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(AUDIT_SCRIPT), *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=ROOT,
    )


def test_console_script_lists_the_built_in_adapters() -> None:
    result = run_cli("--list")
    assert result.returncode == 0, result.stderr
    listed = dict(line.split(maxsplit=1) for line in result.stdout.splitlines())
    assert listed == BUILTIN
    assert "usage: lockguide-audit" in run_cli("--masters", "0", "lockguide").stderr


#: The rows that decide the exit status: the CLI tests about it run these alone (the wait
#: row, not a must, would wait 20 s for the broken lock, which waits for ever).
MUST = [f"--check={check.id}" for check in CHECKS if check.must]


def test_cli_exits_non_zero_when_a_must_have_fails() -> None:
    result = run_cli(
        "lockguide_lab.audit.adapters.broken:adapter", "--backend", "fake", "--json", *MUST
    )
    assert result.returncode == 1, result.stderr
    data: dict[str, Any] = json.loads(result.stdout)
    failed = {row["id"] for row in data["rows"] if row["must"] and row["status"] == "fail"}
    assert failed == {"release", "ttl"}
    assert data["exit_code"] == 1


def test_cli_exits_zero_for_a_lock_that_keeps_the_rules() -> None:
    result = run_cli("lockguide", "--backend", "fake", "--brief", *MUST)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "every must-have row passed" in result.stdout


def test_cli_prints_a_markdown_table_for_a_pull_request() -> None:
    result = run_cli(
        "lockguide_lab.audit.adapters.broken:adapter",
        "--backend",
        "fake",
        "--format",
        "markdown",
        *MUST,
    )
    assert result.returncode == 1, result.stderr  # the format does not change the exit status
    lines = result.stdout.splitlines()
    assert "a must-have row **failed**" in lines[0]
    assert lines[2] == "| check | must | result | what the run showed |"
    assert "| release is compare-and-delete | yes | ❌ |" in result.stdout
    assert "| unique value (the Redis docs' rule) | yes | ✅ |" in result.stdout
    ok = run_cli("lockguide", "--backend", "fake", "--format", "markdown", "--check", "unique")
    assert ok.returncode == 0, ok.stdout + ok.stderr


def test_cli_refuses_a_target_it_cannot_load() -> None:
    result = run_cli("no_such_module:factory", "--backend", "fake")
    assert result.returncode == 2
    assert "cannot load" in result.stderr


def test_cli_says_an_asyncio_adapter_needs_real_servers() -> None:
    result = run_cli("redis-py-asyncio", "--backend", "fake", "--brief")
    assert result.returncode == 2, result.stdout + result.stderr
    assert "cannot run on this backend" in result.stderr
    assert "needs a real server's address" in result.stderr


def test_fake_backend_reports_the_proxy_rows_as_not_run() -> None:
    report = audit("pottery", backend="fake", checks=["partial", "parallel", "retry", "drift"])
    got = statuses(report)
    assert got["partial"] is Status.PASS  # five fake servers are enough for this one
    for check in ("parallel", "retry", "drift"):
        assert got[check] is Status.NOT_RUN
        assert "real redis-server" in report.row(check).summary
