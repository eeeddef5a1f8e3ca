"""Optimistic concurrency, no lock: a value and its version, changed only together, by a
Lua script that stores the new value and the **next** version only if the version is
still the one the writer read.
"""

from __future__ import annotations

import importlib.resources
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

CAS_VERSION = importlib.resources.files("lockguide.scripts").joinpath("cas_version.lua").read_text()


@dataclass(frozen=True)
class Versioned:
    """A value as read, with the version it had. Version 0 means never written."""

    value: str | None
    version: int


@dataclass(frozen=True)
class CasResult:
    """One compare-and-set: whether it was ``accepted``, and the ``version`` now stored."""

    accepted: bool
    version: int


class VersionedValue:
    """A string value and its version, stored together in one Redis hash.

    Args:
        client: a connected ``redis.Redis``.
        key: the hash's key, e.g. ``"profile:42"`` (fields ``value`` and ``version``).

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

        A refusal (``accepted`` is ``False``) is a result: someone wrote first, read again.
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
        """Read, apply ``change``, compare-and-set, retried on conflict; returns what was written.

        Args:
            change: the new value from the current one (``None`` if never written); it
                may run several times, so no side effects.
            retries: attempts after a conflict (``0``: one attempt).
            backoff_ms: ``(base, cap)``: before retry *n* sleep a random 0 to
                ``min(cap, base * 2**n)`` ms.

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
