"""The same locks on ``redis.asyncio``. Every decision is the synchronous locks' (their
steps, checks and errors): this module performs them, and alone knows tasks and cancellation.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Collection, Coroutine
from typing import TYPE_CHECKING, Any, Self

import redis.asyncio
from redis import exceptions as rx
from redis.asyncio.cluster import RedisCluster

from lockguide import _core as core
from lockguide import fencing, renewal
from lockguide._core import DEFAULT_TIMEOUT_MS, UNSET, LockOptions, Steps, T
from lockguide.fencing import Stored, WriteResult
from lockguide.lock import bounded_pool, waiting_room
from lockguide.redlock import RedlockOptions, RedlockSteps

if TYPE_CHECKING:
    from typing_extensions import Unpack  # in typing itself from Python 3.12

__all__ = ["DEFAULT_TIMEOUT_MS", "FencedLock", "FencedStore", "Lock", "Redlock", "Watchdog"]

#: Work outliving its caller (a cancelled acquire's clean-up, a late master), by lock.
_BACKGROUND: dict[asyncio.Task[Any], object] = {}


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


async def _quietly(work: Awaitable[Any]) -> None:
    with contextlib.suppress(BaseException):  # a clean-up: the TTL ends what it cannot
        await work


async def _talk(
    where: Any, commands: tuple[tuple[Any, ...], ...], *, fan_out: bool = False
) -> list[Any]:
    """The replies to ``commands`` on a connection of ``where`` (a pool or a cluster node),
    error replies among them. A connection whose reply did not come is closed, never read.
    ``fan_out``: yield once after writing, so a Redlock's other masters get theirs before a
    reply is read (a Lock skips that turn of the loop: it is on every hand-over's path).
    """
    pooled = isinstance(where, redis.asyncio.ConnectionPool)
    conn = await where.get_connection() if pooled else where.acquire_connection()
    replies = []
    try:
        for command in commands:  # all written before any reply is read
            await conn.send_command(*command, check_health=False)
        if fan_out:
            await asyncio.sleep(0)
        for _ in commands:
            try:
                replies.append(await conn.read_response())
            except rx.ResponseError as answered:  # an answer like any other: read on
                replies.append(answered)
    finally:
        if len(replies) < len(commands):  # interrupted: a reply may come later, never read it
            await conn.disconnect(nowait=True)
        await where.release(conn) if pooled else where.release(conn)
    return replies


class AsyncLease(core.LeaseState):
    """The asyncio driver of the steps: the owner is the task that *calls* a method, read
    when its coroutine is made (so ``wait_for``, ``gather``, ``shield`` act for the caller).
    """

    _owner_kinds = ("task", "process")
    _repr_prefix = "aio."
    _calling: object = None  # while a step runs: the task that called the method
    _pools: list[redis.asyncio.ConnectionPool]
    _send: Callable[[Any], Awaitable[Any]]

    def _holder(self) -> object:
        return self._calling or _task()

    def _pool(self, client: Any, timeout_s: float) -> Any:
        return bounded_pool(client, timeout_s, redis.asyncio)

    def acquire(
        self, *, blocking: bool = True, timeout_ms: float | None = UNSET
    ) -> Coroutine[Any, Any, bool]:
        """Try to take the lock; ``True`` if this call got it (:meth:`lockguide.Lock.acquire`)."""
        return self._drive(self._acquire_steps(blocking, timeout_ms))

    def locked(self) -> Coroutine[Any, Any, bool]:
        """Whether anybody holds the lock now (a Redlock: on a majority of masters)."""
        return self._drive(self._locked_steps())

    def owned(self) -> Coroutine[Any, Any, bool]:
        """Whether the key holds this object's value now (asks Redis, not the local clock)."""
        return self._drive(self._owned_steps())

    def holder(self) -> Coroutine[Any, Any, core.Holder | None]:
        """Who holds the key, since when, for how much longer (:meth:`lockguide.Lock.holder`)."""
        return self._drive(self._holder_steps())

    def _holder_label(self) -> str:
        task = self._calling or _task()
        return task.get_name() if isinstance(task, asyncio.Task) else "no-task"

    def release(self) -> Coroutine[Any, Any, Any]:
        """Release as the sync lock does, finished even if the caller is cancelled meanwhile;
        ``redis.exceptions.TimeoutError``: no answer, the lock stays held here: call again.
        """
        return self._drive(self._release_steps(), finish=True)  # type: ignore[attr-defined]

    def extend(self, ttl_ms: int | None = None) -> Coroutine[Any, Any, Any]:
        """Renew the held lease to ``ttl_ms`` (default: the TTL), as the sync lock does."""
        return self._drive(self._extend_steps(ttl_ms))  # type: ignore[attr-defined]

    def _drive(self, steps: Steps[T], *, finish: bool = False) -> Coroutine[Any, Any, T]:
        caller = _task()
        if not finish:
            return self._go(steps, caller)
        first = self._step(steps, caller, None, None)  # a release checks its owner now
        return _finish(self._go(steps, caller, first))

    def _step(self, steps: Steps[T], caller: object, reply: Any, error: Any) -> Any:
        self._calling = caller  # the owner checks see the caller, not a wrapper task
        try:
            return steps.send(reply) if error is None else steps.throw(error)
        finally:
            self._calling = None

    async def _go(self, steps: Steps[T], caller: object = None, effect: Any = None) -> T:
        """Run ``steps`` for ``caller`` (from ``effect``, if given), Calls too; a cancellation
        is thrown in, and the clean-up it starts runs in the background.
        """
        reply: Any = None
        error: BaseException | None = None
        while True:
            if effect is None:
                try:
                    effect = self._step(steps, caller, reply, error)
                except StopIteration as done:
                    return done.value  # type: ignore[no-any-return]
            try:
                reply, error = await self._perform(effect), None
            except asyncio.CancelledError as cancelled:
                effect = self._step(steps, caller, None, cancelled)
                task = asyncio.ensure_future(_quietly(self._go(steps, caller, effect)))
                _BACKGROUND[task] = self
                task.add_done_callback(_BACKGROUND.pop)
                raise cancelled from None
            except BaseException as raised:
                reply, error = None, raised
            effect = None

    def _perform(self, effect: Any) -> Awaitable[Any]:
        if isinstance(effect, core.Sleep):
            return asyncio.sleep(effect.seconds)
        if isinstance(effect, core.Wait):
            return self._wait(effect)
        return effect() if callable(effect) else self._send(effect)  # a function: Calls

    async def _wait(self, effect: core.Wait) -> Any:
        """:meth:`lockguide.Lock._wait`, awaited: ``BLPOP`` on the wake-up list, else sleep."""
        until = time.monotonic() + effect.seconds
        room = waiting_room(self._client)  # type: ignore[attr-defined]
        if room.enter():
            try:
                return await self._send(effect.blpop(self._request_s))  # type: ignore[attr-defined]
            except (rx.RedisError, OSError) as error:
                if not effect.slept_out(error):
                    raise
            finally:
                room.leave()
        await asyncio.sleep(max(0.0, until - time.monotonic()))
        return None

    async def aclose(self) -> None:
        """Finish this lock's clean-ups (a cancelled acquire's delete), then close its pools."""
        while mine := [task for task, lock in _BACKGROUND.items() if lock is self]:
            await asyncio.wait(mine)
        for pool in self._pools:
            await pool.disconnect(inuse_connections=False)

    async def __aenter__(self) -> Self:
        await self._go(self._enter_calls(), _task())
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        """Release if this task still owns it (not if handed over); the body's exception wins."""
        await self._go(self._exit_calls(exc_info[1]), _task())


class Lock(AsyncLease, core.ServerSteps):
    """:class:`lockguide.Lock` on ``redis.asyncio`` (``client``: a ``redis.asyncio.Redis`` or
    ``RedisCluster``); same arguments, errors and rules, except ``owner`` (``"task"`` or
    ``"process"``); the methods that talk to Redis return coroutines.
    """

    _redis, _cluster_type = redis.asyncio, RedisCluster

    def __init__(
        self,
        client: redis.asyncio.Redis | RedisCluster,
        key: str,
        *,
        ttl_ms: int,
        **options: Unpack[LockOptions],
    ) -> None:
        self._init_server(client, key, ttl_ms, options)

    async def _send(self, effect: core.Send) -> Any:
        where = await self._where(effect)
        try:  # connecting included
            async with asyncio.timeout(effect.timeout_s):
                return effect.reply(await _talk(where, effect.commands))
        except TimeoutError:
            raise rx.TimeoutError(f"no reply within {effect.timeout_s * 1000:.0f} ms") from None

    async def _where(self, effect: core.Send) -> Any:
        if self._pools:
            return self._pools[0]
        cluster: Any = self._client
        try:
            async with asyncio.timeout(effect.timeout_s):
                await cluster.initialize()
                if effect.refresh:  # after MOVED: one read re-learns the slot map
                    with contextlib.suppress(rx.RedisError):
                        await cluster.exists(self._key)
        except TimeoutError:
            raise rx.TimeoutError("the cluster's slot map could not be read in time") from None
        named = None if effect.node is None else cluster.get_node(*effect.node)
        return named or cluster.get_node_from_key(self._key)


class FencedLock(fencing.Fenced, Lock):
    """The :class:`lockguide.FencedLock` on ``redis.asyncio``: Lock's arguments, ``counter_key``."""

    def __init__(
        self,
        client: redis.asyncio.Redis | RedisCluster,
        key: str,
        *,
        ttl_ms: int,
        counter_key: str | None = None,
        **options: Unpack[LockOptions],
    ) -> None:
        self._init_server(client, key, ttl_ms, options)
        self._init_fence(counter_key)


class FencedStore(fencing.Store):
    """:class:`lockguide.FencedStore` on ``redis.asyncio``: writes only with a newer token."""

    _redis, _lock_type = redis.asyncio, FencedLock

    def __init__(
        self, client: redis.asyncio.Redis, key: str, *, lock: FencedLock | None = None
    ) -> None:
        self._init_store(client, key, lock)

    async def try_write(self, token: int, value: str) -> WriteResult:
        """Store ``value`` if ``token`` beats every token accepted so far; see ``accepted``."""
        token, value = fencing._check_write(token, value)
        return self._result(token, await self._write(keys=[self._key], args=[token, value]))

    async def write(self, token: int, value: str) -> WriteResult:
        """Like :meth:`try_write`, but a refusal raises ``StaleToken`` (nothing written)."""
        return fencing._raise_if_refused(self._key, await self.try_write(token, value))

    async def read(self) -> Stored:
        """The current value and the highest token accepted."""
        return self._stored(await self._client.hmget(self._key, ["value", "token"]))


class Redlock(RedlockSteps, AsyncLease):
    """:class:`lockguide.Redlock` on ``redis.asyncio`` (``masters``: ``redis.asyncio.Redis``
    clients); same arguments, checks and errors, except ``owner`` (``"task"`` or ``"process"``).
    """

    _redis, _cluster_type = redis.asyncio, RedisCluster

    def __init__(
        self,
        masters: Collection[redis.asyncio.Redis],
        key: str,
        *,
        ttl_ms: int,
        **options: Unpack[RedlockOptions],
    ) -> None:
        self._init_redlock(masters, key, ttl_ms, options)

    async def _send(self, effect: Any) -> list[Any]:
        """Every master's reply (or error), each awaited at most the node timeout."""

        async def one(pool: redis.asyncio.ConnectionPool) -> Any:
            try:
                return core.answer(await _talk(pool, effect.commands, fan_out=True))
            except (rx.RedisError, OSError) as error:
                return error

        only = range(len(self._pools)) if effect.only is None else effect.only
        timeout_s = self._timeout_s if effect.timeout_s is None else effect.timeout_s
        tasks = {i: asyncio.ensure_future(one(self._pools[i])) for i in only}
        try:  # one timer for all: every request starts now
            done, _ = await asyncio.wait(tasks.values(), timeout=timeout_s)
        finally:
            for task in tasks.values():
                if task.cancel():  # a late master's: it closes its connection, kept till then
                    _BACKGROUND[task] = self
                    task.add_done_callback(_BACKGROUND.pop)
        late = rx.TimeoutError(f"no reply within {timeout_s * 1000:.0f} ms")
        replies = {i: t.result() if t in done else late for i, t in tasks.items()}
        return [replies.get(i) for i in range(len(self._pools))]


class Watchdog(renewal.Renewer):
    """:class:`lockguide.Watchdog` as an asyncio task: renew a held async :class:`Lock`,
    :class:`FencedLock` or :class:`Redlock` (``async with Watchdog(lock):`` acquires it).

    A lost lease stops the work. Inside ``async with Watchdog(lock):`` the body is
    cancelled when the lease is lost (the key gone or someone else's, Redis silent until
    the lease ran out, the bound or a Redlock's ``max_extensions`` reached), as
    ``asyncio.timeout`` cancels its body, and leaving raises ``RenewalFailed``. Only that
    cancellation becomes ``RenewalFailed``: a cancellation from outside (``task.cancel()``,
    ``wait_for``, an anyio scope), even one arriving at the same moment, still propagates.
    Started with :meth:`start` instead, it cancels nothing: poll :meth:`check` or await
    :attr:`lost_event`. The default bound and ``on_lost`` are :class:`lockguide.Watchdog`'s
    (``on_lost`` is called in the event loop, before the body is cancelled).
    """

    _kinds, _label = (Lock, Redlock), "lockguide.aio Lock, FencedLock or Redlock"
    _event, _repr_prefix = asyncio.Event, "aio."
    _body: asyncio.Task[Any] | None = None  # the task inside `async with`, until it leaves
    _cancelled_body = False  # this watchdog cancelled it
    _body_cancelling = 0  # its cancellation requests when it entered
    _deadline: asyncio.TimerHandle | None = None  # the lease's end on this clock

    def __init__(
        self,
        lock: Lock | Redlock,
        *,
        every_ms: float | None = None,
        max_total_ms: float | None = UNSET,
        on_lost: renewal.OnLost | None = None,
    ) -> None:
        self._init_watchdog(lock, every_ms, max_total_ms, on_lost)

    @property
    def lost_event(self) -> asyncio.Event:
        """Set when the lease is lost; ``await dog.lost_event.wait()`` to be woken by it."""
        return self._lost  # type: ignore[return-value]

    @property
    def running(self) -> bool:
        """Whether the renewal task is still running."""
        return self._runner is not None and not self._runner.done()

    def start(self) -> None:
        """Start renewing the held lock (``NotOwned`` if it is not held)."""
        super().start()
        self._renewed()

    async def stop(self) -> None:
        """Stop renewing, without releasing the lock; an extension in flight finishes first,
        even if the caller is cancelled meanwhile (then the cancellation is raised).
        """
        self._stop.set()
        self._renewed()  # disarms the deadline
        runner, cancelled = self._runner, None
        while runner is not None and runner is not _task() and not runner.done():
            try:
                await asyncio.wait((runner,))
            except asyncio.CancelledError as error:  # once, or anyio's at every await
                cancelled = error
        if cancelled is not None:
            raise cancelled

    async def release(self) -> None:
        """Stop renewing, then release the lock (:meth:`lockguide.Watchdog.release`)."""
        await self._lock._go(self._release_calls())

    async def __aenter__(self) -> Self:
        if not self._lock.held:
            await self._lock.__aenter__()  # acquires, or raises NotAcquired
        self.start()
        body = _task()
        if body is not None:  # no await from here to the body: a loss cancels the body only
            self._body, self._body_cancelling = body, body.cancelling()
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        """Stop renewing and release; the body's own exception always wins, except the
        cancellation this watchdog caused, which leaves as ``RenewalFailed``.
        """
        body, self._body = self._body, None  # from here on, a loss cancels nothing
        exc, ours_alone = exc_info[1], False
        if body is not None and self._cancelled_body:
            ours_alone = body.uncancel() <= self._body_cancelling  # as asyncio.timeout counts
            ours_alone &= isinstance(exc, asyncio.CancelledError)
            if exc is not None and not ours_alone and self._error is not None:
                exc.add_note(f"lockguide: the watchdog had cancelled this body: {self._error}")
        late: asyncio.CancelledError | None = None  # a cancellation while leaving
        try:
            await self.stop()
        except asyncio.CancelledError as error:
            late = error
        if ours_alone and late is None:
            await self._lock._go(self._release_calls())  # raises the RenewalFailed
        await self._lock._go(self._exit_calls(late or exc))  # releases; notes, never replaces
        if late is not None:
            raise late

    def _renewed(self) -> None:
        """(Re)arm the deadline at the lease's end: a renewal still unanswered by then (Redis
        frozen, a request timeout longer than the lease's rest) does not delay the loss.
        """
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None
        if self._error is None and not self._stop.is_set():
            left_s = max(self._lock.validity_remaining_ms() / 1000.0, 0.0)
            self._deadline = asyncio.get_running_loop().call_later(left_s, self._at_deadline)

    def _at_deadline(self) -> None:
        self._deadline = None
        if self._error is not None or self._stop.is_set() or not self._lock.held:
            return  # (not held: released by its holder, not lost)
        if self._lock.validity_remaining_ms() > 0:
            self._renewed()  # renewed meanwhile
        else:
            self._fail(self._ran_out(), self._renewal_error)

    def _stop_the_work(self) -> None:
        self._renewed()  # disarms the deadline (the lease is lost)
        super()._stop_the_work()
        if self._body is not None and not self._cancelled_body:
            self._cancelled_body = self._body.cancel()

    def _spawn(self) -> asyncio.Task[None]:
        return asyncio.ensure_future(self._renew())

    async def _wait(self, seconds: float) -> bool:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stop.wait(), max(seconds, 0.0))
        return bool(self._stop.is_set())

    async def _renew(self) -> None:
        try:
            await self._lock._go(self._loop_calls())  # its lock's driver
        except Exception as error:  # never die silently
            self._fail(f"the watchdog task crashed: {error!r}")


from lockguide.leader import AsyncLeader as Leader  # noqa: E402 - it builds on the above

__all__ += ["Leader"]
