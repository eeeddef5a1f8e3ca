"""Adapter for the ``redlock`` package on PyPI (``redlock.RedLock``, by glasslion).

Its import name, ``redlock``, is also redlock-py's, so it is installed apart
(``requirements/audit-peers.txt``) and loaded from there under the name
``redlock_glasslion``; redlock-py keeps ``import redlock``.
"""

from __future__ import annotations

import importlib.util
import math
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import Any

import redis

from lockguide_lab.audit.adapter import DEFAULT, NO_EXPIRY, Server, TtlSpec, Unsupported
from lockguide_lab.audit.adapters import peer_version, peers_on_path

MODULE = "redlock_glasslion"


def load() -> ModuleType:
    """The ``redlock`` package from the peers' directory, as :data:`MODULE`."""
    if MODULE in sys.modules:
        return sys.modules[MODULE]
    package = peers_on_path() / "redlock"
    spec = importlib.util.spec_from_file_location(
        MODULE, package / "__init__.py", submodule_search_locations=[str(package)]
    )
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {package}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[MODULE] = module
    spec.loader.exec_module(module)
    return module


class GlasslionHolder:
    def __init__(self, adapter: GlasslionAdapter, key: str, ttl_ms: int | None) -> None:
        self.adapter = adapter
        self.key = key
        self.ttl_ms = ttl_ms
        self.lock: Any = None

    def _make(self, **kwargs: Any) -> Any:
        if self.ttl_ms is not None:
            kwargs["ttl"] = self.ttl_ms
        return self.adapter.factory.create_lock(self.key, **kwargs)

    def acquire(self, wait_ms: float = 0) -> bool:
        # One attempt, or the library's own retries (0-200 ms apart) for about wait_ms.
        lock = self._make(retry_times=1 + math.ceil(max(0.0, wait_ms) / 100))
        if not lock.acquire():
            return False
        self.lock = lock
        return True

    def acquire_default(self) -> bool:
        lock = self._make()
        if not lock.acquire():
            return False
        self.lock = lock
        return True

    def release(self) -> bool | None:
        if self.lock is None:
            raise RuntimeError("not acquired")
        lock, self.lock = self.lock, None
        lock.release()
        return None

    def extend(self, ttl_ms: int) -> bool | None:
        raise Unsupported("redlock has no extend")

    def token(self) -> int | None:
        return None

    def lost(self) -> bool | None:
        return None


class GlasslionAdapter:
    name = "redlock RedLock"
    version = peer_version("redlock")
    multi_master = True
    ttl_required = False

    def __init__(self, servers: Sequence[Server]) -> None:
        module = load()
        self.clients: list[redis.Redis] = [server.connect() for server in servers]
        self.factory = module.RedLockFactory(self.clients)

    def holder(
        self, key: str, ttl_ms: TtlSpec = DEFAULT, *, renew: bool = False
    ) -> GlasslionHolder:
        if renew:
            raise Unsupported("no automatic renewal")
        if ttl_ms == NO_EXPIRY:
            raise Unsupported("every lock has a ttl (100 s by default)")
        return GlasslionHolder(self, key, None if ttl_ms == DEFAULT else int(ttl_ms))

    def close(self) -> None:
        for client in self.clients:
            client.close()


def adapter(servers: Sequence[Server]) -> GlasslionAdapter:
    """``lockguide-audit lockguide_lab.audit.adapters.redlock_glasslion:adapter``"""
    return GlasslionAdapter(servers)
