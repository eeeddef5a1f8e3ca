"""Control locks for the audit: correct locks in the styles people write them, and broken ones.

Each correct lock must pass every must-have row (a false failure is a bug in the
audit); each broken variant differs from its correct sibling in one rule and
must fail exactly that row. The locks are written here, for the audit's tests,
the way a team would write them: redis-py's public API, a Lua compare-and-delete,
a clock kept wherever the author liked (a class attribute, a closure, an
instance), threads or one loop for the masters.

Every factory is a module-level function, so the audit's holder processes can
import it as ``tests.lab.audit_controls:NAME``.
"""

from __future__ import annotations

import asyncio
import importlib
import itertools
import os
import random
import secrets
import socket
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import redis
import redis.asyncio
from redis.backoff import NoBackoff
from redis.retry import Retry

from lockguide_lab.audit import DEFAULT, NO_EXPIRY, Server, TtlSpec, Unsupported
from lockguide_lab.audit.adapters import LoopThread

RELEASE = """
if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end
return 0
"""
EXTEND = """
if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('pexpire', KEYS[1], ARGV[2]) end
return 0
"""
DEFAULT_TTL_MS = 30_000
#: How long a correct control's acquire with no arguments waits for a held lock.
DEFAULT_WAIT_MS = 500


class NotHeld(Exception):
    """The lock was not ours any more when we released or extended it."""


# -- one instance ---------------------------------------------------------------------------


class SingleLock:
    """A correct single-instance lock; its clock is a class attribute."""

    clock = staticmethod(time.monotonic)
    #: A forked child's release and extend raise instead of reaching Redis.
    check_pid = True

    def __init__(self, client: redis.Redis, key: str, ttl_ms: int) -> None:
        self.client = client
        self.key = key
        self.ttl_ms = ttl_ms
        self.value: str | None = None
        self.pid = os.getpid()

    def new_value(self) -> str:  # random, then who holds it, for a reader of the key
        return f"{secrets.token_hex(20)} {socket.gethostname()}:{os.getpid()}"

    def try_once(self, value: str) -> bool:
        return bool(self.client.set(self.key, value, nx=True, px=self.ttl_ms))

    def acquire(self, wait_ms: float = 0) -> bool:
        give_up = self.clock() + wait_ms / 1000.0
        while True:
            value = self.new_value()
            if self.try_once(value):
                self.value = value
                self.pid = os.getpid()
                return True
            if self.clock() >= give_up:
                return False
            time.sleep(random.uniform(0.02, 0.08))

    def forked(self) -> bool:
        return self.check_pid and os.getpid() != self.pid

    def release(self) -> None:
        value, self.value = self.value, None
        if value is None or self.forked() or not self.client.eval(RELEASE, 1, self.key, value):
            raise NotHeld(self.key)

    def extend(self, ttl_ms: int) -> None:
        if self.value is None or self.forked():
            raise NotHeld(self.key)
        if not self.client.eval(EXTEND, 1, self.key, self.value, ttl_ms):
            raise NotHeld(self.key)


class FencedSingleLock(SingleLock):
    """A correct lock with fencing tokens: a counter key that outlives every hold (it has,
    and needs, no TTL), drawn with ``INCR`` before the ``SET NX PX``."""

    fence: int | None = None

    def try_once(self, value: str) -> bool:
        token = int(self.client.incr(f"{{{self.key}}}:fence"))
        if not self.client.set(self.key, value, nx=True, px=self.ttl_ms):
            return False
        self.fence = token
        return True


_cycle = itertools.cycle([uuid.uuid4().hex for _ in range(3)])
_counter = itertools.count(1)


class RepeatingValueLock(SingleLock):
    """Broken: draws its values from a pool of three, so values repeat (unique row)."""

    def new_value(self) -> str:
        return next(_cycle)


class PredictableValueLock(SingleLock):
    """Broken: ``host:pid:counter`` is unique but anyone can produce it (unpredictable row)."""

    def new_value(self) -> str:
        return f"{socket.gethostname()}:{os.getpid()}:{next(_counter)}"


class AnonymousValueLock(SingleLock):
    """Broken: a random value that does not say who holds the lock (holder row)."""

    def new_value(self) -> str:
        return secrets.token_hex(20)


