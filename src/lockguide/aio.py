"""The same locks on ``redis.asyncio``: ``Lock``, ``FencedLock``, ``Redlock``, ``Watchdog``.

Every decision is :mod:`lockguide._core`'s (and :mod:`lockguide.redlock`'s): the
same steps the synchronous locks run. This module only performs their effects over
``redis.asyncio``, and it is the one place that knows about cancellation.

* **Owner** (``owner="task"``, the default): the task that *calls* ``acquire()``,
  read when the coroutine is made, so ``await asyncio.wait_for(lock.acquire(), 2)``,
  ``asyncio.gather(lock.acquire())`` and ``await asyncio.shield(lock.release())``
  act for the task that wrote them (Python 3.11 runs them in a task of their own).
  Another task's ``release()`` or ``extend()`` raises ``WrongOwner``;
  ``lock.hand_over(task)`` gives the lock to another task; ``owner="process"``
  lets any task of the process use it. In a forked child the lock is not held.
* **Cancellation.** A release, once started, runs to its reply in a task of its
  own, however often the caller is cancelled (anyio cancels at every ``await``);
  the cancellation goes on after it. So the object never says "free" while the
  key is there, nor "held" for a grant Redis deleted; no answer keeps it held,
  and ``release()`` can be called again. An acquire cancelled mid-request returns
  at once and deletes its own value in the background (``aclose()`` waits for it).
* **Connections**: a pool of the lock's own per client (the client's settings,
  class and size; redis-py's retries off), each request bounded by the time the
  steps give it; a connection whose reply did not come is closed.
  ``await lock.aclose()`` closes them. A ``RedisCluster`` is served through its
  nodes' connections, ``MOVED`` and ``ASK`` followed as the steps say.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
import weakref
from collections.abc import Callable, Collection, Coroutine
from types import TracebackType
from typing import Any, Self

import redis.asyncio
from redis import exceptions as rx
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from lockguide import fencing, redlock
from lockguide._core import (
    DEFAULT_TIMEOUT_MS,
    UNSET,
    BadArgument,
    BadArgumentType,
    ExtensionLimitReached,
    LeaseState,
    LockError,
    LockLost,
    NotOwned,
    Owner,
    Send,
    ServerSteps,
    Sleep,
    Steps,
    T,
    check_client_of,
    check_ms,
    note_failed_release,
    pool_settings,
    run_script,
)
from lockguide.fencing import FENCED_WRITE, Stored, WriteResult
from lockguide.lock import DEFAULT_REQUEST_TIMEOUT_MS
from lockguide.redlock import DEFAULT_NODE_TIMEOUT_MS, Attempt, FanOut, RedlockSteps
from lockguide.renewal import WatchdogState, check_renewal
from lockguide.validity import quorum

__all__ = ["DEFAULT_TIMEOUT_MS", "FencedLock", "FencedStore", "Lock", "Redlock", "Watchdog"]

_POOLS: weakref.WeakKeyDictionary[Any, dict[float, redis.asyncio.ConnectionPool]]
_POOLS = weakref.WeakKeyDictionary()
_BACKGROUND: set[asyncio.Task[Any]] = set()  # clean-ups outliving a cancelled caller


def check_client(client: object, name: str = "client") -> redis.asyncio.Redis:
    """A ``redis.asyncio.Redis`` (or subclass: fakeredis's ``FakeAsyncRedis``)."""
    return check_client_of(redis.asyncio.Redis, "redis.asyncio.Redis", client, name)


def bounded_pool(client: redis.asyncio.Redis, timeout_s: float) -> redis.asyncio.ConnectionPool:
    """The locks' own pool to ``client``'s server (:func:`lockguide._core.pool_settings`)."""
    source = client.connection_pool
    mine = _POOLS.setdefault(source, {})
    if timeout_s not in mine:
        settings = pool_settings(source, timeout_s) | {"retry": Retry(NoBackoff(), 0)}
        blocking = isinstance(source, redis.asyncio.BlockingConnectionPool)
        kind = redis.asyncio.BlockingConnectionPool if blocking else redis.asyncio.ConnectionPool
        mine[timeout_s] = kind(**settings)
    return mine[timeout_s]


def _task() -> asyncio.Task[Any] | None:
    try:
        return asyncio.current_task()
    except RuntimeError:  # no event loop running
        return None


async def _finish(work: Coroutine[Any, Any, T]) -> T:
    """Run ``work`` to its end even if the caller is cancelled meanwhile, then deliver that."""
    task = asyncio.ensure_future(work)
    cancelled: BaseException | None = None
    while not task.done():
        try:
            await asyncio.wait((task,))
        except asyncio.CancelledError as error:  # once, twice, or anyio's every iteration
            cancelled = error
    if cancelled is not None:
        if not task.cancelled():
            task.exception()  # retrieved: the lock's state says what happened
        raise cancelled
    return task.result()


async def _quietly(work: Coroutine[Any, Any, Any]) -> None:
    with contextlib.suppress(BaseException):  # a clean-up: the TTL ends what it cannot
        await work


async def _exchange(
    where: Any, commands: tuple[tuple[Any, ...], ...], timeout_s: float
) -> list[Any]:
    """Send ``commands`` in one write on a connection of ``where`` (a pool or a cluster node).

    The replies, error replies among them; within ``timeout_s``, connecting included.
    """
    pooled = isinstance(where, redis.asyncio.ConnectionPool)
    conn, replies = None, []
    try:
        async with asyncio.timeout(timeout_s):
            conn = await where.get_connection() if pooled else where.acquire_connection()
            for command in commands:  # all written before any reply is read
                await conn.send_command(*command, check_health=False)
            for _ in commands:
                try:
                    replies.append(await conn.read_response())
                except rx.ResponseError as answered:  # an answer like any other: read on
                    replies.append(answered)
    except BaseException as error:
        if conn is not None:
            await conn.disconnect(nowait=True)  # a reply may still come: never read it later
        if isinstance(error, TimeoutError):
            raise rx.TimeoutError(f"no reply within {timeout_s * 1000:.0f} ms") from None
        raise
    finally:
        if conn is not None:
            await where.release(conn) if pooled else where.release(conn)
    return replies


class AsyncLease(LeaseState):
    """The asyncio driver of the steps: owner by task, cancellation, ``async with``."""

    _owner_kinds = ("task", "process")
    _calling: object = None
    _pools: list[redis.asyncio.ConnectionPool]

    def _start(self) -> None:
        self._pending: set[asyncio.Task[Any]] = set()

    def _holder(self) -> object:
        return self._calling or _task()

    async def _perform(self, effect: Any) -> Any:
        if isinstance(effect, Sleep):
            await asyncio.sleep(effect.seconds)
            return None
        return await self._send(effect)

    async def _send(self, effect: Any) -> Any:
        raise NotImplementedError

    def acquire(
        self, *, blocking: bool = True, timeout_ms: float | None = UNSET
    ) -> Coroutine[Any, Any, bool]:
        """Try to take the lock; ``True`` if this call got it, ``False`` once the time ran out.

        Timeouts and lost connections are retried within ``timeout_ms`` (kept as
        :attr:`last_error`); an error no retry can fix raises at once.
        """
        return self._drive(self._acquire_steps(blocking, timeout_ms))  # type: ignore[attr-defined]

    def _drive(self, steps: Steps[T], *, finish: bool = False) -> Coroutine[Any, Any, T]:
        """The coroutine that runs ``steps`` for the task calling now (see the module)."""
        if not finish:
            return self._go(steps, _task())
        self._calling = caller = _task()  # a release checks its owner now, in the caller
        try:
            effect = next(steps)
        finally:
            self._calling = None
        return _finish(self._go(steps, caller, effect))

    async def _go(self, steps: Steps[T], caller: object, effect: Any = None) -> T:
        reply: Any = None
        error: BaseException | None = None
        while True:
            if effect is None:
                self._calling = caller  # the owner checks see the caller, not a wrapper task
                try:
                    effect = steps.send(reply) if error is None else steps.throw(error)
                except StopIteration as done:
                    return done.value  # type: ignore[no-any-return]
                finally:
                    self._calling = None
            try:
                reply, error = await self._perform(effect), None
            except asyncio.CancelledError as cancelled:  # the steps' clean-up: in the background
                self._calling = caller
                try:
                    effect = steps.throw(cancelled)
                finally:
                    self._calling = None
                task = asyncio.ensure_future(_quietly(self._go(steps, caller, effect)))
                for tasks in (_BACKGROUND, self._pending):
                    tasks.add(task)
                    task.add_done_callback(tasks.discard)
                raise cancelled from None
            except BaseException as raised:
                reply, error = None, raised
            effect = None

    async def aclose(self) -> None:
        """Finish this lock's clean-ups (a cancelled acquire's delete), then close its connections.

        Connections another lock on the same client is using are left to it.
        """
        while self._pending:
            await asyncio.wait(set(self._pending))
        for pool in self._pools:
            await pool.disconnect(inuse_connections=False)

    def release(self) -> Coroutine[Any, Any, Any]:
        raise NotImplementedError

    async def _acquire_for_with(self) -> None:
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        await self._acquire_for_with()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Release if this task still owns it (not if handed over); the body's exception wins."""
        if not self.held or (self._owners and not any(o is _task() for o in self._owners)):
            return
        if exc is None:
            await self.release()
            return
        try:
            await self.release()
        except Exception as error:  # the body's exception is the one to report
            note_failed_release(exc, self._key, error)


class Lock(AsyncLease, ServerSteps):
    """:class:`lockguide.Lock` on ``redis.asyncio``: a lease on one Redis instance.

    The arguments, errors and rules are :class:`lockguide.Lock`'s, except ``owner``
    (``"task"`` or ``"process"``); ``client`` is a ``redis.asyncio.Redis`` or
    ``RedisCluster``, and the methods that talk to Redis return coroutines.

    Example::

        async with Lock(r, "lock:report", ttl_ms=30_000, timeout_ms=5_000) as lock:
            await build_report()
            if lock.validity_remaining_ms() < 1_000:
                raise RuntimeError("too little lease left to publish safely")
            await publish_report()
    """

    def __init__(
        self,
        client: redis.asyncio.Redis | RedisCluster,
        key: str,
        *,
        ttl_ms: int,
        timeout_ms: float | None = DEFAULT_TIMEOUT_MS,
        retry_delay_ms: tuple[float, float] = (50.0, 150.0),
        request_timeout_ms: float = DEFAULT_REQUEST_TIMEOUT_MS,
        drift_factor: float = 0.01,
        drift_floor_ms: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
        owner: Owner = "task",
    ) -> None:
        self._cluster = isinstance(client, RedisCluster)
        self._client = client if self._cluster else check_client(client)
        self._init_lease(
            key, ttl_ms, timeout_ms, retry_delay_ms, drift_factor, drift_floor_ms, clock, owner
        )
        self._request_s = check_ms(request_timeout_ms, "request_timeout_ms", positive=True) / 1000
        self._uniform = random.uniform
        self._pools = [] if self._cluster else [bounded_pool(self._client, self._request_s)]  # type: ignore[arg-type]
        self._start()

    def release(self) -> Coroutine[Any, Any, None]:
        """Release with compare-and-delete, finished even if the caller is cancelled meanwhile.

        Raises:
            NotOwned: this object does not hold the lock (``WrongOwner``: another task does).
            LockLost: the lease had expired; the key was left untouched.
            redis.exceptions.TimeoutError: no answer; the lock stays held here: call again.
        """
        return self._drive(self._release_steps(), finish=True)

    def extend(self, ttl_ms: int | None = None) -> Coroutine[Any, Any, None]:
        """Give the held lock a fresh lease of ``ttl_ms`` (default: the original TTL).

        Raises:
            NotOwned: this object does not hold the lock (``WrongOwner``: another task does).
            LockLost: the key was gone or someone else's; the lock is no longer held.
        """
        return self._drive(self._extend_steps(ttl_ms))

    async def locked(self) -> bool:
        """Whether anybody (this object or another client) holds the lock now."""
        return bool(await self._ask("EXISTS"))

    async def owned(self) -> bool:
        """Whether the key holds this object's value now (asks Redis, not the local clock)."""
        mine = self.value
        return mine is not None and await self._ask("GET") in (mine, mine.encode())

    def __repr__(self) -> str:
        state = "held" if self.held else "not held"
        return f"<aio.{type(self).__name__} {self._key!r} ttl_ms={self._ttl_ms} {state}>"

    def _ask(self, command: str) -> Coroutine[Any, Any, Any]:
        return self._drive(run_script(None, (command, self._key), self._request_s, self._cluster))

    async def _send(self, effect: Send) -> Any:
        where = self._pools[0] if self._pools else await self._node(effect)
        replies = await _exchange(where, effect.commands, effect.timeout_s)
        errors = [reply for reply in replies if isinstance(reply, rx.ResponseError)]
        if errors:
            raise errors[0]
        return replies[-1]

    async def _node(self, effect: Send) -> Any:
        """On a Cluster: the node a redirect named, else the key's master (slot map re-learnt
        after ``MOVED`` by one read through the cluster client)."""
        cluster: Any = self._client
        try:
            async with asyncio.timeout(effect.timeout_s):
                await cluster.initialize()
                if effect.refresh:
                    with contextlib.suppress(rx.RedisError):
                        await cluster.exists(self._key)
        except TimeoutError:
            raise rx.TimeoutError("the cluster's slot map could not be read in time") from None
        named = None if effect.node is None else cluster.get_node(*effect.node)
        return named or cluster.get_node_from_key(self._key)

    async def _acquire_for_with(self) -> None:
        if not await self.acquire():
            raise self._not_acquired() from self._last_error


class FencedLock(Lock):
    """:class:`lockguide.FencedLock` on ``redis.asyncio``: every acquisition carries a token.

    One script takes the lock and draws the next token. Arguments are
    :class:`Lock`'s, plus ``counter_key`` (by default in the lock key's hash slot).
    """

    def __init__(
        self,
        client: redis.asyncio.Redis | RedisCluster,
        key: str,
        *,
        ttl_ms: int,
        counter_key: str | None = None,
        **options: Any,
    ) -> None:
        super().__init__(client, key, ttl_ms=ttl_ms, **options)
        self._counter_key = fencing.check_counter_key(self._key, counter_key)
        self._token: int | None = None

    @property
    def counter_key(self) -> str:
        """The Redis key holding this lock's token counter."""
        return self._counter_key

    @property
    def token(self) -> int:
        """The fencing token of the current acquisition (``NotOwned`` when not held)."""
        return fencing.FencedLock.token.fget(self)  # type: ignore[attr-defined,no-any-return]

    _grant_command = fencing.FencedLock._grant_command
    _granted = fencing.FencedLock._granted


class FencedStore:
    """:class:`lockguide.FencedStore` on ``redis.asyncio``: writes only with a newer token.

    Args:
        client: a ``redis.asyncio.Redis`` (may be another server than the lock's).
        key: the hash's key, e.g. ``"ledger:balance"``.
        lock: the async :class:`FencedLock` whose tokens this store checks, if on
            the same Redis: its keys must differ from ``key``.
    """

    def __init__(
        self, client: redis.asyncio.Redis, key: str, *, lock: FencedLock | None = None
    ) -> None:
        self._client = check_client(client)
        self._key = fencing.check_store_key(key, lock, FencedLock)
        self._write = self._client.register_script(FENCED_WRITE.source)

    key = fencing.FencedStore.key

    async def try_write(self, token: int, value: str) -> WriteResult:
        """Store ``value`` if ``token`` beats every token accepted so far; see ``accepted``."""
        token, value = fencing._check_write(token, value)
        accepted, highest = await self._write(keys=[self._key], args=[token, value])
        return WriteResult(accepted=accepted == 1, token=token, highest=int(highest))

    async def write(self, token: int, value: str) -> WriteResult:
        """Like :meth:`try_write`, but a refusal raises ``StaleToken`` (nothing written)."""
        return fencing._raise_if_refused(self._key, await self.try_write(token, value))

    async def read(self) -> Stored:
        """The current value and the highest token accepted."""
        raw_value, raw_token = await self._client.hmget(self._key, ["value", "token"])
        value = raw_value.decode("utf-8") if isinstance(raw_value, bytes) else raw_value
        return Stored(value=value, token=int(raw_token or 0))


class Redlock(RedlockSteps, AsyncLease):
    """:class:`lockguide.Redlock` on ``redis.asyncio``: a lease on a majority of N masters.

    The arguments, checks, arithmetic and errors are :class:`lockguide.Redlock`'s,
    except ``owner`` (``"task"`` or ``"process"``); ``masters`` are
    ``redis.asyncio.Redis`` clients. Each request is written to every master, then
    every reply awaited, each for at most ``node_timeout_ms``.

    Example::

        masters = [redis.asyncio.Redis(host=h) for h in ("r1", "r2", "r3", "r4", "r5")]
        async with Redlock(masters, "lock:ledger", ttl_ms=10_000, timeout_ms=2_000) as lock:
            await do_work()
            if lock.validity_remaining_ms() < 500:
                raise RuntimeError("too little lease left to commit safely")
            await commit()
    """

    def __init__(
        self,
        masters: Collection[redis.asyncio.Redis],
        key: str,
        *,
        ttl_ms: int,
        node_timeout_ms: float = DEFAULT_NODE_TIMEOUT_MS,
        timeout_ms: float | None = DEFAULT_TIMEOUT_MS,
        retry_delay_ms: tuple[float, float] = (50.0, 150.0),
        max_extensions: int | None = None,
        rng: random.Random | None = None,
        drift_factor: float = 0.01,
        drift_floor_ms: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
        on_attempt: Callable[[Attempt], object] | None = None,
        owner: Owner = "task",
    ) -> None:
        for i, master in enumerate(masters if isinstance(masters, Collection) else ()):
            if isinstance(master, RedisCluster):
                raise redlock._cluster_refused(f"masters[{i}]")
        clients, self._where = redlock.check_masters(
            masters, redis.asyncio.Redis, check_client, "redis.asyncio.Redis"
        )
        self._init_lease(
            key, ttl_ms, timeout_ms, retry_delay_ms, drift_factor, drift_floor_ms, clock, owner
        )
        self._node_timeout_ms = redlock.check_redlock_options(
            self, node_timeout_ms, retry_delay_ms, max_extensions, rng, on_attempt
        )
        self._masters: tuple[redis.asyncio.Redis, ...] = clients
        self._quorum, self._timeout_s = quorum(len(clients)), self._node_timeout_ms / 1000
        self._pools = [bounded_pool(c, self._timeout_s) for c in clients]
        self._max_extensions, self._on_attempt = max_extensions, on_attempt
        self._uniform = (rng or random.Random()).uniform
        self._extensions = self._released = 0
        self._last: Attempt | None = None
        self._start()

    @property
    def masters(self) -> tuple[redis.asyncio.Redis, ...]:
        """The clients, one per master, in the order given."""
        return self._masters

    @property
    def quorum(self) -> int:
        """Masters that must grant the key: ``len(masters) // 2 + 1``."""
        return self._quorum

    @property
    def node_timeout_ms(self) -> float:
        """How long each master's reply is waited for."""
        return self._node_timeout_ms

    @property
    def extensions_left(self) -> int | None:
        """How many more times :meth:`extend` may renew this acquisition (``None``: no bound)."""
        bound = self._max_extensions
        return None if bound is None else bound - self._extensions

    @property
    def last_attempt(self) -> Attempt | None:
        """The outcome of the most recent try (``None`` before any)."""
        return self._last

    def release(self) -> Coroutine[Any, Any, int]:
        """Release on every master at once (finished even under cancellation); how many deleted.

        If masters did not answer and could still make up a majority, their error is
        raised and the lock stays held here: call again.

        Raises:
            NotOwned: this object does not hold the lock (``WrongOwner``: another task does).
            MajorityLost: fewer than a majority still held this holder's value.
        """
        return self._drive(self._release_steps(), finish=True)

    def extend(self, ttl_ms: int | None = None) -> Coroutine[Any, Any, int]:
        """Renew the lease to ``ttl_ms`` (default: the TTL) on every master; how many did.

        Raises:
            NotOwned: this object does not hold the lock (or another task does).
            ExtensionLimitReached: extended ``max_extensions`` times already.
            LockLost: the lease ran out before (or while) extending.
            MajorityLost: fewer than a majority of masters still held the value.
        """
        return self._drive(self._extend_steps(ttl_ms))

    async def locked(self) -> bool:
        """Whether a majority of masters hold the key now, for anyone."""
        replies: list[Any] = await self._send(FanOut((("EXISTS", self._key),)))
        return replies.count(1) >= self._quorum

    async def owned(self) -> bool:
        """Whether a majority of masters hold this object's value now."""
        mine = self.value
        if mine is None:
            return False
        replies = await self._send(FanOut((("GET", self._key),)))
        return sum(1 for r in replies if r in (mine, mine.encode())) >= self._quorum

    def __repr__(self) -> str:
        where = f"masters={len(self._masters)} ttl_ms={self._ttl_ms}"
        return f"<aio.Redlock {self._key!r} {where} {'held' if self.held else 'not held'}>"

    async def _send(self, effect: FanOut) -> Any:
        """Every request on the wire before any reply is read; each master's last reply (or
        its first error reply, or the exception), ``None`` for masters not asked."""

        async def one(pool: redis.asyncio.ConnectionPool) -> Any:
            try:
                replies = await _exchange(pool, effect.commands, self._timeout_s)
            except (rx.RedisError, OSError) as error:
                return error
            errors = [reply for reply in replies if isinstance(reply, rx.ResponseError)]
            return (
                errors[0]
                if errors and not isinstance(replies[-1], rx.ResponseError)
                else replies[-1]
            )

        targets = range(len(self._pools)) if effect.only is None else effect.only
        results: list[Any] = [None] * len(self._pools)
        for i, result in zip(
            targets, await asyncio.gather(*(one(self._pools[i]) for i in targets)), strict=True
        ):
            results[i] = result
        return results

    async def _acquire_for_with(self) -> None:
        started = self._clock()
        if not await self.acquire():
            raise self._no_quorum(started) from self._last_error


class Watchdog(WatchdogState):
    """:class:`lockguide.Watchdog` as an asyncio task: renew a held async lock.

    Every ``every_ms`` the task extends the lease, until the holder releases it
    (through the watchdog or directly), a renewal finds the key gone or someone
    else's, or ``max_total_ms`` (if given) has passed. A failure is never silent:
    :attr:`lost`, :attr:`lost_event`, :meth:`check` and :meth:`release` report it.

    Args:
        lock: the async :class:`Lock`, :class:`FencedLock` or :class:`Redlock`;
            ``async with Watchdog(lock):`` acquires it if needed.
        every_ms: time between renewals, below the TTL (default: a third of it).
        max_total_ms: the longest time it keeps renewing (default: until released).
    """

    def __init__(
        self,
        lock: Lock | Redlock,
        *,
        every_ms: float | None = None,
        max_total_ms: float | None = None,
    ) -> None:
        if not isinstance(lock, Lock | Redlock):
            raise BadArgumentType(
                "lock must be a lockguide.aio Lock, FencedLock or Redlock, "
                f"not {type(lock).__name__}"
            )
        self._lock: Any = lock
        self._every_s, self._max_total_s = check_renewal(lock.ttl_ms, every_ms, max_total_ms)
        self._stop = asyncio.Event()
        self._lost: asyncio.Event = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._until: float | None = None

    @property
    def lost_event(self) -> asyncio.Event:
        """Set when the lease is lost; ``await dog.lost_event.wait()`` to be woken by it."""
        return self._lost

    @property
    def running(self) -> bool:
        """Whether the renewal task is still running."""
        return self._task is not None and not self._task.done()

    def start(self) -> None:
        """Start renewing the held lock, in a task of the running event loop.

        Raises:
            NotOwned: the lock is not held.
        """
        if not self._lock.held:
            raise NotOwned(self._lock.key, "start a watchdog on")
        if self._task is not None:
            raise BadArgument("this Watchdog has already been started; make a new one")
        self._task = asyncio.ensure_future(self._renew())
        self._lock._allow(self._task)  # this task may extend the lease
        self._until = None if self._max_total_s is None else time.monotonic() + self._max_total_s

    async def stop(self) -> None:
        """Stop renewing, without releasing the lock; an extension in flight finishes first."""
        self._stop.set()
        if self._task is not None and self._task is not _task():
            await asyncio.shield(self._task)

    async def release(self) -> None:
        """Stop renewing, then release the lock.

        Raises:
            RenewalFailed: a renewal had failed; the lock was released if still ours.
            LockLost: the lease ran out unnoticed; nothing deleted.
        """
        await self.stop()
        if self._error is not None:
            if self._lock.held:
                try:
                    await self._lock.release()
                except LockError as error:
                    raise self._error from error
            raise self._error
        await self._lock.release()

    async def __aenter__(self) -> Self:
        if not self._lock.held:
            await self._lock.__aenter__()  # acquires, or raises NotAcquired
        self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Stop renewing and release; the body's own exception always wins."""
        if exc is not None:
            try:
                await self.release()
            except Exception as error:
                note_failed_release(exc, self._lock.key, error)
        elif self._reported or not (self._lock.held or self._error is not None):
            await self.stop()
            if self._lock.held:
                with contextlib.suppress(LockError):
                    await self._lock.release()
        else:
            await self.release()

    def __repr__(self) -> str:
        state = "lost" if self.lost else ("running" if self.running else "stopped")
        return f"<aio.Watchdog {self._lock.key!r} {state}, {self._renewals} renewals>"

    async def _waited(self, seconds: float) -> bool:
        """Wait up to ``seconds``; True if :meth:`stop` was called meanwhile."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(max(seconds, 0.0)):
                await self._stop.wait()
        return bool(self._stop.is_set())

    async def _renew(self) -> None:
        """The task: the thread's loop (:class:`lockguide.Watchdog`), awaited."""
        try:
            wait = self._every_s
            while not await self._waited(wait):
                wait = self._every_s
                if self._until is not None and time.monotonic() >= self._until:
                    if not await self._waited(self._lock.validity_remaining_ms() / 1000.0):
                        self._fail(
                            "the watchdog stopped renewing after max_total_ms (its bound) "
                            "and the lease ran out"
                        )
                    return
                try:
                    await self._lock.extend()
                except (LockLost, ExtensionLimitReached) as error:
                    self._fail(f"the key was gone or held by another owner at renewal ({error})")
                    return
                except NotOwned:  # released (or re-acquired) by the holder: not ours to renew
                    return
                except (rx.RedisError, OSError) as error:
                    left_ms = self._lock.validity_remaining_ms()
                    if left_ms <= 0:
                        self._fail(f"Redis did not answer ({error!r}) before the lease ran out")
                        return
                    wait = min(self._every_s, left_ms / 4000.0)  # try again sooner
                    continue
                self._renewals += 1
        except Exception as error:  # never die silently
            self._fail(f"the watchdog task crashed: {error!r}")
