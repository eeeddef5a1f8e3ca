"""The servers an audit runs against: real ``redis-server`` processes or fakeredis.

Both come from the testbed (:class:`~lockguide_lab.testbed.RedisServer`,
:class:`~lockguide_lab.testbed.FakeServer`), the same servers the scenarios and
the test suite use; here they are wrapped as the :class:`Server` records an
adapter factory receives.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import redis

from lockguide_lab.audit.adapter import Server
from lockguide_lab.testbed import process
from lockguide_lab.testbed.fakeserver import FakeServer

__all__ = ["fake_servers", "real_servers", "server_at"]


def server_at(label: str, host: str, port: int) -> Server:
    """A :class:`Server` for an already running real server on ``host:port``."""

    def connect(**kwargs: Any) -> redis.Redis:
        kwargs.setdefault("socket_timeout", 5.0)
        return redis.Redis(host=host, port=port, **kwargs)

    return Server(label=label, connect=connect, address=(host, port))


@contextlib.contextmanager
def real_servers(count: int, *, executable: str | None = None) -> Iterator[list[Server]]:
    """Start ``count`` independent real servers; stop them on exit.

    Raises :class:`~lockguide_lab.testbed.ServerUnavailable` without ``redis-server``.
    """
    with process.servers(count, executable=executable) as started:
        yield [server_at(f"master-{i}", *s.address) for i, s in enumerate(started)]


def fake_servers(count: int) -> list[Server]:
    """``count`` independent in-process fakeredis servers (with Lua)."""
    servers = []
    for i in range(count):
        fake = FakeServer(label=f"fake-{i}")

        def connect(_fake: FakeServer = fake, **kwargs: Any) -> redis.Redis:
            client: redis.Redis = _fake.client(**kwargs)
            return client

        servers.append(Server(label=f"fake-{i}", connect=connect, address=None))
    return servers
