"""The reference called the way users call it: fork, threads, busy masters, a Cluster
mid-resharding, frozen servers, small pools, positional TTLs, hand-overs.

Each test is a reproduction of a defect found in the reference (issue 20, letters
A-R): written first, seen failing on the code before the fix, then passing.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from redis._parsers.base import BaseParser
from redis.cluster import RedisCluster
from redis.crc import key_slot

from lockguide import (
    FencedLock,
    Lock,
    MasterError,
    NotAcquired,
    Redlock,
    Watchdog,
    WrongOwner,
)
from lockguide.fencing import counter_key_for
from lockguide_lab.testbed import RedisServer
from lockguide_lab.testbed.deployments import ClusterDeployment
from tests.ownership import Worker, a_forked_child_does_nothing
from tests.support import Backend, empty_slot, record_requests, script_sha, start_redis_server

KEY = "lock:users"


# -- A. fork: a child never holds its parent's lock ---------------------------------------


def test_a_forked_child_sees_the_lock_not_held_and_sends_nothing(
    r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    sent = record_requests(monkeypatch, [r])
    lock = Lock(r, KEY, ttl_ms=10_000)
    assert lock.acquire(blocking=False)
    before = len(sent)
    a_forked_child_does_nothing(lock, (lock.release, lock.extend), sent=lambda: len(sent) != before)
    assert lock.held
    assert r.get(KEY) == (lock.value or "").encode(), "the parent's key is untouched"
    lock.release()


# -- K. a later thread with a recycled ident is not the owner ----------------------------


def test_a_later_thread_reusing_the_acquirers_ident_is_not_the_owner(r: redis.Redis) -> None:
    outcomes: list[str] = []
    for _ in range(20):
        lock = Lock(r, KEY, ttl_ms=10_000)
        acquirer = threading.Thread(target=lambda lock=lock: lock.acquire(blocking=False))
        acquirer.start()
        acquirer.join()

        def intruder(lock: Lock = lock) -> None:
            try:
                lock.release()
                outcomes.append("released")
            except WrongOwner:
                outcomes.append("refused")

        later = threading.Thread(target=intruder)
        later.start()
        later.join()
        r.delete(KEY)
    assert outcomes == ["refused"] * 20


# -- R. an explicit hand-over, and a process-wide opt-out ---------------------------------


def test_hand_over_moves_the_lock_to_another_thread(r: redis.Redis) -> None:
    lock = Lock(r, KEY, ttl_ms=10_000)
    assert lock.acquire(blocking=False)
    thread = Worker(lock.release)
    lock.hand_over(thread)
    with pytest.raises(WrongOwner):
        lock.extend()  # the hand-over is complete: the old owner may not
    thread.start()
    thread.join()
    assert thread.outcomes == [None]
    assert r.exists(KEY) == 0


def test_owner_process_lets_any_thread_of_the_process_release(r: redis.Redis) -> None:
    lock = Lock(r, KEY, ttl_ms=10_000, owner="process")
    assert lock.acquire(blocking=False)
    thread = threading.Thread(target=lock.release)
    thread.start()
    thread.join()
    assert not lock.held
    assert r.exists(KEY) == 0


# -- H. a renewal in flight never clears a newer grant -------------------------------------


def test_an_extend_that_lands_after_release_and_reacquire_leaves_the_new_grant(
    r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    extend_sha = script_sha("extend.lua")
    in_flight, go_on = threading.Event(), threading.Event()
    base: type[Any] = r.connection_pool.connection_class

    class Gated(base):  # type: ignore[misc]
        def send_packed_command(self, command: Any, check_health: bool = True) -> None:
            data = command if isinstance(command, bytes) else b"".join(command)
            if extend_sha.encode() in data and not in_flight.is_set():
                in_flight.set()
                go_on.wait(10)  # the watchdog's request is on its way for a while
            super().send_packed_command(command, check_health)

    monkeypatch.setattr(r.connection_pool, "connection_class", Gated)
    lock = Lock(r, KEY, ttl_ms=1_000)
    assert lock.acquire(blocking=False)
    dog = Watchdog(lock, every_ms=20)
    dog.start()
    assert in_flight.wait(5)
    lock.release()  # the holder releases directly, and takes the lock again
    assert lock.acquire(blocking=False)
    go_on.set()  # the old renewal arrives: the key holds the new value, so it does nothing
    dog.stop()
    assert lock.held, "the new grant is still this object's"
    assert r.get(KEY) == (lock.value or "").encode()
    lock.release()
    assert r.exists(KEY) == 0


# -- F. Redlock: one busy master is a failed vote, not a total outage -----------------------


def answering(monkeypatch: pytest.MonkeyPatch, client: redis.Redis, reply: str) -> None:
    """``client``'s server answers ``reply`` (an error line) to every ``SET``."""
    base: type[Any] = client.connection_pool.connection_class

    class Failing(base):  # type: ignore[misc]
        set_sent = 0

        def send_packed_command(self, command: Any, check_health: bool = True) -> None:
            data = command if isinstance(command, bytes) else b"".join(command)
            self.set_sent += data.count(b"\r\nSET\r\n")
            super().send_packed_command(command, check_health)

        def read_response(self, *args: Any, **kwargs: Any) -> Any:
            answer = super().read_response(*args, **kwargs)
            if self.set_sent:
                self.set_sent -= 1
                raise BaseParser.parse_error(reply)  # type: ignore[no-untyped-call]
            return answer

    monkeypatch.setattr(client.connection_pool, "connection_class", Failing)


