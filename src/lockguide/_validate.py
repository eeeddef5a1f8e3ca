"""Argument checks shared by every lock: all run before anything is sent."""

from __future__ import annotations

import math

import redis

from lockguide.errors import BadArgument, BadArgumentType


def check_client(client: object, name: str = "client") -> redis.Redis:
    """Accept a synchronous ``redis.Redis`` (or subclass, e.g. fakeredis)."""
    if not isinstance(client, redis.Redis):
        raise BadArgumentType(
            f"{name} must be a redis.Redis instance (for example redis.Redis(host=...)), "
            f"not {type(client).__name__}"
        )
    return client


def check_key(key: object) -> str:
    """A non-empty string key."""
    if not isinstance(key, str):
        raise BadArgumentType(f"key must be a str, not {type(key).__name__}")
    if not key:
        raise BadArgument(
            "key must not be empty: choose a name for the resource, e.g. 'lock:ledger'"
        )
    return key


def check_ttl_ms(ttl_ms: object, name: str = "ttl_ms") -> int:
    """A positive whole number of milliseconds (``bool`` is refused)."""
    if isinstance(ttl_ms, bool) or not isinstance(ttl_ms, int):
        raise BadArgumentType(
            f"{name} must be a whole number of milliseconds (int), not {ttl_ms!r}; "
            "for 30 seconds write 30_000"
        )
    if ttl_ms <= 0:
        raise BadArgument(
            f"{name} must be > 0 ms, got {ttl_ms}: a lock with no expiry is held forever "
            "by a holder that crashes"
        )
    return ttl_ms


def check_duration_ms(value: object, name: str, *, allow_none: bool = False) -> float | None:
    """A finite, non-negative number of milliseconds (or ``None`` where allowed)."""
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise BadArgumentType(f"{name} must be a number of milliseconds, not {value!r}")
    if not math.isfinite(value) or value < 0:
        raise BadArgument(f"{name} must be a finite number of milliseconds >= 0, got {value!r}")
    return float(value)


def check_delay_range(value: object, name: str = "retry_delay_ms") -> tuple[float, float]:
    """A ``(low, high)`` pair of milliseconds with ``0 <= low <= high`` and ``high > 0``."""
    if not isinstance(value, tuple) or len(value) != 2:
        raise BadArgumentType(f"{name} must be a (low, high) tuple of milliseconds, not {value!r}")
    low = check_duration_ms(value[0], f"{name}[0]")
    high = check_duration_ms(value[1], f"{name}[1]")
    assert low is not None
    assert high is not None
    if low > high or high == 0:
        raise BadArgument(
            f"{name} must satisfy 0 <= low <= high and high > 0, got {value!r}: "
            "the retry delay is drawn at random from this range"
        )
    return (low, high)
