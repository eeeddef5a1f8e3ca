"""A leader elected over one Redis: paused, cut off from Redis, and on a Redis that fails over.

The leader is :class:`lockguide.Leader` as any program uses it: a ``FencedLock`` renewed
by a watchdog thread, timed on ``time.monotonic``. It takes no ``clock=``, so these
scenarios run in real time on every testbed, with a lease of a second.

What the lab does to a leader it does to the connections of the client it hands it
(:func:`gated_client`): while its actor is paused every request waits, as in a stopped
process; once cut off, every request fails, as in a partition that leaves the resource
reachable. The same connections note the watchdog's renewals (an ``EVALSHA`` with one key,
the role, and two arguments, the leader's value and the lease) and their replies, which
the actor records as grants. ``lockguide`` is neither patched nor subclassed.
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import redis

from lockguide.errors import BadArgument, RenewalFailed
from lockguide.fencing import counter_key_for
from lockguide.leader import Leader, check_timing
from lockguide_lab.scenarios import settings
from lockguide_lab.scenarios.actor import Actor
from lockguide_lab.scenarios.locks import Hooks
from lockguide_lab.scenarios.resources import FencedResource, PlainResource, Resource
from lockguide_lab.scenarios.run import Run, Scenario, Way
from lockguide_lab.scenarios.timeline import Kind
from lockguide_lab.testbed.link import RespRequests

__all__ = [
    "LeaderFailover",
    "PartitionedLeader",
    "PausedLeader",
    "ProcessGate",
    "RecordedLeader",
    "gated_client",
]

ROLE = "lock:leader:ledger"
RESOURCE = "ledger:balance"


class ProcessGate:
    """What stands between one leader's process and Redis: a pause, a cut, a recorder."""

    def __init__(self, hooks: Hooks, role: str) -> None:
        self.hooks = hooks
        self.role = role.encode("utf-8")
        self.cut = False

    def before_request(self) -> None:
        """Wait while the process is paused; fail once it is cut off."""
        self.hooks.running.wait()
        if self.cut:
            raise redis.ConnectionError("cut off from the lock's server (the lab's partition)")

    def is_renewal(self, command: list[bytes]) -> bool:
        """``EVALSHA sha 1 role value lease``: the watchdog's compare-and-pexpire."""
        return (
            len(command) == 6
            and command[0].upper() == b"EVALSHA"
            and command[2] == b"1"
            and command[3] == self.role
        )


class _GatedConnection:
    """Mixed into a client's connection class: see :func:`gated_client`."""

    gate: ClassVar[ProcessGate]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._lab_sent: collections.deque[tuple[bool, float]] = collections.deque()

    def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        self.gate.before_request()
        data = command if isinstance(command, bytes) else b"".join(bytes(c) for c in command)
        started = self.gate.hooks.now()
        for request in RespRequests().feed(data):
            self._lab_sent.append((self.gate.is_renewal(request), started))
        super().send_packed_command(command, check_health)  # type: ignore[misc]

    def read_response(self, *args: Any, **kwargs: Any) -> Any:
        try:
            reply = super().read_response(*args, **kwargs)  # type: ignore[misc]
        except redis.ResponseError:  # NOSCRIPT: the lock loads the script and asks again
            if self._lab_sent:
                self._lab_sent.popleft()
            raise
        except BaseException:
            self._lab_sent.clear()  # the connection is closed: no reply will come
            raise
        self._answered(reply)
        return reply

    def disconnect(self, *args: Any, **kwargs: Any) -> None:
        self._lab_sent.clear()
        super().disconnect(*args, **kwargs)  # type: ignore[misc]

    def _answered(self, reply: object) -> None:
        if not self._lab_sent:
            return
        renewal, started = self._lab_sent.popleft()
        if renewal:
            self.gate.hooks.on_extend(started, reply == 1)


def gated_client(client: redis.Redis, gate: ProcessGate) -> redis.Redis:
    """A client of ``client``'s server (same settings) whose connections pass ``gate``."""
    pool = client.connection_pool
    base = pool.connection_class
    connection = type(f"Gated{base.__name__}", (_GatedConnection, base), {"gate": gate})
    return redis.Redis(
        connection_pool=redis.ConnectionPool(connection_class=connection, **pool.connection_kwargs)
    )


