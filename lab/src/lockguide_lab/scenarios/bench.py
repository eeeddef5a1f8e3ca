"""Benches: the servers a scenario runs against, and what can be done to them.

A scenario never starts a server or touches a clock itself; it asks its bench.
The same scenario code then runs on two benches:

* :class:`FakeBench`: in-process fakeredis servers on a :class:`VirtualClock`.
  Needs no server, and every run lands on the same milliseconds. Failover and
  restart are *modelled* (see :class:`FakeFailoverPair` and
  :meth:`FakeServerHandle.crash_and_restart`).
* :class:`RealBench`: ``redis-server`` processes on a :class:`RealClock`.
  Failover is a real primary and replica (``REPLICAOF``), the replica's link
  running through a :class:`~lockguide_lab.scenarios.relay.Relay` that the scenario
  cuts; a restart is ``SIGKILL`` and a fresh start on the same port and data
  directory.

Clients handed out by a bench keep one address for the lock's server, and what
stands behind that address changes: after a failover it is the promoted replica
(as behind a virtual IP or a proxy that follows the primary), after a restart
the restarted process. Locks that open connections of their own from a client's
settings therefore follow too.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Protocol, cast

import redis
from redis.backoff import NoBackoff
from redis.exceptions import RedisError
from redis.retry import Retry

from lockguide.errors import BadArgument
from lockguide_lab.errors import ScenarioError
from lockguide_lab.scenarios.clock import Clock, RealClock, VirtualClock
from lockguide_lab.scenarios.relay import Relay

__all__ = [
    "Bench",
    "ClientBench",
    "FailoverPair",
    "FakeBench",
    "RealBench",
    "ServerHandle",
    "ServerProcess",
    "default_starter",
]


class ServerHandle:
    """One lock server on a bench.

    Attributes:
        label: a short name for the timeline (``"redis"``, ``"node-3"``).
    """

    label: str = "redis"

    def client(self) -> redis.Redis:
        """A client of this server that follows it across restarts."""
        raise NotImplementedError

    def crash_and_restart(self) -> None:
        """The server crashes and comes straight back, with whatever it persisted."""
        self.crash()
        self.restart()

    def crash(self) -> None:
        """The server crashes and stays down: every command to it fails until :meth:`restart`."""
        raise NotImplementedError

    def restart(self) -> None:
        """The crashed server starts again, with whatever it persisted."""
        raise NotImplementedError

    def link(self, delay_ms: float) -> redis.Redis:
        """A client of this server on a slower path: requests and replies take ``delay_ms`` more."""
        raise NotImplementedError

    def jump_clock(self, ms: float) -> None:
        """This server's clock jumps ``ms`` forward: every TTL on it is ``ms`` shorter."""
        raise NotImplementedError

    @property
    def persistent(self) -> bool:
        """Whether writes survive a crash (append-only file, fsync on every write)."""
        raise NotImplementedError


class FailoverPair:
    """A primary with one asynchronous replica, and a failover on demand."""

    def client(self) -> redis.Redis:
        """A client of the current primary; after :meth:`fail_over`, of the promoted replica."""
        raise NotImplementedError

    def sync(self) -> None:
        """Wait until the replica has every write made so far."""
        raise NotImplementedError

    def lag(self) -> None:
        """From now on the replica receives nothing: replication falls behind."""
        raise NotImplementedError

    def fail_over(self) -> None:
        """The primary dies and the replica is promoted with whatever it had received."""
        raise NotImplementedError


