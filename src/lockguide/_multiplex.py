"""Send one command to several Redis servers at once, then read every reply.

Redlock's latency is the latency of its slowest *useful* reply, not the sum of
five round trips. On one thread that means: write the command on every node's
socket first, and only then collect the replies, each bounded by the per-node
timeout counted from (about) the moment that node's command was written. A node that does
not answer in time counts as a failure, its connection is closed (so a late
reply can never be read as the answer to the next command), and the call moves
on.

The connections are made from each client's own settings (its connection
class, address, credentials, database, encoding) and set up by redis-py's own
handshake, but they belong to this module and are configured for the per-node
timeout:

* connecting and the handshake are bounded by the per-node timeout, not by the
  client's ``socket_timeout`` (which is often unset: wait forever);
* redis-py's default connection retries (ten, with back-off) are switched off:
  a master that is down must cost one refused connection, not seconds.

Taking connections from the client's own pool would inherit both, so a stopped
master would stall every attempt that had to reconnect to it.

Once a plain TCP or Unix connection is set up, its socket is switched to
non-blocking mode and driven directly: one ``send`` per node, then one
``poll`` over all of them, then one ``recv`` per reply. Going through
redis-py's reader instead costs four more system calls per node (a ``poll``
before every read and write, and two timeout changes), which is most of the
time Redlock spends. Other connections (TLS, in-process test servers) go
through redis-py's ``send_packed_command`` / ``read_response``.
"""

from __future__ import annotations

import contextlib
import os
import select
import socket
import threading
import time
import weakref
from collections.abc import Sequence
from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.connection import ConnectionPool
from redis.exceptions import (
    ConnectionError,
    InvalidResponse,
    NoScriptError,
    RedisError,
    ResponseError,
    TimeoutError,
)
from redis.retry import Retry

__all__ = ["Node", "node_for", "pack", "run_script", "send_all_read_all"]

#: redis-py's connection classes are not typed; this module treats them as ``Any``.
Connection = Any

_INCOMPLETE = object()
_READABLE = select.POLLIN | select.POLLPRI | select.POLLERR | select.POLLHUP


def pack(*parts: bytes) -> bytes:
    """Encode one command in the Redis protocol (RESP), from already-encoded parts."""
    out = [b"*%d\r\n" % len(parts)]
    for part in parts:
        out.append(b"$%d\r\n%s\r\n" % (len(part), part))
    return b"".join(out)


def parse_reply(buf: bytes, pos: int) -> tuple[Any, int]:
    """Parse one scalar RESP2/RESP3 reply starting at ``buf[pos]``.

    Returns ``(reply, next position)``, or ``(_INCOMPLETE, pos)`` when more bytes
    are needed. Errors become exception *values* (``NoScriptError`` for
    ``NOSCRIPT``); aggregates, which no lock command returns, are a protocol error.
    """
    end = buf.find(b"\r\n", pos)
    if end < 0:
        return _INCOMPLETE, pos
    kind = buf[pos]
    line = buf[pos + 1 : end]
    after = end + 2
    if kind == 43:  # + simple string
        return line, after
    if kind == 58:  # : integer
        return int(line), after
    if kind == 36:  # $ bulk string
        size = int(line)
        if size < 0:
            return None, after
        if len(buf) < after + size + 2:
            return _INCOMPLETE, pos
        return buf[after : after + size], after + size + 2
    if kind == 95:  # _ RESP3 null
        return None, after
    if kind == 45:  # - error
        message = line.decode("utf-8", "replace")
        if message.startswith("NOSCRIPT"):
            return NoScriptError(message), after
        return ResponseError(message), after
    if kind == 35:  # # RESP3 boolean
        return line == b"t", after
    raise InvalidResponse(f"unexpected reply type {chr(kind)!r} from a lock command")


