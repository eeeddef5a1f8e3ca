# cron: */10 * * * *  python sync_invoices.py  (Redis behind Sentinel; one run at a time)
import sys

from redis.sentinel import Sentinel

from lockguide import Lock, LockLost, NotAcquired

sentinel = Sentinel([("sentinel-1", 26379), ("sentinel-2", 26379), ("sentinel-3", 26379)])
primary = sentinel.master_for("mymaster", socket_timeout=2)  # follows a failover


def main() -> int:
    lock = Lock(primary, "lock:sync-invoices", ttl_ms=15 * 60_000, timeout_ms=0)
    try:
        with lock:  # one try: if another run holds it, this one skips
            sync_invoices()
    except NotAcquired:
        return 0  # another run is syncing (or Redis did not answer): skip this tick
    except LockLost:
        return 3  # the key was gone at release: a failover or the TTL; runs may have overlapped
    return 0


def sync_invoices() -> None: ...


if __name__ == "__main__":
    sys.exit(main())
