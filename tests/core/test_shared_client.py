"""The locks as a service runs them: one client shared by every request, locks made per
request, replies lost on kept connections, connections the server closed while idle,
hand-overs to worker threads, small pools and total deadlines (issue 27).

Each test reproduces a defect seen through the public API, failed on the code before
its fix, and passes after it.
"""

from __future__ import annotations

import datetime
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

from lockguide import Lock, LockLost, Redlock, Watchdog
from lockguide_lab.testbed import Link, RedisServer
from tests.support import Backend, start_redis_server

KEY = "lock:shared"


@pytest.fixture
def lone_server(tmp_path: Path) -> Iterator[RedisServer]:
    server = start_redis_server(tmp_path / "lone")
    yield server
    server.thaw()
    server.stop()


# -- close() leaves other requests' connections alone ---------------------------------------


def test_closing_a_lock_per_request_never_breaks_another_threads_request(
    backend: Backend,
) -> None:
    client = backend.client()
    errors: list[BaseException] = []
    stop = time.monotonic() + 1.0

    def serve(n: int) -> None:
        key = f"{KEY}:{n}"
        while time.monotonic() < stop:
            lock = Lock(client, key, ttl_ms=5_000, timeout_ms=1_000)
            try:
                try:
                    with lock:
                        pass
                finally:
                    lock.close()
            except BaseException as error:
                errors.append(error)
                return

    threads = [threading.Thread(target=serve, args=(n,)) for n in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == [], f"{len(errors)} requests failed: {errors[:3]!r}"
    assert client.keys(f"{KEY}:*") == [], "every lock was released"


# -- a reply lost on a kept connection is never sent again --------------------------------


class DropNextReply:
    """A :class:`Gate` that closes the client's connection instead of delivering a reply:
    the server ran the request, the client never hears back (a proxy's reset, CLIENT KILL)."""

    def request_seen(self, seen: float) -> None:
        pass

    def hold(self, client: socket.socket, reply: bytes) -> None:
        client.shutdown(socket.SHUT_RDWR)  # the client reads the end of the stream at once


def _watch_once(link: Link, wanted: Callable[[list[bytes]], bool]) -> None:
    fired = threading.Event()

    def watch(command: list[bytes]) -> bool:
        if fired.is_set() or not wanted(command):
            return False
        fired.set()
        return True

    link.gate, link.watch = DropNextReply(), watch


@pytest.fixture
def linked(lone_server: RedisServer) -> Iterator[tuple[redis.Redis, Link, redis.Redis]]:
    link = Link((lone_server.host, lone_server.port))
    client = redis.Redis(host=link.address[0], port=link.address[1], socket_timeout=5.0)
    yield client, link, lone_server.admin()
    link.close()


@pytest.mark.real_redis
def test_a_lost_set_reply_is_cleaned_up_and_retried_never_resent_into_a_self_lock(
    linked: tuple[redis.Redis, Link, redis.Redis],
) -> None:
    client, link, admin = linked
    lock = Lock(client, KEY, ttl_ms=30_000, timeout_ms=2_000, retry_delay_ms=(5, 10))
    assert lock.acquire()  # the lock's connection is made and kept
    lock.release()
    _watch_once(link, lambda command: command[0].upper() == b"SET")
    assert lock.acquire(), f"a lost reply locked everybody out (last_error={lock.last_error!r})"
    assert admin.get(KEY) == (lock.value or "").encode(), "the key holds this grant's value"
    lock.release()
    assert admin.exists(KEY) == 0


@pytest.mark.real_redis
def test_a_release_whose_reply_was_lost_is_not_reported_as_a_lost_lease(
    linked: tuple[redis.Redis, Link, redis.Redis],
) -> None:
    client, link, admin = linked
    lock = Lock(client, KEY, ttl_ms=30_000)
    assert lock.acquire()
    lock.release()  # the release script is loaded, the connection kept
    assert lock.acquire()
    _watch_once(link, lambda command: command[0].upper() == b"EVALSHA")
    lock.release()  # the first release worked; its reply never came
    assert not lock.held
    assert admin.exists(KEY) == 0


# -- a connection the server closed while idle costs nothing ----------------------------------


@pytest.mark.real_redis
def test_a_connection_the_server_closed_while_the_body_ran_does_not_fail_the_release(
    lone_server: RedisServer,
) -> None:
    client = redis.Redis(unix_socket_path=lone_server.unixsocket)
    admin = lone_server.admin()
    with Lock(client, KEY, ttl_ms=30_000) as lock:
        admin.client_kill_filter(_type="normal", skipme=True)  # as an idle timeout does
    assert not lock.held
    assert admin.exists(KEY) == 0
    admin.client_kill_filter(_type="normal", skipme=True)
    assert lock.acquire(blocking=False), "a free key, after the server closed the connection"
    lock.release()


@pytest.mark.real_redis
def test_a_redlock_release_after_the_servers_closed_its_connections_works(
    redis_server: RedisServer, redis_masters: list[RedisServer]
) -> None:
    servers = [redis_server, *redis_masters[:2]]
    clients = [redis.Redis(unix_socket_path=s.unixsocket) for s in servers]
    lock = Redlock(clients, KEY, ttl_ms=30_000, node_timeout_ms=200)
    assert lock.acquire()
    for server in servers:
        server.admin().client_kill_filter(_type="normal", skipme=True)
    assert lock.release() == 3
    assert all(s.admin().exists(KEY) == 0 for s in servers)


# -- hand-over: the worker owns it in `with` and in the watchdog too ---------------------------


def test_leaving_with_after_a_hand_over_leaves_the_release_to_the_new_owner(
    r: redis.Redis,
) -> None:
    done = threading.Event()
    outcome: list[object] = []

    def work() -> None:
        done.wait(5)
        try:
            lock.release()
            outcome.append("released")
        except BaseException as error:
            outcome.append(error)

    worker = threading.Thread(target=work)
    worker.start()
    with Lock(r, KEY, ttl_ms=10_000) as lock:
        lock.hand_over(worker)
    assert r.exists(KEY) == 1, "leaving `with` did not release the worker's lock"
    done.set()
    worker.join(5)
    assert outcome == ["released"]


def test_a_watchdog_keeps_renewing_a_lock_handed_to_a_worker(r: redis.Redis) -> None:
    lock = Lock(r, KEY, ttl_ms=300)
    assert lock.acquire()
    worker_done = threading.Event()
    worker = threading.Thread(target=worker_done.wait, args=(5,))
    worker.start()
    dog = Watchdog(lock, every_ms=60)
    dog.start()
    lock.hand_over(worker)
    time.sleep(0.7)  # over two leases: only renewals keep it
    try:
        assert not dog.lost, dog.error
        assert r.get(KEY) == (lock.value or "").encode()
    finally:
        dog.stop()
        worker_done.set()
        worker.join(5)
        r.delete(KEY)


# -- deadlines and pools ------------------------------------------------------------------------


@pytest.mark.real_redis
def test_a_redlock_acquire_with_frozen_masters_keeps_its_total_deadline(
    redis_server: RedisServer, redis_masters: list[RedisServer]
) -> None:
    servers = [redis_server, *redis_masters[:2]]
    clients = [s.client() for s in servers]
    for client in clients:
        client.delete(KEY)
    lock = Redlock(clients, KEY, ttl_ms=10_000, node_timeout_ms=200, retry_delay_ms=(10, 20))
    assert lock.acquire()  # every connection made
    lock.release()
    with servers[1].frozen(), servers[2].frozen():
        started = time.monotonic()
        assert lock.acquire(timeout_ms=300) is False
        elapsed = time.monotonic() - started
    for client in clients:  # a frozen master runs the SETs it had queued once thawed
        client.delete(KEY)
    assert elapsed < 0.340, f"acquire(timeout_ms=300) took {elapsed * 1000:.0f} ms"


@pytest.mark.real_redis
def test_locks_with_different_timeouts_share_the_clients_pool_limit(
    redis_server: RedisServer, redis_masters: list[RedisServer]
) -> None:
    admin = redis_server.admin()
    opened = int(admin.info("clients")["connected_clients"])
    pool = redis.BlockingConnectionPool(  # type: ignore[no-untyped-call]
        host=redis_server.host, port=redis_server.port, max_connections=2
    )
    client = redis.Redis(connection_pool=pool)
    others = [s.client() for s in redis_masters[:2]]
    key = f"{KEY}:pool"
    locks = [
        Lock(client, key, ttl_ms=5_000),
        Lock(client, key, ttl_ms=5_000, request_timeout_ms=500),
        Redlock([client, *others], key, ttl_ms=5_000),
    ]
    for lock in locks:
        with lock:
            pass
    now = int(admin.info("clients")["connected_clients"])
    assert now - opened <= 2, f"{now - opened} connections for a pool of 2"


# -- many waiters: the next grant goes to a waiter, woken by the release -------------------------


def _waiting(
    lock: Lock, got: list[float | BaseException], *, then_release: bool = False, timeout_ms: float
) -> threading.Thread:
    """A thread that waits for ``lock``: when it got it (-1.0: not), or what it raised."""

    def wait() -> None:
        try:
            got.append(time.monotonic() if lock.acquire(timeout_ms=timeout_ms) else -1.0)
            if then_release and lock.held:
                lock.release()
        except BaseException as error:
            got.append(error)

    thread = threading.Thread(target=wait)
    thread.start()
    return thread


def test_the_next_grant_goes_to_the_waiter_woken_by_the_release_not_to_the_releaser(
    r: redis.Redis,
) -> None:
    holder = Lock(r, KEY, ttl_ms=10_000, owner="process")
    waiter = Lock(r, KEY, ttl_ms=10_000, retry_delay_ms=(900, 1_000), owner="process")
    assert holder.acquire()
    got: list[float | BaseException] = []
    thread = _waiting(waiter, got, timeout_ms=5_000)
    time.sleep(0.1)  # the waiter was refused, took its place and waits on its wake-up
    holder.release()
    released = time.monotonic()
    assert not holder.acquire(blocking=False), "the releaser took the key back from its waiter"
    thread.join(5)
    assert len(got) == 1
    assert isinstance(got[0], float), got
    assert got[0] - released < 0.3, f"woken {got[0] - released:.3f} s after the release"
    assert waiter.held
    waiter.release()


@pytest.mark.real_redis
def test_a_woken_waiter_holds_the_key_with_its_own_lease_and_sends_nothing_more(
    lone_server: RedisServer,
) -> None:
    client = redis.Redis(host=lone_server.host, port=lone_server.port)
    holder = Lock(client, KEY, ttl_ms=10_000, owner="process")
    waiter = Lock(client, KEY, ttl_ms=3_000, retry_delay_ms=(4_000, 4_000), owner="process")
    for lock in (waiter, holder):  # each script loaded once (NOSCRIPT would count twice)
        assert lock.acquire(timeout_ms=1_000)
        lock.extend()
        lock.release()
    assert holder.acquire()
    got: list[float | BaseException] = []
    thread = _waiting(waiter, got, timeout_ms=8_000)
    give_up = time.monotonic() + 5
    while not any(c["cmd"] == "blpop" for c in client.client_list()):  # in line, blocked
        assert time.monotonic() < give_up, "the waiter never blocked on its wake-up"
        time.sleep(0.01)
    client.config_resetstat()
    holder.release()
    thread.join(5)
    assert len(got) == 1
    assert isinstance(got[0], float), got
    calls = {name: stats["calls"] for name, stats in client.info("commandstats").items()}
    assert calls.get("cmdstat_evalsha") == 1, f"only the release ran a script: {calls}"
    assert calls.get("cmdstat_pexpire") == 1, f"only the wake-up got a TTL: {calls}"
    assert 2_000 < client.pttl(KEY) <= 3_000, "the key has the waiter's lease, not the holder's"
    waiter.release()


@pytest.mark.real_redis
def test_waiters_on_a_pool_of_two_never_take_the_connection_the_holder_releases_with(
    lone_server: RedisServer,
) -> None:
    pool = redis.BlockingConnectionPool(  # type: ignore[no-untyped-call]
        host=lone_server.host, port=lone_server.port, max_connections=2, timeout=5
    )
    client = redis.Redis(connection_pool=pool)
    holder = Lock(client, KEY, ttl_ms=10_000, owner="process")
    assert holder.acquire()
    got: list[float | BaseException] = []
    waiters = [Lock(client, KEY, ttl_ms=10_000, retry_delay_ms=(200, 300)) for _ in range(4)]
    threads = [_waiting(w, got, then_release=True, timeout_ms=10_000) for w in waiters]
    time.sleep(0.2)
    started = time.monotonic()
    holder.release()
    assert time.monotonic() - started < 0.15, "the release waited for a waiter's connection"
    for thread in threads:
        thread.join(15)
    assert len(got) == 4
    assert all(isinstance(t, float) and t > 0 for t in got), got


# -- who holds it -----------------------------------------------------------------------------


def test_anyone_can_read_who_holds_a_key_since_when_and_for_how_long(r: redis.Redis) -> None:
    lock = Lock(r, KEY, ttl_ms=30_000)
    assert lock.holder() is None, "nobody holds it yet"
    worker = threading.Thread(target=lock.acquire, name="report-worker")
    before = datetime.datetime.now(datetime.UTC)
    worker.start()
    worker.join(5)
    seen = Lock(r, KEY, ttl_ms=1_000).holder()  # another object, as a person on call would
    assert seen is not None
    assert seen.name == f"{socket.gethostname()}:{os.getpid()}:report-worker"
    assert seen.since is not None
    assert (
        before - datetime.timedelta(seconds=1) <= seen.since <= datetime.datetime.now(datetime.UTC)
    )
    assert 0 < seen.ttl_ms <= 30_000
    assert seen.value == lock.value
    assert len(seen.value.split(" ")[0]) == 40, "the random part is still 20 bytes"
    r.delete(KEY)


def test_a_redlock_reports_the_holder_a_majority_has(backend: Backend) -> None:
    masters = backend.masters()
    lock = Redlock(masters, KEY, ttl_ms=30_000, node_timeout_ms=100)
    assert lock.acquire()
    seen = Redlock(masters, KEY, ttl_ms=1_000, node_timeout_ms=100).holder()
    assert seen is not None
    assert seen.value == lock.value
    assert seen.name.endswith(":MainThread")
    masters[0].delete(KEY)
    masters[1].delete(KEY)
    masters[2].delete(KEY)  # three of five gone: no majority holds it
    assert lock.holder() is None
    for master in masters:
        master.delete(KEY)


# -- one rule for extending -------------------------------------------------------------------


def test_a_lock_extended_after_its_lease_ran_out_here_is_released_and_lost_as_a_redlock_is(
    r: redis.Redis,
) -> None:
    now = [0.0]
    lock = Lock(r, KEY, ttl_ms=10_000, clock=lambda: now[0])
    assert lock.acquire()
    now[0] = 10.0  # the process was paused past the lease (the key may still be there)
    with pytest.raises(LockLost):
        lock.extend()
    assert not lock.held
    assert r.exists(KEY) == 0, "released, not renewed as if nothing happened"


@pytest.mark.real_redis
def test_a_tcp_connection_closed_by_the_server_while_idle_is_made_again_before_a_try(
    lone_server: RedisServer,
) -> None:
    client = lone_server.client()
    admin = lone_server.admin()
    lock = Lock(client, KEY, ttl_ms=30_000)
    assert lock.acquire(blocking=False)
    lock.release()  # the lock's connection is kept
    admin.client_kill_filter(_type="normal", skipme=True)  # as an idle timeout does
    time.sleep(0.3)  # idle: over TCP the next write would go through, and its reply be lost
    assert lock.acquire(blocking=False), f"a free key refused ({lock.last_error!r})"
    lock.release()
