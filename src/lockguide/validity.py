"""The lock's time arithmetic, pure functions in milliseconds, used by the locks and the docs.

A holder may act for ``ttl - elapsed - drift``, *elapsed* counted from before the first request.
"""

from __future__ import annotations

from dataclasses import dataclass

#: Fraction of the TTL allowed for clock-rate error between client and server.
DEFAULT_DRIFT_FACTOR = 0.01
#: Fixed allowance for Redis's expiry precision, in milliseconds.
DEFAULT_DRIFT_FLOOR_MS = 2.0


def drift_ms(
    ttl_ms: float,
    drift_factor: float = DEFAULT_DRIFT_FACTOR,
    drift_floor_ms: float = DEFAULT_DRIFT_FLOOR_MS,
) -> float:
    """Clock-drift allowance for a lease of ``ttl_ms``: ``ttl * factor + floor``."""
    return ttl_ms * drift_factor + drift_floor_ms


def validity_ms(
    ttl_ms: float,
    elapsed_ms: float,
    drift_factor: float = DEFAULT_DRIFT_FACTOR,
    drift_floor_ms: float = DEFAULT_DRIFT_FLOOR_MS,
) -> float:
    """Time the holder may still rely on the lock: ``ttl - elapsed - drift`` (<= 0: none)."""
    return ttl_ms - elapsed_ms - drift_ms(ttl_ms, drift_factor, drift_floor_ms)


def ttl_for_validity(
    validity_ms: float,
    elapsed_ms: float,
    drift_factor: float = DEFAULT_DRIFT_FACTOR,
    drift_floor_ms: float = DEFAULT_DRIFT_FLOOR_MS,
) -> float:
    """Smallest TTL leaving ``validity_ms`` after ``elapsed_ms``: ``(v + e + floor) / (1 - f)``."""
    if not 0 <= drift_factor < 1:
        raise ValueError("drift_factor must be in [0, 1)")
    return (validity_ms + elapsed_ms + drift_floor_ms) / (1 - drift_factor)


def quorum(n_masters: int) -> int:
    """Votes needed out of ``n_masters``: a strict majority, ``n // 2 + 1``."""
    if n_masters < 1:
        raise ValueError("a quorum needs at least one master")
    return n_masters // 2 + 1


@dataclass(frozen=True)
class Verdict:
    """The outcome of one acquisition attempt, as the arithmetic sees it."""

    ttl_ms: float
    elapsed_ms: float
    drift_ms: float
    validity_ms: float
    votes: int
    needed: int

    @property
    def majority(self) -> bool:
        """Whether enough masters said yes."""
        return self.votes >= self.needed

    @property
    def acquired(self) -> bool:
        """A lock counts only with a majority *and* time left to use it."""
        return self.majority and self.validity_ms > 0


def judge(
    ttl_ms: float,
    elapsed_ms: float,
    votes: int,
    n_masters: int,
    drift_factor: float = DEFAULT_DRIFT_FACTOR,
    drift_floor_ms: float = DEFAULT_DRIFT_FLOOR_MS,
) -> Verdict:
    """Apply the whole rule to one attempt: majority, drift and remaining validity."""
    drift = drift_ms(ttl_ms, drift_factor, drift_floor_ms)
    validity = ttl_ms - elapsed_ms - drift
    return Verdict(ttl_ms, elapsed_ms, drift, validity, votes, needed=quorum(n_masters))
