"""What every lock here shares: argument checks, Lua scripts, bounded connections, lease state.

Read :mod:`lockguide.lock` first; this module holds the parts that
:class:`~lockguide.Redlock` and the fenced store need too, written once.

* **Checks** run before anything is sent and raise a typed error that says
  what to write instead.
* **Scripts** live in ``lockguide/scripts/*.lua``, are called by SHA1 with
  ``EVALSHA``, and are loaded on ``NOSCRIPT`` (first use, a restart, ``SCRIPT
  FLUSH``).
* **Connections**: a lock never uses the caller's client directly, because
  redis-py retries a failed command by default. A ``SET NX`` sent again after
  its reply was lost finds the holder's own key and reports the lock taken,
  and a frozen server costs the whole retry schedule. So each lock talks to
  the same server through a pool of its own, made from the client's public
  settings, with every socket operation bounded by the lock's timeout and no
  retries. Nothing here reads a private attribute of redis-py.
* **Lease state**: the key, the TTL, this holder's random value while it holds
  the lock, the deadline on the lock's clock, and who acquired it (a thread
  here; an asyncio task in :mod:`lockguide.aio`, which shares all of it).
"""

from __future__ import annotations

import hashlib
import math
import numbers
import threading
import weakref
from collections.abc import Callable
from importlib import resources
from types import TracebackType
from typing import Any, Self, TypeVar

import redis
import redis.asyncio
from redis.asyncio.retry import Retry as AsyncRetry
from redis.backoff import NoBackoff
from redis.exceptions import NoScriptError
from redis.retry import Retry

from lockguide.errors import AlreadyAcquired, BadArgument, BadArgumentType, NotOwned, WrongOwner
from lockguide.tokens import new_lock_value as new_lock_value  # what lock.py uses

#: The longest lease a lock accepts: one week. A crashed holder keeps everybody
#: out for a whole TTL; work that runs longer renews a shorter lease (Watchdog).
MAX_TTL_MS = 7 * 24 * 3600 * 1000

Clock = Callable[[], float]
C = TypeVar("C")

# -- checks -----------------------------------------------------------------------


def check_client(client: object, name: str = "client") -> redis.Redis:
    """A synchronous ``redis.Redis`` (or subclass: fakeredis, a Sentinel master client)."""
    return check_client_of(redis.Redis, "redis.Redis", client, name)


def check_client_of(kind: type[C], label: str, client: object, name: str = "client") -> C:
    """A client of class ``kind`` (``redis.Redis``, ``redis.asyncio.Redis``), named ``label``."""
    if not isinstance(client, kind):
        raise BadArgumentType(
            f"{name} must be a {label} instance (for example {label}(host=...)), "
            f"not {type(client).__name__}"
        )
    return client


def check_key(key: object, name: str = "key") -> str:
    """A non-empty string."""
    if not isinstance(key, str):
        raise BadArgumentType(f"{name} must be a str, not {type(key).__name__}")
    if not key:
        raise BadArgument(
            f"{name} must not be empty: choose a name for the resource, e.g. 'lock:ledger'"
        )
    return key


def check_ttl_ms(ttl_ms: object, name: str = "ttl_ms") -> int:
    """A whole number of milliseconds from 1 to :data:`MAX_TTL_MS` (``bool`` is refused)."""
    if isinstance(ttl_ms, bool) or not isinstance(ttl_ms, numbers.Integral):
        raise BadArgumentType(
            f"{name} must be a whole number of milliseconds (int), not {ttl_ms!r}; "
            "for 30 seconds write 30_000"
        )
    ttl = int(ttl_ms)
    if ttl <= 0:
        raise BadArgument(
            f"{name} must be > 0 ms, got {ttl}: a lock with no expiry is held forever "
            "by a holder that crashes"
        )
    if ttl > MAX_TTL_MS:
        raise BadArgument(
            f"{name} must be at most {MAX_TTL_MS} ms (one week), got {ttl}: a holder that "
            "crashes keeps everybody out for the whole TTL. For long work, renew a shorter "
            "lease (lockguide.Watchdog)"
        )
    return ttl


