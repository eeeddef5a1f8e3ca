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
from lockguide_lab.testbed.consensus import EtcdCluster, HttpLink, ZooKeeperEnsemble
from lockguide_lab.testbed.link import Link
from lockguide_lab.testbed.process import LOOPBACK
from tests.ownership import Worker, a_forked_child_does_nothing, outcome_in_a_thread

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


def test_one_try_takes_a_free_lock_and_refuses_a_held_one(make_lock: Factory) -> None:
    """``blocking=False`` on a key nobody has used yet: one try, with time for its requests."""
    a, b = make_lock(), make_lock()
    assert a.acquire(blocking=False)
    assert not b.acquire(blocking=False)
    a.release()
    assert b.acquire(blocking=False)
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
    assert isinstance(outcome_in_a_thread(a.release), WrongOwner)
    a.check()
    a.release()


def test_hand_over_moves_the_lock_to_another_thread(make_lock: Factory) -> None:
    """The Redis locks' rule: after ``hand_over`` only the named thread may use the lock."""
    a = make_lock()
    assert a.acquire()

    def worker() -> None:
        a.check()
        a.release()

    thread = Worker(worker)
    a.hand_over(thread)
    with pytest.raises(WrongOwner):
        a.check()  # the hand-over is complete: the old owner may not
    thread.start()
    thread.join()
    assert thread.outcomes == [None]
    assert not a.held
    b = make_lock()
    assert b.acquire(blocking=False)  # the release reached the cluster
    b.release()


def test_owner_process_lets_any_thread_of_the_process_release(make_lock: Factory) -> None:
    a = make_lock(owner="process")
    assert a.acquire()

    def other_thread() -> None:
        a.check()
        a.release()

    assert outcome_in_a_thread(other_thread) is None
    assert not a.held
    with pytest.raises(BadArgument):
        make_lock(owner="task")  # an asyncio owner: not for a thread-driven lock


def test_a_forked_child_sees_the_lock_not_held_and_sends_nothing(make_lock: Factory) -> None:
    """In a forked child the lock is not held; release, check and token raise NotOwned."""
    a = make_lock()
    assert a.acquire()
    a_forked_child_does_nothing(a, (a.release, a.check, lambda: a.token))
    assert a.held
    a.check()
    b = make_lock()
    assert not b.acquire(blocking=False), "the child released the parent's lock"
    a.release()
    assert b.acquire(blocking=False)
    b.release()


def test_etcd_keeps_the_lease_alive_past_its_ttl(etcd_cluster: EtcdCluster) -> None:
    key = _fresh("lock:test:")
    a = EtcdLock(etcd_cluster.endpoints, key, ttl_ms=1000)
    b = EtcdLock(etcd_cluster.endpoints, key, ttl_ms=1000, timeout_ms=1800)
    assert a.acquire()
    assert not b.acquire()  # 1.8 s: the 1 s lease was renewed
    a.check()
    assert not a.lost
    a.release()


def test_etcd_holder_sees_its_lease_revoked(etcd_cluster: EtcdCluster) -> None:
    """Someone revokes the lease (an operator, an expiry): the keep-alive flags it."""
    import urllib3

    a = EtcdLock(etcd_cluster.endpoints, _fresh("lock:test:"), ttl_ms=3000, keepalive_ms=100)
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
    """The wait runs out with nobody answering: False and the last error; ``with`` raises."""
    lock = EtcdLock(
        "http://127.0.0.1:9", "lock:x", ttl_ms=1000, request_timeout_ms=100, timeout_ms=300
    )
    started = time.monotonic()
    assert lock.acquire() is False
    assert time.monotonic() - started < 2.0  # the total deadline bounds every request
    assert isinstance(lock.last_error, OSError)
    with pytest.raises(ClusterUnavailable) as caught, lock:
        pass
    assert caught.value.__cause__ is lock.last_error


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
    endpoints, key, ttl_ms = args
    with pytest.raises(error):
        EtcdLock(endpoints, key, ttl_ms=ttl_ms)


def test_etcd_ttl_is_keyword_only() -> None:
    with pytest.raises(TypeError):
        EtcdLock("http://127.0.0.1:2379", "k", 1000)  # type: ignore[call-arg]


