"""The locks on the Redis deployments and client settings readers have.

Real servers only: the standalone servers of the session, a primary and replica
behind three Sentinels, and a three-master Redis Cluster (see tests/conftest.py).

* One flow (acquire, a second holder refused, extend, release) for ``Lock``,
  ``Redlock`` and ``FencedLock`` over every client configuration: the matrix.
* The ACL rule the guide prints is enough for every lock, and no command in it
  can be dropped.
* Failover: ``Lock`` follows a Sentinel failover; a write held back from the
  replica is lost when the primary dies, on Sentinel and on the cluster, so a
  second client gets the lock (broken), and a fenced store refuses the first
  holder's late write (fixed). ``WAIT`` shown for what it does and does not do.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, cast

import pytest
import redis
from redis.cluster import RedisCluster
from redis.sentinel import Sentinel

from lockguide import BadArgument, FencedLock, FencedStore, Lock, LockLost, Redlock, StaleToken
from lockguide_lab.testbed import RedisServer
from lockguide_lab.testbed.deployments import (
    ClusterDeployment,
    SentinelDeployment,
    crash_before_replication,
    hold_back_replication,
)
from tests.support import enable_tls, make_tls_certificate

pytestmark = pytest.mark.real_redis

KEY = "lock:matrix"
SERVER_PASSWORD = "the-servers-password"
TTL_MS = 10_000

#: Exactly what the locks send, and what their scripts call (see docs/your-redis.md).
LOCK_COMMANDS: tuple[str, ...] = ("set", "get", "exists", "del", "pexpire", "incr", "evalsha")
LOCK_COMMANDS += ("script|load", "lpop", "getdel", "rpush", "blpop")
LOCK_KEYS = ("~lock:*", "~{lock:*}:*")
LOCK_ACL = " ".join(
    ["resetkeys", *LOCK_KEYS, "resetchannels", "-@all", *(f"+{c}" for c in LOCK_COMMANDS)]
)
ACL_USER, ACL_PASSWORD = "locker", "locker-secret-1"


def master_for(sentinel: Sentinel, service: str) -> redis.Redis:
    """``sentinel.master_for(service)``, typed (redis-py leaves it unannotated)."""
    return cast(redis.Redis, sentinel.master_for(service))  # type: ignore[no-untyped-call]


def slot(client: RedisCluster, key: str) -> int:
    """The hash slot of ``key``, typed."""
    return int(client.keyslot(key))  # type: ignore[no-untyped-call]


# -- the setups -------------------------------------------------------------------------


@dataclass
class Setup:
    """Clients for one configuration: ``clients(n)`` reaches n distinct masters."""

    clients: Callable[[int], list[Any]]
    redlock_refusal: str | None = None


@pytest.fixture(scope="module")
def standalone(
    redis_server: RedisServer, redis_masters: list[RedisServer]
) -> Iterator[list[RedisServer]]:
    servers = [redis_server, *redis_masters[:2]]
    yield servers
    for server in servers:
        with server.admin() as admin:
            admin.acl_deluser(ACL_USER)


@pytest.fixture(scope="module")
def tls_ports(
    standalone: list[RedisServer], tmp_path_factory: pytest.TempPathFactory
) -> tuple[list[int], Path]:
    cert, key = make_tls_certificate(tmp_path_factory.mktemp("tls"))
    return [enable_tls(server, cert, key) for server in standalone], cert


@pytest.fixture
def server_password(standalone: list[RedisServer]) -> Iterator[str]:
    """``requirepass`` on the standalone servers, for one test only."""
    for server in standalone:
        with server.admin() as admin:
            admin.config_set("requirepass", SERVER_PASSWORD)
    yield SERVER_PASSWORD
    for server in standalone:
        with server.client(password=SERVER_PASSWORD) as admin:
            admin.config_set("requirepass", "")


def _acl_on(servers: list[RedisServer], rule: str) -> None:
    for server in servers:
        with server.admin() as admin:
            admin.execute_command("ACL", "SETUSER", ACL_USER, "reset", "on", f">{ACL_PASSWORD}")
            admin.execute_command("ACL", "SETUSER", ACL_USER, *rule.split())


SETUPS = [
    "decode_responses",
    "resp3",
    "unix_socket",
    "acl_user",
    "password",
    "tls",
    "db3",
    "from_url",
    "blocking_pool",
    "own_pool",
    "sentinel",
    "cluster",
]


@pytest.fixture(params=SETUPS)
def setup(request: pytest.FixtureRequest, standalone: list[RedisServer]) -> Setup:
    name = request.param
    for server in standalone:
        with server.admin() as admin:
            admin.flushall()
    if name == "sentinel":
        deployment: SentinelDeployment = request.getfixturevalue("sentinel_deployment")
        sentinel = deployment.sentinel()
        services = ["mymaster", "solo-1", "solo-2"]
        for service in services:
            master_for(sentinel, service).flushall()
        return Setup(lambda n: [master_for(sentinel, s) for s in services[:n]])
    if name == "cluster":
        cluster: ClusterDeployment = request.getfixturevalue("redis_cluster")
        client = cluster.client()
        client.flushall()
        return Setup(
            lambda n: [client] if n == 1 else [m.client() for m in _masters(cluster)][:n],
            redlock_refusal="not independent",
        )
    if name == "tls":
        ports, cert = request.getfixturevalue("tls_ports")
        return Setup(
            lambda n: [
                redis.Redis(port=p, ssl=True, ssl_ca_certs=str(cert), socket_timeout=5)
                for p in ports[:n]
            ]
        )
    if name == "acl_user":
        _acl_on(standalone, LOCK_ACL)
    if name == "password":
        request.getfixturevalue("server_password")
    make: dict[str, Callable[[RedisServer], redis.Redis]] = {
        "decode_responses": lambda s: s.client(decode_responses=True),
        "resp3": lambda s: s.client(protocol=3),
        "unix_socket": lambda s: redis.Redis(unix_socket_path=s.unixsocket, socket_timeout=5),
        "acl_user": lambda s: s.client(username=ACL_USER, password=ACL_PASSWORD),
        "password": lambda s: s.client(password=SERVER_PASSWORD),
        "db3": lambda s: s.client(db=3),
        "from_url": lambda s: redis.Redis.from_url(f"redis://{s.host}:{s.port}/2"),
        "own_pool": lambda s: redis.Redis(
            connection_pool=redis.ConnectionPool(host=s.host, port=s.port, max_connections=4)
        ),
        "blocking_pool": lambda s: redis.Redis(
            connection_pool=redis.BlockingConnectionPool(  # type: ignore[no-untyped-call]
                host=s.host, port=s.port, max_connections=2, timeout=1
            )
        ),
    }
    return Setup(lambda n: [make[name](s) for s in standalone[:n]])


def _masters(cluster: ClusterDeployment) -> list[RedisServer]:
    with cluster.client() as client:
        ports = {int(node.port) for node in client.get_primaries()}
    return [node for node in cluster.nodes if node.port in ports]


# -- the flow -----------------------------------------------------------------------------

LOCKS = ["Lock", "Redlock", "FencedLock"]


def _make(kind: str, clients: list[Any]) -> Lock | Redlock:
    if kind == "Redlock":  # (a cold TLS handshake on a busy machine can take 200 ms: the
        # node timeout covers connecting, so give it room)
        return Redlock(clients, KEY, ttl_ms=TTL_MS, node_timeout_ms=1_000)
    lock_class = FencedLock if kind == "FencedLock" else Lock
    return lock_class(clients[0], KEY, ttl_ms=TTL_MS)


@pytest.mark.parametrize("kind", LOCKS)
def test_acquire_refuse_extend_release(setup: Setup, kind: str) -> None:
    """acquire -> a second holder refused -> extend -> release, then the second gets in."""
    count = 3 if kind == "Redlock" else 1
    if kind == "Redlock" and setup.redlock_refusal is not None:
        with pytest.raises(BadArgument, match=setup.redlock_refusal):
            Redlock(setup.clients(1) * 3, KEY, ttl_ms=TTL_MS)  # the RedisCluster client itself
        nodes = Redlock(setup.clients(count), KEY, ttl_ms=TTL_MS, node_timeout_ms=200)
        with pytest.raises(BadArgument, match=setup.redlock_refusal):
            nodes.acquire(blocking=False)  # its masters' clients: the others answer MOVED
        return
    first, second = _make(kind, setup.clients(count)), _make(kind, setup.clients(count))
    assert first.acquire(blocking=False)
    first_token = first.token if isinstance(first, FencedLock) else 0
    assert first.owned()
    assert first.locked()
    assert not second.acquire(blocking=False)
    first.extend(TTL_MS * 2)
    assert first.owned()
    first.release()
    assert not first.locked()
    assert second.acquire(blocking=False)
    if isinstance(second, FencedLock):
        assert second.token == first_token + 1
    second.release()


@pytest.mark.parametrize("kind", LOCKS)
def test_eight_threads_sharing_one_client_never_overlap(
    standalone: list[RedisServer], kind: str
) -> None:
    """Eight threads, one client per server, each thread with lock objects of its own."""
    clients = [server.client() for server in standalone]
    for client in clients:
        client.flushall()
    inside: list[int] = []
    overlaps: list[int] = []
    done: list[int] = []
    mutex = threading.Lock()

    def worker(number: int) -> None:
        for _ in range(5):
            lock = _make(kind, clients if kind == "Redlock" else clients[:1])
            assert lock.acquire(timeout_ms=20_000)
            with mutex:
                inside.append(number)
                if len(inside) > 1:
                    overlaps.append(number)
            time.sleep(0.002)
            with mutex:
                inside.remove(number)
            lock.release()
        done.append(number)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert sorted(done) == list(range(8)), "every thread got the lock five times"
    assert overlaps == [], "no two threads ever held it at once"


@pytest.mark.parametrize("kind", LOCKS)
def test_a_forked_child_locks_with_its_parents_client(
    standalone: list[RedisServer], kind: str
) -> None:
    """After fork the child locks with its parent's client, and the parent still does."""
    clients = [server.client() for server in standalone]
    for client in clients:
        client.flushall()
    servers = clients if kind == "Redlock" else clients[:1]
    warm = _make(kind, servers)  # the parent has connections open and kept
    assert warm.acquire(blocking=False)
    warm.release()
    pid = os.fork()
    if pid == 0:  # the child: exit 0 only if it locked and unlocked on its own connections
        code = 1
        try:
            child = _make(kind, servers)
            if child.acquire(blocking=False):
                child.release()
                code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    again = _make(kind, servers)  # and the parent's kept connections still answer right
    assert again.acquire(blocking=False)
    again.release()


