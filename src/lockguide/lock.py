"""``Lock``: a lease on one Redis instance.

The story this class is written against, in order:

1. Client A runs ``SET lock:ledger <A's random value> NX PX 30000``. Redis
   creates the key because it did not exist, with a 30 s time to live.
2. Client B runs the same command with its own value. The key exists, so
   ``NX`` refuses, and B waits a *random* moment before trying again.
3. A finishes and releases by running a script that deletes the key **only
   if it still holds A's value**. A bare ``DEL`` would be wrong: if A had been
   paused past its TTL, the key might by now be B's, and A would delete it.
4. If A crashes instead, nobody releases; the key expires after 30 s and B gets
   in. That expiry is what makes the lock safe against crashes and unsafe
   against pauses: a holder that is merely slow loses the lock without knowing.

So the lock keeps its own deadline, on its clock (``time.monotonic`` unless you
pass another), measured from *before* the ``SET`` was sent, and reports it
through :meth:`Lock.validity_remaining_ms`. A grant whose reply came back after
that deadline is released at once and counts as a failure. Check it before
anything you could not undo, and protect the resource itself with a fencing
token when correctness depends on it.

The decisions are the steps in :mod:`lockguide._core`; this module is their
synchronous driver: each request is sent once, on a pool of the lock's own to
the client's server (same settings, same pool class and size, every socket
operation bounded, redis-py's retries off), and its reply is waited for at most
the time the steps allow.
"""

from __future__ import annotations

import contextlib
import os
import random
import threading
import time
import weakref
from collections.abc import Callable
from types import TracebackType
from typing import Any, Self

import redis
from redis import exceptions as rx
from redis.backoff import NoBackoff
from redis.cluster import RedisCluster
from redis.retry import Retry

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
    check_client_of,
    check_ms,
    drive,
    note_failed_release,
    pool_settings,
    run_script,
)

__all__ = ["DEFAULT_REQUEST_TIMEOUT_MS", "DEFAULT_TIMEOUT_MS", "Lock"]

#: How long one request waits for Redis when no ``request_timeout_ms`` is given.
DEFAULT_REQUEST_TIMEOUT_MS = 1_000.0

_POOLS: weakref.WeakKeyDictionary[Any, dict[Any, redis.ConnectionPool]]
_POOLS = weakref.WeakKeyDictionary()
_POOLS_LOCK = threading.Lock()


def bounded_pool(client: redis.Redis, timeout_s: float, **where: Any) -> redis.ConnectionPool:
    """The lock's own pool to ``client``'s server (or ``where``: host, port), made once.

    Shared by every lock on the same client and timeout, so making a lock per
    acquisition costs no new connections; see :func:`lockguide._core.pool_settings`.
    """
    source = client.connection_pool
    with _POOLS_LOCK:
        mine = _POOLS.setdefault(source, {})
        pool = mine.get((timeout_s, *where.items()))
        if pool is None:
            settings = pool_settings(source, timeout_s) | where | {"retry": Retry(NoBackoff(), 0)}
            blocking = isinstance(source, redis.BlockingConnectionPool)
            kind = redis.BlockingConnectionPool if blocking else redis.ConnectionPool
            pool = mine[(timeout_s, *where.items())] = kind(**settings)
        return pool


