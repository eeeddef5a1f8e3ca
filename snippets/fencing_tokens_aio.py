# Fixed, on redis.asyncio: the same tokens, the same refusal.
import asyncio

import redis.asyncio

from lockguide.aio import FencedLock, FencedStore


async def main() -> None:
    r = redis.asyncio.Redis()

    a = FencedLock(r, "lock:ledger", ttl_ms=100)
    await a.acquire(blocking=False)

    await asyncio.sleep(0.15)  # the same pause, past the same 100 ms lease

    b = FencedLock(r, "lock:ledger", ttl_ms=10_000)
    await b.acquire(blocking=False)
    print(f"tokens: A={a.token}, B={b.token}")
    #> tokens: A=1, B=2

    store = FencedStore(r, "ledger:balance", lock=b)
    accepted = (await store.try_write(b.token, "written by B")).accepted
    print("B writes with token 2: accepted =", accepted)
    #> B writes with token 2: accepted = True

    # A wakes up, still believing it holds the lock, and writes with its token:
    late = await store.try_write(a.token, "written by A")
    print("A writes with token 1: accepted =", late.accepted, "| highest seen:", late.highest)
    #> A writes with token 1: accepted = False | highest seen: 2
    print("the resource holds:", await store.read())
    #> the resource holds: Stored(value='written by B', token=2)
    await r.aclose()


asyncio.run(main())
