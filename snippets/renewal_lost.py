# When renewal fails, the holder is told: a flag to wait on, an error before writing.
import redis

from lockguide import Lock, RenewalFailed, Watchdog

r = redis.Redis()
lock = Lock(r, "lock:report", ttl_ms=300)

try:
    with Watchdog(lock, every_ms=100) as dog:  # acquires, then renews every 100 ms
        # The key is lost behind the holder's back (a failover, an operator); B takes it:
        r.set("lock:report", "B's value", px=10_000)
        print("loss signalled:", dog.lost_event.wait(timeout=5))
        #> loss signalled: True
        dog.check()  # what the holder calls before each write
except RenewalFailed as error:
    print("before writing:", error.reason)
    #> before writing: the key was gone or held by another owner at renewal

print("B's key untouched:", r.get("lock:report") == b"B's value")
#> B's key untouched: True