class Bench:
    """Where a scenario runs: a clock, lock servers, a resource, a failover pair.

    Attributes:
        clock: the clock scenarios read and advance.
        label: a short description for timelines (``"fakeredis, virtual clock"``).
    """

    clock: Clock
    label: str

    def server(self, *, persistent: bool = False) -> ServerHandle:
        """A fresh, empty lock server (persistent: append-only, fsync always)."""
        raise NotImplementedError

    def servers(self, count: int, *, persistent: bool = False) -> list[ServerHandle]:
        """``count`` independent, empty lock servers (the masters of a Redlock)."""
        raise NotImplementedError

    def failover_pair(self) -> FailoverPair:
        """A fresh primary and replica, in sync and empty."""
        raise NotImplementedError

    def resource_client(self) -> redis.Redis:
        """A client of the server that holds the protected resource.

        It is never one of the lock servers, so a failover or a restart of the
        lock's server leaves the data alone, as a separate database would.
        """
        raise NotImplementedError

    def key(self, name: str) -> str:
        """The Redis key a scenario uses for ``name`` (a bench on a shared server prefixes it)."""
        return name

    def unreachable_client(self) -> redis.Redis:
        """A client of a server nobody can reach: every command raises ``ConnectionError``.

        For a node that one client cannot see (a partition), e.g. in a Redlock
        whose majority is formed from the nodes it can reach.
        """
        import socket

        with socket.socket() as probe:  # a loopback port with nobody listening on it
            probe.bind(("127.0.0.1", 0))
            port = int(probe.getsockname()[1])
        return redis.Redis(
            host="127.0.0.1",
            port=port,
            socket_connect_timeout=0.05,
            socket_timeout=0.05,
            retry=Retry(NoBackoff(), 0),
        )

    @contextlib.contextmanager
    def running(self) -> Iterator[None]:
        """Around one scenario run: installs the clock; afterwards, cleans up."""
        with self.clock.installed():
            try:
                yield
            finally:
                self.reset()

    def reset(self) -> None:
        """Forget everything the last run created."""

    def close(self) -> None:
        """Stop whatever the bench started."""

    def __enter__(self) -> Bench:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _copy_keys(source: redis.Redis, target: redis.Redis) -> None:
    """Make ``target`` hold exactly ``source``'s keys, with their remaining TTLs."""
    target.flushall()
    for name in cast(list[bytes], source.keys("*")):
        dumped = source.dump(name)
        if dumped is None:
            continue
        pttl = int(source.pttl(name))
        target.restore(name, max(pttl, 0), dumped, replace=True)


# -- fakeredis ----------------------------------------------------------------------------


class FakeServerHandle(ServerHandle):
    """A lock server in this process (fakeredis), on the bench's virtual clock."""

    def __init__(self, bench: FakeBench, label: str, *, persistent: bool = False) -> None:
        self._bench = bench
        self.label = label
        self._persistent = persistent
        self._server = bench._new_server(label)

    @property
    def persistent(self) -> bool:
        return self._persistent

    def client(self) -> redis.Redis:
        client: redis.Redis = self._server.client()
        return client

    def crash(self) -> None:
        """Modelled in place: the in-process server refuses every command from now on.

        Without persistence its keys are gone; a persistent server keeps every
        key with the TTL it had left, which is what replaying an append-only
        file written with ``appendfsync always`` restores (Redis stores expiries
        as absolute times, so a lease keeps running while the server is down).
        Either way it forgets its loaded scripts.
        """
        admin = self._server.client()
        if not self._persistent:
            admin.flushall()
        admin.script_flush()
        self._server.connected = False

    def restart(self) -> None:
        """The same in-process server accepts commands again, as the restarted process."""
        self._server.connected = True

    def link(self, delay_ms: float) -> redis.Redis:
        client: redis.Redis = self._bench._fake.delayed_client(self._server, delay_ms)
        return client

    def jump_clock(self, ms: float) -> None:
        """Exact: this server's clock runs ``ms`` ahead from now on."""
        self._server.skew_ms += ms


class FakeFailoverPair(FailoverPair):
    """Modelled asynchronous replication, behind one in-process server's address.

    :meth:`sync` records what the replica has: every key of the primary, with
    the moment each expires. Nothing written after that reaches it. At
    :meth:`fail_over` the address that clients use starts serving the replica's
    data (its keys, their TTLs still running, no scripts loaded), as after a
    promotion behind a virtual IP. :meth:`lag` therefore changes nothing here;
    it is where, on a real pair, the link is cut.
    """

    def __init__(self, bench: FakeBench) -> None:
        self._bench = bench
        self._endpoint = bench._new_server("primary")
        self._replica: list[tuple[bytes, bytes, float | None]] = []

    def client(self) -> redis.Redis:
        client: redis.Redis = self._endpoint.client()
        return client

    def sync(self) -> None:
        source = self._endpoint.client()
        now_ms = self._bench.clock.now_ms()
        self._replica = []
        for name in cast(list[bytes], source.keys("*")):
            dumped = source.dump(name)
            if dumped is None:
                continue
            pttl = int(source.pttl(name))
            self._replica.append((name, dumped, now_ms + pttl if pttl > 0 else None))

    def lag(self) -> None:
        """Nothing to do: in this model the replica only changes on :meth:`sync`."""

    def fail_over(self) -> None:
        target = self._endpoint.client()
        target.flushall()
        target.script_flush()
        now_ms = self._bench.clock.now_ms()
        for name, dumped, expires_at in self._replica:
            if expires_at is None:
                target.restore(name, 0, dumped, replace=True)
            elif expires_at > now_ms:
                target.restore(name, int(expires_at - now_ms), dumped, replace=True)