@pytest.mark.parametrize(
    "reply",
    [
        "OOM command not allowed when used memory > 'maxmemory'.",
        "BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.",
        "NOREPLICAS Not enough good replicas to write.",
        "LOADING Redis is loading the dataset in memory",
        "TRYAGAIN Multiple keys request during rehashing of slot",
        "MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.",
        "READONLY You can't write against a read only replica.",
    ],
)
def test_one_master_answering_a_retryable_error_is_a_failed_vote(
    backend: Backend, monkeypatch: pytest.MonkeyPatch, reply: str
) -> None:
    masters = backend.masters()[:3]
    answering(monkeypatch, masters[2], reply)
    lock = Redlock(masters, KEY, ttl_ms=10_000, node_timeout_ms=200)
    assert lock.acquire(blocking=False), "two of three masters granted: a majority"
    attempt = lock.last_attempt
    assert attempt is not None
    assert attempt.granted == 2
    assert attempt.failed == 1
    assert reply.split()[0] in " ".join(attempt.causes) or "masters[2]" in attempt.causes[0]
    assert lock.release() == 3, "the busy master ran the SET before its error: deleted too"


@pytest.mark.parametrize(
    "reply",
    ["NOPERM User has no permissions to run the 'set' command", "ERR unknown command 'SET'"],
)
def test_an_error_no_retry_can_fix_raises_master_error_at_once(
    backend: Backend, monkeypatch: pytest.MonkeyPatch, reply: str
) -> None:
    masters = backend.masters()[:3]
    answering(monkeypatch, masters[2], reply)
    lock = Redlock(masters, KEY, ttl_ms=10_000, node_timeout_ms=200)
    started = time.monotonic()
    with pytest.raises(MasterError, match=r"masters\[2\]"):
        lock.acquire(timeout_ms=5_000)
    assert time.monotonic() - started < 2.0, "raised at once, not after the whole wait"
    assert not any(m.exists(KEY) for m in masters), "what was granted has been released"


# -- L. the token counter shares the lock key's slot for every key -------------------------


@pytest.mark.parametrize(
    "key", ["a{}b", "{}{a}", "lock:{}", "{a}b", "x{a}{b}", "{{a}}", "}{a}", "plain", "{", "a}"]
)
def test_the_counter_key_hashes_to_the_lock_keys_slot(key: str) -> None:
    assert key_slot(counter_key_for(key).encode()) == key_slot(key.encode())


# -- Q. a positional TTL is refused ---------------------------------------------------------


def test_a_positional_ttl_is_refused(r: redis.Redis) -> None:
    for make in (
        lambda: Lock(r, KEY, 30),  # type: ignore[call-arg]
        lambda: FencedLock(r, KEY, 30),  # type: ignore[call-arg]
        lambda: Redlock([r], KEY, 30),  # type: ignore[call-arg]
    ):
        with pytest.raises(TypeError):
            make()


