# Threads: work that cannot stop to check runs in a child process, killed on loss.
import subprocess
import sys

import redis

from lockguide import Lock, RenewalFailed, Watchdog

r = redis.Redis()
lock = Lock(r, "lock:report", ttl_ms=300)
work = [sys.executable, "-c", "import time; time.sleep(60)"]  # e.g. a long export

if lock.acquire():
    child = subprocess.Popen(work)  # the work starts once the lock is held
    try:
        with Watchdog(lock, every_ms=100, on_lost=lambda error: child.kill()):
            r.set("lock:report", "B's value", px=10_000)  # lost: a failover, then B
            print("child exit code:", child.wait(timeout=10))  # on_lost killed it
            #> child exit code: -9
    except RenewalFailed as error:
        print("stopped:", error.reason)
        #> stopped: the key was gone or held by another owner at renewal
    finally:
        child.kill()  # whatever happened, the work does not outlive the block