class TwoCommandReleaseLock(SingleLock):
    """Broken: compares with GET, then deletes with a second command (release row)."""

    def release(self) -> None:
        value, self.value = self.value, None
        if value is None or self.client.get(self.key) != value.encode():
            raise NotHeld(self.key)
        self.client.delete(self.key)


class TwoCommandTtlLock(SingleLock):
    """Broken: ``SET NX`` and then ``PEXPIRE`` in a second command (TTL row)."""

    def try_once(self, value: str) -> bool:
        if not self.client.set(self.key, value, nx=True):
            return False
        self.client.pexpire(self.key, self.ttl_ms)
        return True


class Renewer:
    """Renews a held lock every third of its lease; :attr:`lost` once a renewal fails."""

    def __init__(self, lock: SingleLock, *, silent: bool = False) -> None:
        self.lock = lock
        self.silent = silent
        self.lost = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.lock.ttl_ms / 3000.0):
            try:
                self.lock.extend(self.lock.ttl_ms)
            except (NotHeld, redis.RedisError):
                if not self.silent:  # broken: the silent one forgets to say so
                    self.lost = True
                return

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


class SingleHolder:
    def __init__(self, lock: SingleLock, renew: bool, silent: bool) -> None:
        self.lock = lock
        self.renew = renew
        self.silent = silent
        self.renewer: Renewer | None = None

    def acquire(self, wait_ms: float = 0) -> bool:
        got = self.lock.acquire(wait_ms)
        if got and self.renew:
            self.renewer = Renewer(self.lock, silent=self.silent)
        return got

    def acquire_default(self) -> bool:
        return self.acquire(DEFAULT_WAIT_MS)

    def release(self) -> bool | None:
        renewer, self.renewer = self.renewer, None
        if renewer is not None:
            renewer.stop()
        self.lock.release()
        return None

    def extend(self, ttl_ms: int) -> bool | None:
        self.lock.extend(ttl_ms)
        return None

    def token(self) -> int | None:
        return self.lock.fence if isinstance(self.lock, FencedSingleLock) else None

    def lost(self) -> bool | None:
        if self.renewer is not None:
            return self.renewer.lost
        return None


class SingleAdapter:
    version = "control"
    multi_master = False
    ttl_required = False

    def __init__(
        self,
        servers: Sequence[Server],
        lock_class: type[SingleLock],
        *,
        renews: bool = False,
        silent: bool = False,
        holder_class: type[SingleHolder] | None = None,
    ) -> None:
        self.name = f"control {lock_class.__name__}" + (" (renewing)" if renews else "")
        self.lock_class = lock_class
        self.renews = renews
        self.silent = silent
        self.holder_class = holder_class or SingleHolder
        self.client: redis.Redis = servers[0].connect()

    def holder(self, key: str, ttl_ms: TtlSpec = DEFAULT, *, renew: bool = False) -> SingleHolder:
        if renew and not self.renews:
            raise Unsupported("no automatic renewal")
        if ttl_ms == NO_EXPIRY:
            raise Unsupported("every lock expires")
        ttl = DEFAULT_TTL_MS if ttl_ms == DEFAULT else int(ttl_ms)
        return self.holder_class(self.lock_class(self.client, key, ttl), renew, self.silent)

    def close(self) -> None:
        self.client.close()


def single(servers: Sequence[Server]) -> SingleAdapter:
    return SingleAdapter(servers, SingleLock)


def fenced(servers: Sequence[Server]) -> SingleAdapter:
    return SingleAdapter(servers, FencedSingleLock)


def renewing(servers: Sequence[Server]) -> SingleAdapter:
    return SingleAdapter(servers, SingleLock, renews=True)


def repeating_value(servers: Sequence[Server]) -> SingleAdapter:
    return SingleAdapter(servers, RepeatingValueLock)


def predictable_value(servers: Sequence[Server]) -> SingleAdapter:
    return SingleAdapter(servers, PredictableValueLock)


def anonymous_value(servers: Sequence[Server]) -> SingleAdapter:
    return SingleAdapter(servers, AnonymousValueLock)


def two_command_release(servers: Sequence[Server]) -> SingleAdapter:
    return SingleAdapter(servers, TwoCommandReleaseLock)


def two_command_ttl(servers: Sequence[Server]) -> SingleAdapter:
    return SingleAdapter(servers, TwoCommandTtlLock)


def silent_renewal(servers: Sequence[Server]) -> SingleAdapter:
    return SingleAdapter(servers, SingleLock, renews=True, silent=True)


