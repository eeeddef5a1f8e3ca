"""A loopback TCP relay: a replication link cut at a chosen moment, or a moving address.

Redis replication is asynchronous: the primary answers the client first and
streams the write to its replicas afterwards. Whether a replica has a given key
when the primary dies is a race, and a test cannot win a race on purpose. So the
real failover scenario runs the replica's link to its primary through this
relay: while it forwards, the replica keeps up; after :meth:`Relay.cut`, bytes
in either direction are dropped, as if they were still in flight when the
primary died. From the replica's side this is the same as replication lag, and
it happens at exactly the moment the scenario chooses.

The same relay in front of the primary is the address the clients use: after a
failover it is :meth:`Relay.retarget`-ed at the promoted replica, as a virtual
IP is moved. With a delay, a relay is a slower network path: every request
reaches the server that much later, and every reply the client (the
split-vote scenario gives each client near and far masters this way).
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time

__all__ = ["Relay"]


class Relay:
    """Forward one TCP port on 127.0.0.1 to ``target`` until :meth:`cut`.

    Args:
        target: the server's address.
        delay_s: how long each chunk of bytes is held before it is passed on,
            in each direction: the extra one-way latency of this path.
    """

    def __init__(self, target: tuple[str, int], *, delay_s: float = 0.0) -> None:
        self.target = target
        self.delay_s = delay_s
        self._cut = threading.Event()
        self._closing = False
        self._sockets: list[socket.socket] = []
        self._mutex = threading.Lock()
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(8)
        host, port = self._listener.getsockname()
        self.address: tuple[str, int] = (str(host), int(port))
        threading.Thread(target=self._accept, name="lockguide-relay", daemon=True).start()

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
        with self._mutex:
            for sock in self._sockets:
                with contextlib.suppress(OSError):
                    sock.close()
            self._sockets.clear()

    def close(self) -> None:
        """Stop accepting and close every connection."""
        self._closing = True
        with contextlib.suppress(OSError):
            self._listener.close()
        with self._mutex:
            for sock in self._sockets:
                with contextlib.suppress(OSError):
                    sock.close()
            self._sockets.clear()

    def _accept(self) -> None:
        while not self._closing:
            try:
                downstream, _ = self._listener.accept()
            except OSError:
                return
            if self._cut.is_set():
                downstream.close()
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                downstream.close()
                continue
            upstream.settimeout(None)
            for sock in (downstream, upstream):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._mutex:
                self._sockets += [downstream, upstream]
            for src, dst, delay in (
                (downstream, upstream, self.delay_s),
                (upstream, downstream, self.delay_s),
            ):
                threading.Thread(target=self._pump, args=(src, dst, delay), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, delay_s: float) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if delay_s:
                    time.sleep(delay_s)
                if not self._cut.is_set():
                    dst.sendall(data)
        except OSError:
            pass
        finally:
            if not self._cut.is_set():
                for sock in (src, dst):
                    with contextlib.suppress(OSError):
                        sock.shutdown(socket.SHUT_RDWR)
