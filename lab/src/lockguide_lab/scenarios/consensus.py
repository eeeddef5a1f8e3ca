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
* :class:`ConsensusLostReply`: the cluster performs A's create (etcd: the
  transaction; ZooKeeper: the node) but the reply is lost at the testbed's
  link. Broken: A's own code takes the unanswered request as a failure and
  forgets it, so what it created blocks B (etcd: until that lease's TTL;
  ZooKeeper: for as long as A's session lives). Fixed: ``EtcdLock`` finds the
  key on its own lease and holds it; ``ZooKeeperLock`` finds (or deletes) its
  node by its prefix, and B gets the lock as soon as A is done.
* :class:`ConsensusWaiterOutwaits`: B waits for A longer than its own TTL.
  Broken (etcd): a waiter that asked for one lease and retries on it forever
  (this reference's ``EtcdLock`` until it was fixed) fails every try once its
  lease ended, and never acquires. Fixed: ``EtcdLock`` asks for a fresh lease,
  and B holds the lock as soon as A releases. ZooKeeper waits on the session,
  which kazoo keeps alive: both ways acquire.
* :class:`ConsensusDelayedWrite`: A sends its write under a valid lease; the
  network holds it (1.5 s) while A's client times out and releases; B
  acquires and writes; A's write arrives. Broken: it lands over B's. Fixed:
  the resource refuses it on arrival, the token being older than B's.
* :class:`ConsensusWipedMember`: a follower is killed, its data directory
  emptied, and started again while A holds the lock; B tries for twice A's
  lease and is refused; A writes. What each cluster does with the member is
  recorded (etcd's refuses to run with its log gone; ZooKeeper's copies the
  state back from the leader).

The resource is a SQLite file both processes write: a plain ``UPDATE``
(broken) or :class:`~lockguide.SqlFencedStore` (fixed), which takes the
locks' tokens unchanged.

Every run also records its history (:mod:`lockguide_lab.history`, on the
timeline's clock): each write with the holder's token, around the call that
reaches the resource, and the final read, on key ``"resource"``; the grants
and releases on key ``"lock"``. A consensus lease has no end its holder knows
when it is granted (keep-alives, or the session's heartbeats, extend it), so
each grant is recorded as one operation when its lease ends, with the window it
was held for: from the moment ``acquire`` returned to the holder's release
request, or to the first moment the run saw the cluster had deleted the key
(or the holder's ``check()`` found the lease lost), or to the end of the run.
A refused acquire is recorded when it returns, with the window it asked for;
a create whose reply never came, as an operation of unknown outcome.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Protocol

from lockguide.errors import LockError
from lockguide.fencing import SqlFencedStore
from lockguide_lab.history.record import LEASE_KEY, RESOURCE_KEY, Pending
from lockguide_lab.history.record import Recorder as History
from lockguide_lab.scenarios.resources import fenced_write
from lockguide_lab.scenarios.timeline import Event, Kind, Timeline
from lockguide_lab.testbed.consensus import (
    ConsensusCluster,
    EtcdCluster,
    HttpLink,
    ZooKeeperEnsemble,
)
from lockguide_lab.testbed.link import Link
from lockguide_lab.testbed.process import LOOPBACK

__all__ = [
    "CONSENSUS_SCENARIOS",
    "ConsensusCutOffHolder",
    "ConsensusDelayedWrite",
    "ConsensusLeaderKilled",
    "ConsensusLock",
    "ConsensusLostReply",
    "ConsensusMajorityDown",
    "ConsensusPausedHolder",
    "ConsensusScenario",
    "ConsensusWaiterOutwaits",
    "ConsensusWipedMember",
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
    def last_error(self) -> BaseException | None: ...


def _cause(error: BaseException | None) -> str:
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
        return fenced_write(self.store, token, value)

    def read(self) -> str | None:
        return self.store.read().value

    def close(self) -> None:
        self._db.close()


# -- the locks ----------------------------------------------------------------------------


def make_lock(
    system: str,
    address: str | list[str],
    key: str,
    ttl_ms: int,
    clients: list[Any],
    request_timeout_ms: float | None = None,
) -> ConsensusLock:
    """An ``EtcdLock`` or a ``ZooKeeperLock`` (its kazoo client appended to ``clients``)."""
    if system == "etcd":
        from lockguide.etcd import EtcdLock

        return EtcdLock(address, key, ttl_ms=ttl_ms, request_timeout_ms=request_timeout_ms or 500)
    from lockguide.zookeeper import ZooKeeperLock

    client = _kazoo(address, ttl_ms, clients)
    return ZooKeeperLock(client, _zpath(key), request_timeout_ms=request_timeout_ms or 1000)


def _kazoo(address: str | list[str], ttl_ms: int, clients: list[Any]) -> Any:
    """A started kazoo client whose session lasts ``ttl_ms`` (appended to ``clients``)."""
    from kazoo.client import KazooClient

    hosts = address if isinstance(address, str) else ",".join(address)
    client = KazooClient(hosts=hosts, timeout=ttl_ms / 1000, connection_retry={"max_tries": -1})
    client.start(timeout=10)
    clients.append(client)
    return client


def _zpath(key: str) -> str:
    return "/" + key.replace(":", "/")


def _address(cluster: ConsensusCluster) -> list[str] | str:
    if isinstance(cluster, EtcdCluster):
        return cluster.endpoints
    assert isinstance(cluster, ZooKeeperEnsemble)
    return cluster.hosts


# -- one run ------------------------------------------------------------------------------


class _Call:
    """An operation of the history in flight, completed with the value it was invoked with."""

    def __init__(self, pending: Pending, value: Any) -> None:
        self._pending = pending
        self.value = value

    def ok(self) -> None:
        self._pending.ok(self.value)

    def fail(self) -> None:
        self._pending.fail(self.value)

    def info(self) -> None:
        self._pending.info(self.value)


class Recorder:
    """The events of one run, timed from its start on the parent's monotonic clock.

    Also the run's history (:attr:`history`): the scripts call :meth:`acquire`
    (or :meth:`took` and :meth:`refused`), :meth:`ended`, :meth:`releasing`
    and :meth:`writing` around what the clients do.
    """

    def __init__(self, ttl_ms: float = 0.0) -> None:
        self.t0 = time.monotonic()
        self.events: list[Event] = []
        self.ttl_ms = ttl_ms
        self.history = History(clock=self.now)
        self._held: dict[str, float] = {}  # client -> when its acquire returned
        self._mutex = threading.Lock()

    def now(self) -> float:
        return round((time.monotonic() - self.t0) * 1000, 1)

    def __call__(self, actor: str, kind: Kind, detail: str = "", value: str | None = None) -> None:
        self.events.append(Event(self.now(), actor, kind, detail, value))

    # -- the history ------------------------------------------------------------------------

    def acquire(self, who: str, lock: ConsensusLock, timeout_ms: float) -> bool:
        """``lock.acquire(timeout_ms=...)`` for ``who``, its grant or refusal recorded."""
        since = self.now()
        try:
            got = lock.acquire(timeout_ms=timeout_ms)
        except BaseException:
            self.unknown(who, since).info()
            raise
        if got:
            self.took(who)
        else:
            self.refused(who, since)
        return got

    def took(self, who: str) -> None:
        """``who``'s acquire has just returned the lock: its lease is held from now."""
        with self._mutex:
            self._held[who] = self.now()

    def refused(self, who: str, since: float, ttl_ms: float | None = None) -> None:
        """``who``'s acquire, called at ``since``, returned without the lock."""
        ttl = self.ttl_ms if ttl_ms is None else ttl_ms
        self.history.grant(who, since, since + ttl, granted=False, key=LEASE_KEY)

    def unknown(self, who: str, since: float, ttl_ms: float | None = None) -> _Call:
        """An acquire called at ``since`` whose outcome ``who`` will not learn (complete it)."""
        ttl = self.ttl_ms if ttl_ms is None else ttl_ms
        window = {"window": [since, round(since + ttl, 3)]}
        return _Call(self.history.invoke(who, "acquire", window, key=LEASE_KEY), window)

    def ended(self, who: str, at: float | None = None) -> None:
        """``who``'s lease ended (now, or at ``at``): its grant is recorded, with its window."""
        end = self.now() if at is None else at
        with self._mutex:
            start = self._held.pop(who, None)
        if start is not None:
            self.history.grant(who, start, max(start, end), key=LEASE_KEY)

    def releasing(self, who: str) -> _Call:
        """``who`` asks to release now: its lease ends here; complete the returned call."""
        at = {"at": self.now()}
        self.ended(who, at["at"])
        return _Call(self.history.invoke(who, "release", at, key=LEASE_KEY), at)

    def release(self, who: str, lock: ConsensusLock) -> None:
        """``lock.release()`` for ``who``, recorded (a refusal, unknown in effect, re-raised)."""
        call = self.releasing(who)
        try:
            lock.release()
        except BaseException:
            call.info()
            raise
        call.ok()

    def writing(self, who: str, token: int, value: str) -> _Call:
        """``who`` writes ``value`` with ``token``; complete the returned call."""
        carried = {"token": token, "data": value}
        return _Call(self.history.invoke(who, "write", carried, key=RESOURCE_KEY), carried)

    def read(self, resource: SqlResource) -> str | None:
        """The resource's final value, read by an observer and recorded."""
        for who in list(self._held):  # the leases still held when the run ends
            self.ended(who)
        op = self.history.invoke("observer", "read", None, key=RESOURCE_KEY)
        final = resource.read()
        op.ok(final)
        return final


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
        record = Recorder(self.ttl_ms)
        try:
            self.script(
                _Run(cluster, record, resource, db, clients, self._key(cluster), self.ttl_ms)
            )
            final = record.read(resource)
        finally:
            for client in clients:
                with contextlib.suppress(Exception):
                    client.stop()
                    client.close()
            resource.close()
            cluster.ensure_running()
            _wait_quorum(cluster)
        return Timeline(
            scenario=f"{self.title} ({'etcd' if system == 'etcd' else 'ZooKeeper'})",
            way=way,
            approach=self.approach(system, way),
            testbed=f"real {system}, three members, real time",
            events=tuple(sorted(record.events, key=lambda e: e.t_ms)),
            final_value=final,
            parameters={"ttl_ms": float(self.ttl_ms)},
            history=record.history.text(),
        )

    def approach(self, system: str, way: str) -> str:
        """What the run's clients do, for the figure's title."""
        name = "EtcdLock" if system == "etcd" else "ZooKeeperLock"
        fencing = "SqlFencedStore checks the token" if way == "fixed" else "unfenced writes"
        return f"{name}, {fencing}"

    def both(self, cluster: ConsensusCluster, workdir: Path) -> tuple[Timeline, Timeline]:
        """The broken run, then the fixed run."""
        return self.run(cluster, "broken", workdir), self.run(cluster, "fixed", workdir)

    def script(self, run: _Run) -> None:
        raise NotImplementedError

    def _key(self, cluster: ConsensusCluster) -> str:
        return f"{self.key}:{time.monotonic_ns()}"  # a fresh key per run


@dataclass(frozen=True)
class _Run:
    """What a scenario's script works with, and the steps the scripts share."""

    cluster: ConsensusCluster
    record: Recorder
    resource: SqlResource
    db: Path
    clients: list[Any]
    key: str  # this run's own
    ttl_ms: int

    def lock(self, address: str | list[str] | None = None) -> ConsensusLock:
        """A client's lock on the run's key, reaching the cluster at ``address`` (or directly)."""
        where = _address(self.cluster) if address is None else address
        return make_lock(self.cluster.kind, where, self.key, self.ttl_ms, self.clients)

    def start(self) -> None:
        """The run's clock starts now."""
        self.record.t0 = time.monotonic()

    def started(self) -> tuple[ConsensusLock, ConsensusLock]:
        """A's lock and B's, both made before the run's clock starts."""
        a, b = self.lock(), self.lock()
        self.start()
        return a, b

    def takes(
        self,
        who: str,
        lock: ConsensusLock,
        timeout_ms: float,
        *,
        held: str = "",
        refused: str | Callable[[], str] | None = "",
        check: bool = False,
    ) -> bool:
        """``who`` acquires ``lock`` (then calls ``check()``, with ``check``), recorded as
        "token N" and ``held``; or is refused, recorded with ``refused`` (unless None), and
        False."""
        if not self.record.acquire(who, lock, timeout_ms):
            if refused is not None:
                why = refused if isinstance(refused, str) else refused()
                self.record(who, Kind.NOT_ACQUIRED, why)
            return False
        if check:
            lock.check()
        self.record(who, Kind.ACQUIRED, f"token {lock.token}{held}")
        return True

    def write(self, who: str, token: int, resource: SqlResource | None = None) -> None:
        """``who`` writes "<who>'s update" with ``token`` (to ``resource``, or the run's), the
        call and its outcome recorded."""
        record, value = self.record, f"{who}'s update"
        target = self.resource if resource is None else resource
        write = record.writing(who, token, value)
        try:
            accepted, detail = target.write(token, value)
        except BaseException:
            write.info()
            raise
        write.ok() if accepted else write.fail()
        record(who, Kind.WRITE_ACCEPTED if accepted else Kind.WRITE_REFUSED, detail, value)

    @contextlib.contextmanager
    def connection(self) -> Iterator[SqlResource]:
        """The resource on a connection of its own (SQLite: one per thread)."""
        mine = SqlResource(self.db, fenced=self.resource.fenced)
        try:
            yield mine
        finally:
            mine.close()

    def finishes(self, who: str, lock: ConsensusLock) -> None:
        """``who`` writes with its lock's token, then releases it."""
        self.write(who, lock.token)
        self.record.release(who, lock)
        self.record(who, Kind.RELEASED)

    def still_holds(self, who: str, lock: ConsensusLock) -> bool:
        """``lock.check()``: a lock found lost is recorded (its lease ended by now), and False."""
        try:
            lock.check()
        except LockError as error:
            self.record.ended(who)  # found lost: it had ended by now
            self.record(who, Kind.LOST, str(error).split(":")[0])
            return False
        return True

    def outlived(self, who: str, etcd: str, zookeeper: str) -> None:
        """Until the cluster deletes the key (30 s at most): ``who``'s lease ended, in the
        words for this cluster."""
        deadline = time.monotonic() + 30
        while not (gone := _lock_gone(self.cluster, self.key, self.clients)):
            if time.monotonic() >= deadline:
                break
            time.sleep(0.02)
        if gone:  # the cluster deleted the key by now: the lease ended no later
            self.record.ended(who)
        self.record(who, Kind.EXPIRED, etcd if self.cluster.kind == "etcd" else zookeeper)


def _fatal(log: Path, error: Exception) -> str:
    """The message of the last panic or fatal line in a member's log (etcd logs JSON)."""
    with contextlib.suppress(OSError):
        for line in reversed(log.read_text("utf-8", "replace").splitlines()[-200:]):
            if '"level":"panic"' in line or '"level":"fatal"' in line:
                with contextlib.suppress(ValueError):
                    entry = json.loads(line)
                    why = str(entry.get("error", "")).rsplit(": ", 1)[-1]
                    return f"{entry.get('msg', '')}: {why}"[:90]
    return type(error).__name__


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

    def script(self, run: _Run) -> None:
        record, cluster = run.record, run.cluster
        address, fenced = _address(cluster), run.resource.fenced
        with _holder(cluster.kind, address, run.key, self.ttl_ms, run.db, fenced) as a:
            got = a.read()
            record.t0 = time.monotonic()  # the run starts when A holds the lock
            record.took("A")
            record("A", Kind.ACQUIRED, f"token {got['token']}; check() passed")
            # A is about to write: the process stops here (a GC pause, a stalled VM).
            a.pause()
            record("A", Kind.PAUSED, "SIGSTOP, just before its write")
            run.outlived(
                "A",
                etcd="the cluster revoked its lease, deleting the key",
                zookeeper="its session expired; the ensemble deleted its node",
            )
            b = run.lock()
            if not run.takes("B", b, 10_000, refused="still held"):
                return
            run.write("B", b.token)
            time.sleep(0.2)
            a.resume()
            record("A", Kind.RESUMED, "SIGCONT: carries on from the line after its check")
            write = record.writing("A", got["token"], "A's update")
            wrote = a.send("write A's update")
            write.ok() if wrote["accepted"] else write.fail()
            kind = Kind.WRITE_ACCEPTED if wrote["accepted"] else Kind.WRITE_REFUSED
            record("A", kind, wrote["detail"], "A's update")
            release = record.releasing("A")
            released = a.send("release")
            if released["ok"]:
                release.ok()
                record("A", Kind.RELEASED)
            else:
                release.info()  # refused: the lease had ended
                record("A", Kind.RELEASE_REFUSED, released["detail"])
            record.release("B", b)
            record("B", Kind.RELEASED)


@dataclass(frozen=True)
class ConsensusLeaderKilled(ConsensusScenario):
    """The leader killed while A holds the lock: B is refused; A keeps the lock or sees it lost."""

    title: ClassVar[str] = "The leader killed while the lock is held"

    def script(self, run: _Run) -> None:
        record, cluster = run.record, run.cluster
        a, b = run.started()
        if not run.takes("A", a, 5_000):
            return
        leader = cluster.leader()
        cluster.kill(leader)
        record("cluster", Kind.SERVER, f"leader {cluster.members[leader].name} killed (SIGKILL)")
        wait = 2 * self.ttl_ms
        got = record.acquire("B", b, wait)
        if not got and b.last_error is not None:
            record("B", Kind.NOT_ACQUIRED, f"no answer: {_cause(b.last_error)}")
        if got:
            record("B", Kind.ACQUIRED, f"token {b.token}: a second holder")
            record.release("B", b)
            record("B", Kind.RELEASED)
        else:
            record("B", Kind.NOT_ACQUIRED, f"refused for {wait} ms, longer than A's lease")
        if not run.still_holds("A", a):
            return
        run.finishes("A", a)
        cluster.restart(leader)
        record("cluster", Kind.SERVER, f"{cluster.members[leader].name} restarted")


@dataclass(frozen=True)
class ConsensusMajorityDown(ConsensusScenario):
    """Two of three members down: nobody acquires (safety over liveness)."""

    title: ClassVar[str] = "A majority of the cluster down"

    def script(self, run: _Run) -> None:
        record, cluster = run.record, run.cluster
        a, b = run.started()
        down = [cluster.leader()]
        down.append(next(i for i in range(len(cluster.members)) if i not in down))
        for index in down:
            cluster.kill(index)
            record("cluster", Kind.SERVER, f"{cluster.members[index].name} killed (SIGKILL)")
        for name, lock in (("A", a), ("B", b)):
            got = record.acquire(name, lock, self.ttl_ms)
            if not got and lock.last_error is not None:
                record(name, Kind.NOT_ACQUIRED, f"no quorum: {_cause(lock.last_error)}")
                continue
            if got:
                record(name, Kind.ACQUIRED, f"token {lock.token}")
                run.write(name, lock.token)
            else:
                record(name, Kind.NOT_ACQUIRED, "refused")
        cluster.restart(*down)
        record("cluster", Kind.SERVER, "both members restarted")


@dataclass(frozen=True)
class ConsensusCutOffHolder(ConsensusScenario):
    """A holder cut off from every member (the testbed's link) while it works; its late write."""

    title: ClassVar[str] = "The holder cut off from the cluster"
    work_ms: int = 4000

    def script(self, run: _Run) -> None:
        record, cluster = run.record, run.cluster
        links = [Link((LOOPBACK, m.client_port)) for m in cluster.members]
        try:
            if isinstance(cluster, EtcdCluster):
                through: list[str] | str = [
                    f"http://{h}:{p}" for h, p in (x.address for x in links)
                ]
            else:
                through = ",".join(f"{h}:{p}" for h, p in (x.address for x in links))
            a, b = run.lock(through), run.lock()
            run.start()
            if not run.takes("A", a, 5_000, held="; check() passed, starts its work", check=True):
                return
            for link in links:
                link.cut()
            record("cluster", Kind.SERVER, "A's links to all three members cut")
            run.outlived(
                "A",
                etcd="no keep-alive arrived: the cluster revoked its lease",
                zookeeper="no heartbeat arrived: its session expired",
            )
            if not run.takes("B", b, 10_000, refused="still held"):
                return
            run.write("B", b.token)
            time.sleep(max(0.0, self.work_ms / 1000 - (time.monotonic() - record.t0)))
            # A's work is done: it writes without checking again (it checked before it began).
            run.write("A", a.token)
            try:
                record.release("A", a)
                record("A", Kind.RELEASED)
            except LockError as error:
                record("A", Kind.RELEASE_REFUSED, f"{type(error).__name__}: still cut off")
            record.release("B", b)
            record("B", Kind.RELEASED)
        finally:
            for link in links:
                link.close()


class _RawEtcd:
    """The two requests a hand-written etcd lock makes, sent once each (the broken ways)."""

    def __init__(self, url: str) -> None:
        import urllib3

        self._url = url
        self._http = urllib3.PoolManager(timeout=urllib3.Timeout(total=1.0), retries=False)

    def post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """The JSON reply; ``OSError`` when none came."""
        import urllib3

        try:
            response = self._http.request(
                "POST", self._url + path, body=json.dumps(body).encode("utf-8")
            )
        except urllib3.exceptions.HTTPError as error:
            raise OSError(f"no reply to {path}: {error!r}") from error
        reply: dict[str, Any] = json.loads(response.data or b"{}")
        return reply

    def grant(self, ttl_ms: int) -> int:
        return int(self.post("/v3/lease/grant", {"TTL": ttl_ms // 1000})["ID"])

    def create(self, key: str, lease: int) -> dict[str, Any]:
        """Put ``key`` on ``lease`` if absent: the transaction's reply (``error`` on failure)."""
        encoded = base64.b64encode(key.encode()).decode()
        put = {"request_put": {"key": encoded, "value": encoded, "lease": lease}}
        return self.post(
            "/v3/kv/txn",
            {
                "compare": [{"key": encoded, "target": "CREATE", "create_revision": "0"}],
                "success": [put],
            },
        )


@dataclass(frozen=True)
class ConsensusLostReply(ConsensusScenario):
    """A's create is performed, its reply lost at the link; B waits for the lock."""

    title: ClassVar[str] = "The reply to A's create lost"

    def approach(self, system: str, way: str) -> str:
        if way == "fixed":
            return super().approach(system, way)
        if system == "etcd":
            return "A: a grant and a txn by hand, no reply taken as a failure; B: EtcdLock"
        return "A: a node named lock-N by hand, no reply taken as a failure; B: ZooKeeperLock"

    def script(self, run: _Run) -> None:
        record, cluster = run.record, run.cluster
        fixed = run.resource.fenced
        run.start()
        if isinstance(cluster, EtcdCluster):
            with HttpLink(cluster.endpoint(0)) as link:
                link.lose("/v3/kv/txn")
                record("cluster", Kind.SERVER, "the link to etcd-0 will drop A's next txn reply")
                if fixed:
                    a = run.lock([link.url])
                    held = ": its own key, found on its lease"
                    if run.takes("A", a, 5_000, held=held, refused=lambda: _last_error(a)):
                        run.finishes("A", a)
                else:
                    raw = _RawEtcd(link.url)
                    create = record.unknown("A", record.now())  # its lease: the TTL, no keep-alive
                    lease = raw.grant(self.ttl_ms)
                    try:
                        reply = raw.create(run.key, lease)
                    except OSError:
                        create.info()
                        record("A", Kind.NOT_ACQUIRED, "no reply to its txn: taken as a failure")
                    else:
                        create.ok() if reply.get("succeeded") else create.fail()
                self._b_waits(run)
            return
        assert isinstance(cluster, ZooKeeperEnsemble)
        zlink = Link((LOOPBACK, cluster.members[0].client_port))
        try:
            client = _kazoo(":".join(map(str, zlink.address)), 4000, run.clients)
            path = _zpath(run.key)
            client.ensure_path(path)
            zlink.reply_delay_s = 1.0
            record("cluster", Kind.SERVER, "the link to zk-0 delays every reply to A by 1 s")
            if fixed:
                from lockguide.zookeeper import ZooKeeperLock

                a = ZooKeeperLock(client, path, request_timeout_ms=300)
                if not record.acquire("A", a, 1000):
                    record("A", Kind.NOT_ACQUIRED, f"no reply in time: {_cause(a.last_error)}")
            else:
                create = record.unknown("A", record.now(), 4000)  # its node: the session's life
                try:
                    client.create_async(f"{path}/lock-", ephemeral=True, sequence=True).get(
                        timeout=0.3
                    )
                except client.handler.timeout_exception:
                    create.info()
                    record("A", Kind.NOT_ACQUIRED, "no reply to its create in 300 ms: gives up")
                else:
                    create.info()  # a node, but A's code does not go on to hold the lock
            zlink.reply_delay_s = 0.0
            self._b_waits(run)
        finally:
            zlink.close()

    def _b_waits(self, run: _Run) -> None:
        b = run.lock()
        wait = 2 * self.ttl_ms
        what = "A's orphan node" if run.cluster.kind == "zookeeper" else "A's key"
        if run.takes("B", b, wait, refused=f"{wait} ms: blocked by {what}"):
            run.finishes("B", b)


def _last_error(lock: ConsensusLock) -> str:
    return f"last error: {_cause(lock.last_error)}"


@dataclass(frozen=True)
class ConsensusWaiterOutwaits(ConsensusScenario):
    """B waits for A longer than B's own TTL; A releases; does B get the lock?"""

    title: ClassVar[str] = "A waiter that outwaits its TTL"
    ttl_ms: int = 1000
    hold_ms: int = 3000

    def approach(self, system: str, way: str) -> str:
        if system == "etcd" and way == "broken":
            return "B: one lease for the whole wait, retried on (EtcdLock before its fix)"
        return super().approach(system, way)

    def script(self, run: _Run) -> None:
        record = run.record
        a = run.lock()
        run.start()
        if not run.takes("A", a, 5_000, held=f"; holds it {self.hold_ms} ms"):
            return
        wait_ms = self.hold_ms + 2 * self.ttl_ms
        if isinstance(run.cluster, EtcdCluster) and not run.resource.fenced:
            waiter = threading.Thread(target=self._one_lease, args=(run, run.cluster, wait_ms))
        else:
            waiter = threading.Thread(target=self._waits, args=(run, run.lock(), wait_ms))
        waiter.start()
        time.sleep(self.hold_ms / 1000)
        run.write("A", a.token)
        time.sleep(0.005)  # keep the write and the release apart on the timeline
        # A stops believing it holds the lock when it asks to release, not when the
        # reply arrives: B, woken by the same deletion, may hold it before that.
        asked = record.now()
        record.release("A", a)
        record.events.append(Event(asked, "A", Kind.RELEASED, "asked to release"))
        waiter.join()

    def _waits(self, run: _Run, b: ConsensusLock, ms: int) -> None:
        run.record("B", Kind.READ, f"waits up to {ms} ms, its TTL {self.ttl_ms} ms")
        if not run.takes("B", b, ms, refused=f"gave up after {ms} ms"):
            return
        with run.connection() as mine:
            run.write("B", b.token, mine)
        run.record.release("B", b)
        run.record("B", Kind.RELEASED)

    def _one_lease(self, run: _Run, cluster: EtcdCluster, ms: int) -> None:
        """The broken waiter: one lease for the whole wait, never kept alive."""
        record = run.record
        raw = _RawEtcd(cluster.endpoint(0))
        lease = raw.grant(self.ttl_ms)
        record("B", Kind.READ, f"waits up to {ms} ms on one lease of {self.ttl_ms} ms")
        give_up = time.monotonic() + ms / 1000
        error = ""
        since = record.now()
        while time.monotonic() < give_up:
            reply = raw.create(run.key, lease)
            if reply.get("succeeded"):
                record.took("B")
                record("B", Kind.ACQUIRED, f"token {reply['header']['revision']}")
                return
            error = str(reply.get("message", "")) or error
            time.sleep(0.1)
        record.refused("B", since)
        record("B", Kind.NOT_ACQUIRED, f"gave up after {ms} ms; every try: {error[:50]}")


@dataclass(frozen=True)
class ConsensusWipedMember(ConsensusScenario):
    """A follower restarted with its data wiped while A holds the lock."""

    title: ClassVar[str] = "A member restarted with its data wiped"

    def script(self, run: _Run) -> None:
        import shutil

        record, cluster = run.record, run.cluster
        a, b = run.started()
        if not run.takes("A", a, 5_000):
            return
        leader = cluster.leader()
        follower = next(i for i in range(len(cluster.members)) if i != leader)
        name = cluster.members[follower].name
        cluster.kill(follower)
        data = cluster.base / name / "data"
        wiped = data / "version-2" if isinstance(cluster, ZooKeeperEnsemble) else data
        kept = cluster.base / name / "data.kept"
        shutil.rmtree(kept, ignore_errors=True)
        shutil.copytree(data, kept)
        shutil.rmtree(wiped)
        record("cluster", Kind.SERVER, f"follower {name} killed; its data directory emptied")
        try:
            cluster.restart(follower)
            _wait_quorum(cluster)
            came_back = f"{name} restarted empty and rejoined"
            if isinstance(cluster, ZooKeeperEnsemble):
                came_back += ": the leader sent it the state"
        except Exception as error:
            came_back = f"{name} exited at start: {_fatal(cluster.members[follower].log, error)}"
        record("cluster", Kind.SERVER, came_back)
        wait = 2 * self.ttl_ms
        refused = f"refused for {wait} ms, longer than A's lease"
        if run.takes("B", b, wait, held=": a second holder", refused=refused):
            record.release("B", b)
        if not run.still_holds("A", a):
            return
        run.finishes("A", a)
        if run.takes("B", b, 5_000, refused=None):
            run.finishes("B", b)
        if not cluster.members[follower].running:  # put the member back as it was
            shutil.rmtree(data, ignore_errors=True)
            shutil.move(kept, data)
            cluster.restart(follower)
        shutil.rmtree(kept, ignore_errors=True)


@dataclass(frozen=True)
class ConsensusDelayedWrite(ConsensusScenario):
    """A's write leaves under a valid lease and reaches the resource after B's."""

    title: ClassVar[str] = "A's write delayed on its way to the resource"
    delay_ms: int = 1500

    def script(self, run: _Run) -> None:
        record = run.record
        a, b = run.started()
        if not run.takes("A", a, 5_000, held="; check() passed", check=True):
            return
        token = a.token

        def in_flight() -> None:  # the network holds A's request, then delivers it
            time.sleep(self.delay_ms / 1000)
            with run.connection() as mine:
                run.write("A", token, mine)

        wire = threading.Thread(target=in_flight)
        wire.start()
        record("A", Kind.READ, f"sends its write; the network holds it {self.delay_ms} ms")
        time.sleep(0.3)  # A's client times out on the write and lets the lock go
        record.release("A", a)
        record("A", Kind.RELEASED, "its write timed out: it takes it as failed")
        if run.takes("B", b, 5_000, refused=None):
            run.write("B", b.token)
            wire.join()
            record.release("B", b)
            record("B", Kind.RELEASED)
        wire.join()


#: The consensus runs, in the order the page tells them.
CONSENSUS_SCENARIOS: tuple[ConsensusScenario, ...] = (
    ConsensusPausedHolder(),
    ConsensusCutOffHolder(),
    ConsensusLeaderKilled(),
    ConsensusMajorityDown(),
    ConsensusLostReply(),
    ConsensusWaiterOutwaits(),
    ConsensusWipedMember(),
    ConsensusDelayedWrite(),
)
