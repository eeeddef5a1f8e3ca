"""What a scenario runs against: a :class:`Testbed`, its lock servers, a failover pair.

A scenario never starts a server or touches a clock itself; it asks its
testbed. The same scenario code then runs on three testbeds:

* :class:`~lockguide_lab.testbed.fake.FakeTestbed`: in-process fakeredis
  servers on a standing :class:`~lockguide_lab.testbed.clock.VirtualClock`.
  Needs no server, and every run lands on the same milliseconds. Failover and
  restart are *modelled*.
* :class:`~lockguide_lab.testbed.real.RealTestbed`: ``redis-server``
  processes on real time. Failover is a real primary and replica
  (``REPLICAOF``) whose link runs through a
  :class:`~lockguide_lab.testbed.link.Link` that the scenario cuts; a restart is
  ``SIGKILL`` and a fresh start on the same port and data directory.
* :class:`~lockguide_lab.testbed.client.ClientTestbed`: a server you already
  run, for the scenarios that need no fault.

Clients handed out by a testbed keep one address for the lock's server, and
what stands behind that address changes: after a failover it is the promoted
replica (as behind a virtual IP or a proxy that follows the primary), after a
restart the restarted process. Locks that open connections of their own from
a client's settings therefore follow too.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from lockguide.errors import BadArgument
from lockguide_lab.testbed.clock import Clock

__all__ = ["FailoverPair", "LockServer", "Testbed", "check_count"]


class LockServer:
    """One lock server on a testbed.

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


class Testbed:
    """Where a scenario runs: a clock, lock servers, a resource, a failover pair.

    Attributes:
        clock: the clock scenarios read and advance, and the locks they make
            measure with (their ``clock=``).
        label: a short description for timelines (``"fakeredis, virtual clock"``).
    """

    __test__ = False  # not a pytest test class, whatever its name says

    clock: Clock
    label: str

    def server(self, *, persistent: bool = False) -> LockServer:
        """A fresh, empty lock server (persistent: append-only, fsync always)."""
        raise NotImplementedError

    def servers(self, count: int, *, persistent: bool = False) -> list[LockServer]:
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
        """The Redis key a scenario uses for ``name`` (a testbed on a shared server prefixes it)."""
        return name

    def unreachable_client(self) -> redis.Redis:
        """A client of a server nobody can reach: every command raises ``ConnectionError``.

        For a node that one client cannot see (a partition), e.g. in a Redlock
        whose majority is formed from the nodes it can reach.
        """
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
        """Around one scenario run: afterwards, forget what it created."""
        try:
            yield
        finally:
            self.reset()

    def reset(self) -> None:
        """Forget everything the last run created."""

    def close(self) -> None:
        """Stop whatever the testbed started."""

    def __enter__(self) -> Testbed:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def check_count(count: object) -> int:
    """``count`` if it is a whole number of servers >= 1; :class:`BadArgument` otherwise."""
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise BadArgument(f"count must be a whole number of servers >= 1, got {count!r}")
    return count
