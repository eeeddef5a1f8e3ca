"""The testbed on a server you already run: the scenarios that need no fault, in real time."""

from __future__ import annotations

import redis

from lockguide.errors import BadArgument, BadArgumentType
from lockguide_lab.errors import ScenarioError
from lockguide_lab.testbed.base import FailoverPair, LockServer, Testbed
from lockguide_lab.testbed.clock import RealClock

__all__ = ["ClientTestbed"]


class _GivenServer(LockServer):
    def __init__(self, client: redis.Redis) -> None:
        self._client = client

    @property
    def persistent(self) -> bool:
        return False

    def client(self) -> redis.Redis:
        return self._client

    def crash(self) -> None:
        raise ScenarioError("ClientTestbed cannot crash a server it did not start: use RealTestbed")

    def restart(self) -> None:
        raise ScenarioError(
            "ClientTestbed cannot restart a server it did not start: use RealTestbed"
        )

    def link(self, delay_ms: float) -> redis.Redis:
        raise ScenarioError("ClientTestbed does not slow down your network: use RealTestbed")

    def jump_clock(self, ms: float) -> None:
        raise ScenarioError("ClientTestbed does not move the clock of your server: use FakeTestbed")


class ClientTestbed(Testbed):
    """Run the single-server scenarios against a server you already have, in real time.

    Lock and resource live on ``client``'s server, under keys that start with
    ``prefix``; the testbed deletes only those keys. Scenarios that need to
    crash, restart or fail over a server (or move its clock) need
    :class:`~lockguide_lab.testbed.real.RealTestbed` or
    :class:`~lockguide_lab.testbed.fake.FakeTestbed` and raise
    :class:`~lockguide_lab.errors.ScenarioError` here.

    Args:
        client: a connected ``redis.Redis``.
        prefix: put in front of every key the scenarios use.
    """

    def __init__(self, client: redis.Redis, *, prefix: str = "lockguide-lab:") -> None:
        if not isinstance(client, redis.Redis):
            raise BadArgumentType(f"client must be a redis.Redis, not {type(client).__name__}")
        if not isinstance(prefix, str):
            raise BadArgumentType(f"prefix must be a str, not {type(prefix).__name__}")
        if not prefix:
            raise BadArgument("prefix must not be empty: the testbed deletes the keys it starts")
        self._client = client
        self._prefix = prefix
        self.clock = RealClock()
        self.label = "your redis, real time"

    def key(self, name: str) -> str:
        return self._prefix + name

    def server(self, *, persistent: bool = False) -> LockServer:
        if persistent:
            raise ScenarioError("ClientTestbed cannot make your server persistent: use RealTestbed")
        return _GivenServer(self._client)

    def servers(self, count: int, *, persistent: bool = False) -> list[LockServer]:
        raise ScenarioError(
            "ClientTestbed has one server; for several use RealTestbed or FakeTestbed"
        )

    def failover_pair(self) -> FailoverPair:
        raise ScenarioError(
            "ClientTestbed cannot fail your server over: use RealTestbed or FakeTestbed"
        )

    def resource_client(self) -> redis.Redis:
        return self._client

    def reset(self) -> None:
        names = list(self._client.scan_iter(match=self._prefix + "*"))
        if names:
            self._client.delete(*names)
