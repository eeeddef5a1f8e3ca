# POST /tenants/<id>/reindex: one rebuild of a tenant's search index at a time.
import logging
from collections.abc import Callable

import redis

from lockguide import Lock, LockLost, NotAcquired

r = redis.Redis()
log = logging.getLogger(__name__)


def reindex(tenant: str) -> int:
    """The handler; returns the HTTP status."""
    lock = Lock(r, f"lock:reindex:{tenant}", ttl_ms=120_000, timeout_ms=1_000)
    try:
        with lock:
            rebuild_index(tenant, time_left_ms=lock.validity_remaining_ms)  # stop early if short
    except NotAcquired:
        return 409  # a rebuild is already running (or Redis did not answer within 1 s)
    except LockLost:  # raised on leaving the block: the lease ended before the release
        log.warning("reindex %s outlived its lease; another may have overlapped", tenant)
    return 200


def rebuild_index(tenant: str, time_left_ms: Callable[[], float]) -> None: ...
