"""Send one command to several Redis servers at once, then read every reply.

Redlock's latency is the latency of its slowest *useful* reply, not the sum of
five round trips. On one thread that means: write the command on every node's
socket first, and only then read the replies, each bounded by the per-node
timeout counted from the moment that node's command was sent. A node that does
not answer in time counts as a failure, its connection is closed (so a late
reply can never be read as the answer to the next command), and the call moves
on.

The connections are made from each client's own settings (its connection
class, address, credentials, encoding), but they belong to this module and are
configured for the per-node timeout:

* connecting and the connection handshake are bounded by the per-node timeout,
  not by the client's ``socket_timeout`` (which is often unset: forever);
* redis-py's default connection retries (with back-off, seconds in total) are
  switched off: a master that is down must cost one refused connection, not ten.

Taking connections from the client's own pool would inherit both of those, so a
stopped master would stall every attempt that had to reconnect to it.
"""

from __future__ import annotations

import os
import threading
import time
import weakref
from collections.abc import Sequence
from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.connection import ConnectionPool
from redis.exceptions import RedisError, ResponseError
from redis.retry import Retry

__all__ = ["Node", "node_for", "pack", "send_all_read_all"]

#: redis-py's connection classes are not typed; this module treats them as ``Any``.
Connection = Any

#: A pooled connection idle for longer than this is checked before use (seconds).
STALE_AFTER_S = 1.0


def pack(*parts: bytes) -> bytes:
    """Encode one command in the Redis protocol (RESP), from already-encoded parts."""
    out = [b"*%d\r\n" % len(parts)]
    for part in parts:
        out.append(b"$%d\r\n%s\r\n" % (len(part), part))
    return b"".join(out)


class Node:
    """One Redis master as the multiplexer sees it: an address and idle connections.

    Connections are created with the client's connection class and settings,
    with the connect/handshake timeout set to ``timeout_s`` and no retries.
    A connection is only put back in the idle list after its reply was read in
    full; any failure closes it.
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
        self._connection_class: type[Connection] = pool.connection_class
        self._kwargs = kwargs
        self._idle: list[tuple[Connection, float]] = []
        self._pid = os.getpid()

    def checkout(self) -> Connection:
        """A connected connection with nothing unread on it (may connect: bounded)."""
        if self._pid != os.getpid():  # forked: the parent's sockets are not ours
            self._idle = []
            self._pid = os.getpid()
        try:
            conn, idle_since = self._idle.pop()
        except IndexError:
            conn, idle_since = self._connection_class(**self._kwargs), None
        try:
            conn.connect()
            # A server closes a connection that sat idle for its `timeout` (whole
            # seconds); a connection idle that long is checked before use, and
            # replaced if the server has closed it. A connection used within the
            # last second skips the check: it is a syscall, paid on every master.
            stale = idle_since is not None and time.monotonic() - idle_since > STALE_AFTER_S
            if stale and conn.can_read():
                conn.disconnect()
                conn.connect()
        except BaseException:
            conn.disconnect()
            raise
        return conn

    def checkin(self, conn: Connection) -> None:
        """Return a connection whose replies have all been read."""
        self._idle.append((conn, time.monotonic()))


_NODES: weakref.WeakKeyDictionary[ConnectionPool, dict[float, Node]] = weakref.WeakKeyDictionary()
_NODES_LOCK = threading.Lock()


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

    Each node gets ``timeout_s`` from the moment its command was written; a
    reply already waiting when that time is up is still taken.
    """
    count = len(nodes)
    results: list[Any] = [None] * count
    conns: list[Connection] = [None] * count
    deadlines = [0.0] * count
    monotonic = time.monotonic
    try:
        for i in range(count):
            node = nodes[i]
            try:
                conn = node.checkout()
                conns[i] = conn
                conn.send_packed_command((commands[i],), check_health=False)
            except (RedisError, OSError) as error:
                results[i] = error
                continue
            deadlines[i] = monotonic() + timeout_s
        for i in range(count):
            conn = conns[i]
            if conn is None or results[i] is not None:
                continue
            reply: Any = None
            try:
                for _ in range(replies):
                    left = deadlines[i] - monotonic()
                    try:
                        reply = conn.read_response(timeout=left if left > 0 else 0)
                    except ResponseError as error:
                        reply = error  # a reply like any other: keep reading this node's
            except (RedisError, OSError) as error:
                results[i] = error
                continue
            results[i] = reply
            conns[i] = None
            nodes[i].checkin(conn)
    finally:
        # Anything still here failed or was interrupted, possibly with a reply in
        # flight: close it, so nobody can read that reply as the answer to theirs.
        for conn in conns:
            if conn is not None:
                conn.disconnect()
    return results
