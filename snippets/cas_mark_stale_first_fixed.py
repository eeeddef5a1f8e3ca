# Fixed: the mark is itself a conditional write. Each holder reads the version
# when it acquires and marks only if that version is still current, so the
# stale holder's mark, based on a read from before B's, is refused.
import time

import redis

from lockguide import Lock, VersionedValue

r = redis.Redis()
state = VersionedValue(r, "report:state")

a = Lock(r, "lock:report", ttl_ms=100)
a.acquire(blocking=False)
a_read = state.read()  # A reads the version as soon as it holds the lock
time.sleep(0.15)  # A pauses before marking; its lease runs out

b = Lock(r, "lock:report", ttl_ms=10_000)
b.acquire(blocking=False)
b_mark = state.compare_and_set(state.read().version, "marked by B")
step_1 = state.compare_and_set(b_mark.version, "B: step 1")
print("B marks and writes its first step:", b_mark.accepted, step_1.accepted)
#> B marks and writes its first step: True True

a_mark = state.compare_and_set(a_read.version, "marked by A")  # A resumes and marks
print("A marks on the version it read:", a_mark.accepted, "| version now:", a_mark.version)
#> A marks on the version it read: False | version now: 2
step_2 = state.compare_and_set(step_1.version, "B: step 2")
print("B writes its second step:", step_2.accepted)
#> B writes its second step: True
print(state.read())
#> Versioned(value='B: step 2', version=3)