class RecordedLeader:
    """A :class:`~lockguide.Leader` as an actor's lock: a campaign acquires, resign releases.

    ``value`` is what the campaign stored under the role (read back from the server, as any
    reader sees it), so the run can tell on the server whether the role is still this one's.
    """

    #: The actor keeps the term's token for its writes (unfenced, the grant's order counts).
    fenced = False
    defers_renewals = True  # noted by the connections, even inside resign()

    def __init__(self, hooks: Hooks, leader: Leader, observer: redis.Redis, gate: ProcessGate):
        self.hooks = hooks
        self.leader = leader
        self.gate = gate
        self._observer = observer
        self._value: str | None = None

    @property
    def key(self) -> str:
        return self.leader.role

    @property
    def ttl_ms(self) -> int:
        return self.leader.lease_ms

    @property
    def value(self) -> str | None:
        return self._value

    @property
    def token(self) -> int:
        return self.leader.token

    def acquire(self, *, blocking: bool = True, timeout_ms: float | None = None) -> bool:
        """``campaign()``: one try, or until elected within ``timeout_ms``."""
        if blocking:
            elected = self.leader.campaign(timeout_ms=timeout_ms)
        else:
            elected = self.leader.campaign(blocking=False)
        if elected:
            raw = self._observer.get(self.key)
            self._value = raw.decode("utf-8") if isinstance(raw, bytes) else None
        return elected

    def release(self) -> None:
        """``resign()``; ``RenewalFailed`` if the term had been lost."""
        self._value = None
        self.leader.resign()


def leader_of(actor: Actor) -> Leader:
    """The :class:`~lockguide.Leader` an actor made by :meth:`_LeaderScenario.contenders` uses."""
    lock = actor.lock
    assert isinstance(lock, RecordedLeader)
    return lock.leader


@dataclass(frozen=True)
class _LeaderScenario(Scenario):
    """Two contenders, A and B, for one role; client-go's timing, scaled down to a second."""

    real_time: ClassVar[bool] = True

    lease_ms: int = 1000
    renew_deadline_ms: float = 600
    retry_period_ms: float = 150

    def __post_init__(self) -> None:
        settings.ttl_ms(self.lease_ms, "lease_ms")
        check_timing(self.lease_ms, self.renew_deadline_ms, self.retry_period_ms)

    def contenders(
        self, run: Run, connect: Callable[[], redis.Redis], *, fenced: bool
    ) -> tuple[Actor, Actor, Resource]:
        """Leaders A and B, each on a client from ``connect``, and the resource they write
        (checking the term's token if ``fenced``)."""
        role = run.testbed.key(ROLE)
        actors = []
        for name in "AB":
            hooks, observer = Hooks(run.now), connect()
            gate = ProcessGate(hooks, role)
            leader = Leader(
                gated_client(observer, gate),
                role,
                name=name,
                lease_ms=self.lease_ms,
                renew_deadline_ms=self.renew_deadline_ms,
                retry_period_ms=self.retry_period_ms,
                request_timeout_ms=2 * self.retry_period_ms,
            )
            lock = RecordedLeader(hooks, leader, observer, gate)
            lock.fenced = fenced
            actors.append(run.actor(name, lock, [observer]))
        client = run.testbed.resource_client()
        key = run.testbed.key(RESOURCE)
        resource = FencedResource(client, key) if fenced else PlainResource(client, key)
        a, b = actors
        return a, b, resource


def _stop_all(*actors: Actor) -> None:
    for actor in actors:
        if actor.value is not None:
            actor.release()


@dataclass(frozen=True)
class PausedLeader(_LeaderScenario):
    """The leader stops (a stop-the-world pause) after ``check()`` and before its write.

    A is elected and renews; its whole process, watchdog included, stops for ``pause_ms``,
    longer than the lease. Redis frees the role, B is elected and writes. A resumes and
    writes at once: its ``check()`` passed before the pause, so nothing in A can know.

    * broken: a resource that accepts every write: A's lands on top of B's.
    * fixed: the term's token, checked by a :class:`~lockguide.FencedStore`: B's term has
      the larger one, so A's write is refused. The leader is the same both ways.

    Args:
        pause_ms: how long A's process stops; above ``lease_ms`` + 2 retry periods.
    """

    title = "A paused leader"
    broken = "Leader over Redis; the resource accepts every write"
    fixed = "Leader over Redis; the resource checks the term's token"

    pause_ms: float = 2000

    def __post_init__(self) -> None:
        super().__post_init__()
        least = self.lease_ms + 2 * self.retry_period_ms
        if settings.duration_ms(self.pause_ms, "pause_ms") <= least:
            raise BadArgument(
                f"pause_ms must be above lease_ms + 2 retry periods ({least:g}), "
                f"so that B is elected during the pause; got {self.pause_ms!r}"
            )

    def script(self, run: Run, way: Way) -> Resource:
        server = run.testbed.server()
        a, b, resource = self.contenders(run, server.client, fenced=way is Way.FIXED)
        a.acquire()
        run.at(3 * self.retry_period_ms)
        leader_of(a).check()  # it leads: the last look before its write
        a.pause("a stop-the-world pause after check(), before its write")
        paused = run.now()
        run.at(paused + self.lease_ms + 2 * self.retry_period_ms)
        if b.acquire(timeout_ms=self.lease_ms):
            b.write(resource)
        run.at(paused + self.pause_ms)
        a.resume()
        a.write(resource)
        run.after(2 * self.retry_period_ms)  # A's renewal, held by the pause, goes out
        _stop_all(a, b)
        return resource


