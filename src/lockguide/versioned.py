"""Optimistic concurrency: a value and its version, changed only together.

No lock at all. Each writer reads the value *with its version*, computes the new
value, and asks Redis to store it only if the version is still the one it read.
A Lua script makes the comparison and the write one atomic step, and writes the
value **and the next version together** in one hash. If somebody wrote in
between, the version has moved, the write is refused, and the writer reads
again and retries. It is the same pattern as HTTP's ``If-Match`` with an ETag,
or a conditional write in DynamoDB.

The pitfall the guide names: a script that *compares* the version but never
*writes* a new one. The version then never moves. A caller who carries forward
the version it thinks it wrote is refused from its second update on, forever
("works once, then never again"); a caller who re-reads is never refused, so two
writers who read the same state both win and one update is silently lost.
``cas_version.lua`` writes ``value`` and ``version`` in the same ``HSET``.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass

import redis

from lockguide._base import LuaScript, check_client, check_delay_range, check_key
from lockguide.errors import BadArgument, BadArgumentType, VersionConflict

__all__ = ["CasResult", "Versioned", "VersionedValue"]

CAS_VERSION = LuaScript("cas_version.lua")


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


def _check_version(version: object) -> int:
    if isinstance(version, bool) or not isinstance(version, int):
        raise BadArgumentType(
            f"expected_version must be an int (the version read() returned), not {version!r}"
        )
    if version < 0:
        raise BadArgument(f"expected_version must be >= 0, got {version}: versions start at 0")
    return version


def _check_retries(retries: object) -> int:
    if isinstance(retries, bool) or not isinstance(retries, int):
        raise BadArgumentType(f"retries must be an int, not {retries!r}")
    if retries < 0:
        raise BadArgument(f"retries must be >= 0, got {retries}: 0 means one attempt and no retry")
    return retries


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
        self._client = check_client(client)
        self._key = check_key(key)

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
        """Write ``value`` and version ``expected_version + 1``, only if the stored
        version is still ``expected_version``.

        A refusal is an ordinary result (``accepted`` is ``False``), not an
        error: it means someone else wrote first, and the usual answer is to
        read again. :meth:`update` does that for you.
        """
        expected = _check_version(expected_version)
        if not isinstance(value, str):
            raise BadArgumentType(f"value must be a str, not {type(value).__name__}")
        accepted, version = CAS_VERSION(self._client, (self._key,), (expected, value))
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
            change: computes the new value from the current one (``None`` when
                the key was never written). It may run several times, so it
                must not have side effects of its own.
            retries: how many times to try again after a conflict; ``0`` means
                exactly one attempt. Bounded on purpose: under heavy contention
                an unbounded loop never ends.
            backoff_ms: ``(base, cap)``. Before retry *n* (1, 2, ...) the caller
                sleeps a random time between 0 and ``min(cap, base * 2**n)`` ms,
                so writers that collided do not collide again in step.

        Returns:
            The value written and its new version.

        Raises:
            VersionConflict: every attempt lost the race; nothing was written
                by the last one.
        """
        attempts = _check_retries(retries) + 1
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