# Connections kept between requests, per pool: taken without the pool's per-checkout
# bookkeeping, never shared by two requests at once, as many as were in use at once.
# A BlockingConnectionPool gets every connection back, so that its waiters wake.
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

    A connection whose reply did not come (a timeout, ``Ctrl-C``) is closed, so
    that reply can never be read later as the answer to another request. A kept
    connection the server closed meanwhile (an idle timeout, a restart) gets the
    commands once more on a new one: the lock commands can be repeated for one value.
    """
    conn, kept = _take(pool)
    try:
        due = time.monotonic() + effect.timeout_s
        conn.send_packed_command(conn.pack_commands(effect.commands), check_health=False)
        try:
            reply, error = _read(conn, len(effect.commands), due)
        except rx.ConnectionError as lost:
            if not kept or isinstance(lost.__context__, rx.ResponseError):
                raise  # a fresh connection failed, or the server answered (a demoted master)
            conn.disconnect()  # closed while it was kept: once more, on a new connection
            conn.send_packed_command(conn.pack_commands(effect.commands), check_health=False)
            reply, error = _read(conn, len(effect.commands), due)
    except BaseException:
        conn.disconnect()
        raise
    finally:
        _put(pool, conn)
    if error is not None:
        raise error
    return reply


def _read(conn: Any, count: int, due: float) -> tuple[Any, Any]:
    """``count`` replies by ``due``: the last, and the first error reply."""
    reply, error = None, None
    for _ in range(count):
        left = due - time.monotonic()
        if left <= 0:
            raise rx.TimeoutError("no reply within the time the request was given")
        try:
            reply = conn.read_response(timeout=left)
        except rx.ResponseError as answered:  # an answer like any other: read on
            error = error or answered
    return reply, error


class Lease(LeaseState):
    """``with`` for the synchronous locks: acquire on entry, release on the way out."""

    def release(self) -> object:
        """Release what :meth:`acquire` took; every lock defines it."""
        raise NotImplementedError

    def _acquire_for_with(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        self._acquire_for_with()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Release if still held. The body's own exception always wins.

        A lease already found lost (``extend`` raised, or the body released) is
        not reported again. When the body raised, a failed release is added to
        its exception as a note instead of replacing it; when the body
        succeeded, a lost lease is raised here (``LockLost``, ``MajorityLost``).
        """
        if not self.held:
            return
        if exc is None:
            self.release()
            return
        try:
            self.release()
        except Exception as error:  # the body's exception is the one to report
            note_failed_release(exc, self._key, error)


