"""The testbed that needs no server: fakeredis servers in this process, on a virtual clock."""

from __future__ import annotations

from typing import cast

import redis

from lockguide_lab.testbed.base import FailoverPair, LockServer, Testbed, check_count
from lockguide_lab.testbed.clock import VirtualClock
from lockguide_lab.testbed.fakeserver import FakeServer, delayed_client

__all__ = ["FakeFailoverPair", "FakeLockServer", "FakeTestbed"]


class FakeLockServer(LockServer):
    """A lock server in this process (fakeredis), on the testbed's virtual clock."""

    def __init__(self, testbed: FakeTestbed, label: str, *, persistent: bool = False) -> None:
        self.label = label
        self._persistent = persistent
        self.server = FakeServer(testbed.clock, label)

    @property
    def persistent(self) -> bool:
        return self._persistent

    def client(self) -> redis.Redis:
        client: redis.Redis = self.server.client()
        return client

    def crash(self) -> None:
        """Modelled in place: the in-process server refuses every command from now on.

        Without persistence its keys are gone; a persistent server keeps every
        key with the TTL it had left, which is what replaying an append-only
        file written with ``appendfsync always`` restores (Redis stores expiries
        as absolute times, so a lease keeps running while the server is down).
        Either way it forgets its loaded scripts.
        """
        admin = self.server.client()
        if not self._persistent:
            admin.flushall()
        admin.script_flush()
        self.server.connected = False

    def restart(self) -> None:
        """The same in-process server accepts commands again, as the restarted process."""
        self.server.connected = True

    def link(self, delay_ms: float) -> redis.Redis:
        client: redis.Redis = delayed_client(self.server, delay_ms)
        return client

    def jump_clock(self, ms: float) -> None:
        """Exact: this server's clock runs ``ms`` ahead from now on."""
        self.server.skew_ms += ms


class FakeFailoverPair(FailoverPair):
    """Modelled asynchronous replication, behind one in-process server's address.

    :meth:`sync` records what the replica has: every key of the primary, with
    the moment each expires. Nothing written after that reaches it. At
    :meth:`fail_over` the address that clients use starts serving the replica's
    data (its keys, their TTLs still running, no scripts loaded), as after a
    promotion behind a virtual IP. :meth:`lag` therefore changes nothing here;
    it is where, on a real pair, the link is cut.
    """

    def __init__(self, testbed: FakeTestbed) -> None:
        self._clock = testbed.clock
        self._endpoint = FakeServer(testbed.clock, "primary")
        self._replica: list[tuple[bytes, bytes, float | None]] = []

    def client(self) -> redis.Redis:
        client: redis.Redis = self._endpoint.client()
        return client

    def sync(self) -> None:
        source = self._endpoint.client()
        now_ms = self._clock.now_ms()
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
        now_ms = self._clock.now_ms()
        for name, dumped, expires_at in self._replica:
            if expires_at is None:
                target.restore(name, 0, dumped, replace=True)
            elif expires_at > now_ms:
                target.restore(name, int(expires_at - now_ms), dumped, replace=True)


class FakeTestbed(Testbed):
    """In-process fakeredis servers on one standing :class:`VirtualClock`. Needs no server."""

    def __init__(self) -> None:
        self.clock: VirtualClock = VirtualClock()
        self.label = "fakeredis, virtual clock"
        self._resource = FakeServer(self.clock, "resource")

    def server(self, *, persistent: bool = False) -> LockServer:
        return FakeLockServer(self, "redis", persistent=persistent)

    def servers(self, count: int, *, persistent: bool = False) -> list[LockServer]:
        check_count(count)
        return [FakeLockServer(self, f"node-{i + 1}", persistent=persistent) for i in range(count)]

    def failover_pair(self) -> FailoverPair:
        return FakeFailoverPair(self)

    def resource_client(self) -> redis.Redis:
        client: redis.Redis = self._resource.client()
        return client

    def unreachable_client(self) -> redis.Redis:
        """A fakeredis client of a server that is down (``connected = False``)."""
        server = FakeServer(self.clock, "unreachable")
        server.connected = False
        client: redis.Redis = server.client()
        return client

    def reset(self) -> None:
        self._resource.client().flushall()