# -- the ACL rule --------------------------------------------------------------------------


def _every_lock_works(client: redis.Redis) -> None:
    for make in (partial(Lock, client, KEY), partial(FencedLock, client, "lock:fenced")):
        lock = make(ttl_ms=TTL_MS)
        assert lock.acquire(blocking=False)
        assert lock.locked()
        assert lock.owned()
        lock.extend()
        waiter = make(ttl_ms=TTL_MS, retry_delay_ms=(200, 300), owner="process")
        got: list[bool | BaseException] = []
        thread = threading.Thread(target=_acquire_into, args=(waiter, got))
        thread.start()
        try:
            time.sleep(0.05)  # the waiter is in line, blocked on its wake-up
            lock.release()  # hands the key over and wakes it
        finally:  # a waiter left trying would take the next round's key
            thread.join(5)
        if isinstance(got[0], BaseException):
            raise got[0]
        assert got == [True]
        waiter.release()


def _acquire_into(lock: Lock, got: list[bool | BaseException]) -> None:
    try:
        got.append(lock.acquire(timeout_ms=2_000))
    except BaseException as error:
        got.append(error)


def test_the_acl_rule_is_enough_and_each_part_is_needed(standalone: list[RedisServer]) -> None:
    server = standalone[0]
    with server.admin() as admin:
        admin.script_flush()  # so that SCRIPT LOAD is exercised too
    _acl_on([server], LOCK_ACL)
    _every_lock_works(server.client(username=ACL_USER, password=ACL_PASSWORD))
    for part in [*LOCK_KEYS, *(f"+{c}" for c in LOCK_COMMANDS)]:
        with server.admin() as admin:
            admin.script_flush()
            admin.flushall()  # a lock the last round could not release
        _acl_on([server], " ".join(word for word in LOCK_ACL.split() if word != part))
        client = server.client(username=ACL_USER, password=ACL_PASSWORD)
        # NOPERM for a command sent; "can't run" or "can't access" for a command or a key
        # a script reaches
        with pytest.raises(
            redis.exceptions.ResponseError, match=r"permissions|can.t run|can.t access"
        ):
            _every_lock_works(client)
    with server.admin() as admin:
        admin.acl_deluser(ACL_USER)
        admin.flushall()


