"""The deployments readers run: a primary and replica behind Sentinel, and a Redis Cluster.

Both are made of :class:`~lockguide_lab.testbed.process.RedisServer` processes
(pytest-redis's executor, free loopback ports), so they freeze, crash and
restart like every other server of the lab. The Sentinels are ``redis-server
--sentinel`` processes run by a mirakuru ``TCPExecutor``; the cluster is
joined with ``redis-cli --cluster create``.

Losing a write to asynchronous replication, on purpose and every time
(:func:`hold_back_replication`): the replica is frozen (``SIGSTOP``) and the
primary closes its replication connection (``CLIENT KILL TYPE replica``), so a
write made now exists on the primary alone. :func:`crash_before_replication`
then kills the primary (``SIGKILL``, its replication backlog goes with it)
*before* thawing the replica, which finds its primary gone and is promoted by
the Sentinels, or by the cluster, without that write. Nothing here races the
replication stream: the write never had a way to reach the replica.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, cast

import redis
from redis.cluster import RedisCluster
from redis.exceptions import RedisError
from redis.sentinel import Sentinel

from lockguide_lab.testbed.process import (
    LOOPBACK,
    RedisServer,
    ServerUnavailable,
    redis_server_executable,
)

__all__ = [
    "ClusterDeployment",
    "SentinelDeployment",
    "crash_before_replication",
    "hold_back_replication",
    "wait_until",
]


def wait_until(check: Callable[[], object], what: str, timeout_s: float = 30.0) -> None:
    """Poll ``check`` every 50 ms until it is true; raise ``TimeoutError`` naming ``what``."""
    deadline = time.monotonic() + timeout_s
    while True:
        with contextlib.suppress(RedisError, OSError):
            if check():
                return
        if time.monotonic() > deadline:
            raise TimeoutError(f"gave up after {timeout_s:.0f} s waiting for {what}")
        time.sleep(0.05)


def _info(server: RedisServer, section: str) -> dict[str, Any]:
    with server.admin() as admin:
        return cast(dict[str, Any], admin.info(section))


def _configure(server: RedisServer) -> None:
    """What a deployment sets on each of its servers (again after a restart)."""
    with server.admin() as admin:
        # Redis 7 waits 5 s for more replicas before a diskless full sync.
        admin.config_set("repl-diskless-sync-delay", 0)


def _acknowledged(primary: RedisServer) -> bool:
    """A write on ``primary`` that a replica acknowledges within 500 ms (``WAIT``)."""
    with primary.admin() as admin, admin.pipeline(transaction=False) as pipe:
        pipe.set("lockguide:acknowledged", 1)
        pipe.wait(1, 500)
        return int(pipe.execute()[1]) >= 1


def hold_back_replication(primary: RedisServer, replica: RedisServer) -> None:
    """From now on, writes to ``primary`` cannot reach ``replica`` (see the module).

    The replica is frozen, so it cannot reconnect; the primary drops the
    replication connection, so nothing more is sent on it.
    """
    replica.freeze()
    with primary.admin() as admin:
        admin.client_kill_filter(_type="replica")
    wait_until(
        lambda: int(_info(primary, "replication")["connected_slaves"]) == 0,
        "the primary to drop its replica",
    )


def crash_before_replication(primary: RedisServer, replica: RedisServer) -> None:
    """``SIGKILL`` the primary, then thaw the replica: what it never received is lost."""
    primary.crash()
    replica.thaw()


def _free_port() -> int:
    import port_for

    port = port_for.get_port(None)
    if port is None:  # pragma: no cover - port-for always finds one on loopback
        raise ServerUnavailable("no free loopback port")
    return int(port)


def _sentinel_executor(port: int, conf: Path, executable: str) -> Any:
    from mirakuru import TCPExecutor

    return TCPExecutor([executable, str(conf), "--sentinel"], host=LOOPBACK, port=port, timeout=30)


class SentinelDeployment:
    """A primary with one replica watched by three Sentinels (quorum 2), on loopback.

    Args:
        base: a folder for the servers' data and the Sentinels' configuration files.
        service: the name the Sentinels monitor the primary under.
        solo_services: more services, each a lone master with no replica (so a
            Redlock can be given several Sentinel-managed masters).
        down_after_ms: how long a silent primary takes to be judged down.

    The Sentinels are ``redis-server --sentinel`` (the same binary; Debian's
    ``redis-sentinel`` package only adds a service around it).
    """

    def __init__(
        self,
        base: Path,
        *,
        service: str = "mymaster",
        solo_services: Sequence[str] = (),
        down_after_ms: int = 500,
        executable: str | None = None,
    ) -> None:
        exe = executable or redis_server_executable()
        self.service = service
        self.servers = [RedisServer(base / f"node-{i}", executable=exe) for i in range(2)]
        self.solo = {
            name: RedisServer(base / f"solo-{name}", executable=exe) for name in solo_services
        }
        self._sentinels: list[Any] = []
        try:
            for server in self.servers:
                _configure(server)
            self._replicate(self.servers[1], self.servers[0])
            monitored = {service: self.servers[0], **self.solo}
            for i in range(3):
                port = _free_port()
                folder = base / f"sentinel-{i}"
                folder.mkdir(parents=True, exist_ok=True)
                # A log file: the executor's stdout is a pipe nobody reads, and a Sentinel
                # that filled it (64 KB: some 30 failovers) hung in write().
                lines = [f"port {port}", f"bind {LOOPBACK}", f"dir {folder}"]
                lines += [f"logfile {folder / 'sentinel.log'}"]
                for name, server in monitored.items():
                    lines += [
                        f"sentinel monitor {name} {server.host} {server.port} 2",
                        f"sentinel down-after-milliseconds {name} {down_after_ms}",
                        # Also how long before the same service can fail over again (twice it).
                        f"sentinel failover-timeout {name} 2000",
                    ]
                conf = folder / "sentinel.conf"
                conf.write_text("\n".join(lines) + "\n", "utf-8")
                executor = _sentinel_executor(port, conf, exe)
                executor.start()
                self._sentinels.append((port, executor))
            self.wait_ready()
        except BaseException:
            self.stop()
            raise

    @property
    def sentinel_addresses(self) -> list[tuple[str, int]]:
        """Where the three Sentinels listen."""
        return [(LOOPBACK, port) for port, _ in self._sentinels]

    def sentinel(self, **kwargs: Any) -> Sentinel:
        """A redis-py ``Sentinel`` over the three (``kwargs`` go to the data connections)."""
        return Sentinel(self.sentinel_addresses, socket_timeout=2.0, **kwargs)  # type: ignore[no-untyped-call]

    def _ask(self, *args: Any) -> Any:
        with redis.Redis(*self.sentinel_addresses[0], socket_timeout=2.0) as sentinel:
            return sentinel.execute_command(*args)

    def _server_at(self, port: int) -> RedisServer:
        return next(s for s in self.servers if s.port == port)

    def primary(self) -> RedisServer:
        """The server the Sentinels currently name as the service's master."""
        _, port = self._ask("SENTINEL", "GET-MASTER-ADDR-BY-NAME", self.service)
        return self._server_at(int(port))

    def replica(self) -> RedisServer:
        """The other server."""
        primary = self.primary()
        return next(s for s in self.servers if s is not primary)

    def _replicate(self, replica: RedisServer, primary: RedisServer) -> None:
        with replica.admin() as admin:
            admin.replicaof(primary.host, primary.port)
        wait_until(
            lambda: _info(replica, "replication").get("master_link_status") == "up",
            f"the replica on port {replica.port} to sync",
        )

    def _sentinels_agree(self) -> bool:
        primary = self.primary()
        if _info(primary, "replication").get("role") != "master":
            return False
        for host, port in self.sentinel_addresses:
            with redis.Redis(host, port, socket_timeout=2.0) as sentinel:
                for name in [self.service, *self.solo]:
                    state = sentinel.sentinel_master(name)
                    if int(state["num-other-sentinels"]) < 2 or "down" in str(state["flags"]):
                        return False
                    if name == self.service and int(state["num-slaves"]) < 1:
                        return False
                    if name == self.service and state["port"] != primary.port:
                        return False
        return True

    def wait_ready(self, timeout_s: float = 60.0) -> None:
        """Until every Sentinel knows the others, the primary and a synced replica."""
        wait_until(self._sentinels_agree, "the Sentinels to agree", timeout_s)
        replica = self.replica()
        wait_until(
            lambda: _info(replica, "replication").get("master_link_status") == "up",
            "the replica to sync",
            timeout_s,
        )
        wait_until(lambda: _acknowledged(self.primary()), "the replica to acknowledge", timeout_s)

    def fail_over(self, timeout_s: float = 30.0) -> RedisServer:
        """``SENTINEL FAILOVER``: a graceful switch; returns the new primary once ready."""
        old = self.primary()
        self._ask("SENTINEL", "FAILOVER", self.service)
        wait_until(lambda: self.primary() is not old, "the Sentinels to promote", timeout_s)
        # The Sentinels turn the old primary into a replica when they next poll it
        # (every 10 s); do it now, as they would.
        self.heal()
        return self.primary()

    def wait_for_new_primary(self, old: RedisServer, timeout_s: float = 30.0) -> RedisServer:
        """After ``old`` crashed: the replica the Sentinels promoted, once it is master
        and every Sentinel names it (a client may ask any of them)."""
        wait_until(lambda: self.primary() is not old, "the Sentinels to promote", timeout_s)
        new = self.primary()
        wait_until(
            lambda: _info(new, "replication").get("role") == "master",
            "the promoted replica to become master",
            timeout_s,
        )
        wait_until(lambda: self._all_name(new), "every Sentinel to name the new primary")
        return new

    def _all_name(self, primary: RedisServer) -> bool:
        for host, port in self.sentinel_addresses:
            with redis.Redis(host, port, socket_timeout=2.0) as sentinel:
                state = sentinel.sentinel_master(self.service)
                if state["port"] != primary.port or "down" in str(state["flags"]):
                    return False
        return True

    def heal(self, timeout_s: float = 60.0) -> None:
        """Every process running again, the crashed one a replica of the primary.

        The Sentinels may fail over once more meanwhile (seen after a crash failover: the
        just-promoted primary judged down, the restarted server promoted in its place), so
        this waits for a state, not for one server: every other server a synced replica of
        the primary that all the Sentinels name.
        """
        for server in [*self.servers, *self.solo.values()]:
            server.thaw()
            if not server.running:
                server.start()
                _configure(server)  # a restarted process has lost its CONFIG SET
        wait_until(self._healed, "the servers to replicate the named primary", timeout_s)
        self.wait_ready(timeout_s)

    def _healed(self) -> bool:
        """One step towards healed: a server that replicates nothing, or another server than
        the primary all the Sentinels name (and none thinks down), is told to replicate it;
        true once each replicates it over a live link."""
        primary = self.primary()
        if not self._all_name(primary) or _info(primary, "replication")["role"] != "master":
            return False  # a failover is under way: leave the servers to the Sentinels
        healed = True
        for server in self.servers:
            if server is primary:
                continue
            info = _info(server, "replication")
            if info["role"] != "slave" or int(info["master_port"]) != primary.port:
                with server.admin() as admin:
                    admin.replicaof(primary.host, primary.port)
                healed = False
            elif info.get("master_link_status") != "up":
                healed = False
        return healed

    def stop(self) -> None:
        """Stop the Sentinels first (so they see no failure), then the servers."""
        for _, executor in self._sentinels:
            with contextlib.suppress(Exception):
                executor.stop()
        for server in [*self.servers, *self.solo.values()]:
            server.stop()


