"""Adapters for redlock-ng's ``Redlock`` and ``AsyncRedlock`` over every server the audit gives it.

redlock-ng's import name, ``redlock``, is also redlock-py's and glasslion's redlock's, and it
declares ``redis<6``: it is installed apart, without its dependencies
(``requirements/audit-peers-redlock-ng.txt``), and loaded from there under the name
``redlock_ng``, on the environment's redis-py.

What the code (redlock-ng 2.0.4, ``redlock/lock.py``) gives a user: a manager built from the
masters' URLs (``Redlock(urls, retry_count=3)``), ``acquire(resource, ttl_ms)`` that returns
a ``Lock`` or ``None`` after ``retry_count`` retries 0.1-0.3 s apart, ``release(lock)`` and,
on the synchronous manager only, ``extend(lock, ttl_ms)``. The TTL is a required argument.
There is no renewal and no fencing token; ``Lock.valid`` turns ``False`` only at release.
"""

from __future__ import annotations

import importlib.util
import math
import sys
import threading
from collections.abc import Awaitable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from lockguide_lab.audit.adapter import DEFAULT, NO_EXPIRY, Server, TtlSpec, Unsupported
from lockguide_lab.audit.adapters import LoopThread

MODULE = "redlock_ng"
#: Where ``requirements/audit-peers-redlock-ng.txt`` is installed.
PEERS = Path(sys.prefix) / "lib" / "audit-peers-redlock-ng"
#: The managers' own default ``retry_count`` (retries after the first attempt).
DEFAULT_RETRIES = 3
#: Its mean pause between attempts (``random.uniform(0.1, 0.3)``), to turn a wait into retries.
MEAN_RETRY_MS = 200
#: One thread loads the package at a time: a second one must not find it half executed.
_LOADING = threading.Lock()


def load() -> ModuleType:
    """redlock-ng's ``redlock`` package from :data:`PEERS`, as :data:`MODULE`.

    :data:`PEERS` goes at the end of ``sys.path`` for pydantic, which it imports; its
    ``redlock`` directory never shadows redlock-py's, which comes first.
    """
    with _LOADING:
        return _load()


def _load() -> ModuleType:
    if MODULE in sys.modules:
        return sys.modules[MODULE]
    package = PEERS / "redlock"
    if not package.is_dir():
        raise ImportError(
            f"{PEERS} is missing: pip install --no-deps --target {PEERS} "
            "-r requirements/audit-peers-redlock-ng.txt"
        )
    if str(PEERS) not in sys.path:
        sys.path.append(str(PEERS))
    spec = importlib.util.spec_from_file_location(
        MODULE, package / "__init__.py", submodule_search_locations=[str(package)]
    )
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {package}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[MODULE] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[MODULE]
        raise
    return module


def version() -> str:
    """The installed redlock-ng's version, from its metadata in :data:`PEERS`, or ``"?"``."""
    from importlib import metadata

    for found in metadata.distributions(path=[str(PEERS)]):
        if found.metadata["Name"].lower() == "redlock-ng":
            return found.version
    return "?"


def retries_for(wait_ms: float) -> int:
    """The ``retry_count`` that retries for about ``wait_ms`` (0: one attempt only)."""
    return math.ceil(max(0.0, wait_ms) / MEAN_RETRY_MS)


def urls(servers: Sequence[Server]) -> list[str]:
    """The masters as the URLs redlock-ng connects to (it takes no client objects)."""
    if any(server.address is None for server in servers):
        raise Unsupported("redlock-ng connects by URL: it needs real servers")
    return [f"redis://{s.address[0]}:{s.address[1]}/0" for s in servers if s.address]


def _ttl(ttl_ms: TtlSpec, renew: bool) -> int:
    if renew:
        raise Unsupported("no automatic renewal: call extend()")
    if ttl_ms in (DEFAULT, NO_EXPIRY):
        raise Unsupported("ttl is a required argument of acquire()")
    return int(ttl_ms)


class _Holder:
    """What both holders share: the retries a wait becomes, no token, no loss signal."""

    def __init__(self, adapter: Any, key: str, ttl_ms: int) -> None:
        self.adapter = adapter
        self.key = key
        self.ttl_ms = ttl_ms
        self.lock: Any = None

    def _acquire(self, retries: int) -> bool:
        raise NotImplementedError

    def acquire(self, wait_ms: float = 0) -> bool:
        return self._acquire(retries_for(wait_ms))

    def acquire_default(self) -> bool:
        return self._acquire(DEFAULT_RETRIES)

    def token(self) -> int | None:
        return None

    def lost(self) -> bool | None:
        return None  # Lock.valid turns False at release only: no signal of loss


