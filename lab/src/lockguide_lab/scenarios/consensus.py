"""The consensus path, run: EtcdLock and ZooKeeperLock on real clusters, broken and fixed.

Each scenario runs on a real three-member cluster
(:class:`~lockguide_lab.testbed.consensus.EtcdCluster` or
:class:`~lockguide_lab.testbed.consensus.ZooKeeperEnsemble`) and returns the
same :class:`~lockguide_lab.scenarios.timeline.Timeline` as the Redis
scenarios, drawn by the same :mod:`~lockguide_lab.scenarios.plot`:

* :class:`ConsensusPausedHolder`: client A is a separate process that takes
  the lock, checks it, and is frozen (``SIGSTOP``) just before its write,
  past its lease (etcd) or session (ZooKeeper). The cluster ends A's lease,
  B acquires and writes; A is thawed and writes. Broken (the resource ignores
  the token): A's late write lands over B's. Fixed (``SqlFencedStore``): it is
  refused, because B's token (a later revision or zxid) is higher.
* :class:`ConsensusCutOffHolder`: A's connections to every member go through
  the testbed's :class:`~lockguide_lab.testbed.Link`, which is cut while A
  works (it checked the lock before it began). Its lease or session ends, B
  acquires and writes, and A's write at the end of its work is the late one.
* :class:`ConsensusLeaderKilled`: the leader is killed while A holds the
  lock; B tries for longer than A's lease and is refused; A keeps the lock
  (or sees it lost) and writes. No double grant, either way.
* :class:`ConsensusMajorityDown`: two of three members are killed; A and B
  both try and nobody acquires: safety over liveness.

The resource is a SQLite file both processes write: a plain ``UPDATE``
(broken) or :class:`~lockguide.SqlFencedStore` (fixed), which takes the
locks' tokens unchanged.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Protocol

from lockguide.errors import LockError
from lockguide.fencing import SqlFencedStore
from lockguide_lab.scenarios.timeline import Event, Kind, Timeline
from lockguide_lab.testbed.consensus import ConsensusCluster, EtcdCluster, ZooKeeperEnsemble
from lockguide_lab.testbed.link import Link
from lockguide_lab.testbed.process import LOOPBACK

__all__ = [
    "CONSENSUS_SCENARIOS",
    "ConsensusCutOffHolder",
    "ConsensusLeaderKilled",
    "ConsensusLock",
    "ConsensusMajorityDown",
    "ConsensusPausedHolder",
    "ConsensusScenario",
    "SqlResource",
    "make_lock",
]


class ConsensusLock(Protocol):
    """What the scenarios use of :class:`~lockguide.etcd.EtcdLock` and ``ZooKeeperLock``."""

    @property
    def token(self) -> int: ...
    @property
    def held(self) -> bool: ...
    def acquire(self, *, blocking: bool = True, timeout_ms: Any = ...) -> bool: ...
    def release(self) -> None: ...
    def check(self) -> None: ...
    @property
    def last_error(self) -> Exception | None: ...


def _cause(error: Exception) -> str:
    """The last error of an attempt, short, for a timeline."""
    return repr(error).split(":")[0][:60]


# -- the resource -------------------------------------------------------------------------


class SqlResource:
    """The protected value, a row in a SQLite file: fenced (fixed) or not (broken)."""

    def __init__(self, path: Path, *, fenced: bool) -> None:
        self.fenced = fenced
        self._db = sqlite3.connect(path, timeout=10.0)
        self.store = SqlFencedStore(self._db, "ledger")
        self.store.setup()

    def write(self, token: int, value: str) -> tuple[bool, str]:
        """Store ``value`` for a holder of ``token``; (accepted, detail for the timeline)."""
        if not self.fenced:
            self._db.execute("UPDATE fenced_resource SET value = ? WHERE name = 'ledger'", (value,))
            self._db.commit()
            return True, f"token {token} not checked"
        result = self.store.try_write(token, value)
        if result.accepted:
            return True, f"token {token}"
        return False, f"token {token}, but the resource has accepted token {result.highest}"

    def read(self) -> str | None:
        return self.store.read().value

    def close(self) -> None:
        self._db.close()


# -- the locks ----------------------------------------------------------------------------


def make_lock(
    system: str, address: str | list[str], key: str, ttl_ms: int, clients: list[Any]
) -> ConsensusLock:
    """An ``EtcdLock`` or a ``ZooKeeperLock`` (its kazoo client appended to ``clients``)."""
    if system == "etcd":
        from lockguide.etcd import EtcdLock

        return EtcdLock(address, key, ttl_ms=ttl_ms, request_timeout_ms=500)
    from kazoo.client import KazooClient

    from lockguide.zookeeper import ZooKeeperLock

    hosts = address if isinstance(address, str) else ",".join(address)
    client = KazooClient(hosts=hosts, timeout=ttl_ms / 1000, connection_retry={"max_tries": -1})
    client.start(timeout=10)
    clients.append(client)
    return ZooKeeperLock(client, "/" + key.replace(":", "/"), request_timeout_ms=1000)


def _address(cluster: ConsensusCluster) -> list[str] | str:
    if isinstance(cluster, EtcdCluster):
        return cluster.endpoints
    assert isinstance(cluster, ZooKeeperEnsemble)
    return cluster.hosts


# -- one run ------------------------------------------------------------------------------


class Recorder:
    """The events of one run, timed from its start on the parent's monotonic clock."""

    def __init__(self) -> None:
        self.t0 = time.monotonic()
        self.events: list[Event] = []

    def now(self) -> float:
        return round((time.monotonic() - self.t0) * 1000, 1)

    def __call__(self, actor: str, kind: Kind, detail: str = "", value: str | None = None) -> None:
        self.events.append(Event(self.now(), actor, kind, detail, value))


