"""``Lock``: a lease on one Redis instance, and the synchronous driver of its steps.

``SET key <random value> NX PX <ttl>`` takes it; a script that deletes the key only
if it still holds this holder's value releases it; the TTL frees it if the holder
crashes. The lease is timed on the lock's own clock from *before* the ``SET``.
Copy this file with ``_core.py`` (redis-py 5+, Python 3.11+), no edits.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
import weakref
from collections.abc import Callable
from types import TracebackType
from typing import Any, Self

import redis
from redis import exceptions as rx
from redis.cluster import RedisCluster

from ._core import (
    DEFAULT_TIMEOUT_MS,
    UNSET,
    LeaseState,
    Owner,
    Send,
    ServerSteps,
    Sleep,
    Steps,
    T,
    call,
    drive,
    server_reply,
)
from ._core import bounded_pool as _bounded_pool

__all__ = ["DEFAULT_REQUEST_TIMEOUT_MS", "DEFAULT_TIMEOUT_MS", "Lock"]

#: How long one request waits for Redis when no ``request_timeout_ms`` is given.
DEFAULT_REQUEST_TIMEOUT_MS = 1_000.0


def bounded_pool(client: redis.Redis, timeout_s: float, **where: Any) -> redis.ConnectionPool:
    """The locks' own pool to ``client``'s server, shared by every lock on it."""
    return _bounded_pool(client, timeout_s, redis, **where)  # type: ignore[no-any-return]


# Connections kept between requests, per pool, taken without the pool's per-checkout
# bookkeeping. A BlockingConnectionPool gets every connection back, so that its waiters wake.
_IDLE: weakref.WeakKeyDictionary[redis.ConnectionPool, list[Any]] = weakref.WeakKeyDictionary()
_IDLE_LOCK = threading.Lock()


def _take(pool: redis.ConnectionPool) -> tuple[Any, bool]:
    """A kept connection to ``pool``'s server (and ``True``), or one from the pool."""
    with _IDLE_LOCK:
        idle = _IDLE.get(pool)
        if idle:
            return idle.pop(), True
    return pool.get_connection(), False


def _put(pool: redis.ConnectionPool, conn: Any) -> None:
    if (
        isinstance(pool, redis.BlockingConnectionPool)
        or "connection_pool" in pool.connection_kwargs
    ):
        # (a Sentinel-managed connection finds the new master through its pool's checkout)
        pool.release(conn)
        return
    with _IDLE_LOCK:
        _IDLE.setdefault(pool, []).append(conn)


os.register_at_fork(after_in_child=_IDLE.clear)  # a child must not use its parent's sockets


def request(pool: redis.ConnectionPool, effect: Send) -> Any:
    """Send ``effect``'s commands on one connection; the last reply, or the first error.

    A connection whose reply did not come is closed (never read again); a kept one the
    server closed meanwhile gets the commands once more on a new one.
    """
    conn, kept = _take(pool)
    try:
        due = time.monotonic() + effect.timeout_s
        conn.send_packed_command(conn.pack_commands(effect.commands), check_health=False)
        try:
            replies = _read(conn, len(effect.commands), due)
        except rx.ConnectionError as lost:
            if not kept or isinstance(lost.__context__, rx.ResponseError):
                raise  # a fresh connection failed, or the server answered (a demoted master)
            conn.disconnect()
            conn.send_packed_command(conn.pack_commands(effect.commands), check_health=False)
            replies = _read(conn, len(effect.commands), due)
    except BaseException:
        conn.disconnect()
        raise
    finally:
        _put(pool, conn)
    return server_reply(replies)


def _read(conn: Any, count: int, due: float) -> list[Any]:
    """``count`` replies by ``due``, error replies among them."""
    replies = []
    for _ in range(count):
        left = due - time.monotonic()
        if left <= 0:
            raise rx.TimeoutError("no reply within the time the request was given")
        try:
            replies.append(conn.read_response(timeout=left))
        except rx.ResponseError as answered:  # an answer like any other: read on
            replies.append(answered)
    return replies


class Lease(LeaseState):
    """``with`` for the synchronous locks: acquire on entry, release on the way out."""

    def acquire(self, *, blocking: bool = True, timeout_ms: Any = UNSET) -> bool:
        raise NotImplementedError

    def _acquire_for_with(self) -> None:
        drive(self._enter_calls(), call)

    def __enter__(self) -> Self:
        self._acquire_for_with()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Release if still held; the body's own exception wins, a failed release a note on it."""
        drive(self._exit_calls(exc), call)


