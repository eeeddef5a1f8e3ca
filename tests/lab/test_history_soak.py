"""A sample of the soak (``make soak`` runs 10,000 schedules per backend).

The same seeds run with a fenced lock (no schedule may fail a model) and with
a plain lock and unchecked writes (some must: otherwise the soak could not
see a violation). Each violation's seed replays to the same history.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from lockguide_lab.history.judge import judge
from lockguide_lab.history.soak import Soak, backend, main, schedule
from lockguide_lab.testbed.clock import VirtualClock
from tests.support import redis_server_executable

SAMPLE = 150


@pytest.fixture(
    scope="module",
    params=["fakeredis", pytest.param("redis-server", marks=pytest.mark.real_redis)],
)
def server(request: pytest.FixtureRequest) -> Iterator[tuple[str, redis.Redis, VirtualClock]]:
    if request.param == "redis-server":
        redis_server_executable()
    with backend(request.param) as (client, clock):
        yield request.param, client, clock


def test_no_schedule_breaks_the_fenced_lock_and_the_plain_one_is_caught(
    server: tuple[str, redis.Redis, VirtualClock],
) -> None:
    name, client, clock = server
    seeds = range(SAMPLE)
    fenced = Soak(name, client, clock, fenced=True).soak(seeds)
    plain = Soak(name, client, clock, fenced=False).soak(seeds)
    assert fenced.ran == plain.ran == SAMPLE
    assert fenced.violated == [], fenced.report()
    assert plain.fenced_violations, plain.report()
    # Pauses end leases honestly: the lock never overlaps; the stale writes do the damage.
    assert plain.lease_violations == []
    # A violating seed replays to the same history, and the same verdict.
    seed = plain.violated[0]
    again = Soak(name, client, clock, fenced=False)
    first, second = again.run(seed), again.run(seed)
    assert first == second
    assert not judge(first).fenced.ok
    assert {"acquire", "pause", "write"} <= {action for action, _ in schedule(seed)}


def test_the_soak_command_reports_counts_and_seeds(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code = main(["--schedules", "40", "--backend", "fakeredis", "--keep", str(tmp_path)])
    out = capsys.readouterr().out.splitlines()
    assert code == 0
    assert out[0].startswith("fakeredis, fenced lock: 40 schedules ran")
    assert "0 violated" in out[0]
    assert out[1].startswith("fakeredis, plain lock: 40 schedules ran")
    seeds = out[1].split("seeds: ")[1].split(", ")
    kept = sorted(p.name for p in tmp_path.iterdir())
    assert kept == sorted(f"fakeredis-plain-{s}.jsonl" for s in seeds)
