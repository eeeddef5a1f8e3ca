"""Fencing tokens: the lock hands out a number, and the resource checks it.

1. Client A acquires ``lock:ledger`` and, in the same atomic step, draws token 1.
2. A pauses (a GC, a stalled VM) past its lease; the key expires, A does not know.
3. B acquires, draws token 2 and writes with it; the resource remembers 2.
4. A wakes up and writes with token 1. The resource **refuses** it: 1 < 2.

Only the resource can do step 4: the paused client cannot know it is stale. So
:class:`FencedLock` issues the token with the lock in one Lua script, and
:class:`FencedStore` (a Redis hash) and :class:`SqlFencedStore` (a table) accept a
write only if its token beats every one they accepted, atomically with the write.
"""

from __future__ import annotations

import functools
import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import redis
from redis.cluster import RedisCluster
from redis.crc import key_slot

from lockguide._core import (
    DEFAULT_TIMEOUT_MS,
    BadArgument,
    BadArgumentType,
    LuaScript,
    NotOwned,
    Owner,
    StaleToken,
    check_client_of,
    check_count,
    check_key,
)
from lockguide.lock import DEFAULT_REQUEST_TIMEOUT_MS, Lock

__all__ = [
    "MAX_TOKEN",
    "FencedLock",
    "FencedStore",
    "SqlFencedStore",
    "Stored",
    "WriteResult",
    "counter_key_for",
]

FENCED_ACQUIRE = LuaScript("""\
-- Fenced acquire: take the lock and draw the next fencing token in one atomic step.
-- KEYS[1] = the lock key
-- KEYS[2] = the token counter for this resource (never expires)
-- ARGV[1] = this holder's random value
-- ARGV[2] = the time to live, in milliseconds
-- Returns the new token (1, 2, 3, ...) when the lock was taken, 0 when it is held.
-- Nobody can get a token without the lock, or the lock without a token.
if not redis.call("SET", KEYS[1], ARGV[1], "NX", "PX", ARGV[2]) then
    return 0
end
return redis.call("INCR", KEYS[2])
""")

FENCED_WRITE = LuaScript("""\
-- Fenced write: store a value only if its token is newer than every token accepted so far.
-- KEYS[1] = the resource, a hash holding "value" and "token" (the highest accepted)
-- ARGV[1] = the writer's fencing token
-- ARGV[2] = the value to store
-- Returns {1, token} when the write was accepted,
--         {0, highest} when it was refused because a token >= it was already accepted.
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
    """A valid token and a ``str`` value, checked before anything is sent."""
    token = check_token(token)
    if not isinstance(value, str):
        raise BadArgumentType(f"value must be a str, not {type(value).__name__}")
    return token, value


def _raise_if_refused(resource: str, result: WriteResult) -> WriteResult:
    """``result`` if the write was accepted; :class:`~lockguide.StaleToken` if not."""
    if not result.accepted:
        raise StaleToken(resource, result.token, result.highest)
    return result


def counter_key_for(key: str) -> str:
    """The default token counter for lock ``key``, in the same Redis Cluster hash slot.

    Redis's rule: a key's slot is the hash of what lies between its first ``{`` and
    the first ``}`` after it, if that is not empty; else of the whole key. A key with
    such a tag keeps it (``"{ledger}:lock"`` -> ``"{ledger}:lock:fence"``); any other
    becomes the tag (``"lock:ledger"`` -> ``"{lock:ledger}:fence"``), unless it holds
    a ``}`` (``"a{}b"``), which no tag can contain: then a tag of the same slot is used.
    """
    opening = key.find("{")
    closing = key.find("}", opening + 1) if opening >= 0 else -1
    if opening >= 0 and closing > opening + 1:
        return key + ":fence"
    if "}" not in key:
        return "{" + key + "}:fence"
    return "{" + _tag_for_slot(key_slot(key.encode("utf-8"))) + "}:" + key + ":fence"


@functools.lru_cache(maxsize=256)
def _tag_for_slot(slot: int) -> str:
    """The first ``fence:<n>`` that hashes to ``slot``."""
    return next(f"fence:{n}" for n in itertools.count() if key_slot(f"fence:{n}".encode()) == slot)


def check_counter_key(key: str, counter_key: object) -> str:
    """The token counter's key: ``counter_key_for(key)`` by default, never the lock key."""
    if counter_key is None:
        counter_key = counter_key_for(key)
    checked = check_key(counter_key, "counter_key")
    if checked == key:
        raise BadArgument(
            f"counter_key must differ from the lock key {key!r}: the lock's SET would "
            "overwrite the token counter"
        )
    return checked


