# Optimistic retry: four workers increment one counter 25 times each, no lock.
import threading

import redis

from lockguide import VersionedValue


def worker() -> None:
    counter = VersionedValue(redis.Redis(), "page:views")
    for _ in range(25):
        # read, compute, compare-and-set; on a conflict, wait a random moment and retry
        counter.update(lambda old: str(int(old or "0") + 1), retries=200, backoff_ms=(0.5, 20))


threads = [threading.Thread(target=worker) for _ in range(4)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()

print(VersionedValue(redis.Redis(), "page:views").read())
#> Versioned(value='100', version=100)