def redis_cli_executable() -> str:
    """Path of ``redis-cli``; raises :class:`ServerUnavailable` when absent."""
    exe = shutil.which("redis-cli")
    if exe is None:
        raise ServerUnavailable(
            "redis-cli is not on PATH (install it with: apt-get install redis-tools)"
        )
    return exe


class ClusterDeployment:
    """A Redis Cluster of ``masters`` masters, each with ``replicas`` replicas, on loopback.

    The nodes are ``redis-server --cluster-enabled yes`` on free ports, joined by
    ``redis-cli --cluster create ... --cluster-yes``; the constructor returns
    once every node reports ``cluster_state:ok`` and knows every other node.
    """

    def __init__(
        self,
        base: Path,
        *,
        masters: int = 3,
        replicas: int = 1,
        node_timeout_ms: int = 1000,
        executable: str | None = None,
    ) -> None:
        exe = executable or redis_server_executable()
        cli = redis_cli_executable()
        options = (
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            "nodes.conf",
            "--cluster-node-timeout",
            str(node_timeout_ms),
            "--repl-diskless-sync-delay",
            "0",
        )
        count = masters * (1 + replicas)
        self.nodes: list[RedisServer] = []
        try:
            for i in range(count):
                # The bus port defaults to port + 10000, which may be taken: pick a free one.
                bus = ("--cluster-port", str(_free_port()))
                self.nodes.append(
                    RedisServer(base / f"node-{i}", executable=exe, extra_args=options + bus)
                )
            addresses = [f"{n.host}:{n.port}" for n in self.nodes]
            create = [cli, "--cluster", "create", *addresses, "--cluster-yes"]
            subprocess.run(
                [*create, "--cluster-replicas", str(replicas)],
                check=True,
                capture_output=True,
                timeout=60,
            )
            self.wait_ready()
        except BaseException:
            self.stop()
            raise

    def client(self, **kwargs: Any) -> RedisCluster:
        """A ``RedisCluster`` that discovers the nodes from the first one running."""
        first = next(n for n in self.nodes if n.running and not n.is_frozen)
        kwargs.setdefault("socket_timeout", 5.0)
        return RedisCluster(host=first.host, port=first.port, **kwargs)

    def _ok(self) -> bool:
        for node in self.nodes:
            if not node.running:
                continue
            if not _cluster_ok(node):
                return False
            rows = self._nodes_table(node)
            alive = [row for row in rows if "fail" not in row[2] and row[7] == "connected"]
            if len(alive) < sum(1 for n in self.nodes if n.running):
                return False
            if any("master" in row[2] and len(row) < 9 for row in alive):
                return False  # a restarted master that has not yet become a replica
            replication = _info(node, "replication")
            if replication["role"] == "slave" and replication["master_link_status"] != "up":
                return False
        return True

    def wait_ready(self, timeout_s: float = 60.0) -> None:
        """Until every running node says ``cluster_state:ok`` and sees every running node."""
        wait_until(self._ok, "the cluster to be ok", timeout_s)

    def _nodes_table(self, via: RedisServer | None = None) -> list[list[str]]:
        source = via or next(n for n in self.nodes if n.running and not n.is_frozen)
        return [line.split() for line in _cluster_text(source, "NODES").splitlines()]

    def _by_port(self, port: int) -> RedisServer:
        return next(n for n in self.nodes if n.port == port)

    def master_of(self, key: str) -> RedisServer:
        """The master that serves ``key``'s hash slot now."""
        with self.client() as client:
            node = client.get_node_from_key(key)
        return self._by_port(int(node.port))

    def replica_of(self, master: RedisServer) -> RedisServer:
        """A replica of ``master``."""
        table = self._nodes_table(master)
        node_id = next(row[0] for row in table if "myself" in row[2])
        row = next(row for row in table if row[3] == node_id and "slave" in row[2])
        return self._by_port(int(row[1].split("@")[0].rsplit(":", 1)[1]))

    def wait_for_promotion(self, replica: RedisServer, timeout_s: float = 30.0) -> None:
        """Until ``replica`` is a master and the cluster is ok again."""
        wait_until(
            lambda: _info(replica, "replication").get("role") == "master",
            "the replica to be promoted",
            timeout_s,
        )
        wait_until(lambda: _cluster_ok(replica), "the cluster to be ok again", timeout_s)
        wait_until(lambda: self._all_see_master(replica), "every node to see the promotion")

    def _all_see_master(self, promoted: RedisServer) -> bool:
        """Whether every running node's table lists ``promoted`` as a master (clients
        may learn the slot map from any of them)."""
        for node in self.nodes:
            if not node.running or node.is_frozen:
                continue
            for row in self._nodes_table(node):
                port = int(row[1].split("@")[0].rsplit(":", 1)[1])
                if port == promoted.port and "master" not in row[2]:
                    return False
        return True

    def heal(self) -> None:
        """Every node running again (a crashed master rejoins as a replica)."""
        for node in self.nodes:
            node.thaw()
            if not node.running:
                node.start()
        self.wait_ready()

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()


def _cluster_text(server: RedisServer, subcommand: str) -> str:
    """``CLUSTER <subcommand>``'s text reply, unparsed."""
    with server.admin() as admin:
        reply = admin.execute_command("CLUSTER", subcommand, NEVER_DECODE=True)
    return bytes(reply).decode()


def _cluster_ok(server: RedisServer) -> bool:
    return "cluster_state:ok" in _cluster_text(server, "INFO")
