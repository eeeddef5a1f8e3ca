"""EtcdLock and ZooKeeperLock on a real three-member etcd cluster and ZooKeeper ensemble.

The clusters are started once per session on free loopback ports (see
``tests/conftest.py``). Locally these tests skip with a reason when ``etcd`` or
ZooKeeper is absent; with ``LOCKGUIDE_REQUIRE_CONSENSUS=1`` (as ``.ci/run``
sets) their absence fails. The argument checks need no server.
"""

from __future__ import annotations

import itertools
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import fakeredis
import pytest

from lockguide import (
    AlreadyAcquired,
    BadArgument,
    BadArgumentType,
    ClusterUnavailable,
    FencedStore,
    LockLost,
    NotAcquired,
    NotOwned,
    SqlFencedStore,
    StaleToken,
    WrongOwner,
)
from lockguide.etcd import EtcdLock
from lockguide.fencing import MAX_TOKEN
from lockguide.zookeeper import ZooKeeperLock
from lockguide_lab.testbed.consensus import EtcdCluster, ZooKeeperEnsemble

_names = itertools.count()
Factory = Callable[..., Any]


def _fresh(prefix: str) -> str:
    return f"{prefix}{next(_names)}-{time.monotonic_ns()}"


@pytest.fixture(params=["etcd", "zookeeper"])
def make_lock(request: pytest.FixtureRequest) -> Iterator[Factory]:
    """A factory of locks on one fresh key, on the real etcd cluster or ZooKeeper ensemble."""
    if request.param == "etcd":
        cluster: EtcdCluster = request.getfixturevalue("etcd_cluster")
        key = _fresh("lock:test:")

        def etcd(**options: Any) -> EtcdLock:
            options.setdefault("ttl_ms", 2000)
            return EtcdLock(cluster.endpoints, key, **options)

        yield etcd
        return
    from kazoo.client import KazooClient

    ensemble: ZooKeeperEnsemble = request.getfixturevalue("zookeeper_ensemble")
    path = _fresh("/locks/test")
    clients: list[Any] = []

    def zookeeper(**options: Any) -> ZooKeeperLock:
        options.pop("ttl_ms", None)
        client = KazooClient(hosts=ensemble.hosts, timeout=2.0)
        client.start(timeout=10)
        clients.append(client)
        return ZooKeeperLock(client, path, **options)

    yield zookeeper
    for client in clients:
        client.stop()
        client.close()


pytestmark = pytest.mark.consensus


def test_one_holder_at_a_time_and_the_next_gets_a_higher_token(make_lock: Factory) -> None:
    a, b = make_lock(), make_lock(timeout_ms=300)
    assert a.acquire()
    assert not b.acquire()
    first = a.token
    a.release()
    assert b.acquire()
    assert b.token > first
    b.release()


def test_tokens_are_what_the_fenced_stores_accept(make_lock: Factory) -> None:
    """The tokens go into FencedStore and SqlFencedStore unchanged; the older is refused."""
    a, b = make_lock(), make_lock()
    redis_store = FencedStore(fakeredis.FakeRedis(), "ledger:balance")
    sql_store = SqlFencedStore(sqlite3.connect(":memory:"), "ledger")
    sql_store.setup()
    with a:
        old = a.token
        assert 1 <= old <= MAX_TOKEN
    with b:
        assert old < b.token <= MAX_TOKEN
        for store in (redis_store, sql_store):
            assert store.write(b.token, "new").accepted
            with pytest.raises(StaleToken):
                store.write(old, "late")
            assert store.read().value == "new"


def test_with_releases_and_refuses_when_taken(make_lock: Factory) -> None:
    a, b = make_lock(), make_lock(timeout_ms=200)
    with a:
        assert a.held
        with pytest.raises(NotAcquired):
            b.__enter__()
    assert not a.held
    with b:
        assert b.held


def test_misuse_gets_typed_errors(make_lock: Factory) -> None:
    a = make_lock()
    with pytest.raises(NotOwned):
        _ = a.token
    with pytest.raises(NotOwned):
        a.release()
    assert a.acquire()
    with pytest.raises(AlreadyAcquired):
        a.acquire()
    errors: list[BaseException] = []

    def other_thread() -> None:
        try:
            a.release()
        except BaseException as error:
            errors.append(error)

    thread = threading.Thread(target=other_thread)
    thread.start()
    thread.join()
    assert isinstance(errors[0], WrongOwner)
    a.check()
    a.release()


def test_etcd_keeps_the_lease_alive_past_its_ttl(etcd_cluster: EtcdCluster) -> None:
    key = _fresh("lock:test:")
    a = EtcdLock(etcd_cluster.endpoints, key, 1000)
    b = EtcdLock(etcd_cluster.endpoints, key, 1000, timeout_ms=1800)
    assert a.acquire()
    assert not b.acquire()  # 1.8 s: the 1 s lease was renewed
    a.check()
    assert not a.lost
    a.release()


def test_etcd_holder_sees_its_lease_revoked(etcd_cluster: EtcdCluster) -> None:
    """Someone revokes the lease (an operator, an expiry): the keep-alive flags it."""
    import urllib3

    a = EtcdLock(etcd_cluster.endpoints, _fresh("lock:test:"), 3000, keepalive_ms=100)
    assert a.acquire()
    urllib3.request("POST", etcd_cluster.endpoint(0) + "/v3/lease/revoke", json={"ID": a.lease_id})
    assert a.lost_event.wait(5)
    with pytest.raises(LockLost):
        a.check()
    with pytest.raises(LockLost):
        a.release()
    assert not a.held


def test_zookeeper_holder_sees_its_session_expire(zookeeper_ensemble: ZooKeeperEnsemble) -> None:
    """The session ends (here: closed under the lock); the lock says so, and release too."""
    from kazoo.client import KazooClient

    client = KazooClient(hosts=zookeeper_ensemble.hosts, timeout=2.0)
    client.start(timeout=10)
    a = ZooKeeperLock(client, _fresh("/locks/test"))
    assert a.acquire()
    client.stop()  # ends the session: the ensemble deletes the ephemeral node
    assert a.lost_event.wait(5)
    with pytest.raises(LockLost):
        a.check()
    with pytest.raises(LockLost):
        a.release()
    client.close()


def test_etcd_with_no_member_answering_is_cluster_unavailable() -> None:
    lock = EtcdLock("http://127.0.0.1:9", "lock:x", 1000, request_timeout_ms=100)
    with pytest.raises(ClusterUnavailable):
        lock.acquire(timeout_ms=200)


@pytest.mark.parametrize(
    ("args", "error"),
    [
        ((["http://127.0.0.1:2379"], "", 1000), BadArgument),
        ((["127.0.0.1:2379"], "k", 1000), BadArgument),
        (([], "k", 1000), BadArgument),
        ((["http://127.0.0.1:2379"], "k", 1500), BadArgument),
        ((["http://127.0.0.1:2379"], "k", 500), BadArgument),
        ((["http://127.0.0.1:2379"], "k", 1.5), BadArgumentType),
    ],
)
def test_etcd_refuses_bad_arguments(args: tuple[Any, ...], error: type[Exception]) -> None:
    with pytest.raises(error):
        EtcdLock(*args)


def test_zookeeper_refuses_bad_arguments() -> None:
    from kazoo.client import KazooClient

    with pytest.raises(BadArgumentType):
        ZooKeeperLock(object(), "/locks/x")
    client = KazooClient(hosts="127.0.0.1:9")  # never started: the checks come first
    for path in ("", "locks/x", "/locks/x/", "/locks//x"):
        with pytest.raises(BadArgument):
            ZooKeeperLock(client, path)
