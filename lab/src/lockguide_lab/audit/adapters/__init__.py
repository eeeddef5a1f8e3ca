"""Adapters for the locks the guide compares, one module per library.

Each module exposes ``adapter(servers) -> Adapter``. Third-party libraries are
imported inside that function, so nothing here is imported by ``lockguide``
itself and the peers stay development dependencies (``requirements/dev.in``).
"""

from __future__ import annotations

import math
from importlib import metadata

__all__ = ["seconds", "version_of"]


def seconds(ttl_ms: int) -> int:
    """A lease in whole seconds, rounded up (for libraries that take seconds)."""
    return max(1, math.ceil(ttl_ms / 1000))


def version_of(distribution: str) -> str:
    """The installed version of a distribution, or ``"?"``."""
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return "?"
