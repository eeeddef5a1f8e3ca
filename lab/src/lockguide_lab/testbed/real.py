"""The testbed of real ``redis-server`` processes, on real time."""

from __future__ import annotations

import contextlib
import itertools
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import cast

import redis
from redis.exceptions import RedisError

from lockguide_lab.errors import ScenarioError
from lockguide_lab.testbed.base import FailoverPair, LockServer, Testbed, check_count
from lockguide_lab.testbed.clock import RealClock
from lockguide_lab.testbed.link import Link
from lockguide_lab.testbed.process import RedisServer, ServerUnavailable, redis_server_executable

__all__ = ["RealFailoverPair", "RealLockServer", "RealTestbed"]


def _wait_until(check: Callable[[], bool], what: str, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        with contextlib.suppress(RedisError):
            if check():
                return
        if time.monotonic() > deadline:
            raise ScenarioError(f"gave up waiting after {timeout_s:.0f} s: {what}")
        time.sleep(0.01)


class RealLockServer(LockServer):
    """A ``redis-server`` process; crash and restart are ``SIGKILL`` and a new start."""

    def __init__(self, testbed: RealTestbed, label: str, *, persistent: bool) -> None:
        self.label = label
        self.process = testbed._start(persistent)
        self._clients: list[redis.Redis] = []
        self._links: list[Link] = []

    @property
    def persistent(self) -> bool:
        return self.process.appendonly

    def client(self) -> redis.Redis:
        client = self.process.admin()
        self._clients.append(client)
        return client

    def crash(self) -> None:
        """``SIGKILL``: connections to it are refused until :meth:`restart`."""
        self.process.crash()

    def restart(self) -> None:
        """Start again on the same port and data directory.

        A server started with ``appendonly yes`` replays its append-only file
        (with ``appendfsync always``, every acknowledged write is in it); one
        without persistence comes back empty.
        """
        self.process.restart()
        for client in self._clients:
            client.connection_pool.disconnect()

    def link(self, delay_ms: float) -> redis.Redis:
        """A client through a loopback :class:`Link` holding requests and replies ``delay_ms``."""
        link = Link(self.process.address, delay_s=delay_ms / 1000.0)
        self._links.append(link)
        host, port = link.address
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
        with self.process.admin() as admin:
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
        for link in self._links:
            link.close()
        self.process.stop()


class RealFailoverPair(FailoverPair):
    """A real primary and replica (``REPLICAOF``), behind one address.

    Clients connect to a front :class:`Link` that forwards to the primary and,
    after :meth:`fail_over`, to the promoted replica, as a virtual IP or a
    proxy that follows the primary does. The replica's own link to the primary
    runs through a second :class:`Link`, which :meth:`lag` cuts.
    """

    def __init__(self, testbed: RealTestbed) -> None:
        self.primary = testbed._start(False)
        self.replica = testbed._start(False)
        with self.primary.admin() as primary:
            # Redis 7 waits 5 s for more replicas before a diskless full sync; one is all.
            primary.config_set("repl-diskless-sync-delay", 0)
        self.replication = Link(self.primary.address)
        self.front = Link(self.primary.address)
        self._clients: list[redis.Redis] = []
        with self.replica.admin() as replica:
            replica.replicaof(*self.replication.address)
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
        """``WAIT 1``: the primary confirms that its replica has every write so far.

        ``WAIT`` is documented for the writes made on the calling connection, so
        it writes first: replicas acknowledge a position in one ordered stream,
        so acknowledging that write covers every earlier one.
        """
        with self.primary.admin() as primary:
            primary.set("lockguide:synced", 1)
            acked = int(cast(int, primary.execute_command("WAIT", 1, 5000)))
        if acked < 1:
            raise ScenarioError("the replica did not acknowledge the primary's writes")

    def lag(self) -> None:
        """Cut the replication link: the replica receives nothing more."""
        self.replication.cut()

    def fail_over(self) -> None:
        """``SIGKILL`` the primary, ``REPLICAOF NO ONE`` on the replica, point the address at it."""
        self.primary.crash()
        with self.replica.admin() as replica:
            replica.replicaof("NO", "ONE")
            _wait_until(lambda: _info(replica, "role") == "master", "the replica was not promoted")
        self.front.retarget(self.replica.address)
        for client in self._clients:
            client.connection_pool.disconnect()

    def stop(self) -> None:
        for client in self._clients:
            with contextlib.suppress(Exception):
                client.close()
        self.replication.close()
        self.front.close()
        for process in (self.replica, self.primary):
            process.stop()


def _info(client: redis.Redis, field: str) -> str:
    info = client.info("replication")
    return str(info.get(field, ""))


class RealTestbed(Testbed):
    """Real ``redis-server`` processes (:class:`RedisServer`) on a :class:`RealClock`.

    Args:
        base: the folder the servers' data directories go in (default: a
            temporary folder, removed by :meth:`close`).
        resource: a client of an already running server for the protected
            resource; by default the testbed starts one.

    Servers that a scenario run asked for are stopped when the run ends;
    the resource server lives as long as the testbed.
    """

    def __init__(self, base: Path | None = None, *, resource: redis.Redis | None = None) -> None:
        try:
            self._executable = redis_server_executable()
        except ServerUnavailable as error:
            raise ScenarioError(
                f"{error}; use FakeTestbed to run the scenarios without a server"
            ) from None
        self._tmp: str | None = None
        if base is None:
            self._tmp = tempfile.mkdtemp(prefix="lockguide-testbed-")
            base = Path(self._tmp)
        self._base = base
        self._numbers = itertools.count(1)
        self.clock = RealClock()
        self.label = "redis-server, real time"
        self._resource_process: RedisServer | None = None
        if resource is None:
            self._resource_process = self._start(False)
            resource = self._resource_process.admin()
        self._resource = resource
        self._started: list[RealLockServer | RealFailoverPair] = []

    def _start(self, appendonly: bool) -> RedisServer:
        folder = self._base / f"server-{next(self._numbers)}"
        return RedisServer(folder, appendonly=appendonly, executable=self._executable)

    def server(self, *, persistent: bool = False) -> LockServer:
        handle = RealLockServer(self, "redis", persistent=persistent)
        self._started.append(handle)
        return handle

    def servers(self, count: int, *, persistent: bool = False) -> list[LockServer]:
        check_count(count)
        handles = [
            RealLockServer(self, f"node-{i + 1}", persistent=persistent) for i in range(count)
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
            self._resource_process.stop()
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