class Node:
    """One Redis master as the multiplexer sees it: connection settings and idle connections.

    Connections are created with the client's connection class and settings,
    with the connect/handshake timeout set to ``timeout_s`` and no retries.
    A connection goes back to the idle list only after its replies were read
    in full; any failure closes it.
    """

    def __init__(self, client: redis.Redis, timeout_s: float) -> None:
        pool: ConnectionPool = client.connection_pool
        kwargs = dict(pool.connection_kwargs)
        for name in (
            "socket_timeout",
            "socket_connect_timeout",
            "orig_socket_timeout",
            "orig_socket_connect_timeout",
        ):
            kwargs[name] = timeout_s
        kwargs["retry"] = Retry(NoBackoff(), 0)
        kwargs["retry_on_error"] = []
        # The pool's maintenance-notification handler points back at the pool; a
        # Node must not keep the client's pool alive (they are cached weakly).
        kwargs.pop("maint_notifications_pool_handler", None)
        self._connection_class: type[Any] = pool.connection_class
        self._kwargs = kwargs
        self._idle: list[Connection] = []
        _ALL_NODES.add(self)

    def take(self) -> Connection:
        """An idle connection (open, nothing unread), or a new one not yet connected."""
        try:
            return self._idle.pop()
        except IndexError:
            return self._connection_class(**self._kwargs)

    def put(self, conn: Connection) -> None:
        """Return a connection whose replies have all been read."""
        self._idle.append(conn)

    def forget(self) -> None:
        """Drop the idle connections without touching them (used after a fork)."""
        self._idle = []


def _prepare(conn: Connection) -> socket.socket | None:
    """Connect if needed (bounded by the node timeout); the raw socket if it is plain.

    redis-py keeps a connection's socket in ``_sock`` (``None`` when
    disconnected). A plain TCP/Unix socket is switched to non-blocking mode and
    returned; for anything else (TLS, in-process servers) ``None`` is returned
    and the connection is driven through redis-py.
    """
    if conn._sock is None:
        conn.connect()
    sock = conn._sock
    if type(sock) is socket.socket:
        if sock.gettimeout() != 0.0:
            sock.setblocking(False)
        return sock
    if conn.can_read():  # the server closed it, or left something unread: start over
        conn.disconnect()
        conn.connect()
    return None


_NODES: weakref.WeakKeyDictionary[ConnectionPool, dict[float, Node]] = weakref.WeakKeyDictionary()
_NODES_LOCK = threading.Lock()
_ALL_NODES: weakref.WeakSet[Node] = weakref.WeakSet()


def _forget_parents_connections() -> None:
    """In a forked child, the parent's sockets are not ours to use: drop them."""
    for node in list(_ALL_NODES):
        node.forget()


os.register_at_fork(after_in_child=_forget_parents_connections)


def node_for(client: redis.Redis, timeout_s: float) -> Node:
    """The shared :class:`Node` for ``client`` and this timeout.

    Every Redlock over the same client (and timeout) reuses the same idle
    connections, so creating a Redlock per acquisition costs no handshakes.
    """
    pool = client.connection_pool
    with _NODES_LOCK:
        by_timeout = _NODES.setdefault(pool, {})
        node = by_timeout.get(timeout_s)
        if node is None:
            node = by_timeout[timeout_s] = Node(client, timeout_s)
        return node


def _send_rest(sock: socket.socket, data: bytes, sent: int, deadline: float) -> None:
    """Finish writing ``data`` on a non-blocking socket whose buffer was full."""
    view = memoryview(data)[sent:]
    while view:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("Timeout writing to socket")
        poller = select.poll()
        poller.register(sock, select.POLLOUT)
        poller.poll(left * 1000.0)
        with contextlib.suppress(BlockingIOError):
            view = view[sock.send(view) :]


def _write(conn: Connection, data: bytes, timeout_s: float) -> socket.socket | None:
    """Connect if needed, then write ``data``; the raw socket, or ``None`` for redis-py's path."""
    sock = _prepare(conn)
    if sock is None:
        conn.send_packed_command((data,), check_health=False)
        return None
    try:
        sent = sock.send(data)
    except BlockingIOError:
        sent = 0
    if sent != len(data):
        _send_rest(sock, data, sent, time.monotonic() + timeout_s)
    return sock