class FencedLock(Lock):
    """A :class:`~lockguide.Lock` whose every acquisition carries a fencing token.

    One Lua script runs ``SET key value NX PX ttl`` and, only if that succeeded,
    ``INCR`` of a counter: each acquisition gets a larger token. Pass :attr:`token`
    with every write to a resource that checks it. The rest is
    :class:`~lockguide.Lock`'s (extending keeps the token).

    Args:
        counter_key: where the token counter lives; it never expires. The default
            (``counter_key_for(key)``) shares the lock key's Redis Cluster hash slot.

    The counter is only as durable as its Redis: if a failover or restart loses
    increments, an older holder's unseen higher token can be accepted after a newer
    holder's lower one. Keep it where increments are not lost when that matters
    (``appendfsync always``, a database sequence).
    """

    def __init__(
        self,
        client: redis.Redis | RedisCluster,
        key: str,
        *,
        ttl_ms: int,
        counter_key: str | None = None,
        timeout_ms: float | None = DEFAULT_TIMEOUT_MS,
        retry_delay_ms: tuple[float, float] = (50.0, 150.0),
        request_timeout_ms: float = DEFAULT_REQUEST_TIMEOUT_MS,
        drift_factor: float = 0.01,
        drift_floor_ms: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
        owner: Owner = "thread",
    ) -> None:
        super().__init__(
            client,
            key,
            ttl_ms=ttl_ms,
            timeout_ms=timeout_ms,
            retry_delay_ms=retry_delay_ms,
            request_timeout_ms=request_timeout_ms,
            drift_factor=drift_factor,
            drift_floor_ms=drift_floor_ms,
            clock=clock,
            owner=owner,
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
            NotOwned: this object does not hold the lock (never acquired,
                released, or found lost by :meth:`extend`).
        """
        if self._token is None or not self.held:
            raise NotOwned(self._key, "read the fencing token of")
        return self._token

    def __repr__(self) -> str:
        state = f"held, token {self._token}" if self.held else "not held"
        return f"<FencedLock {self._key!r} ttl_ms={self._ttl_ms} {state}>"

    def _grant_command(self, value: str) -> tuple[LuaScript | None, tuple[Any, ...]]:
        """Take the lock and draw its token in one script."""
        keys = (self._key, self._counter_key)
        return FENCED_ACQUIRE, FENCED_ACQUIRE.command(keys, (value, self._ttl_ms))

    def _granted(self, reply: Any) -> bool:
        token = int(reply)
        if token > 0:
            self._token = token
        return token > 0


@dataclass(frozen=True)
class WriteResult:
    """What a fenced resource did with one write.

    Attributes:
        accepted: whether the value was stored.
        token: the token the write carried.
        highest: the highest token the resource has accepted, after this write
            (equal to ``token`` when accepted; the token that beat it when not).
    """

    accepted: bool
    token: int
    highest: int


@dataclass(frozen=True)
class Stored:
    """A fenced resource's value and the token that wrote it (``None`` and ``0`` at first)."""

    value: str | None
    token: int


def check_store_key(key: object, lock: object, lock_type: type[Any]) -> str:
    """A fenced store's key: a non-empty string that is neither of ``lock``'s keys."""
    checked = check_key(key)
    if lock is not None:
        if not isinstance(lock, lock_type):
            raise BadArgumentType(f"lock must be a FencedLock, not {type(lock).__name__}")
        if checked in (lock.key, lock.counter_key):
            raise BadArgument(
                f"store key {checked!r} collides with the lock's keys ({lock.key!r}, "
                f"{lock.counter_key!r}): the lock would overwrite the data, or the data "
                "the lock. Give the resource its own key, e.g. 'ledger:balance'."
            )
    return checked


class FencedStore:
    """A value in a Redis hash that only accepts writes with a newer fencing token.

    A Lua script writes ``value`` and ``token`` (the highest accepted) together, or neither.

    Args:
        client: a connected ``redis.Redis`` (may be another server than the lock's).
        key: the hash's key, e.g. ``"ledger:balance"``.
        lock: the :class:`FencedLock` whose tokens this store checks, if on the
            same Redis: its keys must differ from ``key``.
    """

    def __init__(self, client: redis.Redis, key: str, *, lock: FencedLock | None = None) -> None:
        self._client = check_client_of(redis.Redis, "redis.Redis", client)
        self._key = check_store_key(key, lock, FencedLock)
        self._write = self._client.register_script(FENCED_WRITE.source)

    @property
    def key(self) -> str:
        """The Redis key of the hash."""
        return self._key

    def try_write(self, token: int, value: str) -> WriteResult:
        """Store ``value`` if ``token`` beats every token accepted so far; see ``accepted``."""
        token, value = _check_write(token, value)
        accepted, highest = self._write(keys=[self._key], args=[token, value])
        return WriteResult(accepted=accepted == 1, token=token, highest=int(highest))

    def write(self, token: int, value: str) -> WriteResult:
        """Like :meth:`try_write`, but a refusal raises.

        Raises:
            StaleToken: a token at least as high was already accepted; nothing written.
        """
        return _raise_if_refused(self._key, self.try_write(token, value))

    def read(self) -> Stored:
        """The current value and the highest token accepted."""
        raw_value, raw_token = self._client.hmget(self._key, ["value", "token"])
        value = raw_value.decode("utf-8") if isinstance(raw_value, bytes) else raw_value
        return Stored(value=value, token=int(raw_token or 0))


from lockguide.sqlstore import SqlFencedStore  # noqa: E402 - it builds on the above
