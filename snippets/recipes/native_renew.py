# Valkey 8.1+ or Redis 8.4+: renew with SET ... IFEQ, no script; plain redis-py 8.1.
import secrets

import redis

r = redis.Redis()
KEY, TTL_MS = "lock:search-rebuild", 60_000
RELEASE = "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end"
release = r.register_script(RELEASE)  # Redis 8.4+: r.delex(KEY, ifeq=value) instead


def rebuild_search(batches: list[str]) -> str:
    value = secrets.token_hex(20)
    if not r.set(KEY, value, nx=True, px=TTL_MS):
        return "busy"
    try:
        for batch in batches:
            index(batch)
            if not r.set(KEY, value, ifeq=value, px=TTL_MS):  # renew only if still ours
                return "lost the lock"  # it expired and may be someone else's: stop
    finally:
        release(keys=[KEY], args=[value])  # deletes nothing that is not ours
    return "done"


def index(batch: str) -> None: ...