def check_ms(value: object, name: str, *, positive: bool = False) -> float:
    """A finite number of milliseconds, ``>= 0`` (``> 0`` when ``positive``)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise BadArgumentType(f"{name} must be a number of milliseconds, not {value!r}")
    ms = float(value)
    if not math.isfinite(ms) or ms < 0 or (positive and ms == 0):
        bound = "> 0" if positive else ">= 0"
        raise BadArgument(f"{name} must be a finite number of milliseconds {bound}, got {value!r}")
    return ms


def check_delay_range(value: object, name: str = "retry_delay_ms") -> tuple[float, float]:
    """A ``(low, high)`` pair of milliseconds with ``0 <= low <= high`` and ``high > 0``."""
    if not isinstance(value, tuple | list) or len(value) != 2:
        raise BadArgumentType(f"{name} must be a (low, high) tuple of milliseconds, not {value!r}")
    low, high = check_ms(value[0], f"{name}[0]"), check_ms(value[1], f"{name}[1]")
    if low > high or high == 0:
        raise BadArgument(
            f"{name} must satisfy 0 <= low <= high and high > 0, got {value!r}: "
            "the retry delay is drawn at random from this range"
        )
    return (low, high)


def check_drift(factor: object, floor_ms: object) -> tuple[float, float]:
    """The clock-drift allowance's two parts: a fraction of the TTL in [0, 1), and ms."""
    if isinstance(factor, bool) or not isinstance(factor, numbers.Real):
        raise BadArgumentType(f"drift_factor must be a number, not {factor!r}")
    if not 0 <= float(factor) < 1:
        raise BadArgument(
            f"drift_factor must be in [0, 1), got {factor!r}: it is the fraction of the TTL "
            "set aside for clocks that run at different rates (0.01 allows 1 %)"
        )
    return float(factor), check_ms(floor_ms, "drift_floor_ms")


def check_clock(clock: object) -> Clock:
    """A function of no arguments returning seconds, like ``time.monotonic``."""
    if not callable(clock):
        raise BadArgumentType(f"clock must be a function like time.monotonic, not {clock!r}")
    return clock


# -- scripts ----------------------------------------------------------------------


class LuaScript:
    """A script from ``lockguide/scripts/``, run atomically by Redis with ``EVALSHA``."""

    def __init__(self, filename: str) -> None:
        self.filename = filename
        self.source = resources.files("lockguide.scripts").joinpath(filename).read_text("utf-8")
        self.sha = hashlib.sha1(self.source.encode("utf-8"), usedforsecurity=False).hexdigest()

    def __call__(self, client: redis.Redis, keys: tuple[str, ...], args: tuple[Any, ...]) -> Any:
        """Run the script on ``client`` (loading it once on ``NOSCRIPT``); its reply."""
        try:
            return client.evalsha(self.sha, len(keys), *keys, *args)
        except NoScriptError:
            client.script_load(self.source)
            return client.evalsha(self.sha, len(keys), *keys, *args)

    async def run_async(
        self, client: redis.asyncio.Redis, keys: tuple[str, ...], args: tuple[Any, ...]
    ) -> Any:
        """:meth:`__call__` on a ``redis.asyncio`` client."""
        try:
            return await client.evalsha(self.sha, len(keys), *keys, *args)
        except NoScriptError:
            await client.script_load(self.source)
            return await client.evalsha(self.sha, len(keys), *keys, *args)

    def command(self, keys: tuple[str, ...], args: tuple[Any, ...]) -> tuple[Any, ...]:
        """The ``EVALSHA`` command's arguments, for sending on a connection."""
        return ("EVALSHA", self.sha, len(keys), *keys, *args)


RELEASE = LuaScript("release.lua")
EXTEND = LuaScript("extend.lua")

# -- connections ------------------------------------------------------------------

