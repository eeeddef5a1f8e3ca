"""Redlock's own failures: a clock jump on one master, a master that restarts empty, a split vote.

All three run a real :class:`~lockguide.Redlock` against five independent
servers from the testbed. In the first two, client A reaches only masters 1-3
and client B only masters 3-5 (a partition, as in Kleppmann's example), so
each majority leans on master 3, and what happens to master 3 decides
everything. The third is about liveness, not safety: contenders that retry in
step split the vote again and again, and nobody gets the lock.

Sources: Kleppmann, *How to do distributed locking* (2016), the timing
section (clock jump, restart); the Redis documentation, *Distributed locks
with Redis* (persistence, delayed restarts, random retry delay).
"""

from __future__ import annotations

import random
import threading
from dataclasses import dataclass

import redis

from lockguide.errors import BadArgument
from lockguide.redlock import Redlock
from lockguide_lab.errors import ScenarioError
from lockguide_lab.scenarios import settings
from lockguide_lab.scenarios.actor import Actor
from lockguide_lab.scenarios.lease import KEY, RESOURCE, _ms, b_tries_while_a_works
from lockguide_lab.scenarios.resources import PlainResource, Resource, VersionedResource
from lockguide_lab.scenarios.run import Run, Scenario, Way
from lockguide_lab.scenarios.timeline import Kind, Timeline
from lockguide_lab.testbed.base import LockServer

__all__ = ["ClockJumpOnOneNode", "RedlockRestartForgetsLock", "SplitVote"]

MASTERS = 5


def _partitioned(run: Run, nodes: list[LockServer], ttl_ms: int) -> tuple[Actor, Actor]:
    """A reaches masters 1-3 and B masters 3-5; the others time out for each of them.

    Each holder's lease is judged on all five servers (a majority must hold
    its value), whatever it can reach.
    """
    admin = [node.client() for node in nodes]
    views = {"A": (0, 1, 2), "B": (2, 3, 4)}
    actors = []
    for name, reach in views.items():
        masters = [
            node.client() if i in reach else run.testbed.unreachable_client()
            for i, node in enumerate(nodes)
        ]
        lock = run.redlock(masters, run.testbed.key(KEY), ttl_ms)
        actors.append(run.actor(name, lock, admin))
    return actors[0], actors[1]


@dataclass(frozen=True)
class ClockJumpOnOneNode(Scenario):
    """One master's clock jumps forward and A's key expires there early.

    A gets masters 1, 2 and 3 (4 and 5 do not answer it). Master 3's clock
    then jumps ahead by more than the lease (an operator sets the time by
    hand, NTP steps it), and since Redis compares each key's absolute expiry
    with its own clock, A's key is gone from master 3 at once. B, which
    reaches masters 3, 4 and 5, gets a majority of its own. A's clock did not
    jump: it still has almost all of its validity, and writes.

    * broken: Redlock and a resource that accepts every write. A's write
      lands on top of B's.
    * fixed: Redlock, and a resource that checks a version: each client reads
      the version when it starts and writes with compare-and-set on it, so A,
      which read before B wrote, is refused.

    Redlock cannot prevent this. Its safety assumes that every master measures
    a TTL at about the same rate as the client does; the algorithm has no way
    to see that master 3's clock jumped, and the jump never shows in the
    client's own arithmetic. The check has to be at the resource.

    Args:
        ttl_ms: the lease each client asks for.
        jump_ms: how far master 3's clock jumps (more than what is left of
            A's lease expires the key there).
    """

    title = "A clock jump on one Redlock master"
    broken = "Redlock; the resource accepts every write"
    fixed = "Redlock; the resource accepts a write only on the version its writer read"

    ttl_ms: int = 10_000
    jump_ms: float = 20_000

    def __post_init__(self) -> None:
        settings.ttl_ms(self.ttl_ms)
        if not _ms(self.jump_ms, "jump_ms") > 0:
            raise BadArgument(f"jump_ms must be > 0, got {self.jump_ms!r}")

    def script(self, run: Run, way: Way) -> Resource:
        nodes = run.testbed.servers(MASTERS)
        client = run.testbed.resource_client()
        versioned = VersionedResource(client, run.testbed.key(RESOURCE))
        resource = (
            versioned if way is Way.FIXED else PlainResource(client, run.testbed.key(RESOURCE))
        )
        a, b = _partitioned(run, nodes, self.ttl_ms)
        if a.acquire() and way is Way.FIXED:
            a.read(versioned)
        run.at(10)
        nodes[2].jump_clock(self.jump_ms)
        run.server_event(f"node-3's clock jumps {self.jump_ms / 1000:g} s ahead")
        reads = versioned if way is Way.FIXED else None
        return b_tries_while_a_works(run, a, b, resource, reads=reads)