# -- Redlock ----------------------------------------------------------------------------------

NODE_TIMEOUT_S = 0.5
Clock = Callable[[], float]


class ControlRedlock:
    """A correct Redlock: requests to every master at once, each bounded by a per-node
    timeout; majority; ``validity = ttl - elapsed - (ttl * 1% + 2 ms)``; a failed attempt
    released on every master; a random retry delay. ``now`` is whatever clock the style
    below gives it."""

    parallel = True
    check_validity = True
    allowance = True
    release_partial = True
    raise_on_error = False
    random_retry = True

    def __init__(self, clients: Sequence[redis.Redis], key: str, ttl_ms: int, now: Clock) -> None:
        self.clients = list(clients)
        self.key = key
        self.ttl_ms = ttl_ms
        self.now = now
        self.value: str | None = None
        self.pool = ThreadPoolExecutor(len(self.clients))

    def _set(self, client: redis.Redis, value: str) -> bool | BaseException:
        try:
            return bool(client.set(self.key, value, nx=True, px=self.ttl_ms))
        except (redis.RedisError, OSError) as error:
            return error

    def _unlock(self, client: redis.Redis, value: str) -> bool:
        try:
            return bool(client.eval(RELEASE, 1, self.key, value))
        except (redis.RedisError, OSError):
            return False

    def _each(self, call: Callable[[redis.Redis], Any]) -> list[Any]:
        if self.parallel:
            return list(self.pool.map(call, self.clients))
        return [call(c) for c in self.clients]

    def attempt(self) -> bool:
        value = secrets.token_hex(20)
        started = self.now()
        replies = self._each(lambda c: self._set(c, value))
        elapsed_ms = (self.now() - started) * 1000.0
        granted = sum(1 for r in replies if r is True)
        drift = self.ttl_ms * 0.01 + 2 if self.allowance else 0.0
        validity = self.ttl_ms - elapsed_ms - drift
        if granted >= len(self.clients) // 2 + 1 and (validity > 0 or not self.check_validity):
            errors = [r for r in replies if isinstance(r, BaseException)]
            if errors and self.raise_on_error:  # broken: the keys stay for the whole TTL
                raise errors[0]
            self.value = value
            return True
        if self.release_partial:
            self._each(lambda c: self._unlock(c, value))
        return False

    def acquire(self, wait_ms: float = 0) -> bool:
        give_up = time.monotonic() + wait_ms / 1000.0
        while True:
            if self.attempt():
                return True
            if time.monotonic() >= give_up:
                return False
            time.sleep(random.uniform(0.02, 0.2) if self.random_retry else 0.1)

    def release(self) -> None:
        value, self.value = self.value, None
        if value is None:
            raise NotHeld(self.key)
        if sum(self._each(lambda c: self._unlock(c, value))) < len(self.clients) // 2 + 1:
            raise NotHeld(self.key)

    def extend(self, ttl_ms: int) -> None:
        raise Unsupported("this control does not extend")


class ClassClockRedlock(ControlRedlock):
    """The clock as a class attribute (the audit's warp cannot reach it)."""

    clock = staticmethod(time.monotonic)

    def __init__(self, clients: Sequence[redis.Redis], key: str, ttl_ms: int) -> None:
        super().__init__(clients, key, ttl_ms, lambda: type(self).clock())


def closure_redlock(clients: Sequence[redis.Redis], key: str, ttl_ms: int) -> ControlRedlock:
    """The clock captured in a closure."""
    now = time.perf_counter

    def clock() -> float:
        return now()

    return ControlRedlock(clients, key, ttl_ms, clock)


class InstanceClockRedlock(ControlRedlock):
    """The clock kept on the instance, and one loop instead of threads: every ``SET`` is
    sent before any reply is read."""

    def __init__(self, clients: Sequence[redis.Redis], key: str, ttl_ms: int) -> None:
        self._clock = time.monotonic
        super().__init__(clients, key, ttl_ms, lambda: self._clock())

    def attempt(self) -> bool:
        value = secrets.token_hex(20)
        started = self._clock()
        sent: list[tuple[redis.Redis, Any, bool]] = []
        for client in self.clients:
            conn: Any = client.connection_pool.get_connection()
            try:
                conn.send_command("SET", self.key, value, "NX", "PX", self.ttl_ms)
                sent.append((client, conn, True))
            except (redis.RedisError, OSError):
                conn.disconnect()
                sent.append((client, conn, False))
        granted = 0
        for client, conn, ok in sent:
            if ok:
                try:
                    granted += conn.read_response() is not None
                except (redis.RedisError, OSError):
                    conn.disconnect()
            client.connection_pool.release(conn)
        validity = self.ttl_ms - (self._clock() - started) * 1000.0 - (self.ttl_ms * 0.01 + 2)
        if granted >= len(self.clients) // 2 + 1 and validity > 0:
            self.value = value
            return True
        ControlRedlock._each(self, lambda c: self._unlock(c, value))
        return False