_POOLS: weakref.WeakKeyDictionary[Any, dict[float, Any]]
_POOLS = weakref.WeakKeyDictionary()
_POOLS_LOCK = threading.Lock()


def _bounded(pool: Any, timeout_s: float, make: Callable[..., Any], retry: Any) -> Any:
    """The pool ``make(connection_class=..., **settings)`` to ``pool``'s server, made once."""
    with _POOLS_LOCK:
        by_timeout = _POOLS.setdefault(pool, {})
        mine = by_timeout.get(timeout_s)
        if mine is None:
            settings = dict(pool.connection_kwargs)
            settings.update(
                socket_timeout=timeout_s,
                socket_connect_timeout=timeout_s,
                retry=retry,
                retry_on_error=[],
            )
            mine = make(connection_class=pool.connection_class, **settings)
            by_timeout[timeout_s] = mine
        return mine


def bounded_pool(client: redis.Redis, timeout_s: float) -> redis.ConnectionPool:
    """A pool to ``client``'s server whose every socket operation waits at most ``timeout_s``.

    Made from the client pool's public ``connection_class`` and
    ``connection_kwargs`` (address, credentials, TLS, database, protocol,
    encoding), with the connect and read timeouts replaced and retries off.
    Shared by every lock on the same client and timeout, so making a lock per
    acquisition costs no new connections.
    """
    pool: redis.ConnectionPool
    pool = _bounded(client.connection_pool, timeout_s, redis.ConnectionPool, Retry(NoBackoff(), 0))
    return pool


def bounded_async_pool(
    client: redis.asyncio.Redis, timeout_s: float
) -> redis.asyncio.ConnectionPool:
    """:func:`bounded_pool` for a ``redis.asyncio`` client (same settings, asyncio classes)."""
    pool: redis.asyncio.ConnectionPool = _bounded(
        client.connection_pool, timeout_s, redis.asyncio.ConnectionPool, AsyncRetry(NoBackoff(), 0)
    )
    return pool


def bounded_client(client: redis.Redis, timeout_s: float) -> redis.Redis:
    """A client on :func:`bounded_pool`: each command is sent once and waits at most the timeout."""
    return redis.Redis(connection_pool=bounded_pool(client, timeout_s))


# -- lease state ------------------------------------------------------------------

#: ``acquire(timeout_ms=...)``'s default: the constructor's ``timeout_ms``.
UNSET: Any = object()


