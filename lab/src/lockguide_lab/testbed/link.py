"""One loopback TCP link between a client and a server: the lab's only network fault.

A :class:`Link` listens on a free port of 127.0.0.1 and forwards every
connection to its target, a real server. Whatever the lab does to the network,
it does here:

* **delay**: hold each chunk of bytes for :attr:`Link.request_delay_s` on the
  way to the server and :attr:`Link.reply_delay_s` on the way back (a slower
  path: far masters in the split vote; the audit's check that a Redlock asks
  its masters in parallel);
* **cut**: from :meth:`Link.cut` on, drop every byte in both directions while
  the connections stay open, which is replication lag at a moment the scenario
  chooses (a test cannot win the race of asynchronous replication on purpose);
* **retarget**: send new connections to another server and break the open
  ones, as a virtual IP that moves to a promoted replica;
* **observe**: parse the requests going through (RESP arrays of bulk
  strings) and hand each one, time-stamped on the real clock, to
  :attr:`Link.observers`, so the audit sees *when* each ``SET`` left the client
  without trusting the library's own account;
* **gate**: hand the reply to each request that :attr:`Link.watch` selects to
  a :class:`Gate` instead of the client, which decides when it is delivered
  (the audit's drift check holds every master's reply and releases them at once).
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable
from typing import Protocol

from lockguide_lab.testbed.clock import real_now

__all__ = ["Gate", "Link", "Observer", "RespRequests"]

_sleep = time.sleep

#: Called with each request (its arguments) and the moment it passed, on :func:`real_now`.
Observer = Callable[[list[bytes], float], None]


class Gate(Protocol):
    """Decides when the replies to watched requests reach the client."""

    def request_seen(self, seen: float) -> None:
        """A watched request passed a link at ``seen`` (on :func:`real_now`)."""

    def hold(self, client: socket.socket, reply: bytes) -> None:
        """The reply to a watched request: deliver it to ``client`` when the gate decides."""


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


class Link:
    """Forward one loopback TCP port to ``target``; delay, cut, retarget, observe, gate.

    Args:
        target: the server's ``(host, port)``.
        delay_s: the extra one-way latency of this path, in each direction
            (sets :attr:`request_delay_s` and :attr:`reply_delay_s`; both may be
            changed later, and apply to open connections from the next chunk on).

    Attributes:
        address: ``(host, port)`` clients connect to instead of ``target``.
        observers: called with every request that passes (see :data:`Observer`).
        watch: selects the requests whose reply goes through :attr:`gate` (the
            next reply on the same connection: lock commands are not pipelined).
        gate: where those replies go; ``None`` lets them straight through.
    """

    def __init__(self, target: tuple[str, int], *, delay_s: float = 0.0) -> None:
        self.target = target
        self.request_delay_s = delay_s
        self.reply_delay_s = delay_s
        self.observers: list[Observer] = []
        self.watch: Callable[[list[bytes]], bool] | None = None
        self.gate: Gate | None = None
        self._cut = threading.Event()
        self._closing = False
        self._sockets: list[socket.socket] = []
        self._mutex = threading.Lock()
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(64)
        host, port = self._listener.getsockname()
        self.address: tuple[str, int] = (str(host), int(port))
        threading.Thread(target=self._accept, name="lockguide-link", daemon=True).start()

    # -- faults ---------------------------------------------------------------------------

    def delay(self, seconds: float) -> None:
        """Hold every chunk ``seconds`` in each direction from now on (0: no delay)."""
        self.request_delay_s = self.reply_delay_s = seconds

    @property
    def is_cut(self) -> bool:
        """Whether the link has been cut."""
        return self._cut.is_set()

    def cut(self) -> None:
        """From now on, drop every byte in both directions (connections stay open)."""
        self._cut.set()

    def retarget(self, target: tuple[str, int]) -> None:
        """Forward new connections to ``target``, and close the current ones.

        What a virtual IP does when it moves to another server: clients keep
        the address, their open connections break, and they reconnect there.
        """
        self.target = target
        self._close_connections()

    def close(self) -> None:
        """Stop accepting and close every connection."""
        self._closing = True
        with contextlib.suppress(OSError):
            self._listener.close()
        self._close_connections()

    def _close_connections(self) -> None:
        with self._mutex:
            for sock in self._sockets:
                with contextlib.suppress(OSError):
                    sock.close()
            self._sockets.clear()

    # -- forwarding -----------------------------------------------------------------------

    def _accept(self) -> None:
        while not self._closing:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            if self._cut.is_set():
                client.close()
                continue
            try:
                server = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            server.settimeout(None)
            for sock in (client, server):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._mutex:
                self._sockets += [client, server]
            # Watched requests on this connection whose reply has not come back yet.
            watched = threading.Semaphore(0)
            for args in ((client, server, True, watched), (server, client, False, watched)):
                threading.Thread(target=self._pump, args=args, daemon=True).start()

    def _pump(
        self, src: socket.socket, dst: socket.socket, requests: bool, watched: threading.Semaphore
    ) -> None:
        parser = RespRequests() if requests else None
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if parser is not None:
                    self._saw(parser.feed(data), watched)
                delay = self.request_delay_s if requests else self.reply_delay_s
                if delay:
                    _sleep(delay)
                if self._cut.is_set():
                    continue
                gate = self.gate
                if not requests and gate is not None and watched.acquire(blocking=False):
                    gate.hold(dst, data)
                    continue
                dst.sendall(data)
        except OSError:
            pass
        finally:
            if not self._cut.is_set():
                for sock in (src, dst):
                    with contextlib.suppress(OSError):
                        sock.shutdown(socket.SHUT_RDWR)

    def _saw(self, commands: list[list[bytes]], watched: threading.Semaphore) -> None:
        if not commands:
            return
        seen = real_now()
        for command in commands:
            for observer in list(self.observers):
                observer(command, seen)
            gate, watch = self.gate, self.watch
            if gate is not None and watch is not None and watch(command):
                watched.release()
                gate.request_seen(seen)
