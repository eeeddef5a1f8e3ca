# asyncio: a lost lease cancels the work, and leaving the block says why.
import asyncio

import redis.asyncio

from lockguide import RenewalFailed
from lockguide.aio import Lock, Watchdog


async def main() -> None:
    r = redis.asyncio.Redis()
    lock = Lock(r, "lock:report", ttl_ms=300)
    steps: list[str] = []
    try:
        async with Watchdog(lock, every_ms=100):  # acquires, renews, cancels the body on loss
            steps.append("started")
            await r.set("lock:report", "B's value", px=10_000)  # lost: a failover, then B
            await asyncio.sleep(60)  # the work, waiting on something slow
            steps.append("finished")  # never reached
    except RenewalFailed as error:
        print("stopped:", error.reason)
        #> stopped: the key was gone or held by another owner at renewal
    print("steps:", steps)
    #> steps: ['started']
    print("B's key untouched:", await r.get("lock:report") == b"B's value")
    #> B's key untouched: True
    await lock.aclose()
    await r.aclose()


asyncio.run(main())
