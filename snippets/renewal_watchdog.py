# A watchdog keeps a 300 ms lease alive through 900 ms of work.
import time

import redis

from lockguide import Lock, Watchdog

r = redis.Redis()
lock = Lock(r, "lock:report", ttl_ms=300)

with Watchdog(lock, every_ms=100) as dog:
    for part in range(3):
        time.sleep(0.3)  # each part of the work takes a whole TTL
        dog.check()  # raises RenewalFailed if the lease was lost
        print(f"part {part} done, lock still ours:", r.get("lock:report") == lock.value.encode())
        #> part 0 done, lock still ours: True
        #> part 1 done, lock still ours: True
        #> part 2 done, lock still ours: True
    print("renewed at least 6 times:", dog.renewals >= 6)
    #> renewed at least 6 times: True

print("released:", r.exists("lock:report") == 0)
#> released: True