# -- the default wait is finite ---------------------------------------------------------------


def test_a_blocking_acquire_without_a_timeout_gives_up_after_the_default(r: redis.Redis) -> None:
    from lockguide import DEFAULT_TIMEOUT_MS

    assert DEFAULT_TIMEOUT_MS == 10_000
    r.set(KEY, "someone else", px=60_000)
    readings = iter(range(10_000))

    def fast_clock() -> float:  # each reading is half a second after the last
        return next(readings) * 0.5

    result: list[bool] = []
    lock = Lock(r, KEY, ttl_ms=1_000, clock=fast_clock)
    thread = threading.Thread(target=lambda: result.append(lock.acquire()), daemon=True)
    thread.start()
    thread.join(10)
    r.delete(KEY)
    assert result == [False], "the default wait ends (10 s on the lock's clock)"


# -- J. acquire(timeout_ms) is a total deadline, ending in the library's own outcome ----------


@pytest.fixture
def lone_server(tmp_path: Path) -> Iterator[RedisServer]:
    server = start_redis_server(tmp_path / "lone")
    yield server
    server.thaw()
    server.stop()


@pytest.mark.real_redis
def test_acquire_against_a_frozen_server_keeps_its_deadline(lone_server: RedisServer) -> None:
    client = lone_server.client()
    Lock(client, KEY, ttl_ms=5_000).acquire(blocking=False)  # the lock's connection exists
    client.delete(KEY)
    lock = Lock(client, KEY, ttl_ms=5_000, timeout_ms=150)
    with lone_server.frozen():
        started = time.monotonic()
        assert lock.acquire() is False
        elapsed = time.monotonic() - started
        with pytest.raises(NotAcquired) as raised, lock:
            pytest.fail("the body must not run")
    assert elapsed < 0.45, f"acquire(timeout_ms=150) took {elapsed * 1000:.0f} ms"
    assert isinstance(raised.value.__cause__, redis.exceptions.TimeoutError)


# -- I. Redlock connects to every master at once ------------------------------------------------


@pytest.mark.real_redis
def test_two_frozen_masters_cost_one_node_timeout(
    redis_server: RedisServer, redis_masters: list[RedisServer]
) -> None:
    servers = [redis_server, *redis_masters]
    masters = [s.client() for s in servers]  # new clients: no connection made yet
    for master in masters:
        master.delete(KEY)
    masters = [s.client() for s in servers]
    lock = Redlock(masters, KEY, ttl_ms=10_000, node_timeout_ms=150)
    with servers[3].frozen(), servers[4].frozen():
        started = time.monotonic()
        acquired = lock.acquire(blocking=False)
        elapsed = time.monotonic() - started
        assert acquired, repr(lock.last_attempt).replace("verdict=", "\n")
        lock.release()
    assert elapsed < 0.26, f"two frozen masters cost {elapsed * 1000:.0f} ms (node timeout 150)"


# -- M. the lock honours the client's pool class and size ---------------------------------------


@pytest.mark.real_redis
def test_a_blocking_pool_of_two_means_at_most_two_lock_connections(
    lone_server: RedisServer,
) -> None:
    admin = lone_server.admin()
    opened = int(admin.info("clients")["connected_clients"])
    pool = redis.BlockingConnectionPool(  # type: ignore[no-untyped-call]
        host=lone_server.host, port=lone_server.port, max_connections=2
    )
    client = redis.Redis(connection_pool=pool)
    failures: list[BaseException] = []

    def work() -> None:
        try:
            for _ in range(5):
                with Lock(client, KEY, ttl_ms=5_000, retry_delay_ms=(1, 5)):
                    time.sleep(0.002)
        except BaseException as error:
            failures.append(error)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    now = int(admin.info("clients")["connected_clients"])
    assert now - opened <= 2, f"{now - opened} connections for a pool of 2"
    lock = Lock(client, KEY, ttl_ms=5_000)
    lock.close()
    deadline = time.monotonic() + 5
    while int(admin.info("clients")["connected_clients"]) > opened and time.monotonic() < deadline:
        time.sleep(0.01)  # the server notices a closed socket on its next loop
    assert int(admin.info("clients")["connected_clients"]) == opened, "close() closes them"


