"""Adapter for redis-py's asyncio lock, ``redis.asyncio.lock.Lock`` (``client.lock(name)``).

The lock runs on an event loop in a thread of its own (:class:`LoopThread`); each holder call
is one coroutine on that loop. ``release_async`` hands the audit the release coroutine itself,
so the cancelled-release row can cancel it as a task group or ``asyncio.timeout`` would.
"""

from __future__ import annotations

from collections.abc import Awaitable, Sequence

import redis
import redis.asyncio
from redis.asyncio.lock import Lock

from lockguide_lab.audit.adapter import DEFAULT, NO_EXPIRY, Server, TtlSpec, Unsupported
from lockguide_lab.audit.adapters import LoopThread


class RedisPyAsyncHolder:
    def __init__(self, adapter: RedisPyAsyncAdapter, lock: Lock) -> None:
        self.adapter = adapter
        self.lock = lock

    def acquire(self, wait_ms: float = 0) -> bool:
        if wait_ms <= 0:
            return bool(self.adapter.run(self.lock.acquire(blocking=False)))
        return bool(
            self.adapter.run(self.lock.acquire(blocking=True, blocking_timeout=wait_ms / 1000.0))
        )

    def acquire_default(self) -> bool:
        return bool(self.adapter.run(self.lock.acquire()))

    def release(self) -> bool | None:
        self.adapter.run(self.lock.release())
        return None

    def release_async(self) -> Awaitable[object]:
        return self.lock.release()

    def extend(self, ttl_ms: int) -> bool | None:
        return bool(self.adapter.run(self.lock.extend(ttl_ms / 1000.0, replace_ttl=True)))

    def token(self) -> int | None:
        return None

    def lost(self) -> bool | None:
        return None  # owned() asks Redis: no signal of its own


class RedisPyAsyncAdapter:
    name = "redis-py asyncio Lock"
    version = redis.__version__
    multi_master = False
    ttl_required = False
    asyncio = True

    def __init__(self, servers: Sequence[Server]) -> None:
        address = servers[0].address
        if address is None:
            raise Unsupported("an asyncio client needs a real server's address")
        self.loop_thread = LoopThread()
        self.loop = self.loop_thread.loop
        self.client = redis.asyncio.Redis(host=address[0], port=address[1], socket_timeout=5.0)

    def run(self, coro: Awaitable[object]) -> object:
        async def wrapped() -> object:
            return await coro

        return self.loop_thread.run(wrapped())

    def holder(
        self, key: str, ttl_ms: TtlSpec = DEFAULT, *, renew: bool = False
    ) -> RedisPyAsyncHolder:
        if renew:
            raise Unsupported("no automatic renewal: call extend()")
        if ttl_ms in (DEFAULT, NO_EXPIRY):
            return RedisPyAsyncHolder(self, self.client.lock(key))  # timeout=None: no expiry
        assert isinstance(ttl_ms, int)
        return RedisPyAsyncHolder(self, self.client.lock(key, timeout=ttl_ms / 1000.0))

    def close(self) -> None:
        self.loop_thread.close(self.client.aclose())


def adapter(servers: Sequence[Server]) -> RedisPyAsyncAdapter:
    """``lockguide-audit lockguide_lab.audit.adapters.redis_py_asyncio:adapter``"""
    return RedisPyAsyncAdapter(servers)
