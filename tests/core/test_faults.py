"""Redlock against real faults on five real ``redis-server`` processes.

Each test gets five independent servers (the lab's testbed servers, started
once per module) and may freeze (``SIGSTOP``), kill (``SIGKILL``) or restart
them; the fixture thaws, restarts and empties them again before the next test.
The clients are given a 30 s socket timeout: any wait that fell back to it would
blow far past the bounds asserted here.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import pytest
import redis

from lockguide import Attempt, MajorityLost, Redlock, validity_ms
from lockguide_lab.testbed import RedisServer
from tests.support import start_redis_servers

pytestmark = pytest.mark.real_redis

KEY = "lock:faults"
OTHER = "someone else's value"
#: Per-node timeout in these tests: twice the default, so that a healthy server
#: the (shared, loaded) test machine did not schedule for 50 ms is not mistaken
#: for a failed one; still tiny next to the TTLs.
NODE_TIMEOUT_MS = 100.0
#: Allowance for a loaded machine on top of the per-node timeout. The socket
#: timeout the clients would otherwise fall back to is 30 s.
MARGIN_S = 0.3
SOCKET_TIMEOUT_S = 30.0

T = TypeVar("T")


@dataclass
class Servers:
    """Five independent redis-server processes (the testbed's), and clients of them."""

    processes: list[RedisServer]
    clients_made: list[redis.Redis] = field(default_factory=list)

    def clients(self) -> list[redis.Redis]:
        made = [p.client(socket_timeout=SOCKET_TIMEOUT_S) for p in self.processes]
        self.clients_made += made
        return made

    def __getitem__(self, i: int) -> RedisServer:
        return self.processes[i]

    def heal(self) -> None:
        """Every server running, answering, configured and empty; every client closed."""
        for process in self.processes:
            process.reset()
        for client in self.clients_made:
            client.close()
        self.clients_made.clear()


def start_five(base: Path, *, appendonly: bool = False) -> Iterator[Servers]:
    """Five servers in ``base``, stopped when the module is done."""
    servers = Servers(start_redis_servers(base, 5, appendonly=appendonly))
    yield servers
    for process in servers.processes:
        process.stop()


@pytest.fixture(scope="module")
def five_servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Servers]:
    yield from start_five(tmp_path_factory.mktemp("faults"))


@pytest.fixture
def servers(five_servers: Servers) -> Iterator[Servers]:
    five_servers.heal()
    yield five_servers
    five_servers.heal()


def redlock(clients: list[redis.Redis], ttl_ms: int = 10_000) -> Redlock:
    return Redlock(clients, KEY, ttl_ms=ttl_ms, node_timeout_ms=NODE_TIMEOUT_MS)


def connected(clients: list[redis.Redis]) -> Redlock:
    """A Redlock whose connections are open before the fault (it acquired and released)."""
    lock = redlock(clients)
    assert lock.acquire(blocking=False)
    lock.release()
    return lock


def last_attempt(lock: Redlock) -> Attempt:
    attempt = lock.last_attempt
    assert attempt is not None
    return attempt


def timed(call: Callable[[], T]) -> tuple[T, float]:
    """The call's result, and how many seconds it took."""
    started = time.monotonic()
    result = call()
    return result, time.monotonic() - started


# -- an unresponsive master -----------------------------------------------------------


def test_a_frozen_master_costs_one_node_timeout_and_four_votes_still_win(
    servers: Servers,
) -> None:
    lock = connected(servers.clients())
    bound = NODE_TIMEOUT_MS / 1000 + MARGIN_S
    with servers[2].frozen():
        acquired, took = timed(lambda: lock.acquire(blocking=False))
        assert acquired
        attempt = last_attempt(lock)
        assert (attempt.granted, attempt.failed) == (4, 1)
        assert NODE_TIMEOUT_MS / 1000 <= took < bound
        released, took = timed(lock.release)
        assert released == 4
        assert took < bound
        # The timed-out connection was closed: the next try must connect again
        # to the frozen master, and that handshake is bounded too.
        acquired, took = timed(lambda: lock.acquire(blocking=False))
        assert acquired
        assert took < bound
        lock.release()


def test_a_thawed_master_runs_its_queued_set_but_no_late_reply_is_misread(
    servers: Servers,
) -> None:
    clients = servers.clients()
    lock = connected(clients)
    with servers[0].frozen():
        assert lock.acquire(blocking=False)
        frozen_value = lock.value
        assert lock.release() == 4
    time.sleep(0.05)
    # Master 0 wakes up and executes the SET that waited in its socket: the key is
    # set there after the release, with the frozen attempt's value, until its TTL.
    assert frozen_value is not None
    assert clients[0].get(KEY) == frozen_value.encode()
    # Its late reply went to a closed connection: later requests get their own
    # answers (a misread reply would show up as a wrong count here).
    for _ in range(20):
        assert lock.acquire(blocking=False)
        attempt = last_attempt(lock)
        assert (attempt.granted, attempt.refused, attempt.failed) == (4, 1, 0)
        assert lock.release() == 4


