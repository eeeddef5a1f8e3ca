"""Optimistic concurrency: a value and its version, changed only together.

No lock at all (HTTP's ``If-Match``, DynamoDB's conditional write). A writer reads
the value *with its version*, and a Lua script stores the new value only if the
version is still the one read, writing the value **and the next version** in one
``HSET``; if somebody wrote in between, it is refused and the writer reads again.

The pitfall the guide names: a script that compares the version but never bumps it.
A writer carrying its version forward is then refused forever after its first
update, and writers that re-read both win, silently losing an update.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass

import redis

from lockguide._core import (
    BadArgumentType,
    VersionConflict,
    check_client_of,
    check_count,
    check_delay_range,
    check_key,
)

__all__ = ["CasResult", "Versioned", "VersionedValue"]

CAS_VERSION = """\
-- Compare-and-set on a version: write the value and the next version together,
-- only if the version is still the one the caller read.
-- KEYS[1] = a hash holding "value" and "version" (a missing hash is version 0)
-- ARGV[1] = the version the caller read
-- ARGV[2] = the new value
-- Returns {1, new version} when written, {0, current version} when refused.
local current = tonumber(redis.call("HGET", KEYS[1], "version") or "0")
if current ~= tonumber(ARGV[1]) then
    return {0, current}
end
local next_version = current + 1
redis.call("HSET", KEYS[1], "value", ARGV[2], "version", next_version)
return {1, next_version}
"""


@dataclass(frozen=True)
class Versioned:
    """A value as read, with the version it had. Version 0 means never written."""

    value: str | None
    version: int


@dataclass(frozen=True)
class CasResult:
    """The outcome of one compare-and-set.

    Attributes:
        accepted: whether the value was written.
        version: the version now stored: the new one when accepted, the one
            that beat the caller when refused.
    """

    accepted: bool
    version: int


class VersionedValue:
    """A string value and its version, stored together in one Redis hash.

    Args:
        client: a connected ``redis.Redis``.
        key: the hash's key, e.g. ``"profile:42"``. Its fields are ``value`` and
            ``version``; nothing else should write them.

    Example::

        counter = VersionedValue(r, "page:views")
        counter.update(lambda old: str(int(old or "0") + 1))
    """

    def __init__(self, client: redis.Redis, key: str) -> None:
        self._client = check_client_of(redis.Redis, "redis.Redis", client)
        self._key = check_key(key)
        self._cas = self._client.register_script(CAS_VERSION)

    @property
    def key(self) -> str:
        """The Redis key of the hash."""
        return self._key

    def read(self) -> Versioned:
        """The value and its version, read together (one ``HMGET``)."""
        raw_value, raw_version = self._client.hmget(self._key, ["value", "version"])
        value = raw_value.decode("utf-8") if isinstance(raw_value, bytes) else raw_value
        return Versioned(value=value, version=int(raw_version or 0))

    def compare_and_set(self, expected_version: int, value: str) -> CasResult:
        """Write ``value`` as version ``expected_version + 1`` if that is still the version.

        A refusal (``accepted`` is ``False``) is a result, not an error: someone wrote
        first, so read again (:meth:`update` does).
        """
        hint = " (the version read() returned)"
        expected = check_count(expected_version, "expected_version", 0, hint, "versions start at 0")
        if not isinstance(value, str):
            raise BadArgumentType(f"value must be a str, not {type(value).__name__}")
        accepted, version = self._cas(keys=[self._key], args=[expected, value])
        return CasResult(accepted=accepted == 1, version=int(version))

    def update(
        self,
        change: Callable[[str | None], str],
        *,
        retries: int = 5,
        backoff_ms: tuple[float, float] = (2.0, 100.0),
    ) -> Versioned:
        """Read, apply ``change`` to the value, and compare-and-set; retry on conflict.

        Args:
            change: the new value from the current one (``None`` if never
                written). It may run several times: no side effects.
            retries: attempts after a conflict; ``0`` means one attempt. Bounded,
                because under heavy contention an unbounded loop never ends.
            backoff_ms: ``(base, cap)``: before retry *n* sleep a random
                0 to ``min(cap, base * 2**n)`` ms, so colliders fall out of step.

        Returns:
            The value written and its new version.

        Raises:
            VersionConflict: every attempt lost the race.
        """
        attempts = check_count(retries, "retries", why="0 means one attempt and no retry") + 1
        base, cap = check_delay_range(backoff_ms, "backoff_ms")
        if not callable(change):
            raise BadArgumentType(f"change must be a function of the old value, not {change!r}")
        for attempt in range(attempts):
            if attempt:
                time.sleep(random.uniform(0.0, min(cap, base * 2**attempt)) / 1000.0)
            current = self.read()
            new_value = change(current.value)
            result = self.compare_and_set(current.version, new_value)
            if result.accepted:
                return Versioned(value=new_value, version=result.version)
        raise VersionConflict(self._key, attempts)