# -- G. a Cluster mid-resharding: MOVED is followed, ASK too --------------------------------------


def _node_id(server: RedisServer) -> str:
    with server.admin() as admin:
        reply = admin.execute_command("CLUSTER", "MYID")
        return reply.decode() if isinstance(reply, bytes) else str(reply)


def _primary_ports(client: Any) -> set[int]:
    return {int(node.port) for node in client.get_primaries()}


def _set_slot(servers: list[RedisServer], slot: int, *args: str) -> None:
    for server in servers:
        with server.admin() as admin:
            if args[0] == "NODE":
                empty_slot(admin, slot)
            admin.execute_command("CLUSTER", "SETSLOT", slot, *args)


def _reshardable(
    cluster: ClusterDeployment, key: str
) -> tuple[RedisCluster, RedisServer, list[RedisServer], RedisServer, int]:
    """A client, the master of ``key`` (the source), the masters, another (the target), the slot."""
    client = cluster.client()
    source = cluster.master_of(key)
    masters = [n for n in cluster.nodes if n.port in _primary_ports(client)]
    target = next(m for m in masters if m is not source)
    return client, source, masters, target, key_slot(key.encode())


def _give_back(
    cluster: ClusterDeployment, masters: list[RedisServer], slot: int, source: RedisServer
) -> None:
    """The slot is the source's again on every master, and the cluster ready."""
    _set_slot(masters, slot, "NODE", _node_id(source))
    cluster.wait_ready()


@pytest.mark.real_redis
def test_a_moved_slot_is_followed_within_the_deadline(redis_cluster: ClusterDeployment) -> None:
    key = "lock:resharded"
    client, source, masters, target, slot = _reshardable(redis_cluster, key)
    lock = Lock(client, key, ttl_ms=10_000)
    assert lock.acquire(blocking=False)  # the client's slot map points at the source
    lock.release()
    try:
        _set_slot(masters, slot, "NODE", _node_id(target))  # resharded behind its back
        assert lock.acquire(timeout_ms=3_000)
        with target.admin() as admin:
            assert admin.get(key) == (lock.value or "").encode()
        lock.release()
    finally:
        _give_back(redis_cluster, masters, slot, source)


@pytest.mark.real_redis
def test_a_slot_being_migrated_is_followed_with_asking(redis_cluster: ClusterDeployment) -> None:
    key = "lock:migrating"
    client, source, masters, target, slot = _reshardable(redis_cluster, key)
    try:
        _set_slot([target], slot, "IMPORTING", _node_id(source))
        _set_slot([source], slot, "MIGRATING", _node_id(target))
        for _ in range(5):  # the key is on neither node: the source answers ASK
            lock = Lock(client, key, ttl_ms=10_000)
            assert lock.acquire(timeout_ms=3_000)
            assert lock.owned()
            lock.extend()
            lock.release()
        holder, other = Lock(client, key, ttl_ms=10_000), Lock(client, key, ttl_ms=10_000)
        assert holder.acquire(timeout_ms=3_000)
        assert not other.acquire(blocking=False), "the target has the key: refused"
        holder.release()
    finally:
        _set_slot([source, target], slot, "STABLE")
        _give_back(redis_cluster, masters, slot, source)


def _blocked_on_a_wake_up(server: RedisServer) -> None:
    give_up = time.monotonic() + 5
    with server.admin() as admin:
        while not any(c["cmd"] == "blpop" for c in admin.client_list()):
            assert time.monotonic() < give_up, "no waiter blocked on its wake-up"
            time.sleep(0.01)


def _in_thread(lock: Any, got: list[Any], timeout_ms: int) -> threading.Thread:
    """A thread that waits for ``lock``: when it got it (-1.0: not), or what it raised."""

    def wait() -> None:
        try:
            got.append(time.monotonic() if lock.acquire(timeout_ms=timeout_ms) else -1.0)
        except BaseException as error:
            got.append(error)

    thread = threading.Thread(target=wait)
    thread.start()
    return thread