def test_with_three_masters_down_acquire_fails_fast_and_leaves_no_key(
    servers: Servers,
) -> None:
    clients = servers.clients()
    lock = connected(clients)
    for i in (0, 1, 2):
        servers[i].crash()
    acquired, took = timed(lambda: lock.acquire(blocking=False))
    assert not acquired
    attempt = last_attempt(lock)
    assert (attempt.granted, attempt.failed) == (2, 3)
    assert took < NODE_TIMEOUT_MS / 1000 + MARGIN_S, "refused connections cost no waiting"
    assert [clients[i].get(KEY) for i in (3, 4)] == [None, None]
    # Blocking, it keeps trying until its deadline and still leaves nothing behind.
    acquired, took = timed(lambda: lock.acquire(timeout_ms=200))
    assert not acquired
    assert took < 0.2 + NODE_TIMEOUT_MS / 1000 + MARGIN_S
    assert [clients[i].get(KEY) for i in (3, 4)] == [None, None]


def test_a_connection_the_server_closed_is_replaced_without_losing_the_vote(
    servers: Servers,
) -> None:
    clients = servers.clients()
    lock = connected(clients)
    with servers[1].admin() as admin:
        assert admin.client_kill_filter(_type="normal", skipme=True) >= 1
    # Idle past lockguide.lock.CHECK_IDLE_S, as a connection an idle timeout closed is: it is
    # checked, and made again, before it is written on. (One killed within that time is
    # written on; its reply is lost, a failed vote the clean-up covers.)
    time.sleep(0.3)
    assert lock.acquire(blocking=False)
    attempt = last_attempt(lock)
    assert attempt.granted == 5


# -- a master that restarts -----------------------------------------------------------


def hold_three_of_five(clients: list[redis.Redis], ttl_ms: int) -> Redlock:
    """A wins masters 0, 1, 2 while an earlier owner still holds 3 and 4, which
    that owner then releases: A holds a bare majority."""
    for i in (3, 4):
        clients[i].set(KEY, OTHER, px=30_000)
    a = redlock(clients, ttl_ms)
    assert a.acquire(blocking=False)
    for i in (3, 4):
        clients[i].delete(KEY)
    return a


def test_a_master_restarted_without_persistence_grants_the_lock_twice(
    servers: Servers,
) -> None:
    a = hold_three_of_five(servers.clients(), ttl_ms=10_000)
    servers[2].crash()
    servers[2].restart()  # back at once, with an empty dataset
    b = redlock(servers.clients())
    assert b.acquire(blocking=False), "B wins masters 2, 3 and 4"
    assert a.held
    assert a.validity_remaining_ms() > 5_000, "while A is well inside its validity"
    with pytest.raises(MajorityLost):
        a.release()  # A finds out only at the end: 2 of 5 still had its value


@pytest.fixture(scope="module")
def five_aof_servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Servers]:
    yield from start_five(tmp_path_factory.mktemp("faults-aof"), appendonly=True)


def test_appendfsync_always_keeps_the_lock_across_a_crash(five_aof_servers: Servers) -> None:
    servers = five_aof_servers
    servers.heal()
    try:
        a = hold_three_of_five(servers.clients(), ttl_ms=10_000)
        servers[2].crash()
        servers[2].restart()  # replays its append-only file: A's key, with its expiry
        assert servers.clients()[2].pttl(KEY) > 5_000
        b = redlock(servers.clients())
        assert not b.acquire(blocking=False)
        assert a.release() == 3
    finally:
        servers.heal()


def test_a_restart_delayed_past_the_ttl_never_grants_the_lock_twice(servers: Servers) -> None:
    ttl_ms = 600
    a = hold_three_of_five(servers.clients(), ttl_ms=ttl_ms)
    crashed_at = time.monotonic()
    servers[2].crash()
    b = redlock(servers.clients())
    assert not b.acquire(blocking=False), "while master 2 stays down, B has only 3 and 4"
    # The remedy: keep the crashed master down for longer than the largest TTL.
    time.sleep(max(0.0, ttl_ms / 1000 + 0.05 - (time.monotonic() - crashed_at)))
    servers[2].restart()
    assert b.acquire(blocking=False)
    assert a.validity_remaining_ms() == 0.0, "A's lease was over before B got in"


def test_the_validity_left_after_a_frozen_master_is_the_arithmetic(servers: Servers) -> None:
    lock = connected(servers.clients())
    with servers[4].frozen():
        assert lock.acquire(blocking=False)
        attempt = last_attempt(lock)
        # The attempt waited the full node timeout for master 4, and that time is
        # gone from the lease: at most 10 000 - 50 - 102 ms are left.
        assert attempt.verdict.elapsed_ms >= NODE_TIMEOUT_MS
        assert lock.validity_remaining_ms() <= validity_ms(10_000, NODE_TIMEOUT_MS)
        lock.release()
