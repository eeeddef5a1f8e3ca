"""Test support: the two backends and real redis-server processes.

Real servers are started with pytest-redis's ``RedisExecutor`` (a mirakuru
``TCPExecutor``) on a free loopback port, so no process code is hand-rolled.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import fakeredis
import port_for
import pytest
import redis
from pytest_redis.executor import RedisExecutor

REQUIRE_REAL_ENV = "LOCKGUIDE_REQUIRE_REAL_REDIS"
LOOPBACK = "127.0.0.1"


def redis_server_executable() -> str:
    """Path of ``redis-server``; skips (or fails under CI's requirement) when absent."""
    exe = shutil.which("redis-server")
    if exe is not None:
        return exe
    reason = (
        "redis-server is not on PATH, so the real-Redis half of the suite cannot run "
        "(install it with: apt-get install redis-server)"
    )
    if os.environ.get(REQUIRE_REAL_ENV) == "1":
        pytest.fail(f"{REQUIRE_REAL_ENV}=1 but {reason}", pytrace=False)
    pytest.skip(reason)


def start_redis_server(datadir: Path, *, appendonly: bool = False) -> RedisExecutor:
    """Start one independent ``redis-server`` on a free loopback port and wait for it."""
    datadir.mkdir(parents=True, exist_ok=True)
    port = port_for.get_port(None)
    assert port is not None, "no free loopback port"
    executor = RedisExecutor(
        executable=redis_server_executable(),
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


@dataclass
class Backend:
    """One place where Redis lives for a test: fakeredis or a real server.

    ``client()`` makes a new client; ``redis_class`` is what ``redis.Redis`` is
    replaced with while a docs example runs, so that the example's plain
    ``redis.Redis()`` reaches this backend.
    """

    name: str
    redis_class: type[redis.Redis]

    def client(self, **kwargs: Any) -> redis.Redis:
        return self.redis_class(**kwargs)

    def patch_redis_module(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(redis, "Redis", self.redis_class)


def fake_backend() -> Backend:
    """A fresh, empty in-process server with Lua support."""
    server = fakeredis.FakeServer()

    class FakeRedisOnServer(fakeredis.FakeRedis):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            kwargs.setdefault("server", server)
            super().__init__(*args, **kwargs)

    return Backend("fakeredis", FakeRedisOnServer)


def real_backend(executor: RedisExecutor) -> Backend:
    """Clients for a running server, which is flushed first so each test starts empty."""
    host, port = executor.host, executor.port
    original: type[redis.Redis] = redis.Redis

    class RedisOnTestServer(original):  # type: ignore[misc, valid-type]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            kwargs.setdefault("host", host)
            kwargs.setdefault("port", port)
            kwargs.setdefault("socket_timeout", 5.0)
            super().__init__(*args, **kwargs)

    with original(host=host, port=port) as admin:
        admin.flushall()
        admin.script_flush()
    return Backend("redis-server", RedisOnTestServer)


BackendFactory = Callable[[], Backend]


# -- PostgreSQL, for the SQL fenced store ---------------------------------------------

REQUIRE_POSTGRES_ENV = "LOCKGUIDE_REQUIRE_POSTGRES"


def pg_ctl_executable() -> str:
    """Path of ``pg_ctl``; skips (or fails under CI's requirement) when absent.

    Debian's ``postgresql`` package keeps it in ``/usr/lib/postgresql/NN/bin``,
    which is not on PATH, so that is searched too (newest version first).
    """
    found = shutil.which("pg_ctl")
    if found is None:
        versions = sorted(
            Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"),
            key=lambda p: int(p.parts[-3]) if p.parts[-3].isdigit() else 0,
            reverse=True,
        )
        found = str(versions[0]) if versions else None
    if found is not None:
        return found
    reason = (
        "pg_ctl is not installed, so the PostgreSQL tests of the SQL fenced store cannot "
        "run (install it with: apt-get install postgresql)"
    )
    if os.environ.get(REQUIRE_POSTGRES_ENV) == "1":
        pytest.fail(f"{REQUIRE_POSTGRES_ENV}=1 but {reason}", pytrace=False)
    pytest.skip(reason)


def start_postgres() -> tuple[Any, Path]:
    """Start a throw-away PostgreSQL cluster on a free loopback port.

    Uses pytest-postgresql's ``PostgreSQLExecutor`` (``initdb`` + ``pg_ctl``,
    trust authentication, user ``postgres``). PostgreSQL refuses to run as
    root, and CI runs as root: then every ``pg_ctl`` call goes through a small
    wrapper that runs it as the ``postgres`` system user (created by the Debian
    package), in a directory that user owns. Returns the executor and that
    directory (remove it after ``stop()``).
    """
    import pwd
    import shlex
    import tempfile

    from pytest_postgresql.executors import PostgreSQLExecutor

    executable = pg_ctl_executable()
    base = Path(tempfile.mkdtemp(prefix="lockguide-pg-"))
    if os.geteuid() == 0:
        try:
            owner = pwd.getpwnam("postgres")
        except KeyError:
            pytest.fail(
                "running as root needs the 'postgres' system user (apt-get install postgresql)"
            )
        os.chown(base, owner.pw_uid, owner.pw_gid)
        wrapper = base / "pg_ctl-as-postgres"
        wrapper.write_text(
            f'#!/bin/sh\nexec runuser -u postgres -- {shlex.quote(executable)} "$@"\n', "utf-8"
        )
        wrapper.chmod(0o755)
        executable = str(wrapper)
    port = port_for.get_port(None)
    assert port is not None, "no free loopback port"
    executor = PostgreSQLExecutor(
        executable=executable,
        host=LOOPBACK,
        port=port,
        datadir=str(base / "data"),
        unixsocketdir=str(base),
        logfile=str(base / "postgresql.log"),
        startparams="-w",
        dbname="postgres",
        user="postgres",
        timeout=60,
    )
    executor.start()
    return executor, base