def send_all_read_all(
    nodes: Sequence[Node],
    commands: Sequence[bytes],
    timeout_s: float,
    replies: int = 1,
) -> list[Any]:
    """Send ``commands[i]`` to ``nodes[i]`` for every node, then read the replies.

    ``commands[i]`` may hold several pipelined commands; ``replies`` says how
    many replies each node owes, and the last one is returned. The result for
    a node is its reply, or the exception that stands for it: a
    ``ResponseError`` the server sent (the connection stays usable), or a
    ``ConnectionError`` / ``TimeoutError`` (the connection is closed).

    Nodes with an open connection are written to first, and their replies are
    awaited until ``timeout_s`` after the last of those writes; nodes that need a
    new connection are connected next (each handshake bounded by ``timeout_s``)
    while those replies travel, and each gets ``timeout_s`` from its own write.
    A reply already waiting when its time is up is still taken.

    An open connection can turn out to be closed by the server (an idle
    timeout, a restart): the write fails, or the server's end-of-file arrives
    instead of a reply. The command is then sent once more on a new
    connection. That is safe for the lock commands, which are idempotent for
    the caller's own value: a repeated ``SET NX`` finds its own key and is
    refused, a repeated compare-and-delete finds nothing to delete.
    """
    count = len(nodes)
    results: list[Any] = [None] * count
    conns: list[Connection] = [node.take() for node in nodes]
    # file descriptor -> [index, socket, deadline, may send again on a new connection]
    waiting: dict[int, list[Any]] = {}
    generic: list[tuple[int, float]] = []  # (index, deadline)
    try:
        later: list[int] = []
        first: list[list[Any]] = []
        for i in range(count):
            conn = conns[i]
            if conn._sock is None:
                later.append(i)
                continue
            try:
                sock = _write(conn, commands[i], timeout_s)
            except (RedisError, OSError):
                conn.disconnect()  # closed under us: try again on a new connection
                later.append(i)
                continue
            if sock is None:
                generic.append((i, 0.0))
            else:
                first.append(waiting.setdefault(sock.fileno(), [i, sock, 0.0, True]))
        # Writes on open connections take microseconds: one clock read for all.
        deadline = time.monotonic() + timeout_s
        for entry in first:
            entry[2] = deadline
        generic = [(i, deadline) for i, _ in generic]
        for i in later:
            try:
                sock = _write(conns[i], commands[i], timeout_s)
            except (RedisError, OSError) as error:
                results[i] = error
                continue
            mine = time.monotonic() + timeout_s
            if sock is None:
                generic.append((i, mine))
            else:
                waiting[sock.fileno()] = [i, sock, mine, False]
        if waiting:
            _read_raw(nodes, conns, waiting, results, replies, commands, timeout_s)
        for i, mine in generic:
            _read_generic(nodes[i], conns, i, mine, results, replies)
    finally:
        # Anything still here failed or was interrupted, possibly with a reply in
        # flight: close it, so nobody can read that reply as the answer to theirs.
        for conn in conns:
            if conn is not None:
                conn.disconnect()
    return results


