"""The decisions every lock here makes, free of I/O (sans-IO); copy it with ``lock.py``.

Each operation is a generator of steps: it yields effects (:class:`Send`, :class:`Sleep`) and
receives their replies or exceptions. :func:`drive` performs them; ``lockguide.aio`` awaits them.
"""

from __future__ import annotations

import contextlib
import datetime
import difflib
import functools
import hashlib
import itertools
import math
import numbers
import os
import random
import secrets
import socket
import threading
import time
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass
from typing import Any, Literal, TypedDict, TypeVar

from redis import exceptions as rx
from redis.crc import key_slot

#: The longest lease a lock accepts (one week); longer work renews a shorter one.
MAX_TTL_MS = 7 * 24 * 3600 * 1000
#: How long a blocking ``acquire`` waits by default; ``timeout_ms=None`` waits for ever.
DEFAULT_TIMEOUT_MS = 10_000.0
#: How long one request waits for Redis when no ``request_timeout_ms`` is given.
DEFAULT_REQUEST_TIMEOUT_MS = 1_000.0
#: Bytes of randomness in every lock value (the Redis docs suggest 20).
VALUE_BYTES = 20
#: How long the locks' ``WAIT`` waits for replicas by default (``replicas_timeout_ms``).
DEFAULT_REPLICAS_TIMEOUT_MS = 100
#: How late a ``BLPOP`` may time out: Redis ends blocked clients' waits on its clock tick,
#: ``hz`` times a second (10 by default), so a 20 ms wait can last 100 ms.
LATE_S = 0.1
#: The shortest wait on a wake-up worth a ``BLPOP``; a shorter pause is slept.
MIN_LISTEN_S = 0.01

#: What ``from lockguide._core import *`` gives: the errors, as ``lockguide.errors`` shows them.
__all__ = ["AlreadyAcquired", "BadArgument", "BadArgumentType", "ClusterUnavailable"]
__all__ += ["ExtensionLimitReached", "LockError", "LockLost", "MajorityLost", "MasterError"]
__all__ += ["NoQuorum", "NotAcquired", "NotOwned", "NotReplicated", "RenewalFailed"]
__all__ += ["StaleToken"]
__all__ += ["VersionConflict", "WrongOwner"]

Clock = Callable[[], float]
Owner = Literal["thread", "task", "process"]
T = TypeVar("T")


def new_lock_value(holder: str = "") -> str:
    """A fresh lock value: 20 random bytes from the OS CSPRNG, as 40 hex digits; then, if
    given, ``holder`` after a space. The holder's name is for people reading the key (it is
    no secret); the 40 random digits alone make the value impossible to guess."""
    digits = secrets.token_hex(VALUE_BYTES)
    return f"{digits} {holder}" if holder else digits


@dataclass(frozen=True, slots=True)
class Holder:
    """Who holds a lock, read from Redis: ``name`` (``host:pid:thread``, or the task's name
    in ``lockguide.aio``), ``since`` (its wall clock when it acquired) and ``ttl_ms`` (the
    lease Redis has left). A value without a name (another library's) has ``name`` ``""``."""

    name: str
    since: datetime.datetime | None
    ttl_ms: int
    value: str

    @classmethod
    def read(cls, value: Any, ttl_ms: Any) -> Holder | None:
        """The holder a key's ``value`` and ``PTTL`` describe, or ``None`` if nobody holds it."""
        if value is None or int(ttl_ms) == -2:
            return None
        text = value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
        _, _, rest = text.partition(" ")
        stamp, _, name = rest.partition(" ")
        since = None
        if stamp.isdigit():
            since = datetime.datetime.fromtimestamp(int(stamp) / 1000, datetime.UTC)
        return cls(name, since, int(ttl_ms), text)


def holder_name(owner: str) -> str:
    """What a new grant records of its holder: the wall clock in ms, ``host:pid:owner``."""
    return f"{time.time_ns() // 1_000_000} {socket.gethostname()}:{os.getpid()}:{owner}"


@dataclass(frozen=True, slots=True)
class Send:
    """Write ``commands`` in one go; the last one's reply, waited for at most ``timeout_s``.

    ``node``: a Cluster's ``(host, port)`` to send to, after ``refresh`` (re-learn the slots).
    ``acks``: the last command is a ``WAIT``; the reply is the pair (the reply before it, the
    number of replicas that acknowledged).
    """

    commands: tuple[tuple[Any, ...], ...]
    timeout_s: float
    node: tuple[str, int] | None = None
    refresh: bool = False
    acks: bool = False

    def reply(self, replies: list[Any]) -> Any:
        """What the steps receive from the server's ``replies`` (:func:`server_reply`)."""
        reply = server_reply(replies)
        return (replies[-2], int(reply)) if self.acks else reply


@dataclass(frozen=True, slots=True)
class Sleep:
    """Pause ``seconds`` before the next try."""

    seconds: float


@dataclass(frozen=True, slots=True)
class Wait:
    """Pause at most ``seconds`` before the next try: a wake-up pushed to the list ``wake``
    (``BLPOP``) ends it sooner, and is the reply (else ``None``). The driver sleeps instead
    when the connections that may wait are taken (``lockguide.lock.WaitingRoom``), or the ``BLPOP``
    fails."""

    wake: str
    seconds: float

    def blpop(self, request_s: float) -> Send:
        """The ``BLPOP`` to block with, its reply awaited for the pause, a request timeout
        and a late server tick (:data:`LATE_S`)."""
        command = ("BLPOP", self.wake, f"{max(self.seconds, 0.001):.3f}")
        return Send((command,), self.seconds + request_s + LATE_S)

    @staticmethod
    def slept_out(error: BaseException) -> bool:
        """Whether the driver sleeps out the pause after this ``BLPOP`` error (a later try
        may succeed, or a Cluster slot is being migrated) instead of raising it (a missing
        permission: said at once, as a ``SET`` would)."""
        return retryable(error) or slot_moving(error)


Steps = Generator[Any, Any, T]
#: Steps whose effects are functions to call (sync) or to call and await (asyncio).
Calls = Generator[Callable[[], Any], Any, None]


