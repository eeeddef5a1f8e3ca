"""Checks on a scenario's settings, made before anything runs."""

from __future__ import annotations

import math

from lockguide.errors import BadArgument, BadArgumentType

__all__ = ["duration_ms", "ttl_ms"]


def ttl_ms(value: object, name: str = "ttl_ms") -> int:
    """A lease: a whole number of milliseconds above 0 (``bool`` is refused)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadArgumentType(f"{name} must be a whole number of milliseconds (int), not {value!r}")
    if value <= 0:
        raise BadArgument(f"{name} must be > 0 ms, got {value}")
    return value


def duration_ms(value: object, name: str) -> float:
    """A finite number of milliseconds >= 0."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise BadArgumentType(f"{name} must be a number of milliseconds, not {value!r}")
    if not math.isfinite(value) or value < 0:
        raise BadArgument(f"{name} must be a finite number of milliseconds >= 0, got {value!r}")
    return float(value)
