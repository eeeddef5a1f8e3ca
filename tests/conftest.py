"""One fixture decides the backend: every test that takes ``backend`` (or ``r``)
runs twice, on fakeredis and on a real ``redis-server`` started for the session."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from lockguide_lab.testbed import RedisServer
from lockguide_lab.testbed.consensus import (
    EtcdCluster,
    ZooKeeperEnsemble,
    etcd_executable,
    zookeeper_classpath,
)
from lockguide_lab.testbed.deployments import ClusterDeployment, SentinelDeployment
from tests.sitebuild import SiteBuild, build_site, site_dir_for_session
from tests.support import (
    MASTER_PORTS,
    Backend,
    fake_backend,
    real_backend,
    require_consensus,
    start_cluster,
    start_redis_server,
    start_redis_servers,
    start_sentinel_deployment,
)


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A real redis-server on a free loopback port, for the whole session."""
    server = start_redis_server(tmp_path_factory.mktemp("redis-server"))
    yield server
    server.stop()


@pytest.fixture(scope="session")
def redis_masters(
    redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[list[RedisServer]]:
    """Four more independent servers: with ``redis_server``, the five Redlock masters
    that ``redis.Redis(port=6379)`` .. ``redis.Redis(port=6383)`` reach."""
    extra = start_redis_servers(tmp_path_factory.mktemp("redis-masters"), len(MASTER_PORTS) - 1)
    yield extra
    for server in extra:
        server.stop()


@pytest.fixture(
    params=[
        "fakeredis",
        pytest.param("redis-server", marks=pytest.mark.real_redis),
    ]
)
def backend(request: pytest.FixtureRequest) -> Backend:
    if request.param == "fakeredis":
        return fake_backend()
    server: RedisServer = request.getfixturevalue("redis_server")
    return real_backend(server, request.getfixturevalue("redis_masters"))


@pytest.fixture
def r(backend: Backend) -> Iterator[redis.Redis]:
    """A client on the test's backend."""
    client = backend.client()
    yield client
    client.close()


@pytest.fixture(scope="session")
def built_site(tmp_path_factory: pytest.TempPathFactory) -> SiteBuild:
    """The site, built once per session (``mkdocs build --strict``); see tests/sitebuild.py."""
    return build_site(site_dir_for_session(tmp_path_factory.mktemp("site-build") / "site"))


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--update-recorded",
        action="store_true",
        help="rewrite docs/lab/recorded/*.json from this run of the consensus scenarios",
    )


@pytest.fixture(scope="session")
def etcd_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdCluster]:
    """A three-member etcd cluster on free loopback ports, for the whole session."""
    require_consensus(etcd_executable)
    with EtcdCluster(tmp_path_factory.mktemp("etcd")) as cluster:
        yield cluster


@pytest.fixture(scope="session")
def zookeeper_ensemble(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperEnsemble]:
    """A three-server ZooKeeper ensemble on free loopback ports, for the whole session."""
    require_consensus(zookeeper_classpath)
    with ZooKeeperEnsemble(tmp_path_factory.mktemp("zookeeper")) as ensemble:
        yield ensemble


@pytest.fixture(scope="session")
def sentinel_deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SentinelDeployment]:
    """A primary with a replica behind three Sentinels (service ``mymaster``), plus two
    lone masters (services ``solo-1``, ``solo-2``), for the whole session."""
    deployment = start_sentinel_deployment(tmp_path_factory.mktemp("sentinel"))
    yield deployment
    deployment.stop()


@pytest.fixture(scope="session")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterDeployment]:
    """A Redis Cluster of three masters with a replica each, for the whole session."""
    cluster = start_cluster(tmp_path_factory.mktemp("cluster"))
    yield cluster
    cluster.stop()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Run the browser suite last: Playwright's session keeps an event loop running in
    this thread, and the asyncio tests (``asyncio.run``) must not start inside it."""
    items.sort(key=lambda item: "tests/browser/" in item.nodeid)
