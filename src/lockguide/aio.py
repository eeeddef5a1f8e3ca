"""The same locks on ``redis.asyncio``: ``Lock``, ``FencedLock``, ``Redlock``, ``Watchdog``.

``FencedStore`` too, so that an asyncio holder's writes are fenced without a
blocking call. The argument checks, scripts, lease state, Redlock arithmetic and
errors are the synchronous code's, imported; this module holds the I/O, and it is
the one place that knows about cancellation.

* **Who owns a lock.** ``owner="task"`` (the default): the task that *called*
  ``acquire()``. The caller is read when the coroutine is made, not when it
  runs, so ``await asyncio.wait_for(lock.acquire(), 2)``,
  ``asyncio.gather(lock.acquire(), ...)`` and ``await asyncio.shield(lock.release())``
  act for the task that wrote them, though Python 3.11 runs them in a task of
  their own. Any other task's ``release()`` or ``extend()`` raises
  :class:`~lockguide.WrongOwner`. ``lock.hand_over(task)`` gives a held lock to
  another task; ``owner="process"`` lets any task of the acquiring process use
  it. The grant records the process: in a forked child ``held`` is ``False`` and
  ``release()`` / ``extend()`` raise :class:`~lockguide.NotOwned` without
  sending anything.
* **Cancellation.** A release, once sent, is finished: cancelled once, twice, or
  again and again as anyio's cancel scopes do (Starlette, FastAPI), the
  request runs to its reply in a task of its own and the cancellation is
  delivered after it. So the object never says "free" while the key is still
  there, and never "held" for a grant Redis deleted; if Redis did not answer,
  the lock stays held in the object and ``release()`` can be called again. An
  acquire cancelled mid-request gives up at once and deletes its own value in
  the background (``await lock.aclose()`` waits for that).
* **Deadlines are total.** ``acquire(timeout_ms=...)`` (default
  :data:`DEFAULT_TIMEOUT_MS`) caps every request to the time left; timeouts and
  lost connections are retried within it and end in ``False``
  (:attr:`Lock.last_error` keeps the last one), never a raw redis-py error.
* **Connections**: a pool made from the client's settings with redis-py's
  retries off (:func:`lockguide._base.bounded_async_pool`, shared by the locks
  on one client), each request sent once and bounded by ``asyncio.timeout``; a
  connection whose reply did not come is closed. ``await lock.aclose()`` closes
  them. On ``redis.asyncio.RedisCluster``, ``MOVED`` refreshes the slot map and
  retries once within the request's budget; ``ASK`` sends ``ASKING`` and the
  command to the target.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import time
from collections.abc import Callable, Collection, Coroutine
from types import TracebackType
from typing import Any, Literal, Self, TypeVar

import redis.asyncio
from redis import exceptions as rx
from redis.asyncio.cluster import RedisCluster

from lockguide._base import (
    EXTEND,
    RELEASE,
    UNSET,
    LeaseState,
    bounded_async_pool,
    check_client_of,
    check_ms,
    check_ttl_ms,
    note_failed_release,
)
from lockguide.errors import (
    BadArgument,
    BadArgumentType,
    ExtensionLimitReached,
    LockError,
    LockLost,
    MajorityLost,
    MasterError,
    NoQuorum,
    NotAcquired,
    NotOwned,
    WrongOwner,
)
from lockguide.fencing import (
    FENCED_ACQUIRE,
    FENCED_WRITE,
    Stored,
    WriteResult,
    _check_write,
    _raise_if_refused,
    check_counter_key,
    check_store_key,
)
from lockguide.lock import DEFAULT_REQUEST_TIMEOUT_MS
from lockguide.redlock import (
    DEFAULT_NODE_TIMEOUT_MS,
    Attempt,
    check_masters,
    check_redlock_options,
    tally,
)
from lockguide.renewal import WatchdogState, check_renewal
from lockguide.tokens import new_lock_value
from lockguide.validity import quorum

__all__ = ["DEFAULT_TIMEOUT_MS", "FencedLock", "FencedStore", "Lock", "Redlock", "Watchdog"]

#: How long ``acquire()`` keeps trying when no ``timeout_ms`` is given: 10 s.
DEFAULT_TIMEOUT_MS = 10_000.0

T = TypeVar("T")
Owner = Literal["task", "process"]
_SCRIPTS = {s.sha: s for s in (RELEASE, EXTEND, FENCED_ACQUIRE)}
_BACKGROUND: set[asyncio.Task[Any]] = set()  # clean-ups outliving a cancelled caller


def check_client(client: object, name: str = "client") -> redis.asyncio.Redis:
    """A ``redis.asyncio.Redis`` (or subclass: fakeredis's ``FakeAsyncRedis``)."""
    return check_client_of(redis.asyncio.Redis, "redis.asyncio.Redis", client, name)


def _caller() -> asyncio.Task[Any] | None:
    """The task running now (``None`` outside an event loop)."""
    try:
        return asyncio.current_task()
    except RuntimeError:
        return None


def _transient(error: BaseException) -> bool:
    """A timeout or a lost connection: the next try may succeed (wrong credentials never)."""
    return isinstance(error, rx.TimeoutError | rx.ConnectionError | OSError) and not isinstance(
        error, rx.AuthenticationError
    )


async def _finish(work: Coroutine[Any, Any, T]) -> T:
    """Run ``work`` to its end even if the caller is cancelled meanwhile; then deliver that."""
    task = asyncio.ensure_future(work)
    cancelled: BaseException | None = None
    while not task.done():
        try:
            await asyncio.wait((task,))
        except asyncio.CancelledError as error:  # once, twice, or anyio's every iteration
            cancelled = error
    if cancelled is not None:
        if not task.cancelled():
            task.exception()  # seen: the state it left says what happened
        raise cancelled
    return task.result()


async def _request(where: Any, command: tuple[Any, ...], asking: bool) -> Any:
    """One command on a connection of ``where`` (a pool or a cluster node); its reply."""
    pooled = isinstance(where, redis.asyncio.ConnectionPool)
    conn = await where.get_connection() if pooled else where.acquire_connection()
    try:
        if asking:
            await conn.send_command("ASKING")
        await conn.send_command(*command)
        if asking:
            await conn.read_response()
        return await conn.read_response()
    except BaseException as error:  # no reply, or a half-read one: close, never reuse
        if not isinstance(error, rx.ResponseError):
            await conn.disconnect(nowait=True)
        raise
    finally:
        await where.release(conn) if pooled else where.release(conn)


async def _send(
    where: Any, command: tuple[Any, ...], timeout_s: float, asking: bool = False
) -> Any:
    """:func:`_request` within ``timeout_s``, loading a script on ``NOSCRIPT``."""
    try:
        async with asyncio.timeout(timeout_s):
            try:
                return await _request(where, command, asking)
            except rx.NoScriptError:  # first use there, a restart, SCRIPT FLUSH
                await _request(where, ("SCRIPT", "LOAD", _SCRIPTS[command[1]].source), asking)
                return await _request(where, command, asking)
    except TimeoutError:
        raise rx.TimeoutError(f"no reply within {timeout_s * 1000:.0f} ms") from None


class AsyncLease(LeaseState):
    """A lease owned by an asyncio task (or process), with ``async with`` and the owner rules."""

    _owner_mode: Owner
    _owner: object
    _helpers: set[object]
    _pid = 0
    _last_error: BaseException | None = None

    def _init_owner(self, owner: object) -> None:
        if owner not in ("task", "process"):
            raise BadArgument(f"owner must be 'task' or 'process', got {owner!r}")
        self._owner_mode, self._owner, self._helpers = owner, None, set()
        self._pending: set[asyncio.Task[Any]] = set()
        self._pools: list[redis.asyncio.ConnectionPool] = []

    @property
    def held(self) -> bool:
        """Whether this object acquired the lock (in this process) and still holds it."""
        return self._value is not None and self._pid == os.getpid()

    @property
    def last_error(self) -> BaseException | None:
        """The last timeout or connection error an ``acquire`` retried past, if any."""
        return self._last_error

    def validity_remaining_ms(self) -> float:
        """Milliseconds the holder may still rely on the lock; ``0.0`` when not held."""
        return super().validity_remaining_ms() if self.held else 0.0

    def hand_over(self, task: asyncio.Task[Any]) -> None:
        """Give the held lock to ``task``: from now on it, not the caller, may release or extend.

        Raises:
            NotOwned: this object does not hold the lock.
            WrongOwner: the caller is not the task that holds it.
        """
        if not isinstance(task, asyncio.Task):
            raise BadArgumentType(f"hand_over takes an asyncio.Task, not {type(task).__name__}")
        self._check_owner("hand over", _caller())
        self._owner = task

    async def aclose(self) -> None:
        """Finish this lock's clean-ups (a cancelled acquire's delete), then close its connections.

        Connections in use by another lock on the same client are left to finish.
        """
        while self._pending:
            await asyncio.wait(set(self._pending))
        for pool in self._pools:
            await pool.disconnect(inuse_connections=False)

    def _in_background(self, work: Coroutine[Any, Any, Any]) -> None:
        """Run a clean-up that must not wait for (nor die with) the cancelled caller."""
        task = asyncio.ensure_future(work)
        for tasks in (_BACKGROUND, self._pending):
            tasks.add(task)
            task.add_done_callback(tasks.discard)

    def _start(self, blocking: bool, timeout_ms: object) -> tuple[float | None, float | None]:
        """The checks before an acquire: (when it gives up, the cap on each request)."""
        if self._value is not None and self._pid != os.getpid():
            self._value = None  # the parent's grant, seen from a forked child
        wait_ms = self._wait_ms(blocking, timeout_ms)
        give_up_at = None if wait_ms is None else self._clock() + wait_ms / 1000.0
        self._last_error = None
        return give_up_at, (give_up_at if wait_ms else None)

    def _left_s(self, cap_at: float | None, most_s: float) -> float:
        """A request's budget: ``most_s``, cut to the time left before ``cap_at``."""
        return most_s if cap_at is None else min(most_s, cap_at - self._clock())

    def _won(self, value: str, started: float, owner: object = None) -> None:
        self._value, self._pid, self._owner = value, os.getpid(), owner
        self._deadline = started + self._usable_ms / 1000.0

    def _check_owner(self, action: str, caller: object = None) -> str:
        value = self._value
        if value is None or self._pid != os.getpid():
            raise NotOwned(self._key, action)
        if self._owner_mode == "task":
            caller = caller or _caller()
            if caller is not self._owner and caller not in self._helpers:
                raise WrongOwner(self._key, action)
        return value

    def _allow_thread(self, task: object) -> None:
        """Let the watchdog's task extend and release this lease too."""
        self._helpers.add(task)

    def _forget(self, value: str) -> None:
        """Clear the value only if it is still the one that request carried."""
        if self._value == value:
            self._value = None

    def release(self) -> Coroutine[Any, Any, object]:
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
        """Release if still held by this task. The body's own exception always wins.

        A lock handed over in the body is left to its new owner. A failed release
        becomes a note on the body's exception; after a body that succeeded, a
        lost lease is raised here (``LockLost``, ``MajorityLost``).
        """
        if not self.held or (self._owner_mode == "task" and self._owner is not _caller()):
            return
        if exc is None:
            await self.release()
            return
        try:
            await self.release()
        except Exception as error:  # the body's exception is the one to report
            note_failed_release(exc, self._key, error)


class Lock(AsyncLease):
    """:class:`lockguide.Lock` on ``redis.asyncio``: a lease on one Redis instance.

    The arguments, errors and rules are :class:`lockguide.Lock`'s; ``client``
    is a ``redis.asyncio.Redis`` or ``redis.asyncio.RedisCluster``, and the
    methods that talk to Redis return coroutines.

    Args:
        client: a ``redis.asyncio.Redis`` or ``RedisCluster``; its connections are used.
        key: the Redis key that represents the lock, e.g. ``"lock:ledger"``.
        ttl_ms: the lease, a whole number of milliseconds (keyword only).
        timeout_ms: how long :meth:`acquire` keeps trying, in total
            (:data:`DEFAULT_TIMEOUT_MS`); ``None`` waits for ever.
        retry_delay_ms: the ``(low, high)`` range each pause between tries is drawn from.
        request_timeout_ms: the most one request may take (connecting included).
        owner: ``"task"`` (the calling task) or ``"process"`` (any task of this process).
        drift_factor: the fraction of the TTL set aside for clock drift (1 %).
        drift_floor_ms: the fixed part of the drift allowance (2 ms).
        clock: the function the lease is timed with, in seconds (``time.monotonic``).

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
        owner: Owner = "task",
        drift_factor: float = 0.01,
        drift_floor_ms: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._cluster = client if isinstance(client, RedisCluster) else None
        self._init_lease(
            key, ttl_ms, timeout_ms, retry_delay_ms, drift_factor, drift_floor_ms, clock
        )
        self._init_owner(owner)
        self._request_s = check_ms(request_timeout_ms, "request_timeout_ms", positive=True) / 1000
        if self._cluster is None:
            self._pools = [bounded_async_pool(check_client(client), self._request_s)]

    def acquire(
        self, *, blocking: bool = True, timeout_ms: float | None = UNSET
    ) -> Coroutine[Any, Any, bool]:
        """Try to take the lock; ``True`` if this call got it, ``False`` when the wait ran out.

        Args:
            blocking: ``False`` makes exactly one try (then ``timeout_ms`` must not be given).
            timeout_ms: the total wait; defaults to the constructor's.

        Raises:
            AlreadyAcquired: this object holds the lock already.
        """
        return self._acquire(_caller(), blocking, timeout_ms)

    async def _acquire(self, caller: object, blocking: bool, timeout_ms: object) -> bool:
        give_up_at, cap_at = self._start(blocking, timeout_ms)
        owner = caller or _caller()
        while True:
            value, started = new_lock_value(), self._clock()
            budget = self._left_s(cap_at, self._request_s)
            granted = False
            if budget > 0:
                try:
                    granted = await self._grant(value, budget)
                except BaseException as error:  # the key may be stored: delete our value
                    self._in_background(self._discard(value))
                    if not _transient(error):
                        raise
                    self._last_error = error
                if granted and self._clock() < started + self._usable_ms / 1000.0:
                    self._won(value, started, owner)
                    return True
                if granted:  # granted, but the reply took the whole lease
                    await self._discard(value)
            pause = self._pause_s(random.uniform, give_up_at) if blocking else 0.0
            if pause <= 0:
                return False
            await asyncio.sleep(pause)

    def release(self) -> Coroutine[Any, Any, None]:
        """Release with compare-and-delete; the request is finished even under cancellation.

        Raises:
            NotOwned: this object does not hold the lock (``WrongOwner``: another task does).
            LockLost: the lease had expired; the key was left untouched.
            redis.exceptions.TimeoutError: no answer; the lock stays held here: call again.
        """
        return self._release(_caller())

    async def _release(self, caller: object) -> None:
        value = self._check_owner("release", caller)

        async def request() -> object:
            deleted = await self._call(RELEASE.command((self._key,), (value,)))
            self._forget(value)
            return deleted

        if await _finish(request()) != 1:
            raise LockLost(self._key, "release")

    def extend(self, ttl_ms: int | None = None) -> Coroutine[Any, Any, None]:
        """Give the held lock a fresh lease of ``ttl_ms`` (default: the original TTL).

        Raises:
            NotOwned: this object does not hold the lock (``WrongOwner``: another task does).
            LockLost: the key was gone or someone else's; the lock is no longer held.
        """
        return self._extend(_caller(), ttl_ms)

    async def _extend(self, caller: object, ttl_ms: int | None) -> None:
        new_ttl = self._ttl_ms if ttl_ms is None else check_ttl_ms(ttl_ms)
        usable_ms = self._usable_for(new_ttl)
        value = self._check_owner("extend", caller)
        started = self._clock()
        if await self._call(EXTEND.command((self._key,), (value, new_ttl))) != 1:
            self._forget(value)
            raise LockLost(self._key, "extend")
        if self._value == value:
            self._deadline = started + usable_ms / 1000.0

    async def locked(self) -> bool:
        """Whether anybody (this object or another client) holds the lock now."""
        return bool(await self._call(("EXISTS", self._key)))

    async def owned(self) -> bool:
        """Whether the key holds this object's value now (asks Redis, not the local clock)."""
        if not self.held:
            return False
        current = await self._call(("GET", self._key))
        if isinstance(current, bytes):
            current = current.decode("utf-8", "replace")
        return bool(current == self._value)

    def __repr__(self) -> str:
        state = "held" if self.held else "not held"
        return f"<aio.{type(self).__name__} {self._key!r} ttl_ms={self._ttl_ms} {state}>"

    async def _call(self, command: tuple[Any, ...], timeout_s: float | None = None) -> Any:
        """Send ``command`` where the key lives; on a cluster, follow ``MOVED`` and ``ASK``."""
        budget = self._request_s if timeout_s is None else timeout_s
        cluster = self._cluster
        if cluster is None:
            return await _send(self._pools[0], command, budget)
        end = time.monotonic() + budget
        async with asyncio.timeout(budget):
            await cluster.initialize()
        try:
            return await _send(cluster.get_node_from_key(self._key), command, budget)
        except rx.AskError as error:  # the slot is migrating: ask the target
            target = cluster.get_node(host=error.host, port=error.port)
            return await _send(target, command, end - time.monotonic(), asking=True)
        except rx.MovedError:  # the slot moved: refresh the map, retry once
            async with asyncio.timeout(max(end - time.monotonic(), 0.0)):
                await cluster.exists(self._key)
            return await _send(
                cluster.get_node_from_key(self._key), command, end - time.monotonic()
            )

    async def _grant(self, value: str, timeout_s: float) -> bool:
        """One ``SET key value NX PX ttl``: True if Redis stored it."""
        command = ("SET", self._key, value, "NX", "PX", self._ttl_ms)
        return await self._call(command, timeout_s) is not None

    async def _discard(self, value: str) -> None:
        """Best effort: delete ``value`` if it is the key's."""
        with contextlib.suppress(rx.RedisError, OSError):  # else the TTL removes it
            await self._call(RELEASE.command((self._key,), (value,)))

    async def _acquire_for_with(self) -> None:
        if not await self.acquire():
            raise NotAcquired(self._key, self._timeout_ms or 0.0) from self._last_error


class FencedLock(Lock):
    """:class:`lockguide.FencedLock` on ``redis.asyncio``: every acquisition carries a token.

    One script takes the lock and draws the next token (``INCR`` of a counter
    that never expires, in the lock key's hash slot by default). Arguments are
    :class:`Lock`'s, plus ``counter_key``.
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
        self._counter_key = check_counter_key(self._key, counter_key)
        self._token: int | None = None

    @property
    def counter_key(self) -> str:
        """The Redis key holding this lock's token counter."""
        return self._counter_key

    @property
    def token(self) -> int:
        """The fencing token of the current acquisition.

        Raises:
            NotOwned: this object does not hold the lock.
        """
        if self._token is None or not self.held:
            raise NotOwned(self._key, "read the fencing token of")
        return self._token

    def __repr__(self) -> str:
        state = f"held, token {self._token}" if self.held else "not held"
        return f"<aio.FencedLock {self._key!r} ttl_ms={self._ttl_ms} {state}>"

    async def _grant(self, value: str, timeout_s: float) -> bool:
        """Take the lock and draw its token in one script."""
        command = FENCED_ACQUIRE.command((self._key, self._counter_key), (value, self._ttl_ms))
        token = int(await self._call(command, timeout_s))
        self._token = token or None
        return token > 0


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
        self._key = check_store_key(key, lock, FencedLock)

    @property
    def key(self) -> str:
        """The Redis key of the hash."""
        return self._key

    async def try_write(self, token: int, value: str) -> WriteResult:
        """Store ``value`` if ``token`` beats every token accepted so far; see ``accepted``."""
        token, value = _check_write(token, value)
        reply = await FENCED_WRITE.run_async(self._client, (self._key,), (token, value))
        accepted, highest = reply
        return WriteResult(accepted=accepted == 1, token=token, highest=int(highest))

    async def write(self, token: int, value: str) -> WriteResult:
        """Like :meth:`try_write`, but a refusal raises.

        Raises:
            StaleToken: a token at least as high was already accepted; nothing written.
        """
        return _raise_if_refused(self._key, await self.try_write(token, value))

    async def read(self) -> Stored:
        """The current value and the highest token accepted."""
        raw_value, raw_token = await self._client.hmget(self._key, ["value", "token"])
        value = raw_value.decode("utf-8") if isinstance(raw_value, bytes) else raw_value
        return Stored(value=value, token=int(raw_token or 0))


class Redlock(AsyncLease):
    """:class:`lockguide.Redlock` on ``redis.asyncio``: a lease on a majority of N masters.

    The arguments, checks, arithmetic and errors are :class:`lockguide.Redlock`'s
    (plus ``owner``); ``masters`` are ``redis.asyncio.Redis`` clients. Each try
    writes ``SET key value NX PX ttl`` to every master, then awaits every reply,
    each for at most ``node_timeout_ms`` (cut to the time left).

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
        max_extensions: int = 3,
        rng: random.Random | None = None,
        owner: Owner = "task",
        drift_factor: float = 0.01,
        drift_floor_ms: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
        on_attempt: Callable[[Attempt], object] | None = None,
    ) -> None:
        clients, self._where = check_masters(
            masters, redis.asyncio.Redis, check_client, "redis.asyncio.Redis"
        )
        self._init_lease(
            key, ttl_ms, timeout_ms, retry_delay_ms, drift_factor, drift_floor_ms, clock
        )
        self._init_owner(owner)
        node_ms = check_redlock_options(
            self, node_timeout_ms, retry_delay_ms, max_extensions, rng, on_attempt
        )
        self._masters: tuple[redis.asyncio.Redis, ...] = clients
        self._quorum, self._node_timeout_ms = quorum(len(clients)), node_ms
        self._pools = [bounded_async_pool(c, node_ms / 1000) for c in clients]
        self._max_extensions, self._on_attempt = max_extensions, on_attempt
        self._uniform = (rng or random.Random()).uniform
        self._extensions = self._released = 0
        self._last: Attempt | None = None

    masters = property(lambda self: self._masters, doc="The clients, one per master.")
    quorum = property(lambda self: self._quorum, doc="Masters that must grant: N // 2 + 1.")
    node_timeout_ms = property(lambda self: self._node_timeout_ms, doc="Per-master timeout.")
    last_attempt = property(lambda self: self._last, doc="The most recent try's Attempt.")

    @property
    def extensions_left(self) -> int:
        """How many more times :meth:`extend` may renew the current acquisition."""
        return self._max_extensions - self._extensions

    def acquire(
        self, *, blocking: bool = True, timeout_ms: float | None = UNSET
    ) -> Coroutine[Any, Any, bool]:
        """Try to take the lock on a majority of masters; ``True`` if this call got it.

        Raises:
            MasterError: a master answered an error no retry can fix.
        """
        return self._acquire(_caller(), blocking, timeout_ms)

    async def _acquire(self, caller: object, blocking: bool, timeout_ms: object) -> bool:
        give_up_at, cap_at = self._start(blocking, timeout_ms)
        owner = caller or _caller()
        while (budget := self._left_s(cap_at, self._node_timeout_ms / 1000)) <= 0 or not (
            await self._try(new_lock_value(), budget, owner)
        ):
            pause = self._pause_s(self._uniform, give_up_at) if blocking else 0.0
            if pause <= 0:
                return False
            await asyncio.sleep(pause)
        return True

    def release(self) -> Coroutine[Any, Any, int]:
        """Release on every master at once (finished even under cancellation); how many deleted.

        If masters did not answer and could still make up a majority, their
        error is raised and the lock stays held in this object: call again.

        Raises:
            NotOwned: this object does not hold the lock (``WrongOwner``: another task does).
            MajorityLost: fewer than a majority still held this holder's value.
        """
        return self._release(_caller())

    async def _release(self, caller: object) -> int:
        value = self._check_owner("release", caller)

        async def request() -> int:
            replies = await self._fan_out(RELEASE.command((self._key,), (value,)))
            self._released += replies.count(1)
            errors = [reply for reply in replies if isinstance(reply, Exception)]
            if errors and self._released < self._quorum <= self._released + len(errors):
                raise errors[0]
            self._forget(value)
            return self._released

        released = await _finish(request())
        if released < self._quorum:
            raise self._majority_lost("release", released)
        return released

    def extend(self, ttl_ms: int | None = None) -> Coroutine[Any, Any, int]:
        """Renew the lease to ``ttl_ms`` (default: the TTL) on every master; how many did.

        Raises:
            NotOwned: this object does not hold the lock (or another task does).
            ExtensionLimitReached: extended ``max_extensions`` times already.
            LockLost: the lease ran out before (or while) extending.
            MajorityLost: fewer than a majority of masters still held the value.
        """
        return self._extend(_caller(), ttl_ms)

    async def _extend(self, caller: object, ttl_ms: int | None) -> int:
        new_ttl = self._ttl_ms if ttl_ms is None else check_ttl_ms(ttl_ms)
        usable_ms = self._usable_for(new_ttl)
        value = self._check_owner("extend", caller)
        if self._extensions >= self._max_extensions:
            raise ExtensionLimitReached(self._key, self._max_extensions)
        started = self._clock()
        extended = 0
        if started < self._deadline:
            extended = (await self._fan_out(EXTEND.command((self._key,), (value, new_ttl)))).count(
                1
            )
        if extended >= self._quorum and self._clock() < self._deadline and self._value == value:
            self._deadline = started + usable_ms / 1000.0
            self._extensions += 1
            return extended
        self._forget(value)
        await self._fan_out(RELEASE.command((self._key,), (value,)))
        if extended < self._quorum and started < self._deadline:
            raise self._majority_lost("extend", extended)
        raise LockLost(self._key, "extend")

    async def locked(self) -> bool:
        """Whether a majority of masters hold the key now, for anyone."""
        return (await self._fan_out(("EXISTS", self._key))).count(1) >= self._quorum

    async def owned(self) -> bool:
        """Whether a majority of masters hold this object's value now."""
        mine = self._value
        if mine is None or not self.held:
            return False
        replies = await self._fan_out(("GET", self._key))
        return sum(1 for r in replies if r in (mine, mine.encode())) >= self._quorum

    def __repr__(self) -> str:
        state = "held" if self.held else "not held"
        where = f"masters={len(self._masters)} ttl_ms={self._ttl_ms}"
        return f"<aio.Redlock {self._key!r} {where} {state}>"

    async def _try(self, value: str, budget: float, owner: object) -> bool:
        """One try at every master; True if it won. A lost try leaves nothing behind."""
        release = RELEASE.command((self._key,), (value,))
        try:
            started = self._clock()
            command = ("SET", self._key, value, "NX", "PX", self._ttl_ms)
            replies = await self._fan_out(command, budget)
            elapsed_ms = (self._clock() - started) * 1000.0
            attempt, errors, fatal = tally(replies, elapsed_ms, self._ttl_ms, self._drift)
            self._last = attempt
            if attempt.acquired and fatal is None:
                self._won(value, started, owner)
                self._extensions = self._released = 0
            if self._on_attempt is not None:
                self._on_attempt(attempt)
        except BaseException:  # cancelled, a failing callback: nothing may stay locked
            self._forget(value)
            self._in_background(self._fan_out(release))
            raise
        if self._value == value:
            return True
        await self._fan_out(release)  # everywhere: a "no" may be a lost "yes"
        if fatal is not None:
            error = errors[fatal]
            raise MasterError(self._key, fatal, self._where[fatal], error) from error
        return False

    async def _fan_out(self, command: tuple[Any, ...], budget: float | None = None) -> list[Any]:
        """Send ``command`` to every master at once; a reply or its exception each.

        Every request is on the wire before any reply is read; each waits at most
        ``budget`` (the per-node timeout), connecting included.
        """
        timeout_s = self._node_timeout_ms / 1000.0 if budget is None else budget

        async def one(pool: redis.asyncio.ConnectionPool) -> Any:
            try:
                return await _send(pool, command, timeout_s)
            except (rx.RedisError, OSError) as error:
                return error

        return list(await asyncio.gather(*(one(pool) for pool in self._pools)))

    async def _acquire_for_with(self) -> None:
        started = self._clock()
        if not await self.acquire():
            last = self._last
            waited = (self._clock() - started) * 1000.0
            if last is None:
                raise NotAcquired(self._key, waited)
            raise NoQuorum(
                self._key,
                waited,
                granted=last.granted,
                refused=last.refused,
                failed=last.failed,
                needed=self._quorum,
                causes=last.causes,
            )

    def _majority_lost(self, action: str, confirmed: int) -> MajorityLost:
        return MajorityLost(
            self._key, action, confirmed=confirmed, needed=self._quorum, masters=len(self._masters)
        )


class Watchdog(WatchdogState):
    """:class:`lockguide.Watchdog` as an asyncio task: renew a held async lock.

    Every ``every_ms`` the task extends the lease by the TTL, until the holder
    releases it (through the watchdog or directly), a renewal finds the key gone
    or someone else's, or ``max_total_ms`` (if given) has passed. A failure is
    never silent: :attr:`lost`, :attr:`lost_event`, :meth:`check` and
    :meth:`release` all report it.

    Args:
        lock: the async :class:`Lock`, :class:`FencedLock` or :class:`Redlock`;
            ``async with Watchdog(lock):`` acquires it if needed.
        every_ms: time between renewals, below the TTL (default: a third of it).
        max_total_ms: the longest time it keeps renewing (default: no bound).

    Example::

        lock = FencedLock(r, "lock:report", ttl_ms=30_000)
        async with Watchdog(lock) as dog:
            for part in parts:
                await build(part)
                dog.check()  # raises RenewalFailed once the lease is lost
                await store_write(lock.token, part)  # and the resource still fences
    """

    def __init__(
        self, lock: AsyncLease, *, every_ms: float | None = None, max_total_ms: float | None = None
    ) -> None:
        if not isinstance(lock, Lock | Redlock):
            raise BadArgumentType(
                "lock must be a lockguide.aio Lock, FencedLock or Redlock, "
                f"not {type(lock).__name__}"
            )
        self._lock: AsyncLease = lock
        self._every_s = check_renewal(lock.ttl_ms, every_ms, 0)[0]
        self._max_total_s = (
            None if max_total_ms is None else check_ms(max_total_ms, "max_total_ms") / 1000
        )
        self._stop = asyncio.Event()
        self._lost: asyncio.Event = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

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
        self._task = asyncio.get_running_loop().create_task(
            self._run(), name=f"lockguide-watchdog:{self._lock.key}"
        )
        self._lock._allow_thread(self._task)  # this task may extend the lease

    async def stop(self) -> None:
        """Stop renewing, without releasing the lock; an extension in flight finishes first."""
        self._stop.set()
        if self._task is not None and self._task is not asyncio.current_task():
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

    async def _run(self) -> None:
        """The task: renew until told to stop; a crash is reported as a failure."""
        try:
            await self._loop()
        except Exception as error:  # never die silently
            self._fail(f"the watchdog task crashed: {error!r}")

    async def _stopped_within(self, seconds: float) -> bool:
        """Wait up to ``seconds``; True if :meth:`stop` was called meanwhile."""
        try:
            async with asyncio.timeout(max(seconds, 0.0)):
                await self._stop.wait()
        except TimeoutError:
            return self._stop.is_set()
        return True

    async def _loop(self) -> None:
        lock, wait = self._lock, self._every_s
        ends = None if self._max_total_s is None else time.monotonic() + self._max_total_s
        while not await self._stopped_within(wait):
            wait = self._every_s
            if ends is not None and time.monotonic() >= ends:  # flag the loss when the lease ends
                if not await self._stopped_within(lock.validity_remaining_ms() / 1000.0):
                    self._fail("the watchdog's max_total_ms had passed and the lease ran out")
                return
            try:
                await lock.extend()  # type: ignore[attr-defined]
            except LockLost:
                self._fail("the key was gone or held by another owner at renewal")
                return
            except ExtensionLimitReached as error:
                self._fail(f"the lease could not be renewed: {error}")
                return
            except NotOwned:
                return  # released directly by the holder: nothing left to renew
            except (rx.RedisError, OSError) as error:
                left_ms = lock.validity_remaining_ms()
                if left_ms <= 0:
                    self._fail(f"Redis did not answer ({error!r}) before the lease ran out")
                    return
                wait = min(self._every_s, left_ms / 4000.0)  # try again sooner
                continue
            self._renewals += 1
