"""Adapters for the locks the guide compares, one module per library.

Each module exposes ``adapter(servers) -> Adapter``. Third-party libraries are
imported inside that function, so nothing here is imported by ``lockguide``
itself and the peers stay development dependencies (``requirements/dev.in``).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import sys
import threading
import time
from collections.abc import Coroutine
from importlib import metadata
from pathlib import Path
from typing import Any, TypeVar

__all__ = [
    "PEERS",
    "LoopThread",
    "peer_version",
    "peers_on_path",
    "process_clock",
    "seconds",
    "version_of",
]

T = TypeVar("T")


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
    """A lease or a wait in whole seconds, for libraries that take seconds.

    A 0 stays 0: what the library does with it is what the audit reports (python-redis-lock
    reads it as "never expires", sherlock's ``EXPIRE key 0`` deletes the key it just set).
    A fraction of a second is rounded up, the library's unit; the rows that depend on the
    lease read the TTL the library really set from the server.
    """
    if ttl_ms < 0:
        raise ValueError(f"a negative duration: {ttl_ms} ms")
    return math.ceil(ttl_ms / 1000)


def version_of(distribution: str) -> str:
    """The installed version of a distribution, or ``"?"``."""
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return "?"


#: Where ``requirements/audit-peers.txt`` is installed (``pip install --no-deps --target``):
#: peers that cannot share the environment's site-packages (see that file for why).
PEERS = Path(sys.prefix) / "lib" / "audit-peers"


def peers_on_path() -> Path:
    """Put :data:`PEERS` at the end of ``sys.path`` (so nothing installed is shadowed).

    Raises :class:`ImportError` when it is not installed, naming the command that installs it.
    """
    if not PEERS.is_dir():
        raise ImportError(
            f"{PEERS} is missing: pip install --no-deps --target {PEERS} "
            "-r requirements/audit-peers.txt"
        )
    if str(PEERS) not in sys.path:
        sys.path.append(str(PEERS))
    return PEERS


def peer_version(distribution: str) -> str:
    """The version of a peer installed in :data:`PEERS`, or ``"?"``."""
    for found in metadata.distributions(path=[str(PEERS)]):
        if found.metadata["Name"].lower() == distribution.lower():
            return found.version
    return "?"


class LoopThread:
    """An event loop in a daemon thread, for driving an asyncio lock from the audit's
    synchronous checks: :meth:`run` hands it a coroutine and waits for the result."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout_s: float = 120.0) -> T:
        """Run ``coro`` on the loop; its result, or its exception re-raised here."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout_s)

    def close(self, finish: Coroutine[Any, Any, Any] | None = None) -> None:
        """Run ``finish`` (closing the clients), then stop the loop and its thread."""
        if not self._thread.is_alive():
            if finish is not None:
                finish.close()
            return
        if finish is not None:
            with contextlib.suppress(Exception):
                self.run(finish, 10.0)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10.0)
        if not self._thread.is_alive():
            self.loop.close()