def _variant(name: str, **rules: bool) -> type[ControlRedlock]:
    return type(name, (ClassClockRedlock,), dict(rules))


NoValidityCheck = _variant("NoValidityCheck", check_validity=False)
NoDriftAllowance = _variant("NoDriftAllowance", allowance=False)
KeepsPartial = _variant("KeepsPartial", release_partial=False)
RaisesOnError = _variant("RaisesOnError", raise_on_error=True)
FixedRetry = _variant("FixedRetry", random_retry=False)
Sequential = _variant("Sequential", parallel=False)


class LateReleaseRedlock(ClassClockRedlock):
    """Correct, with a release that returns once a majority answered: master 0's unlock is
    left to go out just before the next attempt of any lock on the same clients. What
    pottery's release (it returns at a majority and leaves the other masters to its
    threads) does now and then on a loaded machine, here every time: the audit then sees
    an earlier holder's release on master 0 before the acquire's ``SET``."""

    def __init__(
        self,
        clients: Sequence[redis.Redis],
        key: str,
        ttl_ms: int,
        late: list[tuple[str, str]],
    ) -> None:
        super().__init__(clients, key, ttl_ms)
        self.late = late

    def attempt(self) -> bool:
        while self.late:
            key, value = self.late.pop()
            self.clients[0].eval(RELEASE, 1, key, value)
        return super().attempt()

    def release(self) -> None:
        value, self.value = self.value, None
        if value is None:
            raise NotHeld(self.key)
        others = list(self.pool.map(lambda c: self._unlock(c, value), self.clients[1:]))
        self.late.append((self.key, value))
        if sum(others) < len(self.clients) // 2 + 1:
            raise NotHeld(self.key)


class WallClockRedlock(ControlRedlock):
    """Broken (a recommendation): times the attempt with ``time.time``."""

    def __init__(self, clients: Sequence[redis.Redis], key: str, ttl_ms: int) -> None:
        super().__init__(clients, key, ttl_ms, lambda: time.time())


class RedlockHolder:
    def __init__(self, lock: ControlRedlock) -> None:
        self.lock = lock

    def acquire(self, wait_ms: float = 0) -> bool:
        return self.lock.acquire(wait_ms)

    def acquire_default(self) -> bool:
        return self.lock.acquire(DEFAULT_WAIT_MS)

    def release(self) -> bool | None:
        self.lock.release()
        return None

    def extend(self, ttl_ms: int) -> bool | None:
        self.lock.extend(ttl_ms)
        return None

    def token(self) -> int | None:
        return None

    def lost(self) -> bool | None:
        return None


MakeRedlock = Callable[[Sequence[redis.Redis], str, int], ControlRedlock]


class RedlockAdapter:
    version = "control"
    multi_master = True
    ttl_required = True

    def __init__(self, servers: Sequence[Server], make: MakeRedlock, name: str) -> None:
        self.name = f"control {name}"
        self.make = make
        # One try per master per attempt, as a Redlock's clients should be made: redis-py's
        # default retries a LOADING reply with backoff (about 4 s on the partial row's error
        # path), beyond any node timeout; the attempt itself is the unit that is retried.
        self.clients = [
            s.connect(
                socket_timeout=NODE_TIMEOUT_S,
                socket_connect_timeout=NODE_TIMEOUT_S,
                retry=Retry(NoBackoff(), 0),
            )
            for s in servers
        ]

    def holder(self, key: str, ttl_ms: TtlSpec = DEFAULT, *, renew: bool = False) -> RedlockHolder:
        if renew:
            raise Unsupported("no automatic renewal")
        if not isinstance(ttl_ms, int):
            raise Unsupported("the TTL is a required argument")
        return RedlockHolder(self.make(self.clients, key, ttl_ms))

    def close(self) -> None:
        for client in self.clients:
            client.close()


