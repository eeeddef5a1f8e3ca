# GET /invoices/<id>.pdf renders the PDF once, with redis-py's own Lock.
import logging

import redis
from redis.exceptions import LockError, LockNotOwnedError

r = redis.Redis(socket_timeout=2)
log = logging.getLogger(__name__)


def invoice_pdf(invoice_id: int) -> int:
    """The handler; returns the HTTP status."""
    lock = r.lock(
        f"lock:invoice-pdf:{invoice_id}",
        timeout=60,  # the lease, in seconds; without it a crashed holder keeps the lock for ever
        blocking_timeout=5,  # wait at most 5 s, then LockError
    )
    try:
        with lock:
            render_pdf(invoice_id)
    except LockNotOwnedError:  # raised by the release: the 60 s ran out while rendering
        log.warning("invoice %s: lease lost while rendering; rendered twice?", invoice_id)
    except LockError:
        return 503  # still busy after 5 s: the client retries
    return 200


def render_pdf(invoice_id: int) -> None: ...