@dataclass(frozen=True)
class ConsensusScenario:
    """A failure mode of a consensus lock, run on a real cluster, broken or fixed."""

    title: ClassVar[str] = ""
    ttl_ms: int = 2000
    key: str = "lock:ledger"
    params: dict[str, float] = field(default_factory=dict, compare=False)

    def run(self, cluster: ConsensusCluster, way: str, workdir: Path) -> Timeline:
        """Run once on ``cluster`` (left running and empty after); the timeline."""
        if way not in ("broken", "fixed"):
            raise ValueError(f"way must be 'broken' or 'fixed', got {way!r}")
        system = cluster.kind
        workdir.mkdir(parents=True, exist_ok=True)
        db = workdir / f"{system}-{type(self).__name__}-{way}.sqlite"
        db.unlink(missing_ok=True)
        resource = SqlResource(db, fenced=way == "fixed")
        clients: list[Any] = []
        record = Recorder()
        try:
            self.script(cluster, record, resource, db, clients)
            final = resource.read()
        finally:
            for client in clients:
                with contextlib.suppress(Exception):
                    client.stop()
                    client.close()
            resource.close()
            cluster.ensure_running()
            _wait_quorum(cluster)
        name = "EtcdLock" if system == "etcd" else "ZooKeeperLock"
        fencing = "SqlFencedStore checks the token" if way == "fixed" else "unfenced writes"
        return Timeline(
            scenario=f"{self.title} ({'etcd' if system == 'etcd' else 'ZooKeeper'})",
            way=way,
            approach=f"{name}, {fencing}",
            testbed=f"real {system}, three members, real time",
            events=tuple(sorted(record.events, key=lambda e: e.t_ms)),
            final_value=final,
            parameters={"ttl_ms": float(self.ttl_ms)},
        )

    def both(self, cluster: ConsensusCluster, workdir: Path) -> tuple[Timeline, Timeline]:
        """The broken run, then the fixed run."""
        return self.run(cluster, "broken", workdir), self.run(cluster, "fixed", workdir)

    def script(
        self,
        cluster: ConsensusCluster,
        record: Recorder,
        resource: SqlResource,
        db: Path,
        clients: list[Any],
    ) -> None:
        raise NotImplementedError

    def _key(self, cluster: ConsensusCluster) -> str:
        return f"{self.key}:{time.monotonic_ns()}"  # a fresh key per run


def _wait_quorum(cluster: ConsensusCluster) -> None:
    if isinstance(cluster, ZooKeeperEnsemble):
        cluster.wait_serving()
    else:
        cluster.leader()


def _lock_gone(cluster: ConsensusCluster, key: str, clients: list[Any]) -> bool:
    """Whether the lock on ``key`` is free on the cluster now (an observer's read)."""
    if isinstance(cluster, EtcdCluster):
        return not cluster.key_exists(key)
    from kazoo.client import KazooClient

    if not clients or not isinstance(clients[-1], KazooClient):
        observer = KazooClient(hosts=_address(cluster), timeout=10)
        observer.start(timeout=10)
        clients.append(observer)
    path = "/" + key.replace(":", "/")
    return not clients[-1].exists(path) or not clients[-1].get_children(path)


