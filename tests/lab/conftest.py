"""The Redis and Redlock scenarios' testbeds and runs, shared by the modules that judge them."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from lockguide_lab.scenarios import FakeTestbed, RealTestbed, Scenario, Testbed, Timeline
from lockguide_lab.testbed import RedisServer
from tests.support import redis_server_executable


@pytest.fixture(
    scope="module",
    params=["fakeredis", pytest.param("redis-server", marks=pytest.mark.real_redis)],
)
def testbed(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Testbed]:
    """A FakeTestbed (virtual clock) or a RealTestbed (real servers, real time), per module."""
    made: Testbed
    if request.param == "fakeredis":
        made = FakeTestbed()
    else:
        redis_server_executable()  # skips (or fails under CI) without redis-server
        server: RedisServer = request.getfixturevalue("redis_server")
        base = tmp_path_factory.mktemp("scenario-servers")
        made = RealTestbed(base, resource=server.client())
    yield made
    made.close()


#: The runs of :func:`runs`, kept for the session: test_scenarios.py judges each run by its
#: outcome and test_history_runs.py judges the same run's history, so each scenario runs
#: once per testbed kind and way, not once per module (the real-server runs mostly wait on
#: TTLs: about a minute saved).
_RUNS: dict[tuple[str, type[Scenario], str], Timeline] = {}


@pytest.fixture(scope="module")
def runs(testbed: Testbed) -> Callable[[type[Scenario], str], Timeline]:
    """Each scenario with its default settings, run once per testbed kind and way (in
    whichever module first asks), then reused."""
    kind = "fakeredis" if isinstance(testbed, FakeTestbed) else "redis-server"

    def run(scenario: type[Scenario], way: str) -> Timeline:
        if (kind, scenario, way) not in _RUNS:
            timeline = scenario().run(testbed, way)
            for _ in range(PREMISE_RUNS - 1):  # the story's premise, measured
                if scenario().premise_held(timeline, way):
                    break
                timeline = scenario().run(testbed, way)
            assert scenario().premise_held(timeline, way), (
                f"in none of {PREMISE_RUNS} runs did {scenario.__name__}'s premise hold\n"
                + timeline.table()
            )
            _RUNS[kind, scenario, way] = timeline
        return _RUNS[kind, scenario, way]

    return run


#: How many times a scenario may run before one keeps its story's premise
#: (:meth:`~lockguide_lab.scenarios.Scenario.premise_held`).
PREMISE_RUNS = 5
