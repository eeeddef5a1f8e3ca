"""The testbed's parts on their own: the link and the server processes, on real servers.

Each capability is shown doing what it says against a real ``redis-server``:
the link delays, cuts, retargets, observes and gates; a server freezes,
thaws, crashes and restarts with or without what it persisted.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from lockguide_lab.testbed import Link, RedisServer
from tests.support import start_redis_server

pytestmark = pytest.mark.real_redis


@pytest.fixture(scope="module")
def two(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[RedisServer]]:
    base = tmp_path_factory.mktemp("testbed")
    started = [start_redis_server(base / f"s{i}") for i in range(2)]
    yield started
    for server in started:
        server.stop()


@pytest.fixture
def servers(two: list[RedisServer]) -> Iterator[list[RedisServer]]:
    for server in two:
        server.reset()
    yield two
    for server in two:
        server.reset()


def through(link: Link, timeout_s: float = 2.0) -> redis.Redis:
    host, port = link.address
    return redis.Redis(host=host, port=port, socket_timeout=timeout_s, retry=Retry(NoBackoff(), 0))


def timed_ping(client: redis.Redis) -> float:
    started = time.monotonic()
    assert client.ping()
    return time.monotonic() - started


def test_a_link_adds_its_delay_each_way_and_can_change_it_while_open(
    servers: list[RedisServer],
) -> None:
    # 200 ms each way: far above what a busy machine adds to a loopback round trip.
    link = Link(servers[0].address, delay_s=0.2)
    try:
        client = through(link)
        client.ping()  # the connection is open
        assert timed_ping(client) >= 0.4  # there and back
        link.reply_delay_s = 0.0
        assert 0.2 <= timed_ping(client) < 0.4  # there only, on the same connection
        link.delay(0.0)
        assert timed_ping(client) < 0.2
    finally:
        link.close()


def test_a_cut_link_drops_every_byte_but_keeps_the_connection(
    servers: list[RedisServer],
) -> None:
    link = Link(servers[0].address)
    try:
        client = through(link, timeout_s=0.2)
        client.set("k", "before")
        link.cut()
        assert link.is_cut
        with pytest.raises(redis.TimeoutError):
            client.set("k", "after")  # on the open connection: no reply, no error
        assert servers[0].client().get("k") == b"before"  # the request never arrived
        with pytest.raises(redis.ConnectionError):
            through(link).ping()  # a new connection is refused
    finally:
        link.close()


def test_a_retargeted_link_sends_the_same_address_to_another_server(
    servers: list[RedisServer],
) -> None:
    first, second = servers
    first.client().set("who", "first")
    second.client().set("who", "second")
    link = Link(first.address)
    try:
        client = through(link)
        assert client.get("who") == b"first"
        link.retarget(second.address)
        with pytest.raises(redis.ConnectionError):
            client.get("who")  # the open connection broke
        assert client.get("who") == b"second"  # the next one reaches the other server
    finally:
        link.close()


def test_a_link_shows_its_observers_every_request_with_its_time(
    servers: list[RedisServer],
) -> None:
    link = Link(servers[0].address)
    seen: list[tuple[list[bytes], float]] = []
    link.observers.append(lambda command, at: seen.append((command, at)))
    try:
        client = through(link)
        client.set("lock", "v1", nx=True, px=1_000)
        client.get("lock")
    finally:
        link.close()
    commands = [command for command, _ in seen]
    assert [b"SET", b"lock", b"v1", b"NX", b"PX", b"1000"] in commands
    assert [b"GET", b"lock"] in commands
    assert [at for _, at in seen] == sorted(at for _, at in seen)


class _Holding:
    """A gate that holds every watched reply until :meth:`open` is called."""

    def __init__(self) -> None:
        self.seen = 0
        self.held: list[tuple[socket.socket, bytes]] = []
        self.opened = threading.Event()

    def request_seen(self, seen: float) -> None:
        self.seen += 1

    def hold(self, client: socket.socket, reply: bytes) -> None:
        self.held.append((client, reply))
        self.opened.wait(5)
        client.sendall(reply)


def test_a_gate_decides_when_the_reply_to_a_watched_request_arrives(
    servers: list[RedisServer],
) -> None:
    link = Link(servers[0].address)
    gate = _Holding()
    link.watch = lambda command: command[0].upper() == b"SET"
    link.gate = gate
    try:
        client = through(link)
        assert client.get("k") is None  # not watched: straight through
        replies: list[object] = []
        setter = threading.Thread(target=lambda: replies.append(client.set("k", "v")))
        setter.start()
        setter.join(0.3)
        assert setter.is_alive(), "the reply to SET is held by the gate"
        assert servers[0].client().get("k") == b"v"  # the server did run it
        assert gate.seen == 1
        assert len(gate.held) == 1
        gate.opened.set()
        setter.join(2)
        assert replies == [True]
    finally:
        link.close()


def test_a_frozen_server_keeps_its_connections_and_answers_once_thawed(
    servers: list[RedisServer],
) -> None:
    server = servers[0]
    client = server.client(socket_timeout=0.2)
    client.set("k", "v")
    with server.frozen():
        assert server.is_frozen
        assert server.running
        with pytest.raises(redis.TimeoutError):
            client.get("k")
    assert not server.is_frozen
    assert server.client().get("k") == b"v"


def test_a_crashed_server_refuses_connections_and_restarts_empty(
    servers: list[RedisServer],
) -> None:
    server = servers[0]
    server.client().set("k", "v")
    server.crash()
    assert not server.running
    with pytest.raises(redis.ConnectionError):
        server.admin().ping()
    server.restart()
    assert server.running
    assert server.client().get("k") is None
    assert server.client().config_get("save") == {"save": ""}


def test_an_append_only_server_restarts_with_every_acknowledged_write(tmp_path: Path) -> None:
    server = start_redis_server(tmp_path / "aof", appendonly=True)
    try:
        assert server.client().config_get("appendfsync") == {"appendfsync": "always"}
        server.client().set("k", "v", px=30_000)
        server.crash()
        server.restart()
        assert server.client().get("k") == b"v"
        assert 0 < int(server.client().pttl("k")) <= 30_000
    finally:
        server.stop()


def test_stopping_a_frozen_server_thaws_it_first(tmp_path: Path) -> None:
    server = start_redis_server(tmp_path / "frozen")
    server.freeze()
    started = time.monotonic()
    server.stop()
    assert not server.running
    assert time.monotonic() - started < 10