class _Holder:
    """Client A in a process of its own (``python -m lockguide_lab.scenarios._holder``)."""

    def __init__(self, system: str, address: Any, key: str, ttl_ms: int, db: Path, fenced: bool):
        settings = {"system": system, "address": address, "key": key, "ttl_ms": ttl_ms}
        config = json.dumps({**settings, "db": str(db), "fenced": fenced})
        self.process = subprocess.Popen(
            [sys.executable, "-m", "lockguide_lab.scenarios._holder", config],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def read(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError("the holder process ended without answering")
        reply: dict[str, Any] = json.loads(line)
        return reply

    def send(self, command: str) -> dict[str, Any]:
        assert self.process.stdin is not None
        self.process.stdin.write(command + "\n")
        self.process.stdin.flush()
        return self.read()

    def pause(self) -> None:
        os.kill(self.process.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.kill(self.process.pid, signal.SIGCONT)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.resume()
        with contextlib.suppress(Exception):
            self.send("quit")
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


@contextlib.contextmanager
def _holder(*args: Any) -> Iterator[_Holder]:
    holder = _Holder(*args)
    try:
        yield holder
    finally:
        holder.close()


@dataclass(frozen=True)
class ConsensusPausedHolder(ConsensusScenario):
    """A holder frozen past its lease or session; B acquires; A's late write."""

    title: ClassVar[str] = "The holder paused past its lease"

    def script(
        self,
        cluster: ConsensusCluster,
        record: Recorder,
        resource: SqlResource,
        db: Path,
        clients: list[Any],
    ) -> None:
        key = self._key(cluster)
        address = _address(cluster)
        with _holder(cluster.kind, address, key, self.ttl_ms, db, resource.fenced) as a:
            got = a.read()
            record.t0 = time.monotonic()  # the run starts when A holds the lock
            record("A", Kind.ACQUIRED, f"token {got['token']}; check() passed")
            # A is about to write: the process stops here (a GC pause, a stalled VM).
            a.pause()
            record("A", Kind.PAUSED, "SIGSTOP, just before its write")
            deadline = time.monotonic() + 30
            while not _lock_gone(cluster, key, clients) and time.monotonic() < deadline:
                time.sleep(0.02)
            ended = (
                "the cluster revoked its lease, deleting the key"
                if cluster.kind == "etcd"
                else "its session expired; the ensemble deleted its node"
            )
            record("A", Kind.EXPIRED, ended)
            b = make_lock(cluster.kind, address, key, self.ttl_ms, clients)
            if not b.acquire(timeout_ms=10_000):
                record("B", Kind.NOT_ACQUIRED, "still held")
                return
            record("B", Kind.ACQUIRED, f"token {b.token}")
            self._write(record, resource, "B", b.token, "B's update")
            time.sleep(0.2)
            a.resume()
            record("A", Kind.RESUMED, "SIGCONT: carries on from the line after its check")
            wrote = a.send("write A's update")
            kind = Kind.WRITE_ACCEPTED if wrote["accepted"] else Kind.WRITE_REFUSED
            record("A", kind, wrote["detail"], "A's update")
            released = a.send("release")
            if released["ok"]:
                record("A", Kind.RELEASED)
            else:
                record("A", Kind.RELEASE_REFUSED, released["detail"])
            b.release()
            record("B", Kind.RELEASED)

    @staticmethod
    def _write(record: Recorder, resource: SqlResource, who: str, token: int, value: str) -> None:
        accepted, detail = resource.write(token, value)
        record(who, Kind.WRITE_ACCEPTED if accepted else Kind.WRITE_REFUSED, detail, value)


@dataclass(frozen=True)
class ConsensusLeaderKilled(ConsensusScenario):
    """The leader killed while A holds the lock: B is refused; A keeps the lock or sees it lost."""

    title: ClassVar[str] = "The leader killed while the lock is held"

    def script(
        self,
        cluster: ConsensusCluster,
        record: Recorder,
        resource: SqlResource,
        db: Path,
        clients: list[Any],
    ) -> None:
        key = self._key(cluster)
        address = _address(cluster)
        a = make_lock(cluster.kind, address, key, self.ttl_ms, clients)
        b = make_lock(cluster.kind, address, key, self.ttl_ms, clients)
        record.t0 = time.monotonic()
        if not a.acquire(timeout_ms=5_000):
            record("A", Kind.NOT_ACQUIRED)
            return
        record("A", Kind.ACQUIRED, f"token {a.token}")
        leader = cluster.leader()
        cluster.kill(leader)
        record("cluster", Kind.SERVER, f"leader {cluster.members[leader].name} killed (SIGKILL)")
        wait = 2 * self.ttl_ms
        got = b.acquire(timeout_ms=wait)
        if not got and b.last_error is not None:
            record("B", Kind.NOT_ACQUIRED, f"no answer: {_cause(b.last_error)}")
        if got:
            record("B", Kind.ACQUIRED, f"token {b.token}: a second holder")
            b.release()
            record("B", Kind.RELEASED)
        else:
            record("B", Kind.NOT_ACQUIRED, f"refused for {wait} ms, longer than A's lease")
        try:
            a.check()
        except LockError as error:
            record("A", Kind.LOST, str(error).split(":")[0])
            return
        ConsensusPausedHolder._write(record, resource, "A", a.token, "A's update")
        a.release()
        record("A", Kind.RELEASED)
        cluster.restart(leader)
        record("cluster", Kind.SERVER, f"{cluster.members[leader].name} restarted")


@dataclass(frozen=True)
class ConsensusMajorityDown(ConsensusScenario):
    """Two of three members down: nobody acquires (safety over liveness)."""

    title: ClassVar[str] = "A majority of the cluster down"

    def script(
        self,
        cluster: ConsensusCluster,
        record: Recorder,
        resource: SqlResource,
        db: Path,
        clients: list[Any],
    ) -> None:
        key = self._key(cluster)
        address = _address(cluster)
        a = make_lock(cluster.kind, address, key, self.ttl_ms, clients)
        b = make_lock(cluster.kind, address, key, self.ttl_ms, clients)
        record.t0 = time.monotonic()
        down = [cluster.leader()]
        down.append(next(i for i in range(len(cluster.members)) if i not in down))
        for index in down:
            cluster.kill(index)
            record("cluster", Kind.SERVER, f"{cluster.members[index].name} killed (SIGKILL)")
        for name, lock in (("A", a), ("B", b)):
            got = lock.acquire(timeout_ms=self.ttl_ms)
            if not got and lock.last_error is not None:
                record(name, Kind.NOT_ACQUIRED, f"no quorum: {_cause(lock.last_error)}")
                continue
            if got:
                record(name, Kind.ACQUIRED, f"token {lock.token}")
                ConsensusPausedHolder._write(record, resource, name, lock.token, f"{name}'s update")
            else:
                record(name, Kind.NOT_ACQUIRED, "refused")
        cluster.restart(*down)
        record("cluster", Kind.SERVER, "both members restarted")


@dataclass(frozen=True)
class ConsensusCutOffHolder(ConsensusScenario):
    """A holder cut off from every member (the testbed's link) while it works; its late write."""

    title: ClassVar[str] = "The holder cut off from the cluster"
    work_ms: int = 4000

    def script(
        self,
        cluster: ConsensusCluster,
        record: Recorder,
        resource: SqlResource,
        db: Path,
        clients: list[Any],
    ) -> None:
        key = self._key(cluster)
        links = [Link((LOOPBACK, m.client_port)) for m in cluster.members]
        try:
            if isinstance(cluster, EtcdCluster):
                through: list[str] | str = [
                    f"http://{h}:{p}" for h, p in (x.address for x in links)
                ]
            else:
                through = ",".join(f"{h}:{p}" for h, p in (x.address for x in links))
            a = make_lock(cluster.kind, through, key, self.ttl_ms, clients)
            b = make_lock(cluster.kind, _address(cluster), key, self.ttl_ms, clients)
            record.t0 = time.monotonic()
            if not a.acquire(timeout_ms=5_000):
                record("A", Kind.NOT_ACQUIRED)
                return
            a.check()
            record("A", Kind.ACQUIRED, f"token {a.token}; check() passed, starts its work")
            for link in links:
                link.cut()
            record("cluster", Kind.SERVER, "A's links to all three members cut")
            deadline = time.monotonic() + 30
            while not _lock_gone(cluster, key, clients) and time.monotonic() < deadline:
                time.sleep(0.02)
            ended = (
                "no keep-alive arrived: the cluster revoked its lease"
                if cluster.kind == "etcd"
                else "no heartbeat arrived: its session expired"
            )
            record("A", Kind.EXPIRED, ended)
            if not b.acquire(timeout_ms=10_000):
                record("B", Kind.NOT_ACQUIRED, "still held")
                return
            record("B", Kind.ACQUIRED, f"token {b.token}")
            ConsensusPausedHolder._write(record, resource, "B", b.token, "B's update")
            time.sleep(max(0.0, self.work_ms / 1000 - (time.monotonic() - record.t0)))
            # A's work is done: it writes without checking again (it checked before it began).
            ConsensusPausedHolder._write(record, resource, "A", a.token, "A's update")
            try:
                a.release()
                record("A", Kind.RELEASED)
            except LockError as error:
                record("A", Kind.RELEASE_REFUSED, f"{type(error).__name__}: still cut off")
            b.release()
            record("B", Kind.RELEASED)
        finally:
            for link in links:
                link.close()


#: The consensus runs, in the order the page tells them.
CONSENSUS_SCENARIOS: tuple[ConsensusScenario, ...] = (
    ConsensusPausedHolder(),
    ConsensusCutOffHolder(),
    ConsensusLeaderKilled(),
    ConsensusMajorityDown(),
)