def test_zookeeper_refuses_bad_arguments() -> None:
    from kazoo.client import KazooClient

    with pytest.raises(BadArgumentType):
        ZooKeeperLock(object(), "/locks/x")
    client = KazooClient(hosts="127.0.0.1:9")  # never started: the checks come first
    for path in ("", "locks/x", "/locks/x/", "/locks//x"):
        with pytest.raises(BadArgument):
            ZooKeeperLock(client, path)


def test_etcd_waiter_that_outwaits_the_ttl_acquires_when_the_holder_releases(
    etcd_cluster: EtcdCluster,
) -> None:
    """B waits three TTLs for A: it gets the lock as soon as A releases, on a lease of its own.

    A waiter's first lease ends after one TTL while it waits; every attempt after that
    must still be able to win (a lease granted for it, a deadline and token from it).
    """
    key = _fresh("lock:test:")
    a = EtcdLock(etcd_cluster.endpoints, key, ttl_ms=1000)
    seen: dict[str, Any] = {}

    def waiter() -> None:
        b = EtcdLock(etcd_cluster.endpoints, key, ttl_ms=1000)
        seen["got"] = b.acquire(timeout_ms=10_000)
        seen["at"] = time.monotonic()
        if seen["got"]:
            seen["left_ms"] = b.validity_remaining_ms()
            seen["token"] = b.token
            b.check()
            b.release()

    assert a.acquire()
    first = a.token
    thread = threading.Thread(target=waiter)
    thread.start()
    time.sleep(3.0)  # three of the waiter's TTLs
    released = time.monotonic()
    a.release()
    thread.join(15)
    assert seen.get("got") is True, seen
    assert seen["at"] - released < 1.0  # it did not wait for its timeout
    assert seen["left_ms"] > 500  # the deadline of the lease that won, not of an old one
    assert seen["token"] > first


def test_zookeeper_create_whose_reply_is_lost_leaves_no_orphan(
    zookeeper_ensemble: ZooKeeperEnsemble,
) -> None:
    """The ensemble performs A's create, but its reply comes after A stopped waiting.

    The node exists in A's session. It must not block B (another session) or A
    itself: A finds it again (its own prefix) or it is deleted once the ensemble answers.
    """
    from kazoo.client import KazooClient

    member = zookeeper_ensemble.members[0]
    link = Link((LOOPBACK, member.client_port))
    path = _fresh("/locks/test")
    host, port = link.address
    a_client = KazooClient(hosts=f"{host}:{port}", timeout=4.0)
    b_client = KazooClient(hosts=zookeeper_ensemble.hosts, timeout=4.0)
    try:
        for client in (a_client, b_client):
            client.start(timeout=10)
        b_client.ensure_path(path)
        session = a_client.client_id
        a = ZooKeeperLock(a_client, path, request_timeout_ms=300)
        b = ZooKeeperLock(b_client, path)
        link.reply_delay_s = 1.0  # every reply reaches A after A's 300 ms wait for it
        try:
            got = a.acquire(timeout_ms=1000)
        except ClusterUnavailable:  # today's code gives up on the unanswered create
            got = False
        link.reply_delay_s = 0.0
        assert not got
        # A's session lives on, so nothing expired the node. (Its connection may have been
        # dropped meanwhile, replies a second late each; kazoo resumes the same session.)
        deadline = time.monotonic() + 5
        while not a_client.connected and time.monotonic() < deadline:
            time.sleep(0.05)
        assert a_client.connected
        assert a_client.client_id == session
        assert b.acquire(timeout_ms=4000), b_client.get_children(path)
        b.release()
        assert a.acquire(timeout_ms=4000), b_client.get_children(path)
        a.release()
        deadline = time.monotonic() + 4
        while b_client.get_children(path) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert b_client.get_children(path) == []
    finally:
        for client in (a_client, b_client):
            client.stop()
            client.close()
        link.close()


