# GET /prices: answer at once from the cache; one task, across all workers, rebuilds it.
import asyncio

import redis.asyncio

from lockguide import LockLost, NotAcquired
from lockguide.aio import Lock

r = redis.asyncio.Redis()
tasks: set[asyncio.Task[None]] = set()  # holds each background task until it ends


async def get_prices() -> bytes | None:
    cached = await r.get("cache:prices")
    if cached is None or not await r.exists("cache:prices:fresh"):  # stale: serve it anyway
        tasks.add(task := asyncio.create_task(refresh()))
        task.add_done_callback(tasks.discard)
    return cached  # None only before the first build: answer 503 (or warm it at start-up)


async def refresh() -> None:
    try:
        async with Lock(r, "lock:cache:prices", ttl_ms=30_000, timeout_ms=0):
            await r.set("cache:prices", await compute_prices())
            await r.set("cache:prices:fresh", 1, ex=60)  # stale after 60 s
    except (NotAcquired, LockLost):
        pass  # another worker is rebuilding (or took over): it fills the cache


async def compute_prices() -> bytes: ...