class RedlockNgHolder(_Holder):
    adapter: RedlockNgAdapter

    def _acquire(self, retries: int) -> bool:
        lock = self.adapter.manager(retries).acquire(self.key, self.ttl_ms)
        if lock is None:
            return False
        self.lock = lock
        return True

    def release(self) -> bool | None:
        if self.lock is None:
            raise RuntimeError("not acquired")
        lock, self.lock = self.lock, None
        lock.client.release(lock)  # the manager that acquired it
        return None

    def extend(self, ttl_ms: int) -> bool | None:
        if self.lock is None:
            raise RuntimeError("not acquired")
        return bool(self.lock.client.extend(self.lock, ttl_ms))


class RedlockNgAdapter:
    """The synchronous ``Redlock``: one manager per retry count, shared by the holders
    (a manager's clients are thread-safe; its ``retry_count`` is fixed when it is made)."""

    name = "redlock-ng Redlock"
    version = version()
    multi_master = True
    ttl_required = True

    def __init__(self, servers: Sequence[Server]) -> None:
        self.module = load()
        self.urls = urls(servers)
        self._managers: dict[int, Any] = {}
        self._guard = threading.Lock()

    def manager(self, retries: int) -> Any:
        with self._guard:
            if retries not in self._managers:
                self._managers[retries] = self.module.Redlock(self.urls, retry_count=retries)
            return self._managers[retries]

    def holder(
        self, key: str, ttl_ms: TtlSpec = DEFAULT, *, renew: bool = False
    ) -> RedlockNgHolder:
        return RedlockNgHolder(self, key, _ttl(ttl_ms, renew))

    def close(self) -> None:
        with self._guard:
            for made in self._managers.values():
                for client in made.client.instances:
                    client.close()
            self._managers.clear()


class AsyncRedlockNgHolder(_Holder):
    adapter: AsyncRedlockNgAdapter

    def _acquire(self, retries: int) -> bool:
        async def run() -> Any:
            made = await self.adapter.manager(retries)
            return await made.acquire(self.key, self.ttl_ms)

        lock = self.adapter.loops.run(run())
        if lock is None:
            return False
        self.lock = lock
        return True

    def release_async(self) -> Awaitable[object]:
        if self.lock is None:
            raise RuntimeError("not acquired")
        lock, self.lock = self.lock, None
        result: Awaitable[object] = lock.client.release(lock)  # the manager that acquired it
        return result

    def release(self) -> bool | None:
        release = self.release_async()

        async def run() -> None:
            await release

        self.adapter.loops.run(run())
        return None

    def extend(self, ttl_ms: int) -> bool | None:
        raise Unsupported("AsyncRedlock has no extend")


class AsyncRedlockNgAdapter:
    """``AsyncRedlock`` on an event loop in a thread of its own; its managers (one per retry
    count) are made on that loop, so their asyncio clients belong to it."""

    name = "redlock-ng AsyncRedlock"
    version = version()
    multi_master = True
    ttl_required = True
    asyncio = True

    def __init__(self, servers: Sequence[Server]) -> None:
        self.module = load()
        self.urls = urls(servers)
        self.managers: dict[int, Any] = {}
        self.loops = LoopThread()
        self.loop = self.loops.loop

    async def manager(self, retries: int) -> Any:
        """The manager for ``retries``, made on first use (on the loop: no race)."""
        if retries not in self.managers:
            self.managers[retries] = self.module.AsyncRedlock(self.urls, retry_count=retries)
        return self.managers[retries]

    def holder(
        self, key: str, ttl_ms: TtlSpec = DEFAULT, *, renew: bool = False
    ) -> AsyncRedlockNgHolder:
        return AsyncRedlockNgHolder(self, key, _ttl(ttl_ms, renew))

    def close(self) -> None:
        async def finish() -> None:
            for made in self.managers.values():
                for client in made.client.instances:
                    await client.aclose()

        self.loops.close(finish())


def adapter(servers: Sequence[Server]) -> RedlockNgAdapter:
    """``lockguide-audit lockguide_lab.audit.adapters.redlock_ng:adapter``"""
    return RedlockNgAdapter(servers)


def async_adapter(servers: Sequence[Server]) -> AsyncRedlockNgAdapter:
    """``lockguide-audit lockguide_lab.audit.adapters.redlock_ng:async_adapter``"""
    return AsyncRedlockNgAdapter(servers)
