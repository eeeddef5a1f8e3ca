"""The same locks on ``redis.asyncio``: ``Lock``, ``FencedLock``, ``Redlock``, ``Watchdog``.

``FencedStore`` too, so that an asyncio holder's writes are fenced without a
blocking call.

Everything that is not I/O is the synchronous code's, imported, not copied: the
argument checks, the scripts, the lease state and its rules
(:class:`lockguide._base.LeaseState`), the Redlock checks and arithmetic, the
errors. What changes is who a lock belongs to and how a request is waited for.

* **Owner: the task.** A lock object belongs to the asyncio task that acquired
  it; another task's ``release()`` or ``extend()`` raises
  :class:`~lockguide.WrongOwner` (the :class:`Watchdog`'s task is let in).
* **Cancellation is an interruption like** ``Ctrl-C``. The story, in order:
  a task sends ``SET lock:ledger <value> NX PX 30000``; Redis stores it; the
  task is cancelled (``asyncio.timeout``, a client that went away) before the
  reply is read. Nobody holds a lock object for that key, so it would keep
  everybody out for 30 s. So the acquire deletes its own value
  (compare-and-delete, shielded from a second cancellation) and re-raises
  ``CancelledError``.
* **Redlock's requests are in flight at once**: the command is written to every
  master, then every reply is awaited, each for at most the per-node timeout
  after its request; a master that does not answer in time counts as "no", and
  its connection is closed so a late reply can never be read as another's.

Each lock talks to its server through a pool of its own made from the client's
public settings, with every socket operation bounded and redis-py's retries off,
as the synchronous locks do (:func:`lockguide._base.bounded_async_pool`).

Example::

    import redis.asyncio

    from lockguide.aio import Lock

    async def nightly_report() -> None:
        r = redis.asyncio.Redis()
        async with Lock(r, "lock:nightly-report", ttl_ms=30_000, timeout_ms=2_000) as lock:
            await build_report()
            if lock.validity_remaining_ms() < 1_000:
                raise RuntimeError("too little lease left to publish safely")
            await publish_report()
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import Callable, Collection
from types import TracebackType
from typing import Any, Self

import redis.asyncio
from redis import exceptions as rx

from lockguide._base import (
    EXTEND,
    RELEASE,
    UNSET,
    LeaseState,
    LuaScript,
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

__all__ = ["FencedLock", "FencedStore", "Lock", "Redlock", "Watchdog"]


def check_client(client: object, name: str = "client") -> redis.asyncio.Redis:
    """A ``redis.asyncio.Redis`` (or subclass: fakeredis's ``FakeAsyncRedis``)."""
    return check_client_of(redis.asyncio.Redis, "redis.asyncio.Redis", client, name)


async def _shielded(work: Any) -> None:
    """Finish ``work`` (a clean-up) even if this task is cancelled again meanwhile."""
    with contextlib.suppress(Exception):
        await asyncio.shield(work)


class AsyncLease(LeaseState):
    """A :class:`~lockguide._base.LeaseState` owned by an asyncio task, with ``async with``."""

    def _holder(self) -> object:
        """The current asyncio task: a grant belongs to the task that won it."""
        return asyncio.current_task()

    async def release(self) -> object:
        """Release what ``acquire`` took; every lock defines it."""
        raise NotImplementedError

    async def _acquire_for_with(self) -> None:
        """Acquire for ``async with``, or raise the lock's own "not acquired" error."""
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
        """Release if still held. The body's own exception always wins.

        As the synchronous ``with``: a loss already reported is not reported
        again; a failed release becomes a note on the body's exception (a
        ``CancelledError`` too); after a body that succeeded, a lost lease is
        raised here (``LockLost``, ``MajorityLost``).
        """
        if self._value is None:
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
    is a ``redis.asyncio.Redis``, and the methods that talk to Redis are
    coroutines. The lock belongs to the task that acquired it.

    Args:
        client: a ``redis.asyncio.Redis``; the lock uses its address,
            credentials and encoding, on connections of its own.
        key: the Redis key that represents the lock, e.g. ``"lock:ledger"``.
        ttl_ms: the lease, a whole number of milliseconds (at most a week).
        timeout_ms: how long :meth:`acquire` keeps trying by default;
            ``None`` waits as long as it takes.
        retry_delay_ms: the ``(low, high)`` range each pause between attempts
            is drawn from at random.
        request_timeout_ms: how long one request may wait for Redis
            (connecting included); then ``redis.exceptions.TimeoutError``.
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
        client: redis.asyncio.Redis,
        key: str,
        ttl_ms: int,
        *,
        timeout_ms: float | None = None,
        retry_delay_ms: tuple[float, float] = (50.0, 150.0),
        request_timeout_ms: float = DEFAULT_REQUEST_TIMEOUT_MS,
        drift_factor: float = 0.01,
        drift_floor_ms: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._client = check_client(client)
        self._init_lease(
            key, ttl_ms, timeout_ms, retry_delay_ms, drift_factor, drift_floor_ms, clock
        )
        timeout = check_ms(request_timeout_ms, "request_timeout_ms", positive=True)
        self._redis = redis.asyncio.Redis(
            connection_pool=bounded_async_pool(self._client, timeout / 1000)
        )

    async def acquire(self, *, blocking: bool = True, timeout_ms: float | None = UNSET) -> bool:
        """Try to take the lock; ``True`` if this call got it (see :meth:`lockguide.Lock.acquire`).

        Cancelled while a ``SET`` is in flight, it deletes its own value (if
        Redis stored it) before ``CancelledError`` goes on.
        """
        wait_ms = self._wait_ms(blocking, timeout_ms)
        give_up_at = None if wait_ms is None else self._clock() + wait_ms / 1000.0
        while True:
            value = new_lock_value()
            started = self._clock()
            try:
                granted = await self._grant(value)
                if granted and self._clock() < started + self._usable_ms / 1000.0:
                    self._won(value, started)
                    return True
            except BaseException:
                # A lost reply after Redis stored the key, or a cancellation
                # mid-request: remove our value (if it is there) before going on.
                await self._discard(value)
                raise
            if granted:  # granted, but the reply took the whole lease
                await self._discard(value)
            pause = self._pause_s(random.uniform, give_up_at) if blocking else 0.0
            if pause <= 0:
                return False
            await asyncio.sleep(pause)

    async def release(self) -> None:
        """Release with compare-and-delete; if Redis does not answer, call it again.

        Raises:
            NotOwned: this object does not hold the lock.
            WrongOwner: another task acquired it.
            LockLost: the lease had expired; the key was left untouched.
        """
        value = self._check_owner("release")
        deleted = await RELEASE.run_async(self._redis, (self._key,), (value,))
        self._value = None
        if deleted != 1:
            raise LockLost(self._key, "release")

    async def extend(self, ttl_ms: int | None = None) -> None:
        """Give the held lock a fresh lease of ``ttl_ms`` (default: the original TTL).

        Raises:
            NotOwned: this object does not hold the lock.
            WrongOwner: another task acquired it.
            LockLost: the key was gone or someone else's; the lock is no longer held.
        """
        new_ttl = self._ttl_ms if ttl_ms is None else check_ttl_ms(ttl_ms)
        usable_ms = self._usable_for(new_ttl)
        value = self._check_owner("extend")
        started = self._clock()
        if await EXTEND.run_async(self._redis, (self._key,), (value, new_ttl)) != 1:
            self._value = None
            raise LockLost(self._key, "extend")
        self._deadline = started + usable_ms / 1000.0

    async def locked(self) -> bool:
        """Whether anybody (this object or another client) holds the lock now."""
        return bool(await self._redis.exists(self._key))

    async def owned(self) -> bool:
        """Whether the key holds this object's value now (asks Redis, not the local clock)."""
        if self._value is None:
            return False
        current = await self._redis.get(self._key)
        if isinstance(current, bytes):
            current = current.decode("utf-8", "replace")
        return bool(current == self._value)

    def __repr__(self) -> str:
        state = "held" if self.held else "not held"
        return f"<aio.{type(self).__name__} {self._key!r} ttl_ms={self._ttl_ms} {state}>"

    async def _grant(self, value: str) -> bool:
        """One ``SET key value NX PX ttl``: True if Redis stored it."""
        return bool(await self._redis.set(self._key, value, nx=True, px=self._ttl_ms))

    async def _discard(self, value: str) -> None:
        """Best effort: delete ``value`` if it is the key's (the caller is raising anyway)."""
        await _shielded(RELEASE.run_async(self._redis, (self._key,), (value,)))

    async def _acquire_for_with(self) -> None:
        if not await self.acquire():
            waited = self._timeout_ms if self._timeout_ms is not None else 0.0
            raise NotAcquired(self._key, waited)


class FencedLock(Lock):
    """:class:`lockguide.FencedLock` on ``redis.asyncio``: every acquisition carries a token.

    One script takes the lock and draws the next token (``INCR`` of a counter
    that never expires, in the lock key's hash slot by default). Arguments are
    :class:`Lock`'s, plus ``counter_key``.
    """

    def __init__(
        self,
        client: redis.asyncio.Redis,
        key: str,
        ttl_ms: int,
        *,
        counter_key: str | None = None,
        timeout_ms: float | None = None,
        retry_delay_ms: tuple[float, float] = (50.0, 150.0),
        request_timeout_ms: float = DEFAULT_REQUEST_TIMEOUT_MS,
        drift_factor: float = 0.01,
        drift_floor_ms: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(
            client,
            key,
            ttl_ms,
            timeout_ms=timeout_ms,
            retry_delay_ms=retry_delay_ms,
            request_timeout_ms=request_timeout_ms,
            drift_factor=drift_factor,
            drift_floor_ms=drift_floor_ms,
            clock=clock,
        )
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
        if self._token is None or self._value is None:
            raise NotOwned(self._key, "read the fencing token of")
        return self._token

    def __repr__(self) -> str:
        state = f"held, token {self._token}" if self.held else "not held"
        return f"<aio.FencedLock {self._key!r} ttl_ms={self._ttl_ms} {state}>"

    async def _grant(self, value: str) -> bool:
        """Take the lock and draw its token in one script."""
        keys = (self._key, self._counter_key)
        token = int(await FENCED_ACQUIRE.run_async(self._redis, keys, (value, self._ttl_ms)))
        self._token = token or None
        return token > 0


class FencedStore:
    """:class:`lockguide.FencedStore` on ``redis.asyncio``: writes only with a newer token.

    The same hash and the same script: ``value`` and ``token`` (the highest
    accepted) change only if the write's token is greater, in one atomic step.

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

    The arguments, checks, arithmetic and errors are :class:`lockguide.Redlock`'s;
    ``masters`` are ``redis.asyncio.Redis`` clients. Each try writes
    ``SET key value NX PX ttl`` to every master, then awaits every reply, each
    for at most ``node_timeout_ms`` after its own request.

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
        ttl_ms: int,
        *,
        node_timeout_ms: float = DEFAULT_NODE_TIMEOUT_MS,
        timeout_ms: float | None = None,
        retry_delay_ms: tuple[float, float] = (50.0, 150.0),
        max_extensions: int = 3,
        rng: random.Random | None = None,
        drift_factor: float = 0.01,
        drift_floor_ms: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
        on_attempt: Callable[[Attempt], object] | None = None,
    ) -> None:
        clients, where = check_masters(
            masters, redis.asyncio.Redis, check_client, "redis.asyncio.Redis"
        )
        self._init_lease(
            key, ttl_ms, timeout_ms, retry_delay_ms, drift_factor, drift_floor_ms, clock
        )
        node_timeout = check_redlock_options(
            self, node_timeout_ms, retry_delay_ms, max_extensions, rng, on_attempt
        )
        self._masters, self._where = clients, where
        self._quorum = quorum(len(clients))
        self._node_timeout_ms = node_timeout
        self._pools = [bounded_async_pool(c, node_timeout / 1000.0) for c in clients]
        self._max_extensions = max_extensions
        self._uniform = (rng or random.Random()).uniform
        self._on_attempt = on_attempt
        self._extensions = self._released = 0
        self._last: Attempt | None = None

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
    def extensions_left(self) -> int:
        """How many more times :meth:`extend` may renew the current acquisition."""
        return self._max_extensions - self._extensions

    @property
    def last_attempt(self) -> Attempt | None:
        """The outcome of the most recent try (``None`` before any)."""
        return self._last

    async def acquire(self, *, blocking: bool = True, timeout_ms: float | None = UNSET) -> bool:
        """Try to take the lock on a majority of masters; ``True`` if this call got it.

        Raises:
            MasterError: a master answered an error no retry can fix.
        """
        wait_ms = self._wait_ms(blocking, timeout_ms)
        give_up_at = None if wait_ms is None else self._clock() + wait_ms / 1000.0
        while not await self._try(new_lock_value()):
            pause = self._pause_s(self._uniform, give_up_at) if blocking else 0.0
            if pause <= 0:
                return False
            await asyncio.sleep(pause)
        return True

    async def release(self) -> int:
        """Release with compare-and-delete on every master; how many deleted this holder's key.

        If masters did not answer and could still make up a majority, their
        error is raised and the lock stays held in this object: call again.

        Raises:
            NotOwned: this object does not hold the lock (``WrongOwner``: another task does).
            MajorityLost: fewer than a majority still held this holder's value.
        """
        value = self._check_owner("release")
        replies = await self._run(RELEASE, value)
        self._released += replies.count(1)
        errors = [reply for reply in replies if isinstance(reply, Exception)]
        if errors and self._released < self._quorum <= self._released + len(errors):
            raise errors[0]
        self._value = None
        if self._released < self._quorum:
            raise self._majority_lost("release", self._released)
        return self._released

    async def extend(self, ttl_ms: int | None = None) -> int:
        """Renew the lease to ``ttl_ms`` (default: the TTL) on every master; how many did.

        Raises:
            NotOwned: this object does not hold the lock (or another task does).
            ExtensionLimitReached: extended ``max_extensions`` times already.
            LockLost: the lease ran out before (or while) extending.
            MajorityLost: fewer than a majority of masters still held the value.
        """
        new_ttl = self._ttl_ms if ttl_ms is None else check_ttl_ms(ttl_ms)
        usable_ms = self._usable_for(new_ttl)
        value = self._check_owner("extend")
        if self._extensions >= self._max_extensions:
            raise ExtensionLimitReached(self._key, self._max_extensions)
        started = self._clock()
        extended = 0
        if started < self._deadline:
            extended = (await self._run(EXTEND, value, new_ttl)).count(1)
        if extended >= self._quorum and self._clock() < self._deadline:
            self._deadline = started + usable_ms / 1000.0
            self._extensions += 1
            return extended
        self._value = None
        await self._release_quietly(value)
        if extended < self._quorum and started < self._deadline:
            raise self._majority_lost("extend", extended)
        raise LockLost(self._key, "extend")

    async def locked(self) -> bool:
        """Whether a majority of masters hold the key now, for anyone."""
        return (await self._fan_out(("EXISTS", self._key))).count(1) >= self._quorum

    async def owned(self) -> bool:
        """Whether a majority of masters hold this object's value now."""
        mine = self._value
        if mine is None:
            return False
        replies = await self._fan_out(("GET", self._key))
        return sum(1 for r in replies if r in (mine, mine.encode())) >= self._quorum

    def __repr__(self) -> str:
        state = "held" if self.held else "not held"
        return (
            f"<aio.Redlock {self._key!r} masters={len(self._masters)} "
            f"ttl_ms={self._ttl_ms} {state}>"
        )

    # -- internals ---------------------------------------------------------------------

    async def _try(self, value: str) -> bool:
        """One try at every master; True if it won. A lost try leaves nothing behind."""
        try:
            started = self._clock()
            replies = await self._fan_out(("SET", self._key, value, "NX", "PX", self._ttl_ms))
            elapsed_ms = (self._clock() - started) * 1000.0
            attempt, errors, fatal = tally(replies, elapsed_ms, self._ttl_ms, self._drift)
            self._last = attempt
            if attempt.acquired and fatal is None:
                self._won(value, started)
                self._extensions = self._released = 0
            if self._on_attempt is not None:
                self._on_attempt(attempt)
        except BaseException:  # cancelled, a failing callback: nothing may stay locked
            self._value = None
            await self._release_quietly(value)
            raise
        if self._value == value:
            return True
        await self._release_quietly(value)
        if fatal is not None:
            error = errors[fatal]
            raise MasterError(self._key, fatal, self._where[fatal], error) from error
        return False

    async def _release_quietly(self, value: str) -> None:
        """Delete ``value`` on every master, not only those that said yes (a reply can be lost)."""
        await _shielded(self._run(RELEASE, value))

    async def _run(self, script: LuaScript, value: str, *args: object) -> list[Any]:
        """Run ``script`` on every master at once, loading it where it is missing."""
        replies = await self._fan_out(script.command((self._key,), (value, *args)))
        for i, reply in enumerate(replies):
            if isinstance(reply, rx.NoScriptError):  # first use there, a restart, SCRIPT FLUSH
                try:
                    client = redis.asyncio.Redis(connection_pool=self._pools[i])
                    replies[i] = await script.run_async(client, (self._key,), (value, *args))
                except (rx.RedisError, OSError) as error:
                    replies[i] = error
        return replies

    async def _fan_out(self, command: tuple[Any, ...]) -> list[Any]:
        """Send ``command`` to every master at once; a reply or its exception each.

        One coroutine per master, all started together: each writes its request
        and then awaits the reply, so every request is on the wire before any
        reply is read. Each master gets at most the per-node timeout, connecting
        included. A connection whose reply did not come is closed, so that reply
        can never be read as the answer to another request.
        """
        timeout_s = self._node_timeout_ms / 1000.0

        async def one(pool: redis.asyncio.ConnectionPool) -> Any:
            conn = None
            try:
                async with asyncio.timeout(timeout_s):
                    conn = await pool.get_connection()  # type: ignore[no-untyped-call]
                    await conn.send_command(*command)
                    return await conn.read_response()
            except TimeoutError:
                if conn is not None:
                    await conn.disconnect(nowait=True)
                return rx.TimeoutError(f"no reply within {self._node_timeout_ms:g} ms")
            except (rx.RedisError, OSError) as error:
                return error
            except BaseException:
                if conn is not None:
                    await conn.disconnect(nowait=True)  # a reply may still be on its way
                raise
            finally:
                if conn is not None:
                    await pool.release(conn)

        return list(await asyncio.gather(*(one(pool) for pool in self._pools)))

    async def _acquire_for_with(self) -> None:
        started = self._clock()
        if not await self.acquire():
            last = self._last
            assert last is not None
            raise NoQuorum(
                self._key,
                (self._clock() - started) * 1000.0,
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

    Every ``every_ms`` the task extends the lease by the TTL; it stops when the
    lock is released through it, when a renewal finds the key gone or someone
    else's, or after ``max_renewals``. A failure is never silent: :attr:`lost`,
    :attr:`lost_event`, :meth:`check` and :meth:`release` all report it.

    Args:
        lock: the async :class:`Lock` or :class:`FencedLock` to keep alive;
            ``async with Watchdog(lock):`` acquires it if needed.
        every_ms: time between renewals, below the TTL (default: a third of it).
        max_renewals: the most renewals ever made.

    Example::

        lock = FencedLock(r, "lock:report", ttl_ms=30_000)
        async with Watchdog(lock, max_renewals=20) as dog:
            for part in parts:
                await build(part)
                dog.check()  # raises RenewalFailed once the lease is lost
                await store_write(lock.token, part)  # and the resource still fences
    """

    def __init__(
        self, lock: Lock, *, every_ms: float | None = None, max_renewals: int = 10
    ) -> None:
        if not isinstance(lock, Lock):
            raise BadArgumentType(
                f"lock must be a lockguide.aio Lock or FencedLock, not {type(lock).__name__}"
            )
        self._lock: Lock = lock
        self._every_s, self._max_renewals = check_renewal(lock.ttl_ms, every_ms, max_renewals)
        self._renewals = 0
        self._stop = asyncio.Event()
        self._lost: asyncio.Event = asyncio.Event()
        self._error = None
        self._task: asyncio.Task[None] | None = None
        self._reported = False

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
        self._lock._allow_thread(asyncio.current_task())  # this task may extend the lease
        try:
            await self._loop()
        except Exception as error:  # never die silently
            self._fail(f"the watchdog task crashed: {error!r}")

    async def _stopped_within(self, seconds: float) -> bool:
        """Wait up to ``seconds``; True if :meth:`stop` was called meanwhile."""
        try:
            await asyncio.wait_for(self._stop.wait(), max(seconds, 0.0))
        except TimeoutError:
            return self._stop.is_set()
        return True

    async def _loop(self) -> None:
        wait = self._every_s
        while not await self._stopped_within(wait):
            wait = self._every_s
            if self._renewals >= self._max_renewals:  # flag the loss when the lease ends
                if not await self._stopped_within(self._lock.validity_remaining_ms() / 1000.0):
                    self._fail(
                        f"the watchdog stopped after {self._max_renewals} renewals (its bound) "
                        "and the lease ran out"
                    )
                return
            if self._stop.is_set():
                return
            try:
                await self._lock.extend()
            except LockLost:
                self._fail("the key was gone or held by another owner at renewal")
                return
            except NotOwned:
                return  # released directly by the holder: nothing left to renew
            except rx.RedisError as error:
                left_ms = self._lock.validity_remaining_ms()
                if left_ms <= 0:
                    self._fail(f"Redis did not answer ({error!r}) before the lease ran out")
                    return
                wait = min(self._every_s, left_ms / 4000.0)  # try again sooner
                continue
            self._renewals += 1