class FakeBench(Bench):
    """In-process fakeredis servers on one :class:`VirtualClock`. Needs no server."""

    def __init__(self) -> None:
        from lockguide_lab.scenarios import _fake

        self._fake = _fake
        self.clock: VirtualClock = VirtualClock()
        self.label = "fakeredis, virtual clock"
        self._resource = self._new_server("resource")

    def _new_server(self, label: str) -> Any:
        return self._fake.ClockedFakeServer(self.clock, label)

    def server(self, *, persistent: bool = False) -> ServerHandle:
        return FakeServerHandle(self, "redis", persistent=persistent)

    def servers(self, count: int, *, persistent: bool = False) -> list[ServerHandle]:
        _check_count(count)
        return [
            FakeServerHandle(self, f"node-{i + 1}", persistent=persistent) for i in range(count)
        ]

    def failover_pair(self) -> FailoverPair:
        return FakeFailoverPair(self)

    def resource_client(self) -> redis.Redis:
        client: redis.Redis = self._resource.client()
        return client

    def unreachable_client(self) -> redis.Redis:
        """A fakeredis client of a server that is down (``FakeServer.connected = False``)."""
        server = self._new_server("unreachable")
        server.connected = False
        client: redis.Redis = server.client()
        return client

    def reset(self) -> None:
        self._resource.client().flushall()


# -- real servers -------------------------------------------------------------------------


class ServerProcess(Protocol):
    """A ``redis-server`` process we can start, stop and kill (a mirakuru executor)."""

    host: str
    port: int

    def start(self) -> Any: ...  # pragma: no cover - protocol

    def stop(self) -> Any: ...  # pragma: no cover - protocol

    def kill(self) -> Any: ...  # pragma: no cover - protocol


#: Starts one ``redis-server`` on a free loopback port; ``appendonly`` says whether
#: it loads and writes an append-only file. It must not share a data directory.
ServerStarter = Callable[[bool], ServerProcess]


def default_starter(base: Path) -> ServerStarter:
    """Start servers with pytest-redis's ``RedisExecutor``, each in its own folder of ``base``
    (through the audit's starter, the one way this project starts a server)."""
    exe = shutil.which("redis-server")
    if exe is None:
        raise ScenarioError(
            "redis-server is not on PATH (apt-get install redis-server); "
            "use FakeBench to run the scenarios without a server"
        )
    executable: str = exe
    counter = iter(range(1, 1_000_000))

    def start(appendonly: bool) -> ServerProcess:
        from lockguide_lab.audit.servers import start_redis_server

        executor = start_redis_server(
            base / f"server-{next(counter)}", executable=executable, appendonly=appendonly
        )
        return cast(ServerProcess, executor)

    return start


def _connect(process: ServerProcess) -> redis.Redis:
    """A client that fails at once, with no retries, while the server is down."""
    return redis.Redis(
        host=process.host,
        port=process.port,
        socket_timeout=5.0,
        socket_connect_timeout=1.0,
        retry=Retry(NoBackoff(), 0),
    )


def _configure(process: ServerProcess, *, persistent: bool) -> None:
    """No snapshot ever; with ``persistent``, fsync the append-only file on every write."""
    with _connect(process) as admin:
        admin.config_set("save", "")
        if persistent:
            admin.config_set("appendfsync", "always")


