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

import contextlib
import functools
import itertools
import re
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, Protocol

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


class Connection(Protocol):
    """The part of a DB-API 2.0 connection that :class:`SqlFencedStore` uses."""

    def cursor(self) -> Any: ...  # pragma: no cover - protocol
    def commit(self) -> None: ...  # pragma: no cover - protocol
    def rollback(self) -> None: ...  # pragma: no cover - protocol


_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")
_PSYCOPG = ("psycopg", "psycopg2")
Paramstyle = Literal["named", "pyformat"]


class SqlFencedStore:
    """A row in a SQL table that only accepts writes with a newer fencing token.

    A write is one ``UPDATE ... WHERE name = :name AND fence_token < :token``, check and
    write at once (one row changed means accepted). In PostgreSQL a concurrent ``UPDATE``
    waits for the first to commit and re-checks the ``WHERE``: two writers cannot both pass.

    Args:
        connection: a DB-API connection (``sqlite3``, ``psycopg``); each write commits.
        name: the resource's name (the row's key).
        table: the table's name (letters, digits and ``_``).
        paramstyle: ``"named"`` (``:token``, sqlite3) or ``"pyformat"``
            (``%(token)s``, psycopg); detected for those two drivers.
    """

    def __init__(
        self,
        connection: Connection,
        name: str,
        *,
        table: str = "fenced_resource",
        paramstyle: Paramstyle | None = None,
    ) -> None:
        if not all(hasattr(connection, m) for m in ("cursor", "commit", "rollback")):
            raise BadArgumentType(
                f"connection must be a DB-API connection (sqlite3, psycopg), not "
                f"{type(connection).__name__}"
            )
        self._connection = connection
        self._name = check_key(name)
        if not isinstance(table, str) or not _IDENTIFIER.match(table):
            raise BadArgument(
                f"table must be a plain SQL identifier (letters, digits, _), got {table!r}"
            )
        self._table = table
        if paramstyle is None and isinstance(connection, sqlite3.Connection):
            paramstyle = "named"
        elif paramstyle is None and type(connection).__module__.split(".")[0] in _PSYCOPG:
            paramstyle = "pyformat"
        elif paramstyle is None:
            raise BadArgument(
                f"cannot tell the parameter style of a {type(connection).__name__} connection: "
                "pass paramstyle='named' (:token) or paramstyle='pyformat' (%(token)s)"
            )
        if paramstyle not in ("named", "pyformat"):
            raise BadArgument(f"paramstyle must be 'named' or 'pyformat', got {paramstyle!r}")
        self._paramstyle: Paramstyle = paramstyle

    @property
    def name(self) -> str:
        """The resource's row name."""
        return self._name

    def setup(self) -> None:
        """Create the table (``name``, ``value``, ``fence_token``) if missing, and this row."""
        self._execute(
            f"CREATE TABLE IF NOT EXISTS {self._table} ("
            " name TEXT PRIMARY KEY, value TEXT, fence_token BIGINT NOT NULL)"
        )
        self._execute(
            f"INSERT INTO {self._table} (name, value, fence_token) VALUES (:name, NULL, 0)"
            " ON CONFLICT (name) DO NOTHING",
            name=self._name,
        )
        self._connection.commit()

    def try_write(self, token: int, value: str) -> WriteResult:
        """Store ``value`` if ``token`` beats every token accepted so far, and commit."""
        token, value = _check_write(token, value)
        sql = f"UPDATE {self._table} SET value = :value, fence_token = :token"
        sql += " WHERE name = :name AND fence_token < :token"
        try:
            changed, _ = self._execute(sql, name=self._name, value=value, token=token)
            if changed != 1:
                return WriteResult(accepted=False, token=token, highest=self.read().token)
            self._connection.commit()
        except BaseException:
            with contextlib.suppress(Exception):
                self._connection.rollback()
            raise
        return WriteResult(accepted=True, token=token, highest=token)

    def write(self, token: int, value: str) -> WriteResult:
        """Like :meth:`try_write`, but a refusal raises.

        Raises:
            StaleToken: a token at least as high was already accepted; nothing written.
        """
        return _raise_if_refused(self._name, self.try_write(token, value))

    def read(self) -> Stored:
        """The current value and the highest token accepted."""
        _, rows = self._execute(
            f"SELECT value, fence_token FROM {self._table} WHERE name = :name", name=self._name
        )
        self._connection.commit()
        if not rows:
            raise BadArgument(
                f"no row named {self._name!r} in table {self._table}: call setup() once first"
            )
        value, fence_token = rows[0]
        return Stored(value=value, token=int(fence_token))

    def _execute(self, sql: str, **params: object) -> tuple[int, list[Any]]:
        """Run one statement written with ``:name`` parameters; its row count and rows."""
        if self._paramstyle == "pyformat":
            sql = re.sub(r":([a-z_]+)", r"%(\1)s", sql)
        cursor = self._connection.cursor()
        try:
            cursor.execute(sql, params)
            return int(cursor.rowcount), list(cursor.fetchall()) if cursor.description else []
        finally:
            cursor.close()