@dataclass(frozen=True)
class PartitionedLeader(_LeaderScenario):
    """The leader is cut off from Redis (not from the resource) and goes on working.

    A writes once every retry period. At two retry periods the network cuts it off from
    Redis: no renewal gets through. A's renew deadline passes ``lease_ms -
    renew_deadline_ms`` before Redis frees the role; B tries half a lease after the cut
    (refused: the role is still A's), and again once the lease is over (elected), and writes.

    * broken: A's loop ignores ``lost_event`` and ``check()``: its next write lands on top
      of B's.
    * fixed: A waits on ``lost_event`` between writes and calls ``check()`` before each; at
      the renew deadline the event is set and A stops, before B can be elected. Nothing is
      fenced: the timing is the fix.
    """

    title = "A leader cut off from Redis"
    broken = "Leader over Redis; the loop ignores lost_event and check()"
    fixed = "Leader over Redis; stop on lost_event, check() before each write"

    def script(self, run: Run, way: Way) -> Resource:
        server = run.testbed.server()
        a, b, resource = self.contenders(run, server.client, fenced=False)
        a.acquire()
        period = self.retry_period_ms
        cut_at = 2 * period
        b_tries = [cut_at + self.lease_ms / 2, cut_at + self.lease_ms + period]
        working, t = True, 0.0
        while t < cut_at + self.lease_ms + 4 * period:
            t += period
            # Fixed, A waits on lost_event between its writes.
            lost = leader_of(a).lost_event
            if working and way is Way.FIXED and lost.wait(max(0.0, t - run.now()) / 1000):
                working = False
                run.record("A", Kind.STOPPED, "lost_event: no renewal within the deadline")
            run.at(t)
            if t >= cut_at and not a.lock.gate.cut:  # type: ignore[attr-defined]
                a.lock.gate.cut = True  # type: ignore[attr-defined]
                run.server_event("the network cuts A off from Redis; the resource is reachable")
            if b_tries and t >= b_tries[0]:
                b_tries.pop(0)
                if b.value is None and b.acquire(timeout_ms=None if b_tries else period):
                    b.write(resource)
            if working and way is Way.FIXED:
                try:
                    leader_of(a).check()
                except RenewalFailed:
                    working = False
                    run.record("A", Kind.STOPPED, "check() raised RenewalFailed")
            if working:
                a.write(resource)
        _stop_all(a, b)
        return resource


@dataclass(frozen=True)
class LeaderFailover(_LeaderScenario):
    """The leader's Redis fails over to a replica that never had the role's key.

    Replication falls behind just before A is elected; the primary crashes and the replica
    is promoted without A's key or its token's increment. B is elected at once, with the
    same token, and writes; A, which has not renewed yet, writes too. A's next renewal
    finds the role B's and A stops: two leaders in one term for up to a retry period.

    * broken: a resource that accepts every write: A's lands on top of B's.
    * fixed: the term's token, checked by a :class:`~lockguide.FencedStore` on another
      server: the token equal to the one it accepted is refused. The overlap stays; a
      correctness leader needs etcd (the consensus scenarios).

    Args:
        earlier_grants: tokens issued before the story starts (they reached the replica).
    """

    title = "A leader whose Redis fails over"
    broken = "Leader over a primary with an asynchronous replica; unfenced writes"
    fixed = "Leader over the same pair; the resource checks the term's token"

    earlier_grants: int = 33

    def __post_init__(self) -> None:
        super().__post_init__()
        if isinstance(self.earlier_grants, bool) or not isinstance(self.earlier_grants, int):
            raise BadArgument(f"earlier_grants must be an int, got {self.earlier_grants!r}")
        if self.earlier_grants < 0:
            raise BadArgument(f"earlier_grants must be >= 0, got {self.earlier_grants}")

    def script(self, run: Run, way: Way) -> Resource:
        pair = run.testbed.failover_pair()
        a, b, resource = self.contenders(run, pair.client, fenced=way is Way.FIXED)
        if self.earlier_grants:
            a.servers[0].set(counter_key_for(run.testbed.key(ROLE)), self.earlier_grants)
        pair.sync()
        run.server_event("the replica has every write so far")
        pair.lag()
        run.server_event("replication falls behind: nothing more reaches the replica")
        a.acquire()
        pair.fail_over()
        run.server_event("the primary crashes; the replica is promoted without A's key")
        if b.acquire():
            b.write(resource)
        a.write(resource)
        failed_over = run.now()
        if leader_of(a).lost_event.wait(10 * self.retry_period_ms / 1000):
            run.record(
                "A",
                Kind.STOPPED,
                f"its renewal found the role gone or B's, {run.now() - failed_over:.0f} ms "
                "after B's write",
            )
        _stop_all(a, b)
        return resource
