"""Adapter for aioredlock's ``Aioredlock`` (asyncio Redlock, on aioredis 1.x) over every server.

Each holder gets a lock manager of its own, as separate processes would: aioredlock keeps one
lock and one watchdog per resource in each manager. Its default lock (no ``lock_timeout``)
is renewed by the manager's watchdog every 0.6 x ``internal_lock_timeout`` (10 s by
default); ``renew=True`` asks for that, with the audit's lease as ``internal_lock_timeout``.
aioredlock is installed apart (``requirements/audit-peers.txt``), so it is imported from there.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Sequence
from typing import Any

from lockguide_lab.audit.adapter import DEFAULT, NO_EXPIRY, Server, TtlSpec, Unsupported
from lockguide_lab.audit.adapters import LoopThread, peer_version, peers_on_path

#: ``Aioredlock``'s own default ``retry_count``.
DEFAULT_RETRIES = 3


class AioredlockHolder:
    def __init__(
        self, adapter: AioredlockAdapter, key: str, lock_timeout: float | None, internal: float
    ) -> None:
        self.adapter = adapter
        self.key = key
        self.lock_timeout = lock_timeout
        self.lock: Any = None
        self.manager: Any = adapter.loops.run(self._connected(internal))

    async def _connected(self, internal: float) -> Any:
        """A manager of this holder's own, its connections open (as a long-lived one's are)."""
        manager = self.adapter.aioredlock.Aioredlock(
            self.adapter.addresses, internal_lock_timeout=internal
        )
        await asyncio.gather(*(i.connect() for i in manager.redis.instances))
        return manager

    async def _acquire(self, retry_count: int) -> bool:
        self.manager.retry_count = retry_count
        try:
            self.lock = await self.manager.lock(self.key, lock_timeout=self.lock_timeout)
        except self.adapter.lock_error:
            return False
        return True

    def acquire(self, wait_ms: float = 0) -> bool:
        # One attempt, or the library's own retries (0.1-0.3 s apart) for about wait_ms.
        return self.adapter.loops.run(self._acquire(1 + math.ceil(max(0.0, wait_ms) / 200)))

    def acquire_default(self) -> bool:
        return self.adapter.loops.run(self._acquire(DEFAULT_RETRIES))

    def release_async(self) -> Awaitable[object]:
        if self.lock is None:
            raise RuntimeError("not acquired")
        lock, self.lock = self.lock, None
        result: Awaitable[object] = self.manager.unlock(lock)
        return result

    def release(self) -> bool | None:
        release = self.release_async()

        async def run() -> None:
            await release

        self.adapter.loops.run(run())
        return None

    def extend(self, ttl_ms: int) -> bool | None:
        if self.lock is None:
            raise RuntimeError("not acquired")
        self.adapter.loops.run(self.manager.extend(self.lock, lock_timeout=ttl_ms / 1000.0))
        return None

    def token(self) -> int | None:
        return None

    def lost(self) -> bool | None:
        if self.lock is None:
            return None
        return not self.lock.valid  # set False when an extension failed

    async def destroy(self) -> None:
        await self.manager.destroy()


class AioredlockAdapter:
    name = "aioredlock"
    version = peer_version("aioredlock")
    multi_master = True
    ttl_required = False
    asyncio = True

    def __init__(self, servers: Sequence[Server]) -> None:
        peers_on_path()
        import aioredlock  # type: ignore[import-not-found]  # installed apart: audit-peers.txt

        if any(server.address is None for server in servers):
            raise Unsupported("aioredis connects by address: it needs real servers")
        self.aioredlock = aioredlock
        self.lock_error = aioredlock.LockError
        self.addresses = [server.address for server in servers]
        self.loops = LoopThread()
        self.loop = self.loops.loop
        self.holders: list[AioredlockHolder] = []

    def holder(
        self, key: str, ttl_ms: TtlSpec = DEFAULT, *, renew: bool = False
    ) -> AioredlockHolder:
        if ttl_ms == NO_EXPIRY:
            raise Unsupported("every lock has a lease (lock_timeout or internal_lock_timeout)")
        if ttl_ms == DEFAULT:
            made = AioredlockHolder(self, key, None, 10.0)  # renewed by its watchdog
        elif renew:
            made = AioredlockHolder(self, key, None, int(ttl_ms) / 1000.0)
        else:
            made = AioredlockHolder(self, key, int(ttl_ms) / 1000.0, 10.0)
        self.holders.append(made)
        return made

    def close(self) -> None:
        async def finish() -> None:
            for made in self.holders:
                await made.destroy()

        self.loops.close(finish())


def adapter(servers: Sequence[Server]) -> AioredlockAdapter:
    """``lockguide-audit lockguide_lab.audit.adapters.aioredlock_redlock:adapter``"""
    return AioredlockAdapter(servers)
