"""Instruments for the Redlock checks: a loopback TCP proxy and a clock warp.

:class:`Proxy` sits between the lock's client and one real server. It can
hold every request for a fixed delay (so sequential acquisition over N masters
costs about N delays and parallel acquisition about one), and it parses the
requests going through so the audit can see *when* each ``SET`` attempt left
the client (the retry delays) without trusting the library's own account.

:class:`ClockWarp` advances the clocks a library can read (``time.time``,
``time.monotonic``, ``time.perf_counter``, their ``_ns`` forms and
``timeit.default_timer``) by a chosen amount at a chosen instant: the proxy
triggers it when the first ``SET`` of an acquisition passes, so the library
measures an acquisition that took as long as the audit wants. A library that
copied a clock function into its own namespace at import time escapes the
warp; the drift check detects that with a control run and says so.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
import timeit
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["ClockWarp", "Proxy", "RespRequests"]

# Real clocks, captured before anything can warp them.
_perf = time.perf_counter
_sleep = time.sleep


def now() -> float:
    """Seconds on the real performance counter (never warped)."""
    return _perf()


class RespRequests:
    """Incremental parser for the client-to-server half of RESP: arrays of bulk strings."""

    def __init__(self) -> None:
        self._buf = b""
        self.broken = False

    def feed(self, data: bytes) -> list[list[bytes]]:
        """Add bytes; return every complete command now available."""
        if self.broken:
            return []
        self._buf += data
        commands = []
        while True:
            parsed = self._one()
            if parsed is None:
                break
            commands.append(parsed)
        return commands

    def _one(self) -> list[bytes] | None:
        buf = self._buf
        if not buf:
            return None
        if buf[:1] != b"*":
            self.broken = True  # inline commands: not used by redis-py
            return None
        end = buf.find(b"\r\n")
        if end < 0:
            return None
        count = int(buf[1:end])
        pos = end + 2
        args = []
        for _ in range(count):
            end = buf.find(b"\r\n", pos)
            if end < 0 or buf[pos : pos + 1] != b"$":
                return None
            size = int(buf[pos + 1 : end])
            start = end + 2
            if len(buf) < start + size + 2:
                return None
            args.append(buf[start : start + size])
            pos = start + size + 2
        self._buf = buf[pos:]
        return args


Observer = Callable[[list[bytes], float], None]


class Proxy:
    """A TCP proxy on a free loopback port in front of one real server."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.delay_s = 0.0
        self.observers: list[Observer] = []
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(64)
        self.address: tuple[str, int] = self._listener.getsockname()
        self._closing = False
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._accept, name="audit-proxy", daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while not self._closing:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            for sock in (client, upstream):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                self._sockets += [client, upstream]
            threading.Thread(target=self._pump, args=(client, upstream, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, False), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, requests: bool) -> None:
        parser = RespRequests() if requests else None
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if parser is not None:
                    seen = now()
                    for command in parser.feed(data):
                        for observer in list(self.observers):
                            observer(command, seen)
                    if self.delay_s:
                        _sleep(self.delay_s)
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (src, dst):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        """Stop accepting and cut every proxied connection."""
        self._closing = True
        with contextlib.suppress(OSError):
            self._listener.close()
        with self._lock:
            for sock in self._sockets:
                with contextlib.suppress(OSError):
                    sock.close()
            self._sockets.clear()


class ClockWarp:
    """Patch the process's clocks so that :meth:`jump` moves them forward.

    ``wall_only=True`` moves only ``time.time`` / ``time.time_ns`` (the wall
    clock), leaving the monotonic clocks alone: a library whose verdict changes
    then is timing itself with the wall clock.
    """

    _WALL = ("time", "time_ns")
    _ALL = ("time", "time_ns", "monotonic", "monotonic_ns", "perf_counter", "perf_counter_ns")

    def __init__(self, *, wall_only: bool = False) -> None:
        self.offset_s = 0.0
        self.jumped = False
        self._names = self._WALL if wall_only else self._ALL
        self._wall_only = wall_only
        self._lock = threading.Lock()
        self._pending: float | None = None

    def arm(self, seconds: float) -> None:
        """Make the next :meth:`trigger` jump the clocks by ``seconds``."""
        with self._lock:
            self._pending = seconds

    def trigger(self) -> None:
        """Jump now if armed (only once per :meth:`arm`)."""
        with self._lock:
            if self._pending is not None:
                self.offset_s += self._pending
                self._pending = None
                self.jumped = True

    @contextlib.contextmanager
    def installed(self) -> Iterator[ClockWarp]:
        """Patch the clocks for the duration of the ``with`` block."""
        originals: dict[str, Any] = {name: getattr(time, name) for name in self._names}
        original_timer = timeit.default_timer

        def make(name: str) -> Callable[[], Any]:
            real = originals[name]
            if name.endswith("_ns"):
                return lambda: real() + int(self.offset_s * 1e9)
            return lambda: real() + self.offset_s

        try:
            for name in self._names:
                setattr(time, name, make(name))
            if not self._wall_only:
                timeit.default_timer = make("perf_counter")
            yield self
        finally:
            for name, func in originals.items():
                setattr(time, name, func)
            timeit.default_timer = original_timer