def drive(steps: Steps[T], perform: Callable[[Any], Any]) -> T:
    """Run ``steps`` to its result, performing each effect; what ``perform`` raises is thrown in."""
    reply: Any = None
    error: BaseException | None = None
    while True:
        try:
            effect = steps.send(reply) if error is None else steps.throw(error)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
        try:
            reply, error = perform(effect), None
        except BaseException as raised:  # handed to the steps, which decide
            reply, error = None, raised


def call(function: Callable[[], Any]) -> Any:
    """Perform a yielded function, the synchronous way: ``drive(calls, call)``."""
    return function()


class LuaScript:
    """A Lua script Redis runs atomically, called by SHA1 with ``EVALSHA``."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.sha = hashlib.sha1(source.encode("utf-8"), usedforsecurity=False).hexdigest()

    def command(self, keys: tuple[str, ...], args: tuple[Any, ...]) -> tuple[Any, ...]:
        return ("EVALSHA", self.sha, len(keys), *keys, *args)


# The code of ``scripts/release.lua`` and ``extend.lua``, which the guide shows with comments
# (compare-and-delete, compare-and-pexpire); a test checks the code is the same.
RELEASE = LuaScript("""\
if redis.call("GET", KEYS[1]) ~= ARGV[1] then
    return 0
end
return redis.call("DEL", KEYS[1])
""")

EXTEND = LuaScript("""\
if redis.call("GET", KEYS[1]) ~= ARGV[1] then
    return 0
end
return redis.call("PEXPIRE", KEYS[1], ARGV[2])
""")


# The code of ``scripts/take.lua`` and ``hand_off.lua`` (waiting in line; the guide shows them
# with comments): a waiter takes a free key, or the key a release handed to its value, or keeps
# its place; a release hands the key to the oldest waiter whose place is alive, and wakes it.
TAKE = LuaScript("""\
local held = redis.call("SET", KEYS[1], ARGV[1], "NX", "PX", ARGV[2], "GET")
if not held then
    if KEYS[2] then
        return redis.call("INCR", KEYS[2])
    end
    return 1
end
if held == ARGV[1] then
    redis.call("PEXPIRE", KEYS[1], ARGV[2])
    if KEYS[2] then
        return tonumber(redis.call("GET", ARGV[4] .. "token:" .. ARGV[1]) or "1")
    end
    return 1
end
if ARGV[3] == "0" then
    return 0
end
local place = ARGV[4] .. "waiter:" .. ARGV[1]
local needs = ARGV[2] .. " " .. (KEYS[2] or "")
if not redis.call("SET", place, needs, "PX", ARGV[3], "GET") then
    redis.call("RPUSH", ARGV[4] .. "line", ARGV[1])
end
return 0
""")

HAND_OFF = LuaScript("""\
if ARGV[5] == "1" then
    redis.call("DEL", ARGV[3] .. "waiter:" .. ARGV[1])
end
local note = ARGV[3] .. "released:" .. ARGV[1]
if redis.call("GET", KEYS[1]) ~= ARGV[1] then
    return redis.call("EXISTS", note)
end
redis.call("SET", note, "1", "PX", ARGV[4])
for _ = 1, 16 do
    local waiter = redis.call("LPOP", ARGV[3] .. "line")
    if not waiter then
        break
    end
    local needs = redis.call("GETDEL", ARGV[3] .. "waiter:" .. waiter)
    if needs then
        local lease, counter = string.match(needs, "^(%d+) (.*)$")
        local token = "1"
        if counter ~= "" then
            token = redis.call("INCR", counter)
            redis.call("SET", ARGV[3] .. "token:" .. waiter, token, "PX", ARGV[2])
        end
        local wake = ARGV[3] .. "wake:" .. waiter
        redis.call("RPUSH", wake, token)
        redis.call("PEXPIRE", wake, ARGV[2])
        redis.call("SET", KEYS[1], waiter, "PX", lease)
        return 1
    end
