"""Fencing tokens: :class:`FencedLock` draws the next number with the lock, in one script,
and a fenced store (a Redis hash, a SQL table) accepts a write only if its token beats
every one it accepted, atomically with the write.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import redis
from redis.cluster import RedisCluster

from lockguide._core import (
    BadArgument,
    BadArgumentType,
    LockOptions,
    LuaScript,
    NotOwned,
    ServerSteps,
    StaleToken,
    beside,
    check_client,
    check_count,
    check_key,
)
from lockguide.lock import Lock

if TYPE_CHECKING:
    from typing_extensions import Unpack  # in typing itself from Python 3.12

__all__ = ["MAX_TOKEN", "FencedLock", "FencedStore", "SqlFencedStore", "Stored", "WriteResult"]
__all__ += ["counter_key_for"]


# The code of ``scripts/fenced_*.lua``, which the guide shows with comments (a test compares).
# Take the lock and draw the next token in one step: the token, or 0 if the lock is held.
FENCED_ACQUIRE = LuaScript("""\
if not redis.call("SET", KEYS[1], ARGV[1], "NX", "PX", ARGV[2]) then
    return 0
end
return redis.call("INCR", KEYS[2])
""")

# Store the value only if its token beats the highest accepted: {1, token} or {0, highest}.
FENCED_WRITE = LuaScript("""\
local highest = tonumber(redis.call("HGET", KEYS[1], "token") or "0")
local token = tonumber(ARGV[1])
if token <= highest then
    return {0, highest}
end
redis.call("HSET", KEYS[1], "value", ARGV[2], "token", ARGV[1])
return {1, token}
""")

#: The largest token a store accepts. Lua compares numbers as doubles, which
#: are exact integers only up to 2**53; a counter will not get there in practice.
MAX_TOKEN = 2**53


def check_token(token: object) -> int:
    """A fencing token: an ``int`` from 1 to :data:`MAX_TOKEN` (``bool`` is refused)."""
    hint = " (the number FencedLock.token gave you)"
    why = "fencing tokens start at 1 and only go up, so a token below 1 was never issued by a lock"
    token = check_count(token, "token", 1, hint, why)
    if token > MAX_TOKEN:
        raise BadArgument(f"token must be <= 2**53 ({MAX_TOKEN}), got {token}")
    return token


def _check_write(token: object, value: object) -> tuple[int, str]:
    token = check_token(token)
    if not isinstance(value, str):
        raise BadArgumentType(f"value must be a str, not {type(value).__name__}")
    return token, value


def _raise_if_refused(resource: str, result: WriteResult) -> WriteResult:
    if not result.accepted:
        raise StaleToken(resource, result.token, result.highest)
    return result


def counter_key_for(key: str) -> str:
    """The default token counter for lock ``key``, in the same Redis Cluster hash slot.

    A key with a hash tag keeps it (``"{ledger}:lock"`` -> ``"{ledger}:lock:fence"``); any
    other becomes the tag (``"lock:ledger"`` -> ``"{lock:ledger}:fence"``), unless it holds a
    ``}`` (``"a{}b"``), which no tag can contain: then a tag of the same slot is used.
    """
    return beside(key, "fence")


class Fenced(ServerSteps):
    """A lock whose grant draws a fencing token (``FencedLock`` here and in ``lockguide.aio``)."""

    _token: int | None

    def _init_fence(self, counter_key: object) -> None:
        counter_key = counter_key_for(self._key) if counter_key is None else counter_key
        self._counter_key = check_key(counter_key, "counter_key")
        if self._counter_key == self._key:
            raise BadArgument(
                f"counter_key must differ from the lock key {self._key!r}: the lock's SET "
                "would overwrite the token counter"
            )
        self._token = None
        self._counter = (self._counter_key,)  # take.lua and hand_off.lua draw the token too

    @property
    def counter_key(self) -> str:
        """The Redis key holding this lock's token counter."""
        return self._counter_key

    @property
    def token(self) -> int:
        """The fencing token of the current acquisition (``NotOwned`` if not held)."""
        if self._token is None or not self.held:
            raise NotOwned(self._key, "read the fencing token of")
        return self._token

    def _grant_command(self, value: str) -> tuple[LuaScript | None, tuple[Any, ...]]:
        keys = (self._key, self._counter_key)
        return FENCED_ACQUIRE, FENCED_ACQUIRE.command(keys, (value, self._ttl_ms))

    def _granted(self, reply: Any) -> bool:
        token = int(reply)
        if token > 0:
            self._token = token
        return token > 0

    def __repr__(self) -> str:
        return self._describe(type(self).__name__, f"token={self._token} " if self.held else "")


