"""The failover-rates command (``bench.failover_rates``): a smoke run on the session's Cluster,
and its table's format. The measurement itself is run by hand (docs/your-redis.md)."""

from __future__ import annotations

import random

import pytest

from bench import failover_rates
from lockguide_lab.testbed.deployments import ClusterDeployment


def test_a_row_says_runs_violations_and_the_wilson_interval() -> None:
    row = failover_rates.Row("Sentinel", 0)
    for outcome in [(True, True, True), (False, False, True), (False, True, False)]:
        row.record(*outcome)
    assert row.cells() == [
        "Sentinel failover, `replicas=0`",
        "broken",
        "1 / 3: 33.3 % (6.1-79.2)",
        "1 / 3",
        "1 / 3",
    ]


@pytest.mark.real_redis
def test_one_run_of_each_condition_on_the_cluster(redis_cluster: ClusterDeployment) -> None:
    """(The Sentinel pair runs the same code, slower: its heal waits for the Sentinels.)"""
    redis_cluster.wait_ready()
    try:
        rows = failover_rates.rows_for(
            failover_rates.Bed(redis_cluster), "Cluster", 1, random.Random(7)
        )
    finally:
        redis_cluster.heal()
    assert [(row.replicas, row.runs) for row in rows] == [(0, 1), (1, 1)]
    assert rows[1].double == 0  # with replicas=1, A never holds a key the new master lacks
    assert "| Cluster failover, `replicas=1` | fixed | 0 / 1: 0.0 % (0.0-79.3) |" in (
        failover_rates.table(rows)
    )