@dataclass(frozen=True)
class RedlockRestartForgetsLock(Scenario):
    """One of A's three masters crashes and restarts while A holds the lock.

    A gets masters 1, 2 and 3 (4 and 5 do not answer it); B reaches 3, 4 and 5.
    Master 3 crashes and comes back.

    * broken: the masters persist nothing. Master 3 restarts empty, B gets
      3, 4 and 5, and A's late write lands on top of B's.
    * fixed (``restart_delay_ms=0``): the masters run with ``appendonly yes``
      and ``appendfsync always``. Master 3 replays its file, still holds A's
      key, and B waits until A releases.
    * fixed (``restart_delay_ms`` above the TTL): no persistence, but master 3
      stays down that long. While it is down it grants nothing to anybody, and
      by the time it restarts empty A's lease is over anyway.

    Args:
        ttl_ms: the lease each client asks for.
        restart_delay_ms: 0 for the append-only fix; otherwise how long the
            crashed master stays down in the fixed run (must exceed ``ttl_ms``).
    """

    title = "A Redlock master restarts empty"
    broken = "Redlock on masters that persist nothing"
    fixed = "Redlock on masters with appendonly yes, appendfsync always"

    ttl_ms: int = 10_000
    restart_delay_ms: float = 0

    def __post_init__(self) -> None:
        ttl = settings.ttl_ms(self.ttl_ms)
        delay = _ms(self.restart_delay_ms, "restart_delay_ms")
        if delay and delay <= ttl:
            raise BadArgument(
                f"restart_delay_ms must be 0 (use the append-only file) or longer than "
                f"ttl_ms ({ttl}), got {self.restart_delay_ms!r}: a master that comes back "
                "empty before the lease is over can grant it a second time"
            )

    def script(self, run: Run, way: Way) -> Resource:
        delayed = way is Way.FIXED and self.restart_delay_ms > 0
        persistent = way is Way.FIXED and not delayed
        if delayed:
            run.approach = (
                f"Redlock; a crashed master stays down {self.restart_delay_ms:g} ms "
                "(longer than the TTL)"
            )
        nodes = run.testbed.servers(MASTERS, persistent=persistent)
        resource = PlainResource(run.testbed.resource_client(), run.testbed.key(RESOURCE))
        a, b = _partitioned(run, nodes, self.ttl_ms)
        a.acquire()
        run.at(10)
        if delayed:
            nodes[2].crash()
            run.server_event(f"node-3 crashes; it stays down for {self.restart_delay_ms:g} ms")
        else:
            nodes[2].crash_and_restart()
            what = ", replaying its append-only file" if persistent else " empty"
            run.server_event(f"node-3 crashes and restarts{what}")

        def restart_late() -> None:
            run.at(10 + self.restart_delay_ms)
            nodes[2].restart()
            run.server_event("node-3 restarts empty, after every lease it granted has ended")
            run.after(10)

        return b_tries_while_a_works(run, a, b, resource, then=restart_late if delayed else None)


def _warm_up(lock: Redlock) -> None:
    """Open the lock's connections and load its scripts, as a client that has run a while has.

    A Redlock over the same clients and per-master timeout shares the lock's
    connections; one try and one release on another key set them up, so the
    first try of the story does not pay for handshakes on slow links.
    """
    probe = Redlock(
        lock.masters,
        lock.key + ":warm-up",
        ttl_ms=lock.ttl_ms,
        node_timeout_ms=lock.node_timeout_ms,
        retry_delay_ms=(1.0, 2.0),
    )
    if probe.acquire(blocking=False):
        for _ in range(3):  # a reply that missed the node timeout on a busy machine: call again
            try:
                probe.release()
                return
            except redis.RedisError:
                continue  # (its key on the warm-up name ends with its TTL)


class _Midpoint(random.Random):
    """Draws the middle of every range: a constant retry delay through Redlock's own loop.

    ``Redlock`` refuses a fixed delay range, so the broken run hands it this
    random source instead, which is what a client with a constant delay does.
    """

    def uniform(self, a: float, b: float) -> float:
        return (a + b) / 2