def _wait_until(check: Callable[[], bool], what: str, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        with contextlib.suppress(RedisError):
            if check():
                return
        if time.monotonic() > deadline:
            raise ScenarioError(f"gave up waiting after {timeout_s:.0f} s: {what}")
        time.sleep(0.01)


class RealServerHandle(ServerHandle):
    """A ``redis-server`` process; crash and restart are ``SIGKILL`` and a new start."""

    def __init__(self, bench: RealBench, label: str, *, persistent: bool) -> None:
        self.label = label
        self._persistent = persistent
        self.process = bench._start(persistent)
        _configure(self.process, persistent=persistent)
        self._clients: list[redis.Redis] = []
        self._relays: list[Relay] = []

    @property
    def persistent(self) -> bool:
        return self._persistent

    def client(self) -> redis.Redis:
        client = _connect(self.process)
        self._clients.append(client)
        return client

    def crash(self) -> None:
        """``SIGKILL``: connections to it are refused until :meth:`restart`."""
        self.process.kill()

    def restart(self) -> None:
        """Start again on the same port and data directory.

        A server started with ``appendonly yes`` replays its append-only file
        (with ``appendfsync always``, every acknowledged write is in it); one
        without persistence comes back empty.
        """
        self.process.start()
        _configure(self.process, persistent=self._persistent)
        for client in self._clients:
            client.connection_pool.disconnect()

    def link(self, delay_ms: float) -> redis.Redis:
        """A client through a loopback :class:`Relay` holding requests and replies ``delay_ms``."""
        relay = Relay((self.process.host, self.process.port), delay_s=delay_ms / 1000.0)
        self._relays.append(relay)
        host, port = relay.address
        client = redis.Redis(host=host, port=port, socket_timeout=5.0)
        self._clients.append(client)
        return client

    def jump_clock(self, ms: float) -> None:
        """Emulated: a real server's clock cannot be moved from here.

        Every key's remaining TTL is shortened by ``ms`` (a key with less left
        is deleted), which is what a forward jump of the server's clock does
        to keys with a TTL, since Redis compares absolute expiry times with
        its clock.
        """
        with _connect(self.process) as admin:
            for name in admin.scan_iter():
                pttl = int(cast(int, admin.pttl(name)))
                if pttl < 0:
                    continue
                if pttl <= ms:
                    admin.delete(name)
                else:
                    admin.pexpire(name, int(pttl - ms))

    def stop(self) -> None:
        for client in self._clients:
            with contextlib.suppress(Exception):
                client.close()
        for relay in self._relays:
            relay.close()
        with contextlib.suppress(Exception):
            self.process.stop()


class RealFailoverPair(FailoverPair):
    """A real primary and replica (``REPLICAOF``), behind one address.

    Clients connect to a front :class:`Relay` that forwards to the primary and,
    after :meth:`fail_over`, to the promoted replica, as a virtual IP or a
    proxy that follows the primary does. The replica's own link to the primary
    runs through a second relay, which :meth:`lag` cuts.
    """

    def __init__(self, bench: RealBench) -> None:
        self.primary = bench._start(False)
        self.replica = bench._start(False)
        for process in (self.primary, self.replica):
            _configure(process, persistent=False)
        with _connect(self.primary) as primary:
            # Redis 7 waits 5 s for more replicas before a diskless full sync; one is all.
            primary.config_set("repl-diskless-sync-delay", 0)
        self.link = Relay((self.primary.host, self.primary.port))
        self.front = Relay((self.primary.host, self.primary.port))
        self._clients: list[redis.Redis] = []
        with _connect(self.replica) as replica:
            replica.replicaof(*self.link.address)
            _wait_until(
                lambda: _info(replica, "master_link_status") == "up",
                "the replica's link to its primary did not come up",
            )

    def client(self) -> redis.Redis:
        host, port = self.front.address
        client = redis.Redis(host=host, port=port, socket_timeout=5.0)
        self._clients.append(client)
        return client

    def sync(self) -> None:
        """``WAIT 1``: the primary confirms that its replica has every write so far."""
        with _connect(self.primary) as primary:
            acked = int(cast(int, primary.execute_command("WAIT", 1, 5000)))
        if acked < 1:
            raise ScenarioError("the replica did not acknowledge the primary's writes")

    def lag(self) -> None:
        """Cut the replication link: the replica receives nothing more."""
        self.link.cut()

    def fail_over(self) -> None:
        """``SIGKILL`` the primary, ``REPLICAOF NO ONE`` on the replica, point the address at it."""
        self.primary.kill()
        with _connect(self.replica) as replica:
            replica.replicaof("NO", "ONE")
            _wait_until(lambda: _info(replica, "role") == "master", "the replica was not promoted")
        self.front.retarget((self.replica.host, self.replica.port))
        for client in self._clients:
            client.connection_pool.disconnect()

    def stop(self) -> None:
        for client in self._clients:
            with contextlib.suppress(Exception):
                client.close()
        self.link.close()
        self.front.close()
        for process in (self.replica, self.primary):
            with contextlib.suppress(Exception):
                process.stop()


def _info(client: redis.Redis, field: str) -> str:
    info = client.info("replication")
    return str(info.get(field, ""))


class RealBench(Bench):
    """Real ``redis-server`` processes on a :class:`RealClock`.

    Args:
        start: starts one server (see :data:`ServerStarter`); by default
            :func:`default_starter` in a temporary folder.
        resource: a client of an already running server for the protected
            resource; by default the bench starts one.

    Servers that a scenario run asked for are stopped when the run ends;
    the resource server lives as long as the bench.
    """

    def __init__(
        self, start: ServerStarter | None = None, *, resource: redis.Redis | None = None
    ) -> None:
        self._tmp: str | None = None
        if start is None:
            self._tmp = tempfile.mkdtemp(prefix="lockguide-bench-")
            start = default_starter(Path(self._tmp))
        self._start = start
        self.clock = RealClock()
        self.label = "redis-server, real time"
        self._resource_process: ServerProcess | None = None
        if resource is None:
            self._resource_process = start(False)
            resource = _connect(self._resource_process)
        self._resource = resource
        self._started: list[RealServerHandle | RealFailoverPair] = []

    def server(self, *, persistent: bool = False) -> ServerHandle:
        handle = RealServerHandle(self, "redis", persistent=persistent)
        self._started.append(handle)
        return handle

    def servers(self, count: int, *, persistent: bool = False) -> list[ServerHandle]:
        _check_count(count)
        handles = [
            RealServerHandle(self, f"node-{i + 1}", persistent=persistent) for i in range(count)
        ]
        self._started.extend(handles)
        return list(handles)

    def failover_pair(self) -> FailoverPair:
        pair = RealFailoverPair(self)
        self._started.append(pair)
        return pair

    def resource_client(self) -> redis.Redis:
        return self._resource

    def reset(self) -> None:
        for started in self._started:
            started.stop()
        self._started.clear()
        self._resource.flushall()

    def close(self) -> None:
        self.reset()
        self._resource.close()
        if self._resource_process is not None:
            with contextlib.suppress(Exception):
                self._resource_process.stop()
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)