class Driven(Lease):
    """The synchronous driver of :class:`Lock`'s and ``Redlock``'s steps."""

    _pools: list[redis.ConnectionPool]

    def _perform(self, effect: Any) -> Any:
        raise NotImplementedError

    def _sleep_or_perform(self, effect: Any) -> Any:
        if isinstance(effect, Sleep):
            return time.sleep(effect.seconds)
        return self._perform(effect)

    def _drive(self, steps: Steps[T]) -> T:
        return drive(steps, self._sleep_or_perform)

    def acquire(self, *, blocking: bool = True, timeout_ms: float | None = UNSET) -> bool:
        """Try to take the lock (a Redlock: on a majority of masters); ``True`` if this call got it.

        ``False`` if it is held by someone else, or Redis did not answer, until ``timeout_ms``
        (default: the constructor's) ran out; :attr:`last_error` keeps the last error, and
        ``with lock:`` raises :class:`NotAcquired`. ``blocking=False`` makes one try (then
        give no ``timeout_ms``). Errors no retry can fix raise at once (a Redlock's:
        :class:`~lockguide.MasterError`).
        """
        return self._drive(self._acquire_steps(blocking, timeout_ms))

    def locked(self) -> bool:
        """Whether anybody holds the lock now (a Redlock: on a majority of masters)."""
        return self._drive(self._locked_steps())

    def owned(self) -> bool:
        """Whether the key holds this object's value now (asks Redis, not the local clock)."""
        return self._drive(self._owned_steps())

    def close(self) -> None:
        """Close the connections of this lock's pools (shared with locks on the same clients)."""
        for pool in self._pools:
            pool.disconnect()


class Lock(Driven, ServerSteps):
    """A mutual-exclusion lease on one Redis instance.

    Args:
        client: a ``redis.Redis`` (a Sentinel ``master_for`` client too) or a
            ``redis.cluster.RedisCluster``; its settings, pool class and size are used
            on connections of the lock's own.
        key: the Redis key that represents the lock, e.g. ``"lock:ledger"``.
        ttl_ms: the lease, a whole number of milliseconds (at most a week), keyword-only.
        timeout_ms: how long :meth:`acquire` keeps trying by default, every request
            included (``DEFAULT_TIMEOUT_MS``, 10 s); ``None`` waits for ever.
        retry_delay_ms: the ``(low, high)`` range each pause between tries is drawn from.
        request_timeout_ms: how long one request may wait for Redis, connecting included.
        drift_factor: the fraction of the TTL set aside for clock-rate error (1 %).
        drift_floor_ms: the fixed part of the drift allowance (2 ms).
        clock: the function the lease is timed with, in seconds (``time.monotonic``).
        owner: ``"thread"``: only the acquiring thread may release or extend
            (:meth:`hand_over` moves it); ``"process"``: any thread of the process.

    Example::

        with Lock(r, "lock:report", ttl_ms=30_000, timeout_ms=5_000) as lock:
            build_report()
            if lock.validity_remaining_ms() < 1_000:
                raise RuntimeError("too little lease left to publish safely")
            publish_report()
    """

    _redis, _cluster_type = redis, RedisCluster

    def __init__(
        self,
        client: redis.Redis | RedisCluster,
        key: str,
        *,
        ttl_ms: int,
        timeout_ms: float | None = DEFAULT_TIMEOUT_MS,
        retry_delay_ms: tuple[float, float] = (50.0, 150.0),
        request_timeout_ms: float = DEFAULT_REQUEST_TIMEOUT_MS,
        drift_factor: float = 0.01,
        drift_floor_ms: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
        owner: Owner = "thread",
    ) -> None:
        args = (key, ttl_ms, timeout_ms, retry_delay_ms, drift_factor, drift_floor_ms, clock, owner)
        self._init_lock(client, request_timeout_ms, *args)

    def _init_lock(self, client: Any, request_timeout_ms: object, *lease: object) -> None:
        self._init_server(client, request_timeout_ms, *lease)
        self._pools = [] if self._cluster else [bounded_pool(client, self._request_s)]

    def release(self) -> None:
        """Release with compare-and-delete. If Redis does not answer, it stays held: call again.

        Raises:
            NotOwned: not held by this object (``WrongOwner``: held for another thread).
            LockLost: the lease had expired; the key was left untouched.
        """
        self._drive(self._release_steps())

    def extend(self, ttl_ms: int | None = None) -> None:
        """Give the held lock a fresh lease of ``ttl_ms`` (default: the TTL), from now.

        Raises:
            NotOwned: not held by this object (``WrongOwner``: held for another thread).
            LockLost: the key was gone or someone else's; the lock is no longer held.
        """
        self._drive(self._extend_steps(ttl_ms))

    def _perform(self, effect: Send) -> Any:
        if self._pools:
            return request(self._pools[0], effect)
        try:
            return request(self._node_pool(effect), effect)
        except rx.ConnectionError:  # a master gone: the cluster client re-learns the slots
            with contextlib.suppress(Exception):
                self._client.exists(self._key)
            raise

    def _node_pool(self, effect: Send) -> redis.ConnectionPool:
        """On a Cluster: the pool to the key's master, or to the node a redirect named."""
        cluster: Any = self._client
        if effect.refresh:  # after MOVED: the cluster client re-learns the slot map
            with contextlib.suppress(Exception):
                cluster.exists(self._key)
        node = cluster.get_node_from_key(self._key)
        if effect.node is not None:
            host, port = effect.node
            named = cluster.get_node(host=host, port=port)
            if named is None:  # a node the client has not met yet: its address, same settings
                return bounded_pool(node.redis_connection, self._request_s, host=host, port=port)
            node = named
        return bounded_pool(node.redis_connection, self._request_s)
