"""Instruments for the Redlock checks: a loopback TCP proxy and a clock warp.

:class:`Proxy` sits between the lock's client and one real server. It can
hold every request for a fixed delay (so sequential acquisition over N masters
costs about N delays and parallel acquisition about one), and it parses the
requests going through so the audit can see *when* each ``SET`` attempt left
the client (the retry delays) without trusting the library's own account.

:class:`ClockWarp` advances the clocks a library can read (``time.time``,
``time.monotonic``, ``time.perf_counter``, their ``_ns`` forms,
``timeit.default_timer``, and module-level copies of them outside the standard
library, such as ``from time import monotonic`` or ``_now = time.monotonic``).
A :class:`ReplyGate` shared by the proxies decides when: it holds the replies
to the lock's ``SET`` until every master has answered, then lets them all
through and advances the clocks as one step, while any thread that reads a
warped clock waits for that step to finish. The library then finds every reply
waiting and its clock moved on, as after a pause of its own process: no reply
was late, so a per-master timeout has nothing to object to, and only its
account of the elapsed time can refuse the lock. A library that hides a clock
elsewhere (a default argument, an attribute of an object) escapes the warp;
the drift check detects that with a control run and says so.
"""

from __future__ import annotations

import contextlib
import socket
import sys
import threading
import time
import timeit
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["ClockWarp", "Proxy", "ReplyGate", "RespRequests"]

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
        #: Which requests are watched: the reply to a watched request (the next
        #: reply on its connection; lock commands are not pipelined) goes
        #: through ``gate`` instead of straight back to the client.
        self.watch: Callable[[list[bytes]], bool] | None = None
        self.gate: ReplyGate | None = None
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
            # Watched requests on this connection whose reply has not come back yet.
            watched = threading.Semaphore(0)
            for args in ((client, upstream, True, watched), (upstream, client, False, watched)):
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
                    seen = now()
                    for command in parser.feed(data):
                        for observer in list(self.observers):
                            observer(command, seen)
                        gate, watch = self.gate, self.watch
                        if gate is not None and watch is not None and watch(command):
                            watched.release()
                            gate.request_seen(seen)
                    if self.delay_s:
                        _sleep(self.delay_s)
                else:
                    gate = self.gate
                    if gate is not None and watched.acquire(blocking=False):
                        gate.hold(dst, data)
                        continue
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

    While :meth:`held` is active, every call of a warped clock waits until it
    ends, so no reading can fall between the replies arriving and the jump.
    """

    _WALL = ("time", "time_ns")
    _ALL = ("time", "time_ns", "monotonic", "monotonic_ns", "perf_counter", "perf_counter_ns")

    def __init__(self, *, wall_only: bool = False) -> None:
        self.offset_s = 0.0
        self.jumped = False
        self._names = self._WALL if wall_only else self._ALL
        self._wall_only = wall_only
        self._holding = False
        self._released = threading.Condition()

    def jump(self, seconds: float) -> None:
        """Move the warped clocks forward by ``seconds`` (at least 0)."""
        self.offset_s += max(0.0, seconds)
        self.jumped = True

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """Make readers of the warped clocks wait until the ``with`` block ends."""
        with self._released:
            self._holding = True
        try:
            yield
        finally:
            with self._released:
                self._holding = False
                self._released.notify_all()

    def _offset(self) -> float:
        if self._holding:
            with self._released:
                while self._holding:
                    self._released.wait()
        return self.offset_s

    @contextlib.contextmanager
    def installed(self) -> Iterator[ClockWarp]:
        """Patch the clocks for the duration of the ``with`` block.

        Besides the functions of the ``time`` module (and ``timeit.default_timer``),
        every module-level name bound to one of them is rebound to its warped
        form and restored afterwards, except in the standard library (whose
        copies time its own waits, e.g. ``threading``) and in the audit (whose
        clocks must stay real).
        """
        originals: dict[str, Any] = {name: getattr(time, name) for name in self._names}
        original_timer = timeit.default_timer
        copies = _copies(originals)

        def make(name: str) -> Callable[[], Any]:
            real = originals[name]
            if name.endswith("_ns"):
                return lambda: real() + int(self._offset() * 1e9)
            return lambda: real() + self._offset()

        warped = {name: make(name) for name in self._names}
        try:
            for name in self._names:
                setattr(time, name, warped[name])
            if not self._wall_only:
                timeit.default_timer = warped["perf_counter"]
            for namespace, attr, name in copies:
                namespace[attr] = warped[name]
            yield self
        finally:
            # A module imported meanwhile may have copied a warped clock: put
            # the real one there too, or its clock would stay warped for good.
            copies += _copies(warped, everywhere=True)
            for namespace, attr, name in copies:
                namespace[attr] = originals[name]
            for name, func in originals.items():
                setattr(time, name, func)
            timeit.default_timer = original_timer


def _copies(
    clocks: dict[str, Any], *, everywhere: bool = False
) -> list[tuple[dict[str, Any], str, str]]:
    """``(module namespace, name, clock)`` for each module-level copy of a clock.

    Unless ``everywhere``, the standard library and the audit are skipped.
    """
    by_id = {id(func): name for name, func in clocks.items()}
    found = []
    for module_name, module in list(sys.modules.items()):
        top = module_name.partition(".")[0]
        audit = module_name == "lockguide_lab.audit" or module_name.startswith(
            "lockguide_lab.audit."
        )
        skipped = top in sys.stdlib_module_names or audit
        namespace = getattr(module, "__dict__", None)
        if (skipped and not everywhere) or not isinstance(namespace, dict):
            continue
        for attr, value in list(namespace.items()):
            name = by_id.get(id(value))
            if name is not None and clocks[name] is value:
                found.append((namespace, attr, name))
    return found


class ReplyGate:
    """Hold the replies to the lock's ``SET`` on every proxy, then release them at once.

    The proxies report each watched request (:meth:`request_seen`) and hand
    over its reply (:meth:`hold`). When every master has answered, the thread
    with the last reply sends all of them to the client and jumps the clocks,
    inside :meth:`ClockWarp.held`: the library wakes to find every reply waiting
    and its clocks advanced so that the attempt appears to have lasted
    ``elapsed_s`` since its first ``SET`` left, whatever the holding cost.

    A library that sends its ``SET`` s one after another (waiting for each
    reply) never has them all out at once: when the replies held are all it
    is waiting for and no request came for ``quiet_s``, they are released.
    """

    def __init__(
        self, warp: ClockWarp, masters: int, elapsed_s: float, quiet_s: float = 0.01
    ) -> None:
        self.warp = warp
        self.masters = masters
        self.elapsed_s = elapsed_s
        self.quiet_s = quiet_s
        self._cond = threading.Condition()
        self._first: float | None = None
        self._seen = 0
        self._held: list[tuple[socket.socket, bytes]] = []
        self._released = False

    def request_seen(self, seen: float) -> None:
        """A watched request passed a proxy at ``seen`` (on :func:`now`)."""
        with self._cond:
            if self._first is None:
                self._first = seen
            self._seen += 1
            self._cond.notify_all()

    def hold(self, client: socket.socket, reply: bytes) -> None:
        """Hold ``reply`` for ``client`` until the release (sent at once if that is over)."""
        with self._cond:
            if self._released:
                self._send(client, reply)
                return
            self._held.append((client, reply))
            while len(self._held) < self.masters:
                seen = self._seen
                woken = self._cond.wait(self.quiet_s)
                if self._released:
                    return  # another thread sent ours
                if not woken and seen == self._seen and len(self._held) >= seen:
                    break  # quiet, and nothing else outstanding: a sequential client
            self._release()

    def _release(self) -> None:
        with self.warp.held():
            for client, reply in self._held:
                self._send(client, reply)
            first = self._first if self._first is not None else now()
            self.warp.jump(self.elapsed_s - (now() - first))
        self._held.clear()
        self._released = True
        self._cond.notify_all()

    @staticmethod
    def _send(client: socket.socket, reply: bytes) -> None:
        with contextlib.suppress(OSError):
            client.sendall(reply)