def test_the_guide_prints_the_acl_rule() -> None:
    page = (Path(__file__).parents[2] / "docs" / "your-redis.md").read_text("utf-8")
    assert LOCK_ACL in page


# -- Sentinel ------------------------------------------------------------------------------


@contextlib.contextmanager
def healed(deployment: SentinelDeployment | ClusterDeployment) -> Iterator[None]:
    try:
        yield
    finally:
        deployment.heal()


def test_lock_on_a_sentinel_master_follows_a_failover(
    sentinel_deployment: SentinelDeployment,
) -> None:
    sentinel = sentinel_deployment.sentinel()
    old = sentinel_deployment.primary()
    # --8<-- [start:sentinel-follows]
    a = Lock(master_for(sentinel, "mymaster"), "lock:follow", ttl_ms=TTL_MS)
    assert a.acquire(blocking=False)
    with healed(sentinel_deployment):
        new = sentinel_deployment.fail_over()  # graceful: the replica is in sync first
    assert new is not old
    b = Lock(master_for(sentinel, "mymaster"), "lock:follow", ttl_ms=TTL_MS)
    assert not b.acquire(blocking=False)  # the key came along, on the new primary
    # A's open connection still reaches the old primary, now a replica, which refuses the
    # release (redis-py reports ConnectionError and drops the connection). The release is
    # asked again on a new connection: the Sentinel pool finds the new primary there.
    a.release()
    assert not a.held
    assert b.acquire(blocking=False)
    with new.admin() as admin:
        assert admin.exists("lock:follow") == 1
    b.release()
    # --8<-- [end:sentinel-follows]