def class_clock_redlock(servers: Sequence[Server]) -> RedlockAdapter:
    return RedlockAdapter(servers, ClassClockRedlock, "Redlock, clock in a class attribute")


def closure_clock_redlock(servers: Sequence[Server]) -> RedlockAdapter:
    return RedlockAdapter(servers, closure_redlock, "Redlock, clock in a closure")


def instance_clock_redlock(servers: Sequence[Server]) -> RedlockAdapter:
    return RedlockAdapter(servers, InstanceClockRedlock, "Redlock, clock on the instance")


def no_validity_check(servers: Sequence[Server]) -> RedlockAdapter:
    return RedlockAdapter(servers, NoValidityCheck, "Redlock without a validity check")


def no_drift_allowance(servers: Sequence[Server]) -> RedlockAdapter:
    return RedlockAdapter(servers, NoDriftAllowance, "Redlock without a drift allowance")


def keeps_partial(servers: Sequence[Server]) -> RedlockAdapter:
    return RedlockAdapter(servers, KeepsPartial, "Redlock keeping partial acquisitions")


def raises_on_error(servers: Sequence[Server]) -> RedlockAdapter:
    return RedlockAdapter(servers, RaisesOnError, "Redlock raising on a master's error")


def fixed_retry(servers: Sequence[Server]) -> RedlockAdapter:
    return RedlockAdapter(servers, FixedRetry, "Redlock with a fixed retry delay")


def sequential(servers: Sequence[Server]) -> RedlockAdapter:
    return RedlockAdapter(servers, Sequential, "Redlock asking one master at a time")


def late_release_redlock(servers: Sequence[Server]) -> RedlockAdapter:
    late: list[tuple[str, str]] = []  # shared by every lock of this adapter

    def make(clients: Sequence[redis.Redis], key: str, ttl_ms: int) -> ControlRedlock:
        return LateReleaseRedlock(clients, key, ttl_ms, late)

    return RedlockAdapter(servers, make, "Redlock releasing master 0 at its next attempt")


def wall_clock_redlock(servers: Sequence[Server]) -> RedlockAdapter:
    return RedlockAdapter(servers, WallClockRedlock, "Redlock on the wall clock")


# -- the rows about a hold's edges: the default wait, renewal after release, fork, cancel -------


class WaitsForeverHolder(SingleHolder):
    """Broken: the default acquire has no deadline (wait row)."""

    def acquire_default(self) -> bool:
        return self.lock.acquire(float("inf"))


class LeakyRenewer(Renewer):
    """Broken: renews with its own copy of the value, and nobody stops it at release."""

    def __init__(self, lock: SingleLock, *, silent: bool = False) -> None:
        assert lock.value is not None, "started on a held lock"
        self.value: str = lock.value
        super().__init__(lock, silent=silent)

    def _run(self) -> None:
        while not self._stop.wait(self.lock.ttl_ms / 3000.0):
            if not self.lock.client.eval(EXTEND, 1, self.lock.key, self.value, self.lock.ttl_ms):
                self.lost = True
                return

    def stop(self) -> None:
        pass  # broken: release leaves it running


class LeakyRenewalHolder(SingleHolder):
    def acquire(self, wait_ms: float = 0) -> bool:
        got = self.lock.acquire(wait_ms)
        if got and self.renew:
            self.renewer = LeakyRenewer(self.lock)
        return got


class ForkUnawareLock(SingleLock):
    """Broken: a forked child's release deletes the parent's lock (fork row)."""

    check_pid = False


def waits_forever(servers: Sequence[Server]) -> SingleAdapter:
    return SingleAdapter(servers, SingleLock, holder_class=WaitsForeverHolder)


def renews_after_release(servers: Sequence[Server]) -> SingleAdapter:
    return SingleAdapter(servers, SingleLock, renews=True, holder_class=LeakyRenewalHolder)


def fork_unaware(servers: Sequence[Server]) -> SingleAdapter:
    return SingleAdapter(servers, ForkUnawareLock, renews=True)


