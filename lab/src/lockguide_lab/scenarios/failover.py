"""Redis itself loses the key: a failover to a replica that lagged, a restart that forgot.

On a :class:`~lockguide_lab.testbed.RealTestbed` both run against real
``redis-server`` processes: a primary and a replica joined with ``REPLICAOF``
whose link is cut before A's write reaches it, and a server killed with
``SIGKILL`` and started again. On a :class:`~lockguide_lab.testbed.FakeTestbed` the
same scripts run against fakeredis models of those events (see :mod:`lockguide_lab.testbed.fake`).
"""

from __future__ import annotations

from dataclasses import dataclass

from lockguide.errors import BadArgument
from lockguide.fencing import counter_key_for
from lockguide_lab.scenarios import settings
from lockguide_lab.scenarios.lease import KEY, RESOURCE, b_tries_while_a_works, fenced_if_fixed
from lockguide_lab.scenarios.resources import PlainResource, Resource
from lockguide_lab.scenarios.run import Run, Scenario, Way

__all__ = ["FailoverLosesLock", "RestartForgetsLock"]


@dataclass(frozen=True)
class FailoverLosesLock(Scenario):
    """The primary grants the lock and dies before its replica has the key.

    Replication is asynchronous: the primary answers A first and streams the
    write to the replica afterwards. Here the stream falls behind just before
    A acquires, the primary crashes, and the replica is promoted without A's
    key. B acquires on the new primary and writes; A, which never noticed,
    finishes and writes too.

    * broken: a :class:`~lockguide.Lock` on the pair and a resource that
      accepts every write: A's write lands on top of B's.
    * fixed: a :class:`~lockguide.FencedLock` on the same pair and a
      :class:`~lockguide.FencedStore` on another server. The token counter
      lagged too, so B draws the *same* token as A; the store accepts only
      tokens above the highest it has seen, so whichever of the two writes
      second is refused. Fencing fails safe here; it does not make the counter
      durable.

    Args:
        ttl_ms: the lease (long: nothing here expires).
        earlier_grants: how many tokens were issued before the story starts
            (they reached the replica).
    """

    title = "A failover loses the lock"
    broken = "Lock on a primary with an asynchronous replica; unfenced writes"
    fixed = "FencedLock on the same pair; the resource checks the token"

    ttl_ms: int = 10_000
    earlier_grants: int = 33

    def __post_init__(self) -> None:
        settings.ttl_ms(self.ttl_ms)
        if isinstance(self.earlier_grants, bool) or not isinstance(self.earlier_grants, int):
            raise BadArgument(f"earlier_grants must be an int, got {self.earlier_grants!r}")
        if self.earlier_grants < 0:
            raise BadArgument(f"earlier_grants must be >= 0, got {self.earlier_grants}")

    def script(self, run: Run, way: Way) -> Resource:
        pair = run.testbed.failover_pair()
        a, b, resource = fenced_if_fixed(run, way, pair.client, self.ttl_ms)
        if self.earlier_grants:
            a.servers[0].set(counter_key_for(run.testbed.key(KEY)), self.earlier_grants)
        pair.sync()
        run.server_event("the replica has every write so far")
        pair.lag()
        run.server_event("replication falls behind: nothing more reaches the replica")
        a.acquire()
        run.at(10)
        pair.fail_over()
        run.server_event("the primary crashes; the replica is promoted without A's key")
        return b_tries_while_a_works(run, a, b, resource)


@dataclass(frozen=True)
class RestartForgetsLock(Scenario):
    """The lock's only server crashes and restarts while A holds the lock.

    * broken: a server without persistence comes back empty: B acquires a lock
      A still holds, and A's late write lands on top of B's.
    * fixed: a server with ``appendonly yes`` and ``appendfsync always``
      replays its append-only file: A's key is back, with the TTL it had left,
      and B waits its turn. (Keeping a crashed server down for longer than the
      largest TTL is the other fix: the lease is over before it returns.)

    Args:
        ttl_ms: the lease (long: nothing here expires).
    """

    title = "A restart without persistence forgets the lock"
    broken = "Lock on a server that persists nothing"
    fixed = "Lock on a server with appendonly yes, appendfsync always"

    ttl_ms: int = 10_000

    def __post_init__(self) -> None:
        settings.ttl_ms(self.ttl_ms)

    def script(self, run: Run, way: Way) -> Resource:
        persistent = way is Way.FIXED
        server = run.testbed.server(persistent=persistent)
        resource = PlainResource(run.testbed.resource_client(), run.testbed.key(RESOURCE))
        clients = {name: server.client() for name in "AB"}
        a, b = (
            run.actor(name, run.lock(client, run.testbed.key(KEY), self.ttl_ms), [client])
            for name, client in clients.items()
        )
        a.acquire()
        run.at(10)
        server.crash_and_restart()
        if persistent:
            run.server_event("the server crashes and restarts, replaying its append-only file")
        else:
            run.server_event("the server crashes and restarts empty: it persisted nothing")
        return b_tries_while_a_works(run, a, b, resource)
