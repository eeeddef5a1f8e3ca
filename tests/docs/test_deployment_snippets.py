"""The "Your Redis" page's examples that need a Sentinel setup or a Redis Cluster.

They live in ``snippets/deployments/`` (outside the two-backend run of
``test_snippets.py``) and are run here against the session's real deployments,
each ``print`` checked against its ``#>`` lines. While a snippet runs,
``Sentinel`` and ``RedisCluster`` are classes that reach those deployments
whatever addresses the snippet names, as ``redis.Redis`` does for the other
examples.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import redis.cluster
import redis.sentinel
from pytest_examples import EvalExample

from lockguide_lab.testbed.deployments import ClusterDeployment, SentinelDeployment
from tests.docs.test_docs import DOCS, INCLUDE_MARK, ROOT, run_checked
from tests.docs.test_snippets import snippet_example

pytestmark = pytest.mark.real_redis

FOLDER = ROOT / "snippets" / "deployments"
SNIPPETS = sorted(FOLDER.glob("*.py"))


def test_every_deployment_snippet_is_included_by_a_page() -> None:
    included = "\n".join(p.read_text("utf-8") for p in DOCS.rglob("*.md"))
    for path in SNIPPETS:
        assert f'{INCLUDE_MARK} "snippets/deployments/{path.name}"' in included, path.name


def _reach(
    monkeypatch: pytest.MonkeyPatch, sentinels: SentinelDeployment, cluster: ClusterDeployment
) -> None:
    addresses = sentinels.sentinel_addresses
    first = next(n for n in cluster.nodes if n.running)

    class TestSentinel(redis.sentinel.Sentinel):
        def __init__(self, _sentinels: Any, **kwargs: Any) -> None:
            super().__init__(addresses, **kwargs)  # type: ignore[no-untyped-call]

    class TestCluster(redis.cluster.RedisCluster):
        def __init__(self, **kwargs: Any) -> None:
            kwargs.update(host=first.host, port=first.port)
            super().__init__(**kwargs)

    monkeypatch.setattr(redis.sentinel, "Sentinel", TestSentinel)
    monkeypatch.setattr(redis.cluster, "RedisCluster", TestCluster)


@pytest.mark.parametrize("path", SNIPPETS, ids=lambda p: p.name)
def test_deployment_snippet(
    path: Path,
    eval_example: EvalExample,
    sentinel_deployment: SentinelDeployment,
    redis_cluster: ClusterDeployment,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with redis_cluster.client() as client:
        client.flushall()
    sentinel_deployment.wait_ready()
    sentinel = sentinel_deployment.sentinel()
    for service in ("mymaster", "solo-1", "solo-2"):
        sentinel.master_for(service).flushall()  # type: ignore[no-untyped-call]
    _reach(monkeypatch, sentinel_deployment, redis_cluster)
    run_checked(snippet_example(path), eval_example)
