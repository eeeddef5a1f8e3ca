"""``Lock``: a lease on one Redis instance, and the synchronous locks' requests.

``SET key <random value> NX PX <ttl>`` takes it, timed from *before* the ``SET``; a
compare-and-delete script releases it; the TTL frees it if the holder crashes.
Copy this file with ``_core.py`` (redis-py 5+, Python 3.11+), no edits.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self

import redis
import redis.asyncio
from redis import exceptions as rx
from redis.backoff import NoBackoff
from redis.cluster import RedisCluster

from ._core import (
    DEFAULT_REQUEST_TIMEOUT_MS,
    DEFAULT_TIMEOUT_MS,
    UNSET,
    Holder,
    LeaseState,
    LockOptions,
    Send,
    ServerSteps,
    Sleep,
    Steps,
    T,
    Wait,
    call,
    drive,
)

if TYPE_CHECKING:
    from typing_extensions import Unpack  # in typing itself from Python 3.12

__all__ = ["DEFAULT_REQUEST_TIMEOUT_MS", "DEFAULT_TIMEOUT_MS", "Lock"]


# -- the thin adapter over redis-py: the locks' pools, and who may wait on a wake-up ----------


def _pool_size(client: Any) -> int | None:
    """How many connections ``client`` may open to one server (on a Cluster: to each node)."""
    pool = getattr(client, "connection_pool", None)
    if isinstance(client, RedisCluster):  # each node's client has a pool
        node = client.get_default_node()  # type: ignore[no-untyped-call]
        pool = node.redis_connection.connection_pool
    elif isinstance(client, redis.asyncio.RedisCluster):  # each node keeps its own limit
        pool = client.get_default_node()
    return getattr(pool, "max_connections", None)


class WaitingRoom:
    """How many requests on one client may block on a wake-up at once: half its pool's
    connections (none of a pool of one; on a Cluster, of each node's), so waiters never hold
    the connection a holder needs to release or renew; the others sleep their retry delay."""

    def __init__(self, client: Any) -> None:
        size = _pool_size(client)
        self.seats = (2**31 if size is None else size) // 2
        self.taken = 0
        self._mutex = threading.Lock()

    def enter(self) -> bool:
        with self._mutex:
            if self.taken >= self.seats:
                return False
            self.taken += 1
            return True

    def leave(self) -> None:
        with self._mutex:
            self.taken -= 1


_ROOMS: weakref.WeakKeyDictionary[Any, WaitingRoom] = weakref.WeakKeyDictionary()
_POOLS_LOCK = threading.Lock()


def waiting_room(client: Any) -> WaitingRoom:
    """The one :class:`WaitingRoom` of ``client`` (every lock made on it shares it)."""
    room = _ROOMS.get(client)
    if room is None:
        with _POOLS_LOCK:
            room = _ROOMS.setdefault(client, WaitingRoom(client))
    return room


_POOLS: weakref.WeakKeyDictionary[Any, dict[Any, Any]] = weakref.WeakKeyDictionary()


def bounded_pool(client: Any, timeout_s: float, flavour: Any, **where: Any) -> Any:
    """The locks' own pool to ``client``'s server (or ``where``: host, port), one per client pool.

    ``flavour``: ``redis`` or ``redis.asyncio``. The client's settings and pool size, no redis-py
    retries (a resent ``SET NX`` finds its own key); connecting bounded by the shortest
    ``timeout_s`` asked for (in sync also the socket's), each request by its own deadline.
    """
    source, blocking, retry = client.connection_pool, flavour.BlockingConnectionPool, flavour.retry
    where_key = tuple(where.items())
    mine = _POOLS.get(source)
    pool = None if mine is None else mine.get(where_key)
    if pool is not None and pool.connection_kwargs["socket_connect_timeout"] <= timeout_s:
        return pool
    with _POOLS_LOCK:
        mine = _POOLS.setdefault(source, {})
        pool = mine.get(where_key)
        read_s = timeout_s if flavour.__name__ == "redis" else None
        if pool is None:
            settings = dict(source.connection_kwargs, retry=retry.Retry(NoBackoff(), 0), **where)
            settings.update(connection_class=source.connection_class, retry_on_error=[])
            settings["max_connections"] = source.max_connections
            if getattr(source, "queue_class", None) is not None:  # a BlockingConnectionPool
                settings["timeout"] = source.timeout
            kind = blocking if isinstance(source, blocking) else flavour.ConnectionPool
            pool = mine[where_key] = kind(**settings)
        elif pool.connection_kwargs["socket_connect_timeout"] <= timeout_s:
            return pool
        # One pool for every lock on this client, so the client's limit bounds them together.
        # A new connection's handshake waits at most the shortest request timeout asked for;
        # each read has its own deadline (the time its request has left).
        pool.connection_kwargs.update(socket_timeout=read_s, socket_connect_timeout=timeout_s)
        return pool


class Kept:
    """A pool's ``idle`` connections, taken without its bookkeeping (a BlockingConnectionPool
    and a Sentinel pool get each back: a waiter wakes, a new master is found at checkout),
    and whether its last request worked (``warm``)."""

    __slots__ = ("give_back", "idle", "warm")

    def __init__(self, pool: redis.ConnectionPool) -> None:
        self.idle: list[Any] = []
        self.warm = False
        sentinel = "connection_pool" in pool.connection_kwargs
        self.give_back = sentinel or isinstance(pool, redis.BlockingConnectionPool)


_KEPT: weakref.WeakKeyDictionary[redis.ConnectionPool, Kept] = weakref.WeakKeyDictionary()


def kept_for(pool: redis.ConnectionPool) -> Kept:
    return _KEPT.get(pool) or _KEPT.setdefault(pool, Kept(pool))


def _forget_parent() -> None:  # a forked child must not use its parent's sockets
    for each in list(_KEPT.values()):
        each.idle.clear()
        each.warm = False


os.register_at_fork(after_in_child=_forget_parent)


def exchange(
    pools: Sequence[Any],
    kept: Sequence[Kept],
    commands: tuple[tuple[Any, ...], ...],
    timeout_s: float,
    only: Sequence[int] | None = None,
    ready: dict[int, Any] | None = None,
) -> list[Any]:
    """Send ``commands`` on a connection of each pool (or those in ``only``), every request
    written before any reply is read; per pool, its replies within ``timeout_s`` of sending
    (error replies among them) or the error that ended it. ``ready``: connections made
    already, or the errors.

    A request is sent once: a kept connection idle for a while is checked before it is
    written on, and one that cannot be written on is made again (nothing left on it); one
    whose reply did not come is closed, never read again, and its request's outcome is the
    caller's to settle."""
    n = len(pools)
    conns: list[Any] = [None] * n
    results: list[Any] = [None] * n
    due = [0.0] * n
    packed: dict[tuple[str, str], Any] = {}  # the commands, encoded once per encoding
    try:
        for i, got in (ready or {}).items():
            conns[i], results[i] = (None, got) if isinstance(got, Exception) else (got, None)
        targets = range(n) if only is None else only
        for i in targets:
            try:
                reused = False
                if conns[i] is None and results[i] is None:
                    conns[i], reused = _take(pools[i], kept[i])
                if conns[i] is not None:
                    encoder = conns[i].encoder
                    encoding = (encoder.encoding, encoder.encoding_errors)
                    if encoding not in packed:
                        packed[encoding] = conns[i].pack_commands(commands)
                    _send(conns[i], packed[encoding], reused)
                    due[i] = time.monotonic() + timeout_s
            except (rx.RedisError, OSError) as error:
                results[i] = error
        for i in targets:
            if results[i] is None:
                results[i] = _replies(conns[i], due[i], len(commands), timeout_s)
                kept[i].warm = not isinstance(results[i], rx.TimeoutError | rx.ConnectionError)
    except BaseException:
        for conn in conns:
            if conn is not None:
                conn.disconnect()  # a reply may still be on its way
        raise
    finally:
        for i, conn in enumerate(conns):
            if conn is None:
                continue
            if isinstance(results[i], BaseException):  # closed: not kept, so the next request
                pools[i].release(conn)  # knows it must connect (a Redlock: to all at once)
            else:
                give_back(pools[i], kept[i], conn)
    return results


#: A kept connection idle longer than this is checked before it is written on (servers close
#: idle connections after seconds: ``timeout``, proxies, load balancers).
CHECK_IDLE_S = 0.25


def _take(pool: Any, kept: Kept) -> tuple[Any, bool]:
    """A connection to write on, and whether it was kept: a kept one that is still sound,
    else one from the pool (which checks the ones it hands out)."""
    try:
        conn, since = kept.idle.pop()
    except IndexError:
        return pool.get_connection(), False
    if time.monotonic() - since > CHECK_IDLE_S:
        try:
            if conn.can_read(timeout=0):  # data nobody asked for: not a connection to trust
                conn.disconnect()
        except (rx.RedisError, OSError):  # closed by the server while idle
            conn.disconnect()  # (the send connects it again)
    return conn, True


def _send(conn: Any, packed: Any, kept: bool) -> None:
    """Write a request. A kept connection that cannot be written on (closed by the server
    since, a kill) is made again and written on once more: nothing left on the first."""
    try:
        conn.send_packed_command(packed, check_health=False)
    except (rx.ConnectionError, OSError):
        if not kept:
            raise
        conn.disconnect()
        conn.send_packed_command(packed, check_health=False)


def give_back(pool: Any, kept: Kept, conn: Any) -> None:
    if kept.give_back:
        pool.release(conn)
    else:
        kept.idle.append((conn, time.monotonic()))


def _replies(conn: Any, due: float, count: int, timeout_s: float) -> Any:
    """One connection's ``count`` replies by ``due``, or the error that ended the wait."""
    replies: list[Any] = []
    try:
        for _ in range(count):
            left = due - time.monotonic()  # after another server's wait, its reply may be here
            if left <= 0 and not conn.can_read(timeout=0):
                raise rx.TimeoutError(f"no reply within {timeout_s * 1000:g} ms")
            try:  # fresh from sending, the socket's own timeout is the wait left
                timeout = conn.socket_timeout
                if timeout is not None and 0.9 * left < timeout <= left:
                    replies.append(conn.read_response())
                else:
                    replies.append(conn.read_response(timeout=max(left, 0)))
            except rx.ResponseError as error:
                replies.append(error)  # an answer like any other: keep reading
    except (rx.RedisError, OSError) as error:
        conn.disconnect()  # a reply may still come: never read it later
        return error
    return replies


class Lease(LeaseState):
    """``with`` for the synchronous locks: acquire on entry, release on the way out."""

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
    _perform: Callable[[Any], Any]
    _client: Any  # (Lock's: a Redlock never waits on a wake-up)
    _request_s: float

    def _pool(self, client: Any, timeout_s: float) -> Any:
        return bounded_pool(client, timeout_s, redis)

    def _sleep_or_perform(self, effect: Any) -> Any:
        if isinstance(effect, Sleep):
            return time.sleep(effect.seconds)
        if isinstance(effect, Wait):
            return self._wait(effect)
        return self._perform(effect)

    def _wait(self, effect: Wait) -> Any:
        """Block on the wake-up list for at most ``effect.seconds`` if a seat in the client's
        waiting room is free, else sleep; a failed ``BLPOP`` sleeps what is left, so a broken
        server is not asked in a tight loop."""
        until = time.monotonic() + effect.seconds
        room = waiting_room(self._client)
        if room.enter():
            try:
                return self._perform(effect.blpop(self._request_s))
            except (rx.RedisError, OSError) as error:
                if not effect.slept_out(error):
                    raise
            finally:
                room.leave()
        time.sleep(max(0.0, until - time.monotonic()))
        return None

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

    def holder(self) -> Holder | None:
        """Who holds the key now (any holder, not only this object), since when and for how
        much longer: a :class:`~lockguide.Holder`, or ``None`` if nobody does."""
        return self._drive(self._holder_steps())

    def close(self) -> None:
        """Close the idle connections of this lock's pools (shared with every lock on the same
        clients); a connection another request is using is left alone."""
        for pool in self._pools:
            kept = kept_for(pool)
            while True:
                try:
                    conn, _ = kept.idle.pop()  # one at a time: another thread may take one
                except IndexError:
                    break
                conn.disconnect()
                pool.release(conn)
            pool.disconnect(inuse_connections=False)


class Lock(Driven, ServerSteps):
    """A mutual-exclusion lease on one Redis instance.

    Args:
        client: a ``redis.Redis`` (a Sentinel ``master_for`` client too) or a
            ``redis.cluster.RedisCluster``; its settings, pool class and size are used
            on connections of the lock's own.
        key: the Redis key that represents the lock, e.g. ``"lock:ledger"``.
        ttl_ms: the lease, a whole number of milliseconds (at most a week), keyword-only.

    Keyword Args:
        timeout_ms (float | None): how long :meth:`acquire` keeps trying by default, every
            request included (``DEFAULT_TIMEOUT_MS``, 10 s); ``None`` waits for ever.
        retry_delay_ms (tuple[float, float]): the ``(low, high)`` range each pause between
            tries is drawn from (50 to 150 ms).
        request_timeout_ms (float): how long one request may wait for Redis, connecting
            included (``DEFAULT_REQUEST_TIMEOUT_MS``, 1 s).
        drift_factor (float): the fraction of the TTL set aside for clock-rate error (1 %).
        drift_floor_ms (float): the fixed part of the drift allowance (2 ms).
        clock (Callable[[], float]): the function the lease is timed with, in seconds
            (``time.monotonic``).
        owner (str): ``"thread"`` (the default): only the acquiring thread may release or
            extend (:meth:`hand_over` moves it); ``"process"``: any thread of the process.
        replicas (int): how many replicas must have each grant and extension (``WAIT``,
            sent with it on one connection) before it counts; 0 (the default) waits for
            none. A grant fewer acknowledge is deleted and the try fails (the acquire
            retries until its deadline, :attr:`last_error` a
            :class:`~lockguide.NotReplicated`): handing out a grant a failover can lose is
            what this option exists to avoid. An extension fewer acknowledge raises it,
            the old deadline kept. It narrows the failover window, no more: an
            acknowledged key can still be lost.
        replicas_timeout_ms (int): how long the server waits for them (whole ms, below
            ``request_timeout_ms``; ``DEFAULT_REPLICAS_TIMEOUT_MS``, 100 ms).

    These options are declared once, in ``LockOptions``; a name that is not one of them is
    a :class:`~lockguide.errors.BadArgumentType` before anything is sent.

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
        **options: Unpack[LockOptions],
    ) -> None:
        self._init_server(client, key, ttl_ms, options)

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
            NotOwned: as for :meth:`release`.
            LockLost: the key was gone or someone else's; the lock is no longer held.
        """
        self._drive(self._extend_steps(ttl_ms))

    def _perform(self, effect: Send) -> Any:
        pool = self._pools[0] if self._pools else self._node_pool(effect)
        (reply,) = exchange([pool], [kept_for(pool)], effect.commands, effect.timeout_s)
        if isinstance(reply, rx.ConnectionError) and self._cluster:
            with contextlib.suppress(Exception):  # a master gone: the client re-learns the slots
                self._client.exists(self._key)
        if isinstance(reply, BaseException):
            raise reply
        return effect.reply(reply)

    def _node_pool(self, effect: Send) -> Any:
        """On a Cluster: the pool to the key's master, or to the node a redirect named."""
        cluster: Any = self._client
        if effect.refresh:  # after MOVED: the cluster client re-learns the slot map
            with contextlib.suppress(Exception):
                cluster.exists(self._key)
        node, where = cluster.get_node_from_key(self._key), {}
        if effect.node is not None:
            host, port = effect.node
            named = cluster.get_node(host=host, port=port)
            if named is None:  # a node the client has not met yet: its address, same settings
                where = {"host": host, "port": port}
            node = named or node
        return bounded_pool(node.redis_connection, self._request_s, redis, **where)
