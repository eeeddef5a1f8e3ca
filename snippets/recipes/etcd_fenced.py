# Rotate a signing key: an etcd lock; its revision is the token the database checks.
from lockguide import NotAcquired, SqlFencedStore, StaleToken
from lockguide.etcd import EtcdLock

ENDPOINTS = ["http://10.0.0.1:2379", "http://10.0.0.2:2379", "http://10.0.0.3:2379"]


def rotate_signing_key(db: object) -> bool:
    """db: a sqlite3 or psycopg connection to the database that keeps the key."""
    store = SqlFencedStore(db, "signing-key")
    store.setup()  # idempotent: creates the table and this row if missing
    lock = EtcdLock(ENDPOINTS, "lock:signing-key", ttl_ms=10_000, timeout_ms=2_000)
    try:
        with lock:  # granted by a quorum; a keep-alive thread renews the lease
            store.write(lock.token, new_key())  # token: the revision that created the key
    except NotAcquired:
        return False  # another rotation is running
    except StaleToken:
        return False  # a newer holder already stored its key: ours is dropped
    return True


def new_key() -> str: ...