end
return redis.call("DEL", KEYS[1])
""")


def run_script(
    script: LuaScript | None,
    command: tuple[Any, ...],
    timeout_s: float,
    cluster: bool = False,
    then: tuple[Any, ...] | None = None,
) -> Steps[Any]:
    """Send one command (a script's ``EVALSHA`` if ``script``); its reply. ``then``: a
    ``WAIT`` sent right after it, on the same connection; the reply is then a pair
    (:class:`Send`'s ``acks``).

    ``NOSCRIPT`` loads the script and runs it again; on a Cluster ``MOVED`` re-learns the
    slots and ``ASK`` sends ``ASKING`` to the importing node. Each at most once.
    """
    node: tuple[str, int] | None = None
    load = asking = refresh = False
    tried: set[str] = set()
    while True:
        commands = ((("SCRIPT", "LOAD", script.source),) if load and script else ()) + (
            (("ASKING",),) if asking else ()
        )
        after = () if then is None else (then,)
        try:
            return (yield Send((*commands, command, *after), timeout_s, node, refresh, bool(after)))
        except rx.NoScriptError:
            if script is None or "load" in tried:
                raise
            tried.add("load")
            load = True
        except (rx.MovedError, rx.AskError) as redirect:  # AskError is a ResponseError
            kind = "moved" if isinstance(redirect, rx.MovedError) else "ask"  # a kind of ASK
            if not cluster or kind in tried:
                raise
            tried.add(kind)
            node, asking, refresh = (redirect.host, redirect.port), kind == "ask", kind == "moved"


def answer(replies: list[Any]) -> Any:
    """The one rule for what a server answered to commands sent together (a ``SCRIPT LOAD``
    or ``ASKING`` before the command): its first error reply, since the command after a
    failed one did not run as meant; else the last reply."""
    return next((reply for reply in replies if isinstance(reply, rx.ResponseError)), replies[-1])


def server_reply(replies: list[Any]) -> Any:
    """One server's answer to a :class:`Send` (:func:`answer`), an error reply raised."""
    reply = answer(replies)
    if isinstance(reply, rx.ResponseError):
        raise reply
    return reply


#: Error replies a later try may not get, by the message's first word.
RETRYABLE_REPLIES = frozenset(
    ("OOM", "BUSY", "NOREPLICAS", "LOADING", "TRYAGAIN", "MASTERDOWN", "READONLY", "CLUSTERDOWN")
)
_RETRYABLE_TYPES = (
    rx.TimeoutError,
    rx.ConnectionError,
    rx.OutOfMemoryError,
    rx.BusyLoadingError,
    rx.ReadOnlyError,
    rx.TryAgainError,
    rx.MasterDownError,
    rx.ClusterDownError,
)


def retryable(error: BaseException) -> bool:
    """Whether a later try may succeed; never for credentials, permissions, unknown commands."""
    if isinstance(error, NotReplicated):  # a replica behind may catch up
        return True
    if isinstance(error, rx.AuthenticationError | rx.AuthorizationError | rx.NoPermissionError):
        return False
    if isinstance(error, _RETRYABLE_TYPES):
        return True
    return isinstance(error, rx.ResponseError) and str(error).split(" ", 1)[0] in RETRYABLE_REPLIES


def slot_moving(error: BaseException) -> bool:
    """Whether a Redis Cluster slot being migrated refused a command of the line: not all
    its keys on this node (``TRYAGAIN``), a redirection, or a script reaching a key that is
    elsewhere now. The plain command on the lock key alone follows the migration."""
    if isinstance(error, rx.TryAgainError | rx.AskError | rx.MovedError):
        return True
    return isinstance(error, rx.ResponseError) and "non local key" in str(error)


def check_client_of(kind: type[T], label: str, client: object, name: str = "client") -> T:
    """A client of class ``kind`` (``redis.Redis``, ``redis.asyncio.Redis``), named ``label``."""
    if not isinstance(client, kind):
        raise BadArgumentType(
            f"{name} must be a {label} instance (for example {label}(host=...)), "
            f"not {type(client).__name__}"
        )
    return client


def check_client(flavour: Any, client: object, name: str = "client") -> Any:
    """A ``flavour.Redis`` (``redis`` or ``redis.asyncio``, looked up at each call)."""
    return check_client_of(flavour.Redis, f"{flavour.__name__}.Redis", client, name)


def check_key(key: object, name: str = "key") -> str:
    """A non-empty string."""
    if not isinstance(key, str):
        raise BadArgumentType(f"{name} must be a str, not {type(key).__name__}")
    if not key:
        raise BadArgument(
            f"{name} must not be empty: choose a name for the resource, e.g. 'lock:ledger'"
        )
    return key


def _number(value: object, name: str, what: str, kind: Any = numbers.Real, tail: str = "") -> Any:
    """``value`` if it is a ``kind`` and not a ``bool``; else ``{name} must be {what}``."""
    if type(value) is int or (type(value) is float and kind is numbers.Real):
        return value  # the common case, without the abstract classes' slower check
    if isinstance(value, bool) or not isinstance(value, kind):
        raise BadArgumentType(f"{name} must be {what}, not {value!r}{tail}")
    return value


def check_ttl_ms(ttl_ms: object, name: str = "ttl_ms") -> int:
    """A whole number of milliseconds from 1 to :data:`MAX_TTL_MS`."""
    what, example = "a whole number of milliseconds (int)", "; for 30 seconds write 30_000"
    ttl = int(_number(ttl_ms, name, what, numbers.Integral, example))
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
    ms = float(_number(value, name, "a number of milliseconds"))
    if not math.isfinite(ms) or ms < 0 or (positive and ms == 0):
        bound = "> 0" if positive else ">= 0"
        raise BadArgument(f"{name} must be a finite number of milliseconds {bound}, got {value!r}")
    return ms


def check_count(value: object, name: str, least: int = 0, hint: str = "", why: str = "") -> int:
    """An ``int`` of at least ``least``; ``hint`` and ``why`` go in the errors."""
    count: int = _number(value, name, f"an int{hint}", int)
    if count < least:
        raise BadArgument(f"{name} must be >= {least}, got {count}" + (f": {why}" if why else ""))
    return count


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
    """The drift allowance's two parts: a fraction of the TTL in [0, 1), and ms."""
    fraction = float(_number(factor, "drift_factor", "a number"))
    if not 0 <= fraction < 1:
        raise BadArgument(
            f"drift_factor must be in [0, 1), got {factor!r}: it is the fraction of the TTL "
            "set aside for clocks that run at different rates (0.01 allows 1 %)"
        )
    return fraction, check_ms(floor_ms, "drift_floor_ms")


def beside(key: str, suffix: str) -> str:
    """A key for ``suffix`` in the same Redis Cluster hash slot as ``key`` (its *hash tag*).

    A key with a hash tag keeps it (``"{ledger}:lock"`` -> ``"{ledger}:lock:fence"``); any
    other becomes the tag (``"lock:ledger"`` -> ``"{lock:ledger}:fence"``), unless it holds a
    ``}`` (``"a{}b"``), which no tag can contain: then a tag of the same slot is used.
    """
    opening = key.find("{")
    closing = key.find("}", opening + 1) if opening >= 0 else -1
    if opening >= 0 and closing > opening + 1:
        return f"{key}:{suffix}"
    if "}" not in key:
        return "{" + key + "}:" + suffix
    return "{" + _tag_for_slot(key_slot(key.encode("utf-8"))) + "}:" + f"{key}:{suffix}"


@functools.lru_cache(maxsize=256)
def _tag_for_slot(slot: int) -> str:
    """The first ``fence:<n>`` that hashes to ``slot``."""
    return next(f"fence:{n}" for n in itertools.count() if key_slot(f"fence:{n}".encode()) == slot)


#: ``acquire(timeout_ms=...)``'s default: the constructor's ``timeout_ms``.
UNSET: Any = object()


class LeaseOptions(TypedDict, total=False):
    """The options every lock on Redis takes after ``ttl_ms``, declared once here: each
    constructor takes them as ``**options`` (typed with ``Unpack``), their defaults are
    :data:`LEASE_DEFAULTS` and :meth:`LeaseState._init_lease` checks them. What each one
    means is in :class:`~lockguide.Lock`'s docstring."""

    timeout_ms: float | None
    retry_delay_ms: tuple[float, float]
    drift_factor: float
    drift_floor_ms: float
    clock: Clock
    owner: Owner


class LockOptions(LeaseOptions, total=False):
    """:class:`LeaseOptions`, and the options of a lock on one server (``Lock``, ``FencedLock``)."""

    request_timeout_ms: float
    replicas: int
    replicas_timeout_ms: int


#: The defaults of :class:`LeaseOptions` (``owner``: the lock's first owner kind).
LEASE_DEFAULTS: dict[str, object] = {
    "owner": UNSET,
    "timeout_ms": DEFAULT_TIMEOUT_MS,
    "retry_delay_ms": (50.0, 150.0),
    "drift_factor": 0.01,
    "drift_floor_ms": 2.0,
    "clock": time.monotonic,
}
#: The defaults of :class:`LockOptions`.
LOCK_DEFAULTS: dict[str, object] = {
    **LEASE_DEFAULTS,
    "request_timeout_ms": DEFAULT_REQUEST_TIMEOUT_MS,
    "replicas": 0,
    "replicas_timeout_ms": DEFAULT_REPLICAS_TIMEOUT_MS,
}


def with_defaults(
    kind: str, given: Mapping[str, object], defaults: Mapping[str, object]
) -> dict[str, object]:
    """``given`` over ``defaults``; a name that is no option of ``kind`` is a typed error
    (the signature's ``**options`` would otherwise take any name in silence)."""
    unknown = sorted(set(given) - set(defaults))
    if unknown:
        near = difflib.get_close_matches(unknown[0], [*defaults, "ttl_ms"], n=1)
        hint = f" (did you mean {near[0]!r}?)" if near else ""
        raise BadArgumentType(
            f"{kind} has no option {unknown[0]!r}{hint}; its options are ttl_ms, "
            + ", ".join(sorted(defaults))
        )
    return {**defaults, **given}


class LeaseState:
    """The state of one lease and the rules every lock here shares; no I/O.

    ``_value`` is ``None`` unless held. A grant belongs to :meth:`_holder`: the current
    ``threading.Thread`` (never its reusable ident), an ``asyncio.Task`` in ``lockguide.aio``,
    or, with ``owner="process"``, the acquiring process.
    """

    _clock: Clock
    _value: str | None
    _owner: Owner
    _owners: list[object]
    _last_error: BaseException | None
    _owner_kinds: tuple[str, ...] = ("thread", "process")
    _acquire_steps: Callable[[bool, object], Steps[bool]]  # the steps each lock defines
    _locked_steps: Callable[[], Steps[bool]]
    _owned_steps: Callable[[], Steps[bool]]
    _holder_steps: Callable[[], Steps[Holder | None]]
    acquire: Callable[..., Any]
    release: Callable[[], object]

    def _init_lease(self, key: object, ttl_ms: object, options: Mapping[str, object]) -> None:
        """Check ``key``, ``ttl_ms`` and :class:`LeaseOptions` (with their defaults)."""
        given = with_defaults(type(self).__name__, options, LEASE_DEFAULTS)
        self._key = check_key(key)
        self._ttl_ms = check_ttl_ms(ttl_ms)
        timeout_ms = given["timeout_ms"]
        self._timeout_ms = None if timeout_ms is None else check_ms(timeout_ms, "timeout_ms")
        self._retry_delay_ms = check_delay_range(given["retry_delay_ms"])
        self._drift = check_drift(given["drift_factor"], given["drift_floor_ms"])
        self._usable_ms = self._usable_for(self._ttl_ms)
        clock, owner = given["clock"], given["owner"]
        owner = self._owner_kinds[0] if owner is UNSET else owner
        if not callable(clock):
            raise BadArgumentType(f"clock must be a function like time.monotonic, not {clock!r}")
        self._clock = clock
        if owner not in self._owner_kinds:
            raise BadArgument(f"owner must be one of {self._owner_kinds}, got {owner!r}")
        self._owner = owner  # type: ignore[assignment]
        self._value, self._deadline, self._pid, self._owners = None, 0.0, 0, []
        self._last_error = None

    def _usable_for(self, ttl_ms: int) -> float:
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
        return self._value if self.held else None

    @property
    def held(self) -> bool:
        """Whether this object holds the lock, in this process (it may have expired meanwhile)."""
        return self._value is not None and self._pid == os.getpid()

    @property
    def last_error(self) -> BaseException | None:
        """The last transient error the most recent ``acquire`` retried past, if any."""
        return self._last_error

    def validity_remaining_ms(self) -> float:
        """Milliseconds the holder may still rely on it (TTL - elapsed - drift); 0 if not held."""
        if not self.held:
            return 0.0
        return max(0.0, (self._deadline - self._clock()) * 1000.0)

    def hand_over(self, to: object) -> None:
        """Make ``to`` (a ``threading.Thread`` or ``asyncio.Task``) the owner: it alone may
        release or extend it, with the watchdogs renewing it; leaving ``with`` leaves it held."""
        self._check_owner("hand over")
        self._owners = [to, *self._owners[1:]]  # [the owner, then the watchdogs let in]

    def _holder(self) -> object:
        return threading.current_thread()

    def _new_value(self) -> str:
        """A value for the next try, naming who asks (:class:`Holder`)."""
        return new_lock_value(holder_name(self._holder_label()))

    def _holder_label(self) -> str:
        return threading.current_thread().name

    def _give_up_at(self, blocking: bool, timeout_ms: object) -> float | None:
        if self.held:
            raise AlreadyAcquired(self._key)
        if timeout_ms is UNSET:
            wait = self._timeout_ms if blocking else 0.0
        elif not blocking:
            raise BadArgument(
                "acquire(blocking=False) makes exactly one try, so a timeout_ms means "
                "nothing: pass one or the other"
            )
        else:
            wait = None if timeout_ms is None else check_ms(timeout_ms, "timeout_ms")
        self._last_error = None
        return None if wait is None else self._clock() + wait / 1000.0

    def _budget_s(self, request_s: float, give_up_at: float | None, first: bool) -> float:
        """The most the next request may wait: its own timeout, capped to the time left."""
        if give_up_at is None:
            return request_s
        left = give_up_at - self._clock()
        return request_s if first and left <= 0 else max(0.0, min(request_s, left))

    def _pause_s(self, draw: Callable[[float, float], float], give_up_at: float | None) -> float:
        """The random pause before the next try, cut to the wait left (0: give up)."""
        pause = draw(*self._retry_delay_ms) / 1000.0
        if give_up_at is None:
            return pause
        return max(0.0, min(pause, give_up_at - self._clock()))

    def _usable_until(self, started: float) -> float:
        """When a lease granted by a request sent at ``started`` stops being usable."""
        return started + self._usable_ms / 1000.0

    def _won(self, value: str, started: float) -> None:
        self._value, self._pid = value, os.getpid()
        self._deadline = self._usable_until(started)
        self._owners = [] if self._owner == "process" else [self._holder()]

    def _check_owner(self, action: str) -> str:
        value = self._value
        if value is None or self._pid != os.getpid():
            raise NotOwned(self._key, action)
        if self._owners and not any(o is self._holder() for o in self._owners):
            raise WrongOwner(self._key, action)
        return value

    def _allow(self, owner: object) -> None:
        """Let another thread (or task) extend and release this lease (the watchdog's)."""
        if self._owners:
            self._owners.append(owner)

    def _in_lease(self, at: float) -> bool:
        """The one rule for extending, every lock alike: an extension is sent only before the
        lease runs out on this process's clock, and counts only if answered before then.
        Later, the lease may have lapsed and another holder come and gone: the lock is
        released and the caller told (``LockLost``), not renewed as if nothing happened."""
        return at < self._deadline

    def _forget(self, value: str) -> None:
        if self._value == value:
            self._value = None

    _repr_prefix = ""  # "aio." in lockguide.aio
    _timed_with = False  # whether `with` reads the clock before acquiring

    def _describe(self, name: str, fields: str = "") -> str:
        state = "held" if self.held else "not held"
        where = f"{self._key!r} {fields}ttl_ms={self._ttl_ms}"
        return f"<{self._repr_prefix}{name} {where} {state}>"

    def _enter_calls(self) -> Calls:
        started = self._clock() if self._timed_with else 0.0
        if not (yield self.acquire):
            raise self._not_acquired(started) from self._last_error

    def _exit_calls(self, exc: BaseException | None) -> Calls:
        """Leaving ``with``: release if still held; the body's own exception wins."""
        owners = self._owners
        if not self.held or (owners and not any(o is self._holder() for o in owners)):
            return  # nor a lock the block handed over: its new owner releases it
        try:
            yield self.release
        except Exception as error:
            if exc is None:
                raise
            note_failed_release(exc, self._key, error)

    def _not_acquired(self, started: float) -> NotAcquired:
        waited = self._timeout_ms if self._timeout_ms is not None else 0.0
        error = NotAcquired(self._key, waited)
        error.__cause__ = self._last_error
        return error


class ServerSteps(LeaseState):
    """The steps of a lock on one Redis server (a Sentinel master, a Cluster's slot).

    Waiting in line (on a Cluster too: see :meth:`_grant`). A blocking acquire's tries run
    ``scripts/take.lua``: ``SET NX`` and, when refused, a place in line (a list, oldest
    first; each place a key with a lease of its own, renewed by every try, so a crashed
    waiter drops out). Between tries the waiter blocks on its wake-up list (``BLPOP``) for
    at most the longest retry pause (the line orders the tries, not chance). A release
    (``scripts/hand_off.lua``) hands the key to the oldest waiter whose place is alive, with
    that waiter's lease, and pushes its wake-up: the wake-up is the grant, with no request
    after it. The releaser, trying again at once, finds the key taken and queues behind.
    A lost wake-up costs one pause (the next try finds the key holding the waiter's value);
    a line lost in a failover leaves random retry; the key is still held by one value at a
    time, so the line can never grant it twice. A waiter that dies while its place is alive
    may be handed the key: it then expires with the lease, as a dead holder's does.
    """

    _redis: Any  # the client flavour: the module redis or redis.asyncio
    _cluster_type: type[Any]
    _request_s: float
    _pools: list[Any]
    _cluster: bool = False
    _uniform: Callable[[float, float], float]
    _pool: Callable[[Any, float], Any]  # the driver's: the locks' pool to a client's server
    _replicas, _replicas_ms = 0, DEFAULT_REPLICAS_TIMEOUT_MS

    def _init_server(
        self, client: Any, key: object, ttl_ms: object, options: Mapping[str, object]
    ) -> None:
        """Check the client and :class:`LockOptions`, before anything is sent."""
        self._cluster = isinstance(client, self._cluster_type)
        self._client = client if self._cluster else check_client(self._redis, client)
        given = with_defaults(type(self).__name__, options, LOCK_DEFAULTS)
        request_timeout_ms = given.pop("request_timeout_ms")
        replicas = given.pop("replicas"), given.pop("replicas_timeout_ms")
        self._init_lease(key, ttl_ms, given)
        self._request_s = check_ms(request_timeout_ms, "request_timeout_ms", positive=True) / 1000.0
        self._init_replicas(*replicas)
        self._uniform = random.uniform
        self._pools = [] if self._cluster else [self._pool(client, self._request_s)]
        self._init_line()

    def _init_replicas(self, replicas: object, timeout_ms: object) -> None:
        """How many replicas must acknowledge each grant and extension (``WAIT``), and for
        how long the server may wait for them: at least 1 ms (``WAIT 0`` waits for ever),
        less than the request timeout (the reply must still arrive) and than the lease."""
        self._replicas = check_count(replicas, "replicas", 0, " (a number of replicas)")
        why = "WAIT with a timeout of 0 would wait for ever"
        self._replicas_ms = check_count(timeout_ms, "replicas_timeout_ms", 1, " of ms", why)
        request_ms = self._request_s * 1000
        if self._replicas and not self._replicas_ms < min(request_ms, self._usable_ms):
            raise BadArgument(
                f"replicas_timeout_ms={self._replicas_ms} must be below request_timeout_ms "
                f"({request_ms:g}) and the lease's usable part ({self._usable_ms:g} ms): the "
                "server waits that long for the replicas, then the reply must still come in time"
            )

    def _wait_for_replicas(self, budget_s: float) -> tuple[Any, ...] | None:
        """The ``WAIT`` sent after a write (``None`` without ``replicas``): its timeout leaves
        the reply the time the request timeout leaves it, cut when the budget is."""
        if not self._replicas:
            return None
        spare_ms = self._request_s * 1000 - self._replicas_ms
        wait_ms = max(1, min(self._replicas_ms, int(budget_s * 1000 - spare_ms)))
        return ("WAIT", self._replicas, wait_ms)

    def _acked(
        self, action: str, steps: Steps[Any], wrote: Callable[[Any], bool], then: Any
    ) -> Steps[Any]:
        """``steps``' reply; if ``then`` (a ``WAIT``) went with it and the write took
        effect, :class:`NotReplicated` when fewer replicas than asked acknowledged it."""
        reply = yield from steps
        if then is None:
            return reply
        reply, acked = reply
        if acked < self._replicas and wrote(reply):
            raise NotReplicated(self._key, action, acked, self._replicas, self._replicas_ms)
        return reply

    def _grant(self, value: str, budget: float, in_line: bool) -> Steps[Any]:
        """One try's request: ``take.lua`` in line, else the plain grant; then ``WAIT``.
        On a Cluster slot being migrated, a place in line refused makes it ``take.lua``
        without a place, in the time left."""
        then = self._wait_for_replicas(budget)
        if not in_line:
            script, command = self._grant_command(value)
            steps = run_script(script, command, budget, self._cluster, then)
            return (yield from self._acked("acquire", steps, self._granted, then))
        began = self._clock()

        def take(place_ms: int, budget_s: float) -> Steps[Any]:
            args = (value, self._ttl_ms, place_ms, self._prefix)
            command = TAKE.command((self._key, *self._counter), args)
            steps = run_script(TAKE, command, budget_s, self._cluster, then)
            return self._acked("acquire", steps, self._granted, then)

        def without_a_place() -> Steps[Any]:
            return take(0, max(0.001, budget - (self._clock() - began)))

        return (yield from self._keyed(take(self._place_ms, budget), without_a_place))

    def _renew(self, action: str, value: str, ttl_ms: int) -> Steps[Any]:
        """Compare-and-pexpire ``value`` to ``ttl_ms``; then ``WAIT``. 1 if it was ours."""
        then = self._wait_for_replicas(self._request_s)
        command = EXTEND.command((self._key,), (value, ttl_ms))
        steps = run_script(EXTEND, command, self._request_s, self._cluster, then)
        return (yield from self._acked(action, steps, lambda reply: reply == 1, then))

    def _init_line(self) -> None:
        """Where the line's keys go (in the lock key's slot), how long a place lasts."""
        self._prefix = beside(self._key, "")  # the line, places, wake-ups, notes, tokens
        # A place's lease, and how long an unheard wake-up is kept: three of the longest
        # retry pauses and three late BLPOPs, so a waiter keeps its place between tries.
        self._place_ms = int(3 * (self._retry_delay_ms[1] + LATE_S * 1000))
        self._counter: tuple[str, ...] = ()  # FencedLock's token counter

    def __repr__(self) -> str:
        return self._describe(type(self).__name__)

    def _grant_command(self, value: str) -> tuple[LuaScript | None, tuple[Any, ...]]:
        return None, ("SET", self._key, value, "NX", "PX", self._ttl_ms)

    def _granted(self, reply: Any) -> bool:
        return reply is not None and reply is not False and reply != 0

    def _script(self, script: LuaScript | None, timeout_s: float, *args: Any) -> Steps[Any]:
        command = (args[0], self._key) if script is None else script.command((self._key,), args)
        return run_script(script, command, timeout_s, self._cluster)

    def _hand_off(self, value: str, timeout_s: float, leaving: bool = False) -> Steps[Any]:
        """Compare-and-delete ``value``, handing the key to the oldest live waiter (and, if
        ``leaving``, first giving up ``value``'s own place in line).

        On a Redis Cluster slot being migrated, a refused hand-over (a key of the line not on
        this node) wrote nothing to the lock key: the plain compare-and-delete releases it.
        """
        note_ms = max(int(2000 * self._request_s), self._place_ms)
        args = (value, self._place_ms, self._prefix, note_ms, "1" if leaving else "0")
        steps = run_script(HAND_OFF, HAND_OFF.command((self._key,), args), timeout_s, self._cluster)
        return (yield from self._keyed(steps, lambda: self._script(RELEASE, timeout_s, value)))

    def _keyed(self, steps: Steps[Any], on_the_key: Callable[[], Steps[Any]]) -> Steps[Any]:
        """The reply to ``steps`` (a script of the line); if a Cluster slot being migrated
        refused them, the reply to ``on_the_key()``: a command on the lock key alone, which
        the migration's redirections reach."""
        try:
            return (yield from steps)
        except rx.ResponseError as error:
            if not (self._cluster and slot_moving(error)):
                raise
        return (yield from on_the_key())

    def _acquire_steps(self, blocking: bool, timeout_ms: object) -> Steps[bool]:
        """Tries until the deadline (errors a retry may fix kept in ``last_error``): a plain
        ``SET NX`` without ``blocking``, else in line. Whatever interrupts a try (an error,
        ``Ctrl-C``, a cancellation) deletes its value first; a waiter that gives up leaves
        its place, and so does one too near its deadline to listen for a wake-up (it polls
        the time left), so that a release hands the key to a waiter that hears it."""
        give_up_at = self._give_up_at(blocking, timeout_ms)
        in_line = blocking
        first = answered = True
        value = self._new_value()
        while True:
            started = self._clock()
            budget = self._budget_s(self._request_s, give_up_at, first)
            if budget <= 0:
                break
            first = False
            try:
                reply = yield from self._grant(value, budget, in_line)
                granted, answered = self._granted(reply), True
                if granted and self._clock() < self._usable_until(started):
                    self._won(value, started)
                    return True
            except Exception as error:
                if not retryable(error):
                    yield from self._discard(value, self._request_s)
                    raise
                # The SET may have been stored: delete it, unless the server let the whole
                # budget pass unanswered and the deadline is gone too (then its TTL ends it).
                self._last_error = error
                waited = self._clock() - started
                silent = isinstance(error, rx.TimeoutError) and waited >= 0.9 * budget
                yield from self._discard(
                    value,
                    self._budget_s(self._request_s, give_up_at, False)
                    if silent
                    else self._request_s,
                )
                value = self._new_value()  # the outcome was unknown: never reuse the value
                granted = answered = False
            except BaseException:  # Ctrl-C, a cancellation: nothing may stay locked
                yield from self._discard(value, self._request_s)
                raise
            if granted:  # granted, but the reply took the whole lease: no use to anyone
                yield from self._discard(value, self._request_s)
                value = self._new_value()
            # In line, the line orders the tries, not chance: block for the longest pause.
            draw = longest if in_line else self._uniform
            pause = self._pause_s(draw, give_up_at) if blocking else 0.0
            if pause <= 0:
                break
            listen = pause  # a BLPOP may end LATE_S late: near the deadline, listen less
            if give_up_at is not None:
                listen = min(pause, give_up_at - self._clock() - LATE_S)
            if in_line and listen < MIN_LISTEN_S:  # it can no longer listen: leave the line,
                left = self._budget_s(self._request_s, give_up_at, False)  # so a release
                yield from self._discard(value, left)  # hands the key to one that does,
                value, in_line = self._new_value(), False  # and poll what time is left
            if not in_line:
                yield Sleep(pause)
                continue
            woken = yield Wait(f"{self._prefix}wake:{value}", listen)
            if woken is None:
                continue
            if self._replicas:  # a grant must reach the replicas: one request with WAIT
                if (yield from self._claim(value, woken[-1])):
                    return True
                continue
            # The key was handed to this waiter with its lease, after its last try ran:
            # the lease counts from that try's start, as if that try had been granted.
            if self._clock() < self._usable_until(started):
                self._granted(woken[-1])
                self._won(value, started)
                return True
            yield from self._discard(value, self._request_s)  # too late to use: pass it on
            value = self._new_value()
        if in_line and answered:  # leave the line (pass on a key just handed over) at once,
            yield from self._discard(value, min(self._request_s, 0.01))  # a few ms late at most
        return False

    def _claim(self, value: str, token: Any) -> Steps[bool]:
        """With ``replicas``: make a key handed to ``value`` (with ``token``: FencedLock's,
        or 1) this lock's, for its TTL from before the request, and ``WAIT`` for them."""
        started = self._clock()
        try:
            reply = yield from self._renew("acquire", value, self._ttl_ms)
        except Exception as error:
            if not retryable(error):
                raise
            self._last_error = error
            return False  # the next try (take.lua) finds it handed over, and takes it
        except BaseException:
            yield from self._discard(value, self._request_s)
            raise
        if reply != 1 or self._clock() >= self._usable_until(started):
            return False
        self._granted(token)
        self._won(value, started)
        return True

    def _discard(self, value: str, timeout_s: float) -> Steps[None]:
        """Best effort: delete ``value`` if it is the key's and leave the line (the TTLs end
        what this cannot); a key handed to ``value`` goes on to the next waiter."""
        if timeout_s > 0:
            with contextlib.suppress(Exception):
                yield from self._hand_off(value, timeout_s, leaving=True)

    def _release_steps(self) -> Steps[None]:
        """Compare-and-delete, handing the key to the next waiter. If Redis does not answer,
        the lock stays held: call again.

        A release whose connection broke is asked once more, on a new connection: the first
        request may have run (its reply lost), and then the note it left (for twice the
        request timeout) makes the second answer 1 too, not a false :class:`LockLost`. (The
        lease alone cannot tell: after a failover another holder may have the key within it.)
        """
        value = self._check_owner("release")
        try:
            released = yield from self._hand_off(value, self._request_s)
        except rx.ConnectionError:
            released = yield from self._hand_off(value, self._request_s)
        self._forget(value)
        if released != 1:
            raise LockLost(self._key, "release")

    def _extend_steps(self, ttl_ms: int | None) -> Steps[None]:
        """Compare-and-pexpire, within the lease (:meth:`_in_lease`); the new lease counts
        from just before the request. With ``replicas``, an extension fewer replicas
        acknowledged raises :class:`NotReplicated` and leaves the deadline where it was
        (a promoted replica may have only the old lease); the lock stays held."""
        new_ttl = self._ttl_ms if ttl_ms is None else check_ttl_ms(ttl_ms)
        usable_ms = self._usable_for(new_ttl)
        value = self._check_owner("extend")
        started = self._clock()
        gone = self._in_lease(started) and ((yield from self._renew("extend", value, new_ttl)) != 1)
        if gone or not self._in_lease(self._clock()):
            self._forget(value)
            if not gone:  # the key may still be ours, but nobody may rely on it: release it
                yield from self._discard(value, self._request_s)
            raise LockLost(self._key, "extend")
        if self._value == value:  # not released and re-acquired meanwhile
            self._deadline = started + usable_ms / 1000.0

    def _locked_steps(self) -> Steps[bool]:
        return bool((yield from self._script(None, self._request_s, "EXISTS")))

    def _holder_steps(self) -> Steps[Holder | None]:
        value = yield from self._script(None, self._request_s, "GET")
        ttl_ms = (yield from self._script(None, self._request_s, "PTTL")) if value else -2
        return Holder.read(value, ttl_ms)

    def _owned_steps(self) -> Steps[bool]:
        mine = self.value
        if mine is None:
            return False
        return (yield from self._script(None, self._request_s, "GET")) in (mine, mine.encode())


def longest(shortest_ms: float, longest_ms: float) -> float:
    """The draw of a waiter in line: the longest retry pause."""
    return longest_ms


def note_failed_release(exc: BaseException, key: str, error: BaseException) -> None:
    exc.add_note(f"lockguide: releasing {key!r} on the way out also failed: {error}")


class LockError(Exception):
    """Base class of every error this library raises on purpose."""


class BadArgument(LockError, ValueError):
    """An argument that cannot work (an empty key, a negative TTL), refused before any request."""


class BadArgumentType(BadArgument, TypeError):
    """An argument of the wrong type (a TTL of ``1.5`` or ``"30s"``); also a ``TypeError``."""


class NotAcquired(LockError):
    """``with lock:`` did not get the lock (:meth:`Lock.acquire` returns ``False``)."""

    def __init__(self, key: str, waited_ms: float) -> None:
        self.key, self.waited_ms = key, waited_ms
        super().__init__(
            f"lock {key!r} is held by another owner; gave up after {waited_ms:.0f} ms. "
            "The protected work did not run: retry later or wait longer (timeout_ms)."
        )


class NotReplicated(LockError):
    """Fewer replicas than ``replicas=`` acknowledged a grant or an extension in time.

    An acquire deletes such a grant (compare-and-delete) and tries again until its deadline,
    then returns ``False`` with this as :attr:`~lockguide.Lock.last_error`; an extend leaves
    the lock held until its old deadline and raises it.
    """

    def __init__(self, key: str, action: str, acked: int, needed: int, waited_ms: int) -> None:
        self.key, self.action, self.acked, self.needed = key, action, acked, needed
        super().__init__(
            f"{action} of lock {key!r}: {acked} of the {needed} replicas asked for "
            f"acknowledged it within {waited_ms} ms. A failover now could promote a replica "
            "without it, so it was not counted: the grant was deleted (acquire retries), or "
            "the lease was not lengthened (extend: the lock is held to its old deadline). "
            "Check the replicas' link, or wait longer (replicas_timeout_ms)."
        )


class NotOwned(LockError):
    """Release or extend by a lock object that does not hold the lock: a bug in the caller."""

    _message = (
        "cannot {action} lock {key!r}: this Lock object does not hold it "
        "(never acquired, or already released). Check the acquire/release pairing."
    )

    def __init__(self, key: str, action: str) -> None:
        self.key = key
        super().__init__(self._message.format(key=key, action=action))


class WrongOwner(NotOwned):
    """Release or extend from a thread or task that did not acquire (the lock's watchdog may)."""

    _message = (
        "cannot {action} lock {key!r} from this thread or task: another one acquired it, "
        "and only that thread or asyncio task may release or extend it. Give each thread "
        "or task its own lock object."
    )


class LockLost(NotOwned):
    """The lease expired: Redis no longer has this holder's value. Nothing was changed."""

    _message = (
        "cannot {action} lock {key!r}: its lease expired and the key is gone or "
        "held by someone else. Work done after the deadline may have overlapped "
        "another holder; only a fencing check at the resource can refuse it."
    )


class AlreadyAcquired(LockError):
    """``acquire`` on a lock object that already holds the lock; locks are not re-entrant."""

    def __init__(self, key: str) -> None:
        self.key = key
        super().__init__(
            f"this Lock object already holds {key!r}; locks are not re-entrant. "
            "Release it first, or create a separate Lock for a separate holder."
        )


class StaleToken(LockError):
    """A fenced resource refused a write: it accepted a token at least as high. Do not retry it."""

    def __init__(self, resource: str, token: int, highest: int) -> None:
        self.resource, self.token, self.highest = resource, token, highest
        super().__init__(
            f"write to {resource!r} with fencing token {token} refused: it has already "
            f"accepted token {highest}. A newer lock holder exists; this write must not "
            "happen. Acquire the lock again for a fresh token if the work is still needed."
        )


class VersionConflict(LockError):
    """An optimistic update gave up: another writer changed the version before every attempt."""

    def __init__(self, key: str, attempts: int) -> None:
        self.key, self.attempts = key, attempts
        super().__init__(
            f"update of {key!r} gave up after {attempts} attempt(s): another writer "
            "changed the version each time. Nothing was written by the last attempt; "
            "retry later or allow more retries."
        )


class RenewalFailed(LockLost):
    """The watchdog found the key lost, or could not reach Redis in time, and stopped renewing."""

    def __init__(self, key: str, reason: str) -> None:
        self.key, self.reason = key, reason
        LockError.__init__(
            self,
            f"lease on {key!r} was not renewed: {reason}. The lock may be held by "
            "someone else now; do not write to the resource, and treat work done "
            "since the last successful renewal as suspect.",
        )


class MasterError(LockError):
    """A Redlock master answered an error no retry can fix; ``error`` (and ``__cause__``) is it."""

    def __init__(self, key: str, master: int, address: str, error: Exception) -> None:
        self.key, self.master, self.error = key, master, error
        super().__init__(
            f"lock {key!r}: masters[{master}] ({address}) answered {type(error).__name__}: "
            f"{error}. No retry can fix that: correct the master's configuration or the "
            "client's credentials."
        )


class NoQuorum(NotAcquired):
    """A :class:`~lockguide.Redlock` won no majority in time; the counts are the last try's."""

    def __init__(
        self,
        key: str,
        waited_ms: float,
        *,
        granted: int,
        refused: int,
        failed: int,
        needed: int,
        causes: tuple[str, ...] = (),
    ) -> None:
        self.key, self.waited_ms, self.causes = key, waited_ms, causes
        self.granted, self.refused, self.failed, self.needed = granted, refused, failed, needed
        why = f" ({'; '.join(causes)})" if causes else ""
        LockError.__init__(
            self,
            f"lock {key!r}: no majority after {waited_ms:.0f} ms (last try: {granted} granted, "
            f"{refused} refused, {failed} failed or did not answer{why}; {needed} needed, with "
            "validity left). The protected work did not run: retry later, wait longer "
            "(timeout_ms), or bring the failed masters back.",
        )


class MajorityLost(LockLost):
    """Fewer than a majority of masters (``confirmed``) still held this Redlock holder's value."""

    def __init__(self, key: str, action: str, *, confirmed: int, needed: int, masters: int) -> None:
        self.key, self.confirmed, self.needed, self.masters = key, confirmed, needed, masters
        LockError.__init__(
            self,
            f"cannot {action} lock {key!r}: only {confirmed} of {masters} masters still held this "
            f"holder's value ({needed} needed). The lease expired, a master lost the key, or "
            "masters did not answer; another client may hold the lock. Work done under it may have "
            "overlapped another holder: only a fencing check at the resource can refuse it.",
        )


class ExtensionLimitReached(LockError):
    """A Redlock was extended ``max_extensions`` times already (a bound against stuck holders)."""

    def __init__(self, key: str, max_extensions: int) -> None:
        self.key, self.max_extensions = key, max_extensions
        super().__init__(
            f"lock {key!r} has already been extended {max_extensions} times (max_extensions); "
            "it stays held until its current validity runs out. Release it when the work is "
            "done, or allow more extensions."
        )


class ClusterUnavailable(NotAcquired):
    """A consensus lock got no answer from a quorum in time: nothing was granted (or released)."""

    def __init__(self, key: str, waited_ms: float, cause: str) -> None:
        self.key, self.waited_ms, self.cause = key, waited_ms, cause
        LockError.__init__(
            self,
            f"lock {key!r}: the cluster did not answer within {waited_ms:.0f} ms "
            f"(last error: {cause}). A majority of its members may be down, or this client "
            "cut off from them; nothing was granted. Retry later, or bring the members back.",
        )
