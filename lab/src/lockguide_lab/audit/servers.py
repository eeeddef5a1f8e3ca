"""The servers an audit runs against: real ``redis-server`` processes or fakeredis.

Real servers are started through pytest-redis's ``RedisExecutor`` (a mirakuru
executor that waits until the server answers) on free loopback ports, the same
way the test suite starts its own. pytest-redis, mirakuru, port-for and
fakeredis are development tools, not dependencies of ``lockguide``: they are
imported only when an audit asks for them.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import redis

from lockguide_lab.audit.adapter import Server

__all__ = ["BackendUnavailable", "fake_servers", "real_servers", "start_redis_server"]

LOOPBACK = "127.0.0.1"


class BackendUnavailable(RuntimeError):
    """The requested backend cannot be started here (a missing binary or package)."""


def start_redis_server(
    datadir: Path, *, executable: str | None = None, appendonly: bool = False
) -> Any:
    """Start one independent ``redis-server`` on a free loopback port and wait for it.

    Returns the running ``RedisExecutor``; call ``.stop()`` on it when done.
    """
    exe = executable or shutil.which("redis-server")
    if exe is None:
        raise BackendUnavailable(
            "redis-server is not on PATH (apt-get install redis-server), "
            "or run the audit with --backend fake"
        )
    try:
        import port_for
        from pytest_redis.executor import RedisExecutor
    except ImportError as error:  # pragma: no cover - dev environment has them
        raise BackendUnavailable(
            "starting real servers needs pytest-redis and port-for "
            "(pip install pytest-redis), or run the audit with --backend fake"
        ) from error
    datadir.mkdir(parents=True, exist_ok=True)
    port = port_for.get_port(None)
    if port is None:  # pragma: no cover - port-for always finds one on loopback
        raise BackendUnavailable("no free loopback port")
    executor = RedisExecutor(
        executable=exe,
        databases=16,
        redis_timeout=30,
        loglevel="warning",
        host=LOOPBACK,
        port=port,
        datadir=datadir,
        startup_timeout=30,
        appendonly="yes" if appendonly else "no",
    )
    executor.start()
    return executor


def _real_server(label: str, host: str, port: int) -> Server:
    def connect(**kwargs: Any) -> redis.Redis:
        kwargs.setdefault("socket_timeout", 5.0)
        return redis.Redis(host=host, port=port, **kwargs)

    return Server(label=label, connect=connect, address=(host, port))


def server_at(label: str, host: str, port: int) -> Server:
    """A :class:`Server` for an already running real server (e.g. one the tests started)."""
    return _real_server(label, host, port)


@contextlib.contextmanager
def real_servers(count: int, *, executable: str | None = None) -> Iterator[list[Server]]:
    """Start ``count`` independent real servers; stop them on exit."""
    executors: list[Any] = []
    with tempfile.TemporaryDirectory(prefix="lockguide-audit-") as tmp:
        try:
            for i in range(count):
                executors.append(
                    start_redis_server(Path(tmp) / f"master-{i}", executable=executable)
                )
            yield [_real_server(f"master-{i}", ex.host, ex.port) for i, ex in enumerate(executors)]
        finally:
            for ex in executors:
                with contextlib.suppress(Exception):
                    ex.stop()


def fake_servers(count: int) -> list[Server]:
    """``count`` independent in-process fakeredis servers (with Lua)."""
    try:
        import fakeredis
    except ImportError as error:  # pragma: no cover - dev environment has it
        raise BackendUnavailable("the fake backend needs fakeredis[lua]") from error
    servers = []
    for i in range(count):
        fake = fakeredis.FakeServer()

        def connect(_fake: Any = fake, **kwargs: Any) -> redis.Redis:
            client: redis.Redis = fakeredis.FakeRedis(server=_fake, **kwargs)
            return client

        servers.append(Server(label=f"fake-{i}", connect=connect, address=None))
    return servers