def _read_raw(
    nodes: Sequence[Node],
    conns: list[Connection],
    waiting: dict[int, list[Any]],
    results: list[Any],
    replies: int,
    commands: Sequence[bytes],
    timeout_s: float,
) -> None:
    """Collect replies from the non-blocking sockets, one ``poll`` for all of them."""
    poller = select.poll()
    for fd in waiting:
        poller.register(fd, _READABLE)
    partial: dict[int, bytes] = {}
    while waiting:
        left = min(entry[2] for entry in waiting.values()) - time.monotonic()
        for fd, _ in poller.poll(left * 1000.0 if left > 0 else 0):
            i, sock, _, may_retry = waiting[fd]
            reply = _take(sock, partial, i, replies)
            if reply is _INCOMPLETE:
                continue
            del waiting[fd]
            poller.unregister(fd)
            results[i] = reply
            if not isinstance(reply, _BROKEN):
                nodes[i].put(conns[i])
                conns[i] = None
            elif may_retry and isinstance(reply, ConnectionError) and i not in partial:
                # Closed by the server before it answered: once more, on a new connection.
                conns[i].disconnect()
                try:
                    again = _write(conns[i], commands[i], timeout_s)
                except (RedisError, OSError) as error:
                    results[i] = error
                    continue
                if again is not None:
                    results[i] = None
                    waiting[again.fileno()] = [i, again, time.monotonic() + timeout_s, False]
                    poller.register(again, _READABLE)
        if left <= 0:
            # A deadline had passed and a last look found nothing more: those failed.
            now = time.monotonic()
            for fd, (i, _, deadline, _) in list(waiting.items()):
                if deadline <= now:
                    results[i] = TimeoutError("Timeout reading from socket")
                    del waiting[fd]
                    poller.unregister(fd)


_BROKEN = (ConnectionError, TimeoutError, InvalidResponse)


def _take(sock: socket.socket, partial: dict[int, bytes], i: int, replies: int) -> Any:
    """Read what is there; the node's last reply once all arrived, else ``_INCOMPLETE``."""
    try:
        data = sock.recv(65536)
    except BlockingIOError:
        return _INCOMPLETE
    except OSError as error:
        return ConnectionError(f"Error while reading from socket: {error}")
    if not data:
        return ConnectionError("Connection closed by server.")
    if partial:
        data = partial.pop(i, b"") + data
    pos = 0
    reply: Any = None
    try:
        for _ in range(replies):
            reply, pos = parse_reply(data, pos)
            if reply is _INCOMPLETE:
                partial[i] = data  # replies are re-parsed from the start: they are tiny
                return _INCOMPLETE
    except (InvalidResponse, ValueError) as error:
        return InvalidResponse(str(error))
    if pos != len(data):
        return InvalidResponse("more data than the replies owed")
    return reply


def _read_generic(
    node: Node,
    conns: list[Connection],
    i: int,
    deadline: float,
    results: list[Any],
    replies: int,
) -> None:
    """Collect one node's replies through redis-py's reader (TLS, in-process servers)."""
    conn = conns[i]
    reply: Any = None
    try:
        for _ in range(replies):
            left = deadline - time.monotonic()
            try:
                reply = conn.read_response(timeout=left if left > 0 else 0)
            except ResponseError as error:
                reply = error  # a reply like any other: keep reading this node's
    except (RedisError, OSError) as error:
        results[i] = error
        return
    results[i] = reply
    conns[i] = None
    node.put(conn)


def run_script(
    nodes: Sequence[Node], source: str, commands: Sequence[bytes], timeout_s: float
) -> list[Any]:
    """Send ``EVALSHA`` commands (``commands[i]`` to ``nodes[i]``) and read the replies.

    A node that answers ``NOSCRIPT`` (first use there, a restart, ``SCRIPT
    FLUSH``) is sent ``SCRIPT LOAD`` of ``source`` pipelined with the same
    ``EVALSHA`` once more; its reply replaces the ``NOSCRIPT`` one. Other
    results are as :func:`send_all_read_all` returns them.
    """
    replies = send_all_read_all(nodes, commands, timeout_s)
    missing = [i for i, reply in enumerate(replies) if isinstance(reply, NoScriptError)]
    if missing:
        load = pack(b"SCRIPT", b"LOAD", source.encode())
        again = send_all_read_all(
            [nodes[i] for i in missing],
            [load + commands[i] for i in missing],
            timeout_s,
            replies=2,
        )
        for i, reply in zip(missing, again, strict=True):
            replies[i] = reply
    return replies