class Lock(Lease, ServerSteps):
    """A mutual-exclusion lease on one Redis instance.

    Args:
        client: a ``redis.Redis`` (a Sentinel ``master_for`` client too) or a
            ``redis.cluster.RedisCluster``; the lock uses its address,
            credentials, encoding and pool class and size, on connections of
            its own. On a cluster each request goes to the key's master
            (``MOVED`` and ``ASK`` are followed once each).
        key: the Redis key that represents the lock, e.g. ``"lock:ledger"``.
        ttl_ms: the lease, a whole number of milliseconds (at most a week),
            keyword-only. After this long Redis deletes the key whether or
            not the holder is done.
        timeout_ms: how long :meth:`acquire` keeps trying by default, every
            request included (``lockguide.DEFAULT_TIMEOUT_MS``, 10 s); ``None``
            waits for ever.
        retry_delay_ms: the ``(low, high)`` range from which each pause between
            attempts is drawn at random, so competing clients do not retry in step.
        request_timeout_ms: how long one request may wait for Redis (connecting
            included), and less when the acquire's deadline is nearer. A
            server that does not answer costs this much per ``release`` or
            ``extend``, which then raise ``redis.exceptions.TimeoutError``.
        drift_factor: the fraction of the TTL set aside for clocks running at
            different rates (default 1 %, as the Redlock reference
            implementations do); part of the drift allowance.
        drift_floor_ms: the fixed part of the drift allowance (default 2 ms).
        clock: the function the lease is timed with, returning seconds
            (default ``time.monotonic``).
        owner: ``"thread"`` (the default): only the thread that acquired may
            release or extend (:meth:`hand_over` moves it to another);
            ``"process"``: any thread of the acquiring process may. A forked
            child never may, and sees the lock as not held.

    Example::

        with Lock(r, "lock:report", ttl_ms=30_000, timeout_ms=5_000) as lock:
            build_report()
            if lock.validity_remaining_ms() < 1_000:
                raise RuntimeError("too little lease left to publish safely")
            publish_report()
    """

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
        self._cluster = isinstance(client, RedisCluster)
        self._client = (
            client if self._cluster else check_client_of(redis.Redis, "redis.Redis", client)
        )
        self._init_lease(
            key, ttl_ms, timeout_ms, retry_delay_ms, drift_factor, drift_floor_ms, clock, owner
        )
        self._request_s = check_ms(request_timeout_ms, "request_timeout_ms", positive=True) / 1000.0
        self._uniform = random.uniform
        self._pool = None if self._cluster else bounded_pool(client, self._request_s)  # type: ignore[arg-type]

    def acquire(self, *, blocking: bool = True, timeout_ms: float | None = UNSET) -> bool:
        """Try to take the lock; return ``True`` if this call got it.

        Args:
            blocking: ``False`` makes exactly one attempt (then ``timeout_ms``
                must not be given).
            timeout_ms: the most this call takes, every request included;
                defaults to the constructor's (``None``: no limit).

        Returns ``False`` when the lock is held by someone else, or Redis did
        not answer, until the time ran out (:attr:`last_error` keeps the last
        such error). Use ``with lock:`` to turn that into :class:`NotAcquired`.
        Errors no retry can fix (authentication, permissions) raise at once.
        """
        return self._drive(self._acquire_steps(blocking, timeout_ms))

    def release(self) -> None:
        """Release the lock with compare-and-delete.

        If Redis does not answer, the lock stays held in this object and the
        error is raised: call ``release()`` again.

        Raises:
            NotOwned: this object does not hold the lock (or this is a forked child).
            WrongOwner: another thread acquired it.
            LockLost: the lease had expired; the key is gone or someone else's,
                and it was left untouched.
        """
        self._drive(self._release_steps())

    def extend(self, ttl_ms: int | None = None) -> None:
        """Give the held lock a fresh lease of ``ttl_ms`` (default: the original TTL).

        The new lease counts from just before this request. Extending only works
        while the key still holds this holder's value: it cannot revive a lost lock.

        Raises:
            NotOwned: this object does not hold the lock.
            WrongOwner: another thread acquired it.
            LockLost: the key was gone or someone else's; the lock is no longer held.
        """
        self._drive(self._extend_steps(ttl_ms))

    def locked(self) -> bool:
        """Whether anybody (this object or another client) holds the lock now."""
        return bool(
            self._drive(run_script(None, ("EXISTS", self._key), self._request_s, self._cluster))
        )

    def owned(self) -> bool:
        """Whether the key holds this object's value now (asks Redis, not the local clock)."""
        mine = self.value
        if mine is None:
            return False
        current = self._drive(run_script(None, ("GET", self._key), self._request_s, self._cluster))
        return current in (mine, mine.encode())

    def close(self) -> None:
        """Close the connections of this lock's pool (shared by locks on the same client).

        They are opened again on the next request.
        """
        if self._pool is not None:
            self._pool.disconnect()

    def __repr__(self) -> str:
        state = "held" if self.held else "not held"
        return f"<{type(self).__name__} {self._key!r} ttl_ms={self._ttl_ms} {state}>"

    # -- the driver ----------------------------------------------------------------

    def _drive(self, steps: Steps[T]) -> T:
        return drive(steps, self._perform)

    def _perform(self, effect: Send | Sleep) -> Any:
        if isinstance(effect, Sleep):
            time.sleep(effect.seconds)
            return None
        if self._pool is not None:
            return request(self._pool, effect)
        try:
            return request(self._node_pool(effect), effect)
        except rx.ConnectionError:  # a master gone: the cluster client re-learns the slots
            with contextlib.suppress(Exception):
                self._client.exists(self._key)
            raise

    def _node_pool(self, effect: Send) -> redis.ConnectionPool:
        """On a Cluster: the pool to the key's master, or to the node a redirect named.

        After ``MOVED`` the cluster client re-learns the slot map through one
        read of its own, so the next lock on the key goes to the new master.
        """
        cluster: Any = self._client
        if effect.refresh:
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

    def _acquire_for_with(self) -> None:
        if not self.acquire():
            raise self._not_acquired() from self._last_error
