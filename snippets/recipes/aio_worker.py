# An asyncio consumer: one sync of a customer's mailbox at a time, across all workers.
import asyncio

import redis.asyncio

from lockguide import LockLost, NotAcquired
from lockguide.aio import Lock, Watchdog

r = redis.asyncio.Redis()


async def sync_mailbox(customer_id: int) -> str:
    lock = Lock(r, f"lock:mailbox:{customer_id}", ttl_ms=10_000, timeout_ms=1_000)
    try:
        async with asyncio.timeout(50):  # the work's own deadline
            async with Watchdog(lock):  # renews every 3.3 s; a lost lease cancels the body
                await fetch_and_store(customer_id)
    except NotAcquired:
        return "busy"  # another worker has this mailbox
    except TimeoutError:
        return "too slow"  # cancelled after 50 s; the lock was released on the way out
    except LockLost:  # RenewalFailed too: the work was cancelled when the lease was lost
        return "lease lost"  # the key vanished (failover, eviction) before the work ended
    return "synced"


async def fetch_and_store(customer_id: int) -> None: ...