class LeaseState:
    """The state of one lease, its read-only facts, and the rules every lock here shares.

    No I/O and no ``with``: :class:`Lease` adds those for the threaded locks,
    :mod:`lockguide.aio` for the asyncio ones. A subclass's ``__init__`` calls
    :meth:`_init_lease`; ``_value`` is ``None`` whenever the lock is not held.
    :meth:`_holder` names the caller a lease belongs to (the thread here).
    """

    _key: str
    _ttl_ms: int
    _timeout_ms: float | None
    _retry_delay_ms: tuple[float, float]
    _usable_ms: float
    _drift: tuple[float, float]
    _clock: Clock
    _value: str | None
    _deadline: float
    _owners: set[object]

    def _init_lease(
        self,
        key: object,
        ttl_ms: object,
        timeout_ms: object,
        retry_delay_ms: object,
        drift_factor: object,
        drift_floor_ms: object,
        clock: object,
    ) -> None:
        self._key = check_key(key)
        self._ttl_ms = check_ttl_ms(ttl_ms)
        self._timeout_ms = None if timeout_ms is None else check_ms(timeout_ms, "timeout_ms")
        self._retry_delay_ms = check_delay_range(retry_delay_ms)
        self._drift = check_drift(drift_factor, drift_floor_ms)
        self._usable_ms = self._usable_for(self._ttl_ms)
        self._clock = check_clock(clock)
        self._value = None
        self._deadline = 0.0
        self._owners = set()

    def _usable_for(self, ttl_ms: int) -> float:
        """What a lease of ``ttl_ms`` leaves after the drift allowance (refused if nothing)."""
        factor, floor = self._drift
        usable = ttl_ms - (ttl_ms * factor + floor)
        if usable <= 0:
            raise BadArgument(
                f"ttl_ms={ttl_ms} leaves no validity after the drift allowance "
                f"({ttl_ms * factor + floor:.1f} ms): use a longer TTL"
            )
        return usable

    @property
    def key(self) -> str:
        """The Redis key this lock uses (on a Redlock, the same key on every master)."""
        return self._key

    @property
    def ttl_ms(self) -> int:
        """The lease requested on every acquire, in milliseconds."""
        return self._ttl_ms

    @property
    def value(self) -> str | None:
        """This holder's random value while the lock is held, else ``None``."""
        return self._value

    @property
    def held(self) -> bool:
        """Whether this object acquired the lock and has not released or lost it.

        This is the holder's *belief*: the lease may have expired meanwhile.
        :meth:`validity_remaining_ms` says how much of it the lock's clock still allows.
        """
        return self._value is not None

    def validity_remaining_ms(self) -> float:
        """Milliseconds the holder may still rely on the lock; ``0.0`` when not held.

        The TTL, minus the time since just before the request that won (or last
        extended) the lease, minus the drift allowance, on the lock's clock.
        """
        if self._value is None:
            return 0.0
        return max(0.0, (self._deadline - self._clock()) * 1000.0)

    def _wait_ms(self, blocking: bool, timeout_ms: object) -> float | None:
        """How long this ``acquire`` may keep trying (``None``: no limit); checks first."""
        if self._value is not None:
            raise AlreadyAcquired(self._key)
        if timeout_ms is UNSET:
            return self._timeout_ms if blocking else 0.0
        if not blocking:
            raise BadArgument(
                "acquire(blocking=False) makes exactly one try, so a timeout_ms means "
                "nothing: pass one or the other"
            )
        return None if timeout_ms is None else check_ms(timeout_ms, "timeout_ms")

    def _pause_s(self, draw: Callable[[float, float], float], give_up_at: float | None) -> float:
        """The random pause before the next try, cut to the wait left (0: give up)."""
        pause = draw(*self._retry_delay_ms) / 1000.0
        if give_up_at is None:
            return pause
        return max(0.0, min(pause, give_up_at - self._clock()))

    def _holder(self) -> object:
        """Who is calling: the one a grant belongs to (the current thread's ident)."""
        return threading.get_ident()

    def _won(self, value: str, started: float) -> None:
        """Record a grant: the value, the deadline, and the caller that may use it."""
        self._value = value
        self._deadline = started + self._usable_ms / 1000.0
        self._owners = {self._holder()}

    def _check_owner(self, action: str) -> str:
        """The held value, if the caller may ``action`` the lock; else a typed error."""
        value = self._value
        if value is None:
            raise NotOwned(self._key, action)
        if self._holder() not in self._owners:
            raise WrongOwner(self._key, action)
        return value

    def _allow_thread(self, ident: object) -> None:
        """Let another thread (or task) extend and release this lease (the watchdog's)."""
        self._owners.add(ident)


def note_failed_release(exc: BaseException, key: str, error: Exception) -> None:
    """Add a failed release to the body's exception, which stays the one raised."""
    exc.add_note(f"lockguide: releasing {key!r} on the way out also failed: {error}")


class Lease(LeaseState):
    """A :class:`LeaseState` owned by a thread, with ``with``: the synchronous locks' base."""

    def release(self) -> object:
        """Release what :meth:`acquire` took; every lock defines it."""
        raise NotImplementedError

    def _acquire_for_with(self) -> None:
        """Acquire for ``with``, or raise the lock's own "not acquired" error."""
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
        if self._value is None:
            return
        if exc is None:
            self.release()
            return
        try:
            self.release()
        except Exception as error:  # the body's exception is the one to report
            note_failed_release(exc, self._key, error)