def test_sentinel_failover_before_replication_gives_the_lock_twice(
    sentinel_deployment: SentinelDeployment, redis_server: RedisServer
) -> None:
    """Broken: a plain Lock held by A and B at once. Fixed: the store refuses A's write."""
    deployment = sentinel_deployment
    sentinel = deployment.sentinel()
    primary, replica = deployment.primary(), deployment.replica()
    store = FencedStore(redis_server.client(), "ledger:balance")
    redis_server.client().delete("ledger:balance")
    with healed(deployment):
        # --8<-- [start:sentinel-failover]
        a_client = master_for(sentinel, "mymaster")
        a_plain, a_fenced = (
            Lock(a_client, "lock:p", ttl_ms=TTL_MS),
            FencedLock(a_client, "lock:f", ttl_ms=TTL_MS),
        )
        hold_back_replication(primary, replica)
        assert a_plain.acquire(blocking=False)
        assert a_fenced.acquire(blocking=False)
        crash_before_replication(primary, replica)
        deployment.wait_for_new_primary(primary)
        b_client = master_for(deployment.sentinel(), "mymaster")
        b_plain, b_fenced = (
            Lock(b_client, "lock:p", ttl_ms=TTL_MS),
            FencedLock(b_client, "lock:f", ttl_ms=TTL_MS),
        )
        # Broken: the promoted replica never had A's key, so B gets the lock A holds.
        assert b_plain.acquire(blocking=False)
        assert a_plain.held
        assert b_plain.held
        # Fixed: B's token is A's again (the counter's increment was lost too), and the
        # store accepts a token only if it beats every one it accepted: A's late write fails.
        assert b_fenced.acquire(blocking=False)
        assert b_fenced.token == a_fenced.token
        store.write(b_fenced.token, "written by B")
        with pytest.raises(StaleToken):
            store.write(a_fenced.token, "written by A, who no longer holds the lock")
        assert store.read().value == "written by B"
        # --8<-- [end:sentinel-failover]


