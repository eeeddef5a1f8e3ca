"""fakeredis servers whose keys expire on a :class:`VirtualClock` (imported lazily).

fakeredis (2.40) sets ``Database.time`` from ``time.time()`` before every
command and compares each key's expiry with it. The databases here take that
stamp from the virtual clock instead, plus the server's own skew, so a
jump of the clock (or of this one server's clock) expires keys exactly as the
same jump of a real server's clock would. fakeredis and its internals are a
development dependency; this module is imported only when a ``FakeBench`` is made.
"""

from __future__ import annotations

import collections
import threading
import time
from typing import Any

import fakeredis
import redis
from fakeredis import _msgs as msgs
from fakeredis._clients._sync import FakeRedisConnection
from fakeredis._core._database import Database

from lockguide.scenarios.clock import VirtualClock

__all__ = ["ClockedFakeServer", "delayed_client"]


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


#: How long a read with no timeout waits on a delayed link before it gives up.
_FOREVER_S = 60.0


# fakeredis's connection classes are partly untyped; this module treats them as Any.
_FakeConnection: Any = FakeRedisConnection


class _DelayedConnection(_FakeConnection):  # type: ignore[misc]
    """A fakeredis connection on a slow path: requests and replies each take ``delay_s``.

    ``send_packed_command`` returns at once and a timer hands the bytes to the
    server when the delay is over; the reply becomes readable ``delay_s`` after
    the server produced it. ``read_response`` waits for a reply at most its
    ``timeout`` (fakeredis's own waits without limit).
    """

    delay_s: float = 0.0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._in_flight: list[threading.Timer] = []
        self._arrived = threading.Condition()
        self._replies_at: collections.deque[float] = collections.deque()

    def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        if not self.delay_s:
            super().send_packed_command(command, check_health=False)
            return
        if not self._server.connected:  # a refused connection costs no delay
            raise self._connection_error_class(msgs.CONNECTION_ERROR_MSG)
        timer = threading.Timer(self.delay_s, self._arrive, (command,))
        timer.daemon = True
        self._in_flight = [t for t in self._in_flight if t.is_alive()] + [timer]
        timer.start()

    def _arrive(self, command: Any) -> None:
        try:
            before = self._sock.responses.qsize()
            _FakeConnection.send_packed_command(self, command, check_health=False)
            replies = self._sock.responses.qsize() - before  # a pipeline has several
        except (redis.RedisError, OSError, AttributeError):
            return  # the connection was closed while the request was on its way
        with self._arrived:
            self._replies_at.extend([time.monotonic() + self.delay_s] * replies)
            self._arrived.notify_all()

    def read_response(self, **kwargs: Any) -> Any:
        if not self.delay_s:
            return super().read_response(**kwargs)
        timeout = kwargs.get("timeout")
        wait_s = _FOREVER_S if timeout is None else max(0.0, float(timeout))
        deadline = time.monotonic() + wait_s
        with self._arrived:
            if not self._arrived.wait_for(lambda: bool(self._replies_at), timeout=wait_s):
                raise redis.TimeoutError("Timeout reading from the delayed link")
            visible = self._replies_at.popleft()
        if visible > deadline:
            time.sleep(max(0.0, deadline - time.monotonic()))
            raise redis.TimeoutError("Timeout reading from the delayed link")
        time.sleep(max(0.0, visible - time.monotonic()))
        return super().read_response(**kwargs)

    def disconnect(self, *args: Any) -> None:
        for timer in self._in_flight:
            timer.cancel()
        self._in_flight = []
        with self._arrived:
            self._replies_at.clear()
        super().disconnect(*args)


def delayed_client(server: ClockedFakeServer, delay_ms: float) -> fakeredis.FakeRedis:
    """A client of ``server`` whose requests and replies each arrive ``delay_ms`` late."""
    connection = type("DelayedConnection", (_DelayedConnection,), {"delay_s": delay_ms / 1000.0})
    return fakeredis.FakeRedis(server=server, connection_class=connection)