def test_etcd_transaction_whose_reply_is_lost_is_recognised(etcd_cluster: EtcdCluster) -> None:
    """The cluster creates A's key, the reply never reaches A: A holds it, on that lease."""
    key = _fresh("lock:test:")
    with HttpLink(etcd_cluster.endpoint(0)) as link:
        a = EtcdLock([link.url], key, ttl_ms=2000, timeout_ms=3000)
        b = EtcdLock(etcd_cluster.endpoints, key, ttl_ms=2000, timeout_ms=200)
        link.lose("/v3/kv/txn")
        assert a.acquire()
        assert [path for path, _ in link.lost] == ["/v3/kv/txn"]
        assert not b.acquire()
        assert etcd_cluster.key_exists(key)
        a.check()
        a.release()
        assert not etcd_cluster.key_exists(key)
        assert b.acquire()
        b.release()


def test_etcd_refusal_no_retry_can_fix_raises_at_once() -> None:
    """A member that answers PERMISSION_DENIED (code 7): no retrying until the deadline."""
    import http.server

    from lockguide.etcd import EtcdError

    class Refuses(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            body = b'{"error": "permission denied", "code": 7, "message": "permission denied"}'
            self.send_response(403)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            return

    server = http.server.ThreadingHTTPServer((LOOPBACK, 0), Refuses)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        lock = EtcdLock(
            f"http://{LOOPBACK}:{server.server_address[1]}", "lock:x", ttl_ms=1000, timeout_ms=5000
        )
        started = time.monotonic()
        with pytest.raises(EtcdError) as caught:
            lock.acquire()
        assert time.monotonic() - started < 1.0
        assert caught.value.code == 7
    finally:
        server.shutdown()
        server.server_close()


def test_zookeeper_finds_its_own_node_after_a_create_whose_reply_was_late(
    zookeeper_ensemble: ZooKeeperEnsemble,
) -> None:
    """The create's reply misses A's wait, the ensemble answers again: A holds with that node."""
    from kazoo.client import KazooClient

    link = Link((LOOPBACK, zookeeper_ensemble.members[1].client_port))
    host, port = link.address
    client = KazooClient(hosts=f"{host}:{port}", timeout=4.0)
    path = _fresh("/locks/test")
    try:
        client.start(timeout=10)
        client.ensure_path(path)
        a = ZooKeeperLock(client, path, request_timeout_ms=300)
        link.reply_delay_s = 0.8  # the create's reply comes after A's 300 ms wait
        timer = threading.Timer(0.5, lambda: setattr(link, "reply_delay_s", 0.0))
        timer.start()
        assert a.acquire(timeout_ms=5000)
        timer.join()
        node = a.node
        assert node is not None
        assert client.get_children(path) == [node.rsplit("/", 1)[1]]
        stat = client.exists(node)
        assert stat is not None
        assert a.token == stat.czxid
        a.release()
        assert client.get_children(path) == []
    finally:
        client.stop()
        client.close()
        link.close()


# -- lock-delay (Chubby's): after a lease ends without a release ----------------------------

DELAY_MS = 2000  # a whole number of seconds, as etcd's leases are


@pytest.fixture(params=["etcd", "zookeeper"])
def delayed(request: pytest.FixtureRequest) -> Iterator[tuple[Factory, Callable[[Any], None]]]:
    """Locks with a lock-delay on one fresh key, and a way to end a holder's lease unreleased.

    etcd: the lease is revoked from outside (as its expiry does, the key goes with it).
    ZooKeeper: the holder's session ends (its client stops), so the ensemble deletes the node.
    """
    if request.param == "etcd":
        import urllib3

        cluster: EtcdCluster = request.getfixturevalue("etcd_cluster")
        key = _fresh("lock:delay:")

        def etcd(**options: Any) -> EtcdLock:
            options.setdefault("lock_delay_ms", DELAY_MS)
            return EtcdLock(cluster.endpoints, key, ttl_ms=2000, **options)

        def revoke(lock: Any) -> None:
            reply = urllib3.request(
                "POST", cluster.endpoint(0) + "/v3/lease/revoke", json={"ID": lock.lease_id}
            )
            assert reply.status == 200

        yield etcd, revoke
        return
    from kazoo.client import KazooClient

    ensemble: ZooKeeperEnsemble = request.getfixturevalue("zookeeper_ensemble")
    path = _fresh("/locks/delay")
    clients: dict[int, Any] = {}

    def zookeeper(**options: Any) -> ZooKeeperLock:
        options.setdefault("lock_delay_ms", DELAY_MS)
        client = KazooClient(hosts=ensemble.hosts, timeout=2.0)
        client.start(timeout=10)
        lock = ZooKeeperLock(client, path, **options)
        clients[id(lock)] = client
        return lock

    def end_session(lock: Any) -> None:
        clients[id(lock)].stop()  # the session ends without the lock's release

    yield zookeeper, end_session
    for client in clients.values():
        client.stop()
        client.close()


def test_after_a_lease_lost_without_release_the_next_grant_waits_the_delay(
    delayed: tuple[Factory, Callable[[Any], None]],
) -> None:
    make, lose = delayed
    a, b = make(), make()
    assert a.acquire()
    first = a.token
    lost_at = time.monotonic()
    lose(a)
    assert b.acquire(timeout_ms=DELAY_MS + 5000)
    waited = time.monotonic() - lost_at
    assert waited >= DELAY_MS / 1000, f"granted {waited:.3f} s after the loss"
    assert waited < DELAY_MS / 1000 + 3.0  # the delay, not the timeout
    assert b.token > first
    b.release()


def test_after_a_clean_release_the_next_grant_does_not_wait(
    delayed: tuple[Factory, Callable[[Any], None]],
) -> None:
    make, _ = delayed
    a, b = make(), make()
    for _ in range(2):  # the second round: after a grant that itself followed a release
        assert a.acquire()
        a.release()
        started = time.monotonic()
        assert b.acquire(timeout_ms=DELAY_MS + 5000)
        assert time.monotonic() - started < 0.5
        b.release()


def test_the_deadline_holds_during_a_lock_delay(
    delayed: tuple[Factory, Callable[[Any], None]],
) -> None:
    """Acquires whose wait ends before the delay: False (``with``: NotAcquired) on time.

    Their giving up does not restart the delay: a patient acquirer is granted one
    delay after the loss, not one delay after the last of them gave up.
    """
    make, lose = delayed
    a, b, c = make(), make(), make(timeout_ms=300)
    assert a.acquire()
    lost_at = time.monotonic()
    lose(a)
    assert not b.acquire(blocking=False)
    started = time.monotonic()
    with pytest.raises(NotAcquired), c:
        pass
    assert time.monotonic() - started < 0.3 + 0.3
    while time.monotonic() - lost_at < DELAY_MS / 1000 - 0.4:
        started = time.monotonic()
        assert not b.acquire(timeout_ms=300)
        assert time.monotonic() - started < 0.3 + 0.3
        time.sleep(0.05)
    assert b.acquire(timeout_ms=DELAY_MS + 5000)
    waited = time.monotonic() - lost_at
    assert DELAY_MS / 1000 <= waited < DELAY_MS / 1000 + 1.0, f"granted after {waited:.3f} s"
    b.release()


@pytest.mark.parametrize(
    ("delay", "error"),
    [
        (60_001, BadArgument),
        (-1, BadArgument),
        (float("inf"), BadArgument),
        ("1s", BadArgumentType),
    ],
)
def test_lock_delay_is_bounded_and_checked_before_any_request(
    delay: Any, error: type[Exception]
) -> None:
    from kazoo.client import KazooClient

    with pytest.raises(error):
        EtcdLock("http://127.0.0.1:9", "lock:x", ttl_ms=1000, lock_delay_ms=delay)
    with pytest.raises(error):
        ZooKeeperLock(KazooClient(hosts="127.0.0.1:9"), "/locks/x", lock_delay_ms=delay)
    with pytest.raises(BadArgument):  # etcd times it on a lease: whole seconds
        EtcdLock("http://127.0.0.1:9", "lock:x", ttl_ms=1000, lock_delay_ms=1500)
    assert ZooKeeperLock(KazooClient(hosts="127.0.0.1:9"), "/locks/x", lock_delay_ms=60_000)


@pytest.mark.parametrize("system", ["etcd", "zookeeper"])
def test_a_holder_cut_off_until_its_lease_expires_delays_the_next_grant(
    system: str, request: pytest.FixtureRequest
) -> None:
    """A's link to the cluster is cut: its lease (etcd) or session (ZooKeeper) expires there.

    B starts as soon as A's key or node is seen gone, and is granted no earlier than the
    delay after that: the loss came before it was seen, so at least the delay after the loss.
    """
    from kazoo.client import KazooClient

    clients: list[Any] = []
    if system == "etcd":
        cluster: EtcdCluster = request.getfixturevalue("etcd_cluster")
        key = _fresh("lock:delay:")
        host, port = cluster.endpoint(0).removeprefix("http://").split(":")
        link = Link((host, int(port)))
        a: Any = EtcdLock(
            f"http://{link.address[0]}:{link.address[1]}",
            key,
            ttl_ms=2000,
            lock_delay_ms=DELAY_MS,
            request_timeout_ms=200,
        )
        b: Any = EtcdLock(cluster.endpoints, key, ttl_ms=2000, lock_delay_ms=DELAY_MS)

        def a_is_gone() -> bool:
            return not cluster.key_exists(key)

    else:
        ensemble: ZooKeeperEnsemble = request.getfixturevalue("zookeeper_ensemble")
        path = _fresh("/locks/delay")
        link = Link((LOOPBACK, ensemble.members[0].client_port))
        a_client = KazooClient(hosts=f"{link.address[0]}:{link.address[1]}", timeout=2.0)
        b_client = KazooClient(hosts=ensemble.hosts, timeout=2.0)
        clients += [a_client, b_client]
        for client in clients:
            client.start(timeout=10)
        a = ZooKeeperLock(a_client, path, lock_delay_ms=DELAY_MS)
        b = ZooKeeperLock(b_client, path, lock_delay_ms=DELAY_MS)

        def a_is_gone() -> bool:
            return b_client.exists(a.node) is None

    try:
        assert a.acquire()
        link.cut()
        deadline = time.monotonic() + 10
        while not a_is_gone():
            assert time.monotonic() < deadline, "A's lease never ended"
            time.sleep(0.02)
        gone_at = time.monotonic()
        assert b.acquire(timeout_ms=DELAY_MS + 5000)
        waited = time.monotonic() - gone_at
        assert DELAY_MS / 1000 <= waited < DELAY_MS / 1000 + 1.5, f"granted after {waited:.3f} s"
        b.release()
    finally:
        link.close()
        for client in clients:
            client.stop()
            client.close()


def test_zookeeper_waiter_whose_node_goes_during_the_delay_starts_again(
    zookeeper_ensemble: ZooKeeperEnsemble,
) -> None:
    """B serves the delay at the front; its node is deleted meanwhile (as by its session's
    end). B makes a new node and is granted when the same delay ends, not an error."""
    from kazoo.client import KazooClient

    path = _fresh("/locks/delay")
    clients = [KazooClient(hosts=zookeeper_ensemble.hosts, timeout=2.0) for _ in range(3)]
    for client in clients:
        client.start(timeout=10)
    a_client, b_client, eyes = clients
    try:
        a = ZooKeeperLock(a_client, path, lock_delay_ms=DELAY_MS)
        b = ZooKeeperLock(b_client, path, lock_delay_ms=DELAY_MS, owner="process")
        assert a.acquire()
        a_client.stop()  # A's session ends without a release
        lost_at = time.monotonic()
        outcome: dict[str, Any] = {}

        def wait_for_it() -> None:
            try:
                outcome["got"] = b.acquire(timeout_ms=DELAY_MS + 5000)
            except Exception as error:  # the test reports it
                outcome["got"] = error
            outcome["at"] = time.monotonic()

        thread = threading.Thread(target=wait_for_it)
        thread.start()
        deadline = time.monotonic() + 5
        while not eyes.get_children(path):
            assert time.monotonic() < deadline
            time.sleep(0.02)
        time.sleep(0.5)  # B is at the front, serving the delay
        for child in eyes.get_children(path):
            eyes.delete(f"{path}/{child}")
        thread.join(15)
        assert outcome.get("got") is True, outcome
        waited = outcome["at"] - lost_at
        assert DELAY_MS / 1000 <= waited < DELAY_MS / 1000 + 1.0, f"granted after {waited:.3f} s"
        b.release()
    finally:
        for client in clients:
            client.stop()
            client.close()
