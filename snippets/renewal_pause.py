# A pause stops the watchdog too. Only the fencing check at the resource saves the data.
import sys
import time

import redis

from lockguide import FencedLock, FencedStore, RenewalFailed, Watchdog


def stop_the_world(seconds: float) -> None:
    """Hold the interpreter like a long garbage collection: no other thread runs."""
    previous = sys.getswitchinterval()
    sys.setswitchinterval(60)  # let this thread keep the GIL
    try:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            pass
    finally:
        sys.setswitchinterval(previous)


r = redis.Redis()
store = FencedStore(r, "report:data")
a = FencedLock(r, "lock:report", ttl_ms=200)
dog = Watchdog(a, every_ms=50)
dog.__enter__()
token = a.token  # A keeps its token for the writes it will make

dog.check()  # A checks its lease: fine
stop_the_world(0.5)  # ... and then its process stalls for 500 ms, watchdog included

b = FencedLock(r, "lock:report", ttl_ms=10_000)
print("A's lease ran out during the stall; B acquires:", b.acquire(blocking=False))
#> A's lease ran out during the stall; B acquires: True
print("B writes:", store.try_write(b.token, "B's report").accepted)
#> B writes: True

# A's process runs again from where it stopped: after its check, before its write.
# (A and B share one process here, so B's steps run after the stall; in production
# B is another machine and acts during it.)
print("A writes:", store.try_write(token, "A's report").accepted)
#> A writes: False
print("A's watchdog noticed, too late to matter:", dog.lost_event.wait(timeout=5))
#> A's watchdog noticed, too late to matter: True
try:
    dog.release()
except RenewalFailed:
    print("A's release: RenewalFailed")
    #> A's release: RenewalFailed
