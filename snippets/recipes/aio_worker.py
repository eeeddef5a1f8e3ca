# An asyncio consumer: one sync of a customer's mailbox at a time, across all workers.
import asyncio

import redis.asyncio

from lockguide import LockLost, NotAcquired
from lockguide.aio import Lock

r = redis.asyncio.Redis()


async def sync_mailbox(customer_id: int) -> str:
    lock = Lock(r, f"lock:mailbox:{customer_id}", ttl_ms=60_000, timeout_ms=1_000)
    try:
        async with asyncio.timeout(50):  # cancel the work 10 s before the lease would end
            async with lock:  # released even when the body is cancelled
                await fetch_and_store(customer_id)
    except NotAcquired:
        return "busy"  # another worker has this mailbox
    except TimeoutError:
        return "too slow"  # cancelled after 50 s; the lock was released on the way out
    except LockLost:
        return "lease lost"  # the key vanished before the release (failover, eviction)
    return "synced"


async def fetch_and_store(customer_id: int) -> None: ...
