# When renewal fails, the holder is told: a flag before writing, an error at release.
import redis

from lockguide import Lock, RenewalFailed, Watchdog

r = redis.Redis()
lock = Lock(r, "lock:report", ttl_ms=300)
dog = Watchdog(lock, every_ms=100)
dog.__enter__()  # acquire and start renewing (what `with` does)

# The key is lost behind the holder's back (a failover, an operator), and B takes it:
r.set("lock:report", "B's value", px=10_000)

print("loss signalled:", dog.lost_event.wait(timeout=5))
#> loss signalled: True
try:
    dog.check()  # what the holder calls before each write
except RenewalFailed as error:
    print("before writing:", error.reason)
    #> before writing: the key was gone or held by another owner at renewal

try:
    dog.release()
except RenewalFailed:
    print("release raised RenewalFailed; B's key untouched:", r.get("lock:report") == b"B's value")
    #> release raised RenewalFailed; B's key untouched: True