@dataclass(frozen=True)
class SplitVote(Scenario):
    """Contenders that retry in step split the vote every time: nobody wins.

    ``contenders`` clients (3 to 5) are released at the same moment against
    five masters. The network puts each client near some masters and
    ``far_ms`` further from the rest (client A is near masters 1 and 4, B near
    2 and 5, C near 3, and so on), so a round in which all of them send at
    once splits the masters between them and nobody reaches three. Each
    releases what it got and pauses before trying again, for ``window_ms``.

    * broken: every client pauses the same time (the middle of
      ``retry_ms``): they come back together, split the vote again, and
      keep doing so until they give up.
    * fixed: :class:`~lockguide.Redlock`'s own random pause, drawn from
      ``retry_ms``: the first to come back usually has the masters to itself.
      Each client writes once under the lock.

    Safety is not at stake here: no two clients ever hold the lock at once.
    What fails is progress. This scenario runs in real time on any testbed
    (the clients are threads, and the network delays are real), so its
    timings vary from run to run; its outcome does not, as long as thread
    scheduling jitter stays well below ``far_ms``.

    Each master's reply is waited for ``5 * far_ms`` (a far round trip takes
    ``2 * far_ms``), so that a busy machine does not turn a slow reply into a
    timeout and the outcome stays a matter of retry timing alone.

    Args:
        contenders: how many clients compete (3 to 5, so that nobody is near
            a majority).
        far_ms: the extra one-way latency to a client's far masters (each
            request and each reply).
        retry_low_ms, retry_high_ms: the range each pause is drawn from (the
            broken run always takes its middle).
        window_ms: how long each client keeps trying.
        ttl_ms: the lease.
    """

    title = "Retries in step split the vote"
    broken = "Redlock with a constant retry delay"
    fixed = "Redlock with a random retry delay"
    real_time = True
    liveness = True

    contenders: int = 3
    far_ms: float = 60
    retry_low_ms: float = 20
    retry_high_ms: float = 1_220
    window_ms: float = 3_000
    ttl_ms: int = 10_000

    def __post_init__(self) -> None:
        if (
            isinstance(self.contenders, bool)
            or not isinstance(self.contenders, int)
            or not 3 <= self.contenders <= MASTERS
        ):
            raise BadArgument(
                f"contenders must be an int from 3 to {MASTERS}, got {self.contenders!r}: "
                "with fewer, one client is near a majority of the masters and wins every round"
            )
        if not _ms(self.far_ms, "far_ms") > 0:
            raise BadArgument(f"far_ms must be > 0, got {self.far_ms!r}")
        low, high = _ms(self.retry_low_ms, "retry_low_ms"), _ms(self.retry_high_ms, "retry_high_ms")
        if not low < high:
            raise BadArgument(f"retry_low_ms must be below retry_high_ms, got {low!r} and {high!r}")
        if not _ms(self.window_ms, "window_ms") > 0:
            raise BadArgument(f"window_ms must be > 0, got {self.window_ms!r}")
        ttl = settings.ttl_ms(self.ttl_ms)
        if ttl <= 10 * self.far_ms:
            raise BadArgument(
                f"ttl_ms ({ttl}) must be more than ten times far_ms ({self.far_ms!r}): "
                "a try may wait 5 * far_ms for a master, and the lease must outlast that"
            )

    def premise_held(self, timeline: Timeline, way: Way | str) -> bool:
        """The broken way's story needs the clients in step: each round's tries ending
        within ``far_ms`` of each other, up to the first grant (a client more than that
        ahead reaches its far masters first and wins). A busy machine breaks it now and
        then (seen: one client's second try 130 ms after the others')."""
        if Way(way) is not Way.BROKEN:
            return True
        tries = {
            actor: timeline.of(actor, Kind.NOT_ACQUIRED, Kind.ACQUIRED)
            for actor in {e.actor for e in timeline.events if e.kind is Kind.NOT_ACQUIRED}
        }
        for round_ in range(max((len(t) for t in tries.values()), default=0)):
            ends = [t[round_] for t in tries.values() if len(t) > round_]
            if (
                len(ends) > 1
                and max(e.t_ms for e in ends) - min(e.t_ms for e in ends) > self.far_ms
            ):
                return False
            if any(e.kind is Kind.ACQUIRED for e in ends):
                break
        return True

    def script(self, run: Run, way: Way) -> Resource:
        nodes = run.testbed.servers(MASTERS)
        admin = [node.client() for node in nodes]
        resource = PlainResource(run.testbed.resource_client(), run.testbed.key(RESOURCE))
        contenders: list[tuple[Actor, Redlock]] = []
        for c in range(self.contenders):
            masters: list[redis.Redis] = [
                node.link(0 if i % self.contenders == c else self.far_ms)
                for i, node in enumerate(nodes)
            ]
            lock = run.redlock(
                masters,
                run.testbed.key(KEY),
                self.ttl_ms,
                node_timeout_ms=5 * self.far_ms,
                retry_delay_ms=(self.retry_low_ms, self.retry_high_ms),
                rng=_Midpoint() if way is Way.BROKEN else None,
            )
            contenders.append((run.actor("ABCDE"[c], lock, admin), lock))

        # The run starts when every client is ready, connections open: not part of the story.
        start = threading.Barrier(len(contenders), action=run.begin)
        failures: list[BaseException] = []

        def contend(actor: Actor, lock: Redlock) -> None:
            try:
                _warm_up(lock)
                start.wait()
                if actor.acquire(timeout_ms=self.window_ms):
                    actor.write(resource)
                    actor.release()
            except BaseException as error:  # reported by the main thread
                failures.append(error)
                start.abort()

        threads = [
            threading.Thread(
                target=contend, args=pair, name=f"contender-{pair[0].name}", daemon=True
            )
            for pair in contenders
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=self.window_ms / 1000.0 + 30.0)
        if any(thread.is_alive() for thread in threads):
            raise ScenarioError("a contender did not finish within its window")
        if failures:
            raise failures[0]
        return resource
