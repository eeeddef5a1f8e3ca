# The nightly price update: the lock saves duplicate work, the token protects the row.
import psycopg
import redis

from lockguide import FencedLock, LockLost, SqlFencedStore, StaleToken

DSN = "host=127.0.0.1 dbname=shop user=shop"
r = redis.Redis()


def publish_prices(catalogue: str) -> bool:
    """True if our prices are the ones stored; False if a newer holder's are."""
    lock = FencedLock(r, f"lock:prices:{catalogue}", ttl_ms=60_000, timeout_ms=5_000)
    with psycopg.connect(DSN) as db:
        store = SqlFencedStore(db, f"prices:{catalogue}")
        store.setup()  # idempotent: creates the table (fence_token NOT NULL) and this row
        try:
            with lock:  # NotAcquired goes up: the caller retries later
                store.write(lock.token, compute_prices(catalogue))  # one write per token
        except StaleToken:
            return False  # a holder with a newer token wrote first: drop ours
        except LockLost:
            pass  # the lease ended after the write; the store had already accepted it
    return True


def compute_prices(catalogue: str) -> str: ...
