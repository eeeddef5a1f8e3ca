"""What the audit does with the replies a :class:`~lockguide_lab.testbed.link.Link` gates.

Each class here is a :class:`~lockguide_lab.testbed.link.Gate`: the link hands it
the reply to every request its ``watch`` selects, and the gate decides what the
client gets and when.

* :class:`HoldGate` holds the replies until :meth:`HoldGate.open` (a race
  between two commands: hold the reply to a release's ``GET`` while another
  holder takes the lock);
* :class:`PauseGate` holds the replies to an acquire, stops the holder's
  process (``SIGSTOP``), releases the replies into its socket buffers, waits
  past the lease and continues the process (Kleppmann's second example);
* :class:`CrashGate` kills the holder's process when its N-th watched reply
  comes back, before the client reads it (a crash between two commands);
* :class:`ErrorGate` answers every watched request with an error instead of
  the server's reply (one master failing while the others grant).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import threading
import time

from lockguide_lab.testbed.clock import real_now

__all__ = ["AllRepliesGate", "CrashGate", "ErrorGate", "HoldGate", "PauseGate", "wait_stopped"]


def _send(client: socket.socket, reply: bytes) -> None:
    with contextlib.suppress(OSError):
        client.sendall(reply)


def wait_stopped(pid: int, timeout_s: float = 2.0) -> bool:
    """Wait until process ``pid`` is stopped (state ``T`` in ``/proc``)."""
    give_up = time.monotonic() + timeout_s
    while time.monotonic() < give_up:
        try:
            with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
                state = stat.read().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            return False
        if state in ("T", "t"):
            return True
        time.sleep(0.001)
    return False


class HoldGate:
    """Hold every watched reply until :meth:`open`; :attr:`held` is set at the first."""

    def __init__(self) -> None:
        self.held = threading.Event()
        self._mutex = threading.Lock()
        self._open = False
        self._replies: list[tuple[socket.socket, bytes]] = []

    def request_seen(self, seen: float) -> None:
        pass

    def hold(self, client: socket.socket, reply: bytes) -> None:
        with self._mutex:
            if self._open:
                _send(client, reply)
                return
            self._replies.append((client, reply))
        self.held.set()

    def open(self) -> None:
        """Deliver what is held, and every later reply at once."""
        with self._mutex:
            self._open = True
            replies, self._replies = self._replies, []
        for client, reply in replies:
            _send(client, reply)


class AllRepliesGate:
    """Hold the watched replies until every master has answered, then :meth:`_let_go` once.

    A lock that asks one master after another (waiting for each reply) never has
    them all out at once: when the replies held are all it is waiting for and no
    request came for ``quiet_s``, they are let go. A reply that comes after is
    sent at once.
    """

    def __init__(self, masters: int, quiet_s: float) -> None:
        self.masters = masters
        self.quiet_s = quiet_s
        self._cond = threading.Condition()
        self._first: float | None = None
        self._seen = 0
        self._held: list[tuple[socket.socket, bytes]] = []
        self._released = False

    def request_seen(self, seen: float) -> None:
        """A watched request passed a link at ``seen`` (on :func:`real_now`)."""
        with self._cond:
            if self._first is None:
                self._first = seen
            self._seen += 1
            self._cond.notify_all()

    def hold(self, client: socket.socket, reply: bytes) -> None:
        """Hold ``reply`` for ``client`` until the release (sent at once if that is over)."""
        with self._cond:
            if self._released:
                _send(client, reply)
                return
            self._held.append((client, reply))
            while len(self._held) < self.masters:
                seen = self._seen
                woken = self._cond.wait(self.quiet_s)
                if self._released:
                    return  # another thread sent ours
                if not woken and seen == self._seen and len(self._held) >= seen:
                    break  # nothing else outstanding: a lock that asks one master at a time
            self._let_go()
            self._released = True
            self._held.clear()
            self._cond.notify_all()

    def _let_go(self) -> None:
        """What happens to the replies held (:attr:`_held`): sent, one way or another."""
        raise NotImplementedError

    def _send_held(self) -> None:
        for client, reply in self._held:
            _send(client, reply)

    def _first_seen(self) -> float:
        """When the first watched request passed a link (now, if none did)."""
        return self._first if self._first is not None else real_now()


class PauseGate(AllRepliesGate):
    """A real pause between the grant and the holder reading it.

    The replies to the lock's ``SET`` are held until every master has answered
    (or, for a lock that asks one master after another, until no request came
    for ``quiet_s``). Then the holder's process is stopped with ``SIGSTOP``,
    the replies are sent into its socket buffers, and the process is continued
    ``pause_s`` after its first ``SET`` passed a link. Every clock the lock can
    read, wherever it keeps it, has moved on by then: this is no clock warp.

    ``replies_first=True`` sends the replies *before* stopping the process: a
    broken pause, kept so a test can show the check then misses the hazard.
    """

    def __init__(
        self, masters: int, pause_s: float, *, quiet_s: float = 0.01, replies_first: bool = False
    ) -> None:
        super().__init__(masters, quiet_s)
        self.pause_s = pause_s
        self.replies_first = replies_first
        self.pid: int | None = None
        self.paused_s: float | None = None
        self.error: str | None = None

    def _let_go(self) -> None:
        pid = self.pid
        if pid is None:
            self.error = "no holder process to stop"
            self._send_held()
            return
        if self.replies_first:
            self._send_held()
            time.sleep(0.05)  # the holder reads them before it is stopped
        os.kill(pid, signal.SIGSTOP)
        if not wait_stopped(pid):
            self.error = "the holder process did not stop"
        if not self.replies_first:
            self._send_held()
        first = self._first_seen()
        left = self.pause_s - (real_now() - first)
        if left > 0:
            time.sleep(left)
        self.paused_s = real_now() - first
        os.kill(pid, signal.SIGCONT)


class CrashGate:
    """Kill the holder's process (``SIGKILL``) when its ``nth`` watched reply comes back.

    The reply is never delivered: the holder dies between that command and
    whatever it meant to send next. :attr:`crashed` is set once it is dead.
    """

    def __init__(self, nth: int) -> None:
        self.nth = nth
        self.pid: int | None = None
        self.crashed = threading.Event()
        self.commands: list[list[bytes]] = []
        self._mutex = threading.Lock()
        self._count = 0

    def request_seen(self, seen: float) -> None:
        pass

    def hold(self, client: socket.socket, reply: bytes) -> None:
        with self._mutex:
            self._count += 1
            kill = self._count == self.nth and self.pid is not None
        if not kill:
            _send(client, reply)
            return
        assert self.pid is not None
        with contextlib.suppress(OSError):
            os.kill(self.pid, signal.SIGKILL)
        self.crashed.set()


class ErrorGate:
    """Answer every watched request with ``error`` (a RESP error line) instead of its reply."""

    def __init__(self, error: bytes = b"-LOADING Redis is loading the dataset in memory") -> None:
        self.error = error + b"\r\n"
        self.answered = 0

    def request_seen(self, seen: float) -> None:
        pass

    def hold(self, client: socket.socket, reply: bytes) -> None:
        self.answered += 1
        _send(client, self.error)