class FencedLock(Fenced, Lock):
    """A :class:`~lockguide.Lock` whose every acquisition carries a fencing token.

    One Lua script runs ``SET key value NX PX ttl`` and, only if that succeeded, ``INCR``
    of a counter; pass :attr:`token` with every write to a resource that checks it.

    Args:
        counter_key: where the token counter lives (it never expires); by default
            ``counter_key_for(key)``, in the lock key's hash slot. The rest is Lock's.
    """

    def __init__(
        self,
        client: redis.Redis | RedisCluster,
        key: str,
        *,
        ttl_ms: int,
        counter_key: str | None = None,
        **options: Unpack[LockOptions],
    ) -> None:
        self._init_server(client, key, ttl_ms, options)
        self._init_fence(counter_key)


@dataclass(frozen=True)
class WriteResult:
    """A write's outcome: ``accepted``, its ``token`` and the ``highest`` token accepted so far."""

    accepted: bool
    token: int
    highest: int


@dataclass(frozen=True)
class Stored:
    """A fenced resource's value and the token that wrote it (``None`` and ``0`` at first)."""

    value: str | None
    token: int


class Store:
    """What both ``FencedStore`` classes decide; they only send (or await) the requests."""

    _client: Any
    _redis: Any  # the client flavour: the module redis or redis.asyncio
    _lock_type: type[Any]

    def _init_store(self, client: object, key: object, lock: object) -> None:
        self._client = check_client(self._redis, client)
        self._key = check_key(key)
        if lock is not None and not isinstance(lock, self._lock_type):
            raise BadArgumentType(f"lock must be a FencedLock, not {type(lock).__name__}")
        if lock is not None and self._key in (lock.key, lock.counter_key):
            raise BadArgument(
                f"store key {self._key!r} collides with the lock's keys ({lock.key!r}, "
                f"{lock.counter_key!r}): the lock would overwrite the data, or the data "
                "the lock. Give the resource its own key, e.g. 'ledger:balance'."
            )
        self._write = self._client.register_script(FENCED_WRITE.source)

    @property
    def key(self) -> str:
        """The Redis key of the hash."""
        return self._key

    def _result(self, token: int, reply: Any) -> WriteResult:
        accepted, highest = reply
        return WriteResult(accepted=accepted == 1, token=token, highest=int(highest))

    def _stored(self, reply: Any) -> Stored:
        raw_value, raw_token = reply
        value = raw_value.decode("utf-8") if isinstance(raw_value, bytes) else raw_value
        return Stored(value=value, token=int(raw_token or 0))


class FencedStore(Store):
    """A value in a Redis hash that only accepts writes with a newer fencing token.

    Args:
        client: a ``redis.Redis`` (may be another server than the lock's).
        key: the hash's key, e.g. ``"ledger:balance"``.
        lock: the :class:`FencedLock` whose tokens it checks, if on the same Redis
            (its keys must differ from ``key``).
    """

    _redis, _lock_type = redis, FencedLock

    def __init__(self, client: redis.Redis, key: str, *, lock: FencedLock | None = None) -> None:
        self._init_store(client, key, lock)

    def try_write(self, token: int, value: str) -> WriteResult:
        """Store ``value`` if ``token`` beats every token accepted so far; see ``accepted``."""
        token, value = _check_write(token, value)
        return self._result(token, self._write(keys=[self._key], args=[token, value]))

    def write(self, token: int, value: str) -> WriteResult:
        """Like :meth:`try_write`, but a refusal raises :class:`~lockguide.StaleToken`."""
        return _raise_if_refused(self._key, self.try_write(token, value))

    def read(self) -> Stored:
        """The current value and the highest token accepted."""
        return self._stored(self._client.hmget(self._key, ["value", "token"]))


from lockguide.sqlstore import SqlFencedStore  # noqa: E402 - it builds on the above
