"""fakeredis servers whose keys expire on a :class:`VirtualClock` (imported lazily).

fakeredis (2.40) sets ``Database.time`` from ``time.time()`` before every
command and compares each key's expiry with it. The databases here take that
stamp from the virtual clock instead, plus the server's own skew, so a
jump of the clock (or of this one server's clock) expires keys exactly as the
same jump of a real server's clock would. fakeredis and its internals are a
development dependency; this module is imported only when a ``FakeBench`` is made.
"""

from __future__ import annotations

from typing import Any

import fakeredis
from fakeredis._core._database import Database

from lockguide.scenarios.clock import VirtualClock

__all__ = ["ClockedFakeServer"]


class _ClockedDatabase(Database):
    def __init__(self, server: ClockedFakeServer) -> None:
        self._clocked_server = server
        self._stamp = 0.0
        super().__init__(server.lock)

    @property
    def time(self) -> float:
        return self._stamp

    @time.setter
    def time(self, value: float) -> None:
        # fakeredis passes time.time(); the server's clock is the virtual one.
        server = self._clocked_server
        self._stamp = server.clock.wall() + server.skew_ms / 1000.0


class _Databases(dict[int, Any]):
    def __init__(self, server: ClockedFakeServer) -> None:
        super().__init__()
        self._server = server

    def __missing__(self, index: int) -> Any:
        db = _ClockedDatabase(self._server)
        self[index] = db
        return db


class ClockedFakeServer(fakeredis.FakeServer):
    """An in-process Redis whose clock is ``clock`` plus ``skew_ms`` of its own."""

    def __init__(self, clock: VirtualClock, label: str) -> None:
        super().__init__()
        self.clock = clock
        self.label = label
        self.skew_ms = 0.0
        self.dbs = _Databases(self)

    def client(self, **kwargs: Any) -> fakeredis.FakeRedis:
        """A new client of this server."""
        return fakeredis.FakeRedis(server=self, **kwargs)
