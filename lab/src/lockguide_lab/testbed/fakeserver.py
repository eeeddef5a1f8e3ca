"""In-process Redis servers (fakeredis, with Lua): the lab's one way to make them.

:class:`FakeServer` is fakeredis's server, optionally on a lab clock: fakeredis
(2.40) sets ``Database.time`` from ``time.time()`` before every command and
compares each key's expiry with it; a server made with ``clock=`` takes that
stamp from :meth:`~lockguide_lab.testbed.clock.Clock.wall` instead, plus a skew
of its own, so a jump of the clock (or of this one server's clock) expires keys
exactly as the same jump of a real server's clock would. Nothing global is
patched.

:func:`delayed_client` is the in-process stand-in for a delayed
:class:`~lockguide_lab.testbed.link.Link`: a client whose requests and replies
each arrive late.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections.abc import Callable
from typing import Any

import fakeredis
import redis
from fakeredis import _msgs as msgs
from fakeredis._clients._sync import FakeRedisConnection
from fakeredis._core._database import Database

from lockguide_lab.testbed.clock import Clock

__all__ = ["FakeServer", "delayed_client"]


class _ClockedDatabase(Database):
    def __init__(self, server: FakeServer) -> None:
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
        assert server.clock is not None
        self._stamp = server.clock.wall() + server.skew_ms / 1000.0


class _Databases(dict[int, Any]):
    def __init__(self, server: FakeServer) -> None:
        super().__init__()
        self._server = server

    def __missing__(self, index: int) -> Any:
        db = _ClockedDatabase(self._server)
        self[index] = db
        return db


class FakeServer(fakeredis.FakeServer):
    """An in-process Redis with Lua; on ``clock`` plus ``skew_ms`` of its own, if given.

    Without ``clock`` it keeps fakeredis's own time (``time.time()``).
    ``connected = False`` makes every command to it fail with a connection
    error, as a server that is down.
    """

    def __init__(self, clock: Clock | None = None, label: str = "fakeredis") -> None:
        super().__init__()
        self.clock = clock
        self.label = label
        self.skew_ms = 0.0
        if clock is not None:
            self.dbs = _Databases(self)

    def client(self, **kwargs: Any) -> fakeredis.FakeRedis:
        """A new client of this server."""
        return fakeredis.FakeRedis(server=self, **kwargs)


#: How long a read with no timeout waits on a delayed link before it gives up.
_FOREVER_S = 60.0


# fakeredis's connection classes are partly untyped; this module treats them as Any.
_FakeConnection: Any = FakeRedisConnection


class _Network:
    """One thread that carries every delayed request and reply, in the order they are due.

    A thread per message would let two messages due a millisecond apart swap
    places whenever the machine is busy; here a late delivery is only late,
    and what reaches a server first is always what was due there first.
    """

    def __init__(self) -> None:
        self._due: list[tuple[float, int, Callable[[], None]]] = []
        self._order = itertools.count()
        self._wake = threading.Condition()
        self._thread: threading.Thread | None = None

    def after(self, delay_s: float, deliver: Callable[[], None]) -> None:
        """Call ``deliver`` on the network's thread ``delay_s`` from now."""
        with self._wake:
            heapq.heappush(self._due, (time.monotonic() + delay_s, next(self._order), deliver))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="fake-network", daemon=True)
                self._thread.start()
            self._wake.notify()

    def _run(self) -> None:
        while True:
            with self._wake:
                while not self._due or self._due[0][0] > time.monotonic():
                    self._wake.wait(self._due[0][0] - time.monotonic() if self._due else None)
                _, _, deliver = heapq.heappop(self._due)
            deliver()


_NETWORK = _Network()


class _DelayedConnection(_FakeConnection):  # type: ignore[misc]
    """A fakeredis connection on a slow path: requests and replies each take ``delay_s``.

    ``send_packed_command`` returns at once; the network's thread hands the
    bytes to the server when the delay is over, and makes each reply readable
    ``delay_s`` after the server produced it. ``read_response`` waits for a
    reply at most its ``timeout`` (fakeredis's own waits without limit).
    Closing the connection drops whatever is still on its way.
    """

    delay_s: float = 0.0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._io = threading.Condition()  # guards the fake socket, the count and the epoch
        self._readable = 0
        self._epoch = 0

    def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        if not self.delay_s:
            super().send_packed_command(command, check_health=False)
            return
        if not self._server.connected:  # a refused connection costs no delay
            raise self._connection_error_class(msgs.CONNECTION_ERROR_MSG)
        epoch = self._epoch
        _NETWORK.after(self.delay_s, lambda: self._arrive(command, epoch))

    def _arrive(self, command: Any, epoch: int) -> None:
        with self._io:
            if epoch != self._epoch or self._sock is None:
                return  # the connection was closed while the request was on its way
            before = self._sock.responses.qsize()
            try:
                _FakeConnection.send_packed_command(self, command, check_health=False)
            except (redis.RedisError, OSError):
                return
            replies = self._sock.responses.qsize() - before  # a pipeline has several
        _NETWORK.after(self.delay_s, lambda: self._readable_now(replies, epoch))

    def _readable_now(self, replies: int, epoch: int) -> None:
        with self._io:
            if epoch == self._epoch:
                self._readable += replies
                self._io.notify_all()

    def read_response(self, **kwargs: Any) -> Any:
        if not self.delay_s:
            return super().read_response(**kwargs)
        timeout = kwargs.get("timeout")
        wait_s = _FOREVER_S if timeout is None else max(0.0, float(timeout))
        with self._io:
            if not self._io.wait_for(lambda: self._readable > 0, timeout=wait_s):
                raise redis.TimeoutError("Timeout reading from the delayed link")
            self._readable -= 1
            return super().read_response(**kwargs)

    def disconnect(self, *args: Any) -> None:
        with self._io:
            self._epoch += 1
            self._readable = 0
            super().disconnect(*args)


def delayed_client(server: fakeredis.FakeServer, delay_ms: float) -> fakeredis.FakeRedis:
    """A client of ``server`` whose requests and replies each arrive ``delay_ms`` late."""
    connection = type("DelayedConnection", (_DelayedConnection,), {"delay_s": delay_ms / 1000.0})
    return fakeredis.FakeRedis(server=server, connection_class=connection)