def _write_then_wait(client: redis.Redis, timeout_ms: int) -> int:
    """A write, then ``WAIT 1 timeout_ms``, on one connection: WAIT covers that connection's
    writes, and so every write before it in the replication stream, the lock's SET included."""
    with client.pipeline(transaction=False) as pipe:
        pipe.set("lock:wait:marker", 1)
        pipe.wait(1, timeout_ms)
        return int(pipe.execute()[1])


def test_wait_counts_replicas_that_have_the_writes_and_promises_nothing_more(
    sentinel_deployment: SentinelDeployment,
) -> None:
    deployment = sentinel_deployment
    deployment.wait_ready()
    client = master_for(deployment.sentinel(), "mymaster")
    lock = Lock(client, "lock:wait", ttl_ms=TTL_MS)
    assert lock.acquire(blocking=False)
    assert _write_then_wait(client, 5000) == 1  # the replica has the key (at once, here)
    lock.release()
    primary, replica = deployment.primary(), deployment.replica()
    with healed(deployment):
        hold_back_replication(primary, replica)
        assert lock.acquire(blocking=False)
        assert _write_then_wait(client, 100) == 0  # nobody has it after 100 ms...
        assert lock.held
        assert lock.owned()
        replica.thaw()


# -- Redis Cluster -------------------------------------------------------------------------


def test_cluster_failover_before_replication_gives_the_lock_twice(
    redis_cluster: ClusterDeployment, redis_server: RedisServer
) -> None:
    cluster = redis_cluster
    key, fenced_key = "lock:{ledger}", "lock:{ledger}:fenced"  # one slot, one master
    master = cluster.master_of(key)
    replica = cluster.replica_of(master)
    store = FencedStore(redis_server.client(), "ledger:balance")
    redis_server.client().delete("ledger:balance")
    with healed(cluster):
        # --8<-- [start:cluster-failover]
        a_client = cluster.client()
        a_plain, a_fenced = (
            Lock(a_client, key, ttl_ms=TTL_MS),
            FencedLock(a_client, fenced_key, ttl_ms=TTL_MS),
        )
        hold_back_replication(master, replica)
        assert a_plain.acquire(blocking=False)
        assert a_fenced.acquire(blocking=False)
        crash_before_replication(master, replica)
        cluster.wait_for_promotion(replica)
        b_client = RedisCluster(host=replica.host, port=replica.port, socket_timeout=5)
        assert cluster.master_of(key) is replica  # the slot is served by the promoted replica
        b_plain, b_fenced = (
            Lock(b_client, key, ttl_ms=TTL_MS),
            FencedLock(b_client, fenced_key, ttl_ms=TTL_MS),
        )
        assert b_plain.acquire(blocking=False)  # broken: A and B both hold it
        assert a_plain.held
        assert b_plain.held
        assert b_fenced.acquire(blocking=False)
        assert b_fenced.token == a_fenced.token
        store.write(b_fenced.token, "written by B")
        with pytest.raises(StaleToken):  # fixed: A's late write is refused
            store.write(a_fenced.token, "written by A, who no longer holds the lock")
        # A's client still maps the slot to the dead master: the release fails there and has
        # the client re-learn the slots; asked again, it reaches the promoted replica, where
        # the key is B's.
        with pytest.raises(LockLost):
            a_plain.release()
        # --8<-- [end:cluster-failover]


def test_fenced_lock_on_a_cluster_keeps_the_counter_in_the_lock_keys_slot(
    redis_cluster: ClusterDeployment,
) -> None:
    client = redis_cluster.client()
    for key in ("lock:report", "{tenant-7}:lock", "lock:a{b}c"):
        lock = FencedLock(client, key, ttl_ms=TTL_MS)
        assert slot(client, lock.counter_key) == slot(client, key)
        assert lock.acquire(blocking=False)  # no CROSSSLOT
        lock.release()