class AsyncSingleLock:
    """A correct asyncio lock (redis.asyncio): its release is one script, shielded, so a
    cancellation cannot stop it half-way."""

    def __init__(self, client: redis.asyncio.Redis, key: str, ttl_ms: int) -> None:
        self.client = client
        self.key = key
        self.ttl_ms = ttl_ms
        self.value: str | None = None

    async def acquire(self, wait_ms: float = 0) -> bool:
        give_up = time.monotonic() + wait_ms / 1000.0
        while True:
            value = secrets.token_hex(20)
            if await self.client.set(self.key, value, nx=True, px=self.ttl_ms):
                self.value = value
                return True
            if time.monotonic() >= give_up:
                return False
            await asyncio.sleep(random.uniform(0.02, 0.08))

    async def _release(self, value: str) -> None:
        if not await self.client.eval(RELEASE, 1, self.key, value):
            raise NotHeld(self.key)

    async def release(self) -> None:
        value, self.value = self.value, None
        if value is None:
            raise NotHeld(self.key)
        await asyncio.shield(self._release(value))

    async def extend(self, ttl_ms: int) -> None:
        if self.value is None or not await self.client.eval(
            EXTEND, 1, self.key, self.value, ttl_ms
        ):
            raise NotHeld(self.key)


class UnshieldedAsyncLock(AsyncSingleLock):
    """Broken: keeps a heartbeat task while held and, at release, stops it and waits for it
    before it sends the release script, unshielded (as aioredlock stops its watchdog): a
    cancellation that lands in that wait means the script is never sent (cancel row)."""

    heartbeat: asyncio.Future[None] | None = None

    async def acquire(self, wait_ms: float = 0) -> bool:
        got = await super().acquire(wait_ms)
        if got:
            self.heartbeat = asyncio.ensure_future(asyncio.sleep(3600))
        return got

    async def release(self) -> None:
        value, self.value = self.value, None
        if value is None:
            raise NotHeld(self.key)
        heartbeat, self.heartbeat = self.heartbeat, None
        if heartbeat is not None:
            heartbeat.cancel()
            await asyncio.wait([heartbeat])
        await self._release(value)


class AsyncHolder:
    def __init__(self, adapter: AsyncAdapter, lock: AsyncSingleLock) -> None:
        self.adapter = adapter
        self.lock = lock

    def acquire(self, wait_ms: float = 0) -> bool:
        return self.adapter.loops.run(self.lock.acquire(wait_ms))

    def acquire_default(self) -> bool:
        return self.adapter.loops.run(self.lock.acquire(DEFAULT_WAIT_MS))

    def release(self) -> bool | None:
        self.adapter.loops.run(self.lock.release())
        return None

    def release_async(self) -> Awaitable[None]:
        return self.lock.release()

    def extend(self, ttl_ms: int) -> bool | None:
        self.adapter.loops.run(self.lock.extend(ttl_ms))
        return None

    def token(self) -> int | None:
        return None

    def lost(self) -> bool | None:
        return None


class AsyncAdapter:
    version = "control"
    multi_master = False
    ttl_required = False
    asyncio = True

    def __init__(self, servers: Sequence[Server], lock_class: type[AsyncSingleLock]) -> None:
        address = servers[0].address
        if address is None:
            raise Unsupported("an asyncio client needs a real server's address")
        self.name = f"control {lock_class.__name__}"
        self.lock_class = lock_class
        self.loops = LoopThread()
        self.loop = self.loops.loop
        self.client = redis.asyncio.Redis(host=address[0], port=address[1], socket_timeout=5.0)

    def holder(self, key: str, ttl_ms: TtlSpec = DEFAULT, *, renew: bool = False) -> AsyncHolder:
        if renew:
            raise Unsupported("no automatic renewal")
        if ttl_ms == NO_EXPIRY:
            raise Unsupported("every lock expires")
        ttl = DEFAULT_TTL_MS if ttl_ms == DEFAULT else int(ttl_ms)
        return AsyncHolder(self, self.lock_class(self.client, key, ttl))

    def close(self) -> None:
        self.loops.close(self.client.aclose())


def async_single(servers: Sequence[Server]) -> AsyncAdapter:
    return AsyncAdapter(servers, AsyncSingleLock)


def unshielded_release(servers: Sequence[Server]) -> AsyncAdapter:
    return AsyncAdapter(servers, UnshieldedAsyncLock)


def unimportable(servers: Sequence[Server]) -> SingleAdapter:
    """A lock whose import fails where it runs (as a library would on a Python it does not
    support): the audit reports every row as an error naming what was raised."""
    importlib.import_module("lockguide_lab.audit.no_such_module")
    return SingleAdapter(servers, SingleLock)