def _check_count(count: object) -> int:
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise BadArgument(f"count must be a whole number of servers >= 1, got {count!r}")
    return count


# -- a server you already run -------------------------------------------------------------


class _ClientServer(ServerHandle):
    def __init__(self, client: redis.Redis) -> None:
        self._client = client

    @property
    def persistent(self) -> bool:
        return False

    def client(self) -> redis.Redis:
        return self._client

    def crash(self) -> None:
        raise ScenarioError("ClientBench cannot crash a server it did not start: use RealBench")

    def restart(self) -> None:
        raise ScenarioError("ClientBench cannot restart a server it did not start: use RealBench")

    def link(self, delay_ms: float) -> redis.Redis:
        raise ScenarioError("ClientBench does not slow down your network: use RealBench")

    def jump_clock(self, ms: float) -> None:
        raise ScenarioError("ClientBench does not move the clock of your server: use FakeBench")


class ClientBench(Bench):
    """Run the single-server scenarios against a server you already have, in real time.

    Lock and resource live on ``client``'s server, under keys that start with
    ``prefix``; the bench deletes only those keys. Scenarios that need to crash,
    restart or fail over a server (or move its clock) need :class:`RealBench`
    or :class:`FakeBench` and raise :class:`~lockguide.errors.ScenarioError` here.

    Args:
        client: a connected ``redis.Redis``.
        prefix: put in front of every key the scenarios use.
    """

    def __init__(self, client: redis.Redis, *, prefix: str = "lockguide-lab:") -> None:
        from lockguide import _validate

        self._client = _validate.check_client(client)
        self._prefix = _validate.check_key(prefix)
        self.clock = RealClock()
        self.label = "your redis, real time"

    def key(self, name: str) -> str:
        return self._prefix + name

    def server(self, *, persistent: bool = False) -> ServerHandle:
        if persistent:
            raise ScenarioError("ClientBench cannot make your server persistent: use RealBench")
        return _ClientServer(self._client)

    def servers(self, count: int, *, persistent: bool = False) -> list[ServerHandle]:
        raise ScenarioError("ClientBench has one server; for several use RealBench or FakeBench")

    def failover_pair(self) -> FailoverPair:
        raise ScenarioError("ClientBench cannot fail your server over: use RealBench or FakeBench")

    def resource_client(self) -> redis.Redis:
        return self._client

    def reset(self) -> None:
        names = list(self._client.scan_iter(match=self._prefix + "*"))
        if names:
            self._client.delete(*names)
