"""Adapters for the locks the guide compares, one module per library.

Each module exposes ``adapter(servers) -> Adapter``. Third-party libraries are
imported inside that function, so nothing here is imported by ``lockguide``
itself and the peers stay development dependencies (``requirements/dev.in``).
"""

from __future__ import annotations

import math
import time
from importlib import metadata

__all__ = ["process_clock", "seconds", "version_of"]


def process_clock() -> float:
    """``time.monotonic()``, looked up at every call: the process's clock as it is now.

    lockguide's adapters hand it to their locks as ``clock=``. A lock given
    ``time.monotonic`` itself would keep that function for good; this one reads
    whatever the ``time`` module's clock is at the moment, so the audit's clock
    checks, which move the process's clocks
    (:class:`~lockguide_lab.testbed.clock.ProcessClocks`), reach the lock
    through its public argument, as they reach every other library.
    """
    return time.monotonic()


def seconds(ttl_ms: int) -> int:
    """A lease in whole seconds, rounded up (for libraries that take seconds)."""
    return max(1, math.ceil(ttl_ms / 1000))


def version_of(distribution: str) -> str:
    """The installed version of a distribution, or ``"?"``."""
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return "?"
