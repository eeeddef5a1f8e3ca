"""PostgreSQL advisory locks on a real server, against the timelines the site draws.

Each scenario of :mod:`lockguide_lab.scenarios.advisory` runs broken (a
session-level lock, writes on another connection) and fixed (a
transaction-level lock in the writing transaction) on a PostgreSQL server of
this module's own, started once (it is restarted by one scenario). As with the
consensus runs, the verdicts are compared with ``docs/lab/recorded/postgres-*.json``
and ``pytest --update-recorded`` rewrites them.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from lockguide_lab.scenarios import Kind, Timeline
from lockguide_lab.scenarios.advisory import (
    ADVISORY_SCENARIOS,
    AdvisoryLostConnection,
    AdvisoryPausedHolder,
    AdvisoryRestart,
    AdvisoryScenario,
    Postgres,
)
from tests.lab.recorded import matches_recorded
from tests.support import start_postgres

RECORDED = Path(__file__).resolve().parents[2] / "docs" / "lab" / "recorded"

pytestmark = pytest.mark.postgres


@pytest.fixture(scope="module")
def postgres() -> Iterator[Postgres]:
    executor, base = start_postgres()

    def restart() -> None:
        executor.stop()
        executor.start()

    yield Postgres(int(executor.port), restart)
    executor.stop()
    shutil.rmtree(base, ignore_errors=True)


def recorded_path(scenario: AdvisoryScenario) -> Path:
    name = type(scenario).__name__.removeprefix("Advisory").lower()
    return RECORDED / f"postgres-{name}.json"


def expect(scenario: AdvisoryScenario, broken: Timeline, fixed: Timeline) -> None:
    """What each run must show, whatever was recorded."""
    if isinstance(scenario, AdvisoryPausedHolder):
        for run in (broken, fixed):  # no lease to run out: B waits for A
            assert run.outcome.safe, run.table()
            assert run.of("B", Kind.NOT_ACQUIRED), run.table()
            assert run.of("B", Kind.ACQUIRED), run.table()
    elif isinstance(scenario, AdvisoryLostConnection | AdvisoryRestart):
        # Broken: the lock went with the session; A's write on its other connection lands.
        assert not broken.outcome.mutual_exclusion, broken.table()
        assert not broken.outcome.data_intact, broken.table()
        # Fixed: A's transaction, lock and write together, was rolled back.
        assert fixed.outcome.safe, fixed.table()
        assert fixed.of("A", Kind.WRITE_REFUSED), fixed.table()
        assert fixed.final_value == "B's update"


@pytest.mark.parametrize("scenario", ADVISORY_SCENARIOS, ids=lambda s: type(s).__name__)
def test_advisory_run_matches_its_recorded_timeline(
    scenario: AdvisoryScenario, postgres: Postgres, request: pytest.FixtureRequest
) -> None:
    broken, fixed = scenario.both(postgres)
    expect(scenario, broken, fixed)
    matches_recorded(request, recorded_path(scenario), broken, fixed, "PostgreSQL")
