"""The lab's failover scenario on the real deployments: Sentinel's and a Redis Cluster's.

``FailoverLosesLock`` runs unchanged on a :class:`DeploymentTestbed`: the
replica is held back, the primary is killed, and the Sentinels (or the
cluster) promote the replica without A's key. Broken, B acquires a lock A
still holds and A's write lands on B's; fixed, B draws A's token again and the
store refuses the second write. The timelines draw with the lab's figure code.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from lockguide_lab.scenarios import FailoverLosesLock, Kind, Timeline
from lockguide_lab.scenarios.plot import png
from lockguide_lab.testbed import RedisServer
from lockguide_lab.testbed.deployed import DeploymentTestbed
from lockguide_lab.testbed.deployments import ClusterDeployment, SentinelDeployment

pytestmark = pytest.mark.real_redis


@pytest.fixture(params=["sentinel", "cluster"])
def testbed(
    request: pytest.FixtureRequest, redis_server: RedisServer, tmp_path: Path
) -> Iterator[DeploymentTestbed]:
    deployment: SentinelDeployment | ClusterDeployment = request.getfixturevalue(
        "sentinel_deployment" if request.param == "sentinel" else "redis_cluster"
    )
    resource = redis_server.client()
    resource.flushall()
    made = DeploymentTestbed(deployment, tmp_path, resource=resource)
    yield made
    made.close()


def _kinds(timeline: Timeline, actor: str) -> list[Kind]:
    return [e.kind for e in timeline.events if e.actor == actor]


def test_a_real_failover_loses_the_lock_and_fencing_refuses_the_late_write(
    testbed: DeploymentTestbed,
) -> None:
    broken, fixed = FailoverLosesLock().both(testbed)
    assert not broken.outcome.mutual_exclusion, broken.table()
    assert not broken.outcome.data_intact, broken.table()
    assert Kind.LOST in _kinds(broken, "A"), broken.table()
    assert Kind.ACQUIRED in _kinds(broken, "B"), broken.table()
    assert fixed.outcome.data_intact, fixed.table()
    tokens = [e.detail for e in fixed.events if e.kind is Kind.ACQUIRED]
    assert tokens == ["lease 10000 ms, fencing token 34"] * 2, fixed.table()
    assert Kind.WRITE_REFUSED in _kinds(fixed, "A"), fixed.table()
    assert png(broken, fixed).startswith(b"\x89PNG")
