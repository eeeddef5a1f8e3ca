# A Redlock holder that pauses past its validity: a second client acquires,
# and both go on to write. Five masters cannot help with a pause in the client.
import time

import redis

from lockguide import Redlock

masters = [redis.Redis(port=port) for port in range(6379, 6384)]
writes = []

a = Redlock(masters, "lock:ledger", ttl_ms=200)
print("A acquires:", a.acquire(blocking=False))
#> A acquires: True

time.sleep(0.25)  # A is paused (GC, swapping, a stopped VM) for longer than its lease

b = Redlock(masters, "lock:ledger", ttl_ms=10_000)
print("B acquires:", b.acquire(blocking=False))
#> B acquires: True
writes.append("B")

# A resumes where it stopped: just before its write.
print("A believes it holds the lock:", a.held)
#> A believes it holds the lock: True
writes.append("A")
print("writes:", writes)
#> writes: ['B', 'A']

# A's own deadline knew, had A looked at it before writing:
print("A's validity left:", a.validity_remaining_ms())
#> A's validity left: 0.0