@pytest.mark.real_redis
@pytest.mark.parametrize("kind", [Lock, FencedLock])
def test_on_a_cluster_the_next_grant_goes_to_the_waiter_not_back_to_the_releaser(
    redis_cluster: ClusterDeployment, kind: type[Lock]
) -> None:
    key = f"lock:cluster-line:{kind.__name__}"
    client = redis_cluster.client()
    holder = kind(client, key, ttl_ms=10_000, owner="process")
    waiter = kind(client, key, ttl_ms=10_000, retry_delay_ms=(900, 1_000), owner="process")
    assert holder.acquire()
    got: list[Any] = []
    thread = _in_thread(waiter, got, timeout_ms=5_000)
    try:
        _blocked_on_a_wake_up(redis_cluster.master_of(key))  # refused, in line
        holder.release()
        released = time.monotonic()
        assert not holder.acquire(blocking=False), "the releaser took the key back"
        thread.join(5)
        assert len(got) == 1, got
        assert isinstance(got[0], float), got
        assert got[0] - released < 0.3, f"woken {got[0] - released:.3f} s after the release"
    finally:
        thread.join(5)
        for lock in (holder, waiter):
            if lock.held:
                lock.release()


@pytest.mark.real_redis
def test_waiters_in_line_get_the_key_while_its_slot_is_being_migrated(
    redis_cluster: ClusterDeployment,
) -> None:
    """Mid-migration the source refuses the line's scripts (a key they reach is not there, or
    not all of them are): each try and release falls back to the plain command on the key,
    so the waiters poll, one holder at a time, and nothing raises."""
    key = "lock:line-migrating"
    client, source, masters, target, slot = _reshardable(redis_cluster, key)
    holder = Lock(client, key, ttl_ms=10_000, owner="process")
    waiters = [
        Lock(client, key, ttl_ms=10_000, retry_delay_ms=(100, 200), owner="process")
        for _ in range(4)
    ]
    inside, most = [0], [0]
    mutex = threading.Lock()
    got: list[Any] = []

    def work() -> None:
        with mutex:
            inside[0] += 1
            most[0] = max(most[0], inside[0])
        time.sleep(0.02)
        with mutex:
            inside[0] -= 1

    def wait(lock: Lock) -> None:
        try:
            ok = lock.acquire(timeout_ms=8_000)
            got.append(ok)
            if ok:
                work()
                lock.release()
        except BaseException as error:
            got.append(error)

    try:
        assert holder.acquire()
        threads = [threading.Thread(target=wait, args=(w,)) for w in waiters]
        for thread in threads[:3]:
            thread.start()
        time.sleep(0.3)  # three waiters are in line, on the source
        _set_slot([target], slot, "IMPORTING", _node_id(source))
        _set_slot([source], slot, "MIGRATING", _node_id(target))
        threads[3].start()  # the source has no place for this one: its tries are the key's
        time.sleep(0.3)
        holder.release()
        for thread in threads:
            thread.join(10)
        assert got == [True] * 4, got
        assert most[0] == 1
    finally:
        with target.admin() as admin:  # what the migration brought: the slot goes back
            empty_slot(admin, slot)
        _set_slot([source, target], slot, "STABLE")
        _give_back(redis_cluster, masters, slot, source)


@pytest.mark.real_redis
def test_on_a_cluster_of_two_connections_a_node_waiters_leave_one_to_release_with(
    redis_cluster: ClusterDeployment,
) -> None:
    key = "lock:cluster-room"
    client = redis_cluster.client(  # as the one-server twin: a pool that waits when full
        max_connections=2, connection_pool_class=redis.BlockingConnectionPool
    )
    holder = Lock(client, key, ttl_ms=10_000, owner="process")
    assert holder.acquire()
    got: list[Any] = []
    waiters = [Lock(client, key, ttl_ms=10_000, retry_delay_ms=(200, 300)) for _ in range(4)]

    def wait(lock: Lock) -> None:
        try:
            got.append(lock.acquire(timeout_ms=10_000))
            lock.release()
        except BaseException as error:
            got.append(error)

    threads = [threading.Thread(target=wait, args=(w,)) for w in waiters]
    for thread in threads:
        thread.start()
    time.sleep(0.3)
    try:
        started = time.monotonic()
        holder.release()  # a connection of the node's two is free for it
        assert time.monotonic() - started < 0.15, "the release waited for a waiter's connection"
    finally:
        for thread in threads:
            thread.join(15)
    assert got == [True] * 4, got
