# Re-encode a video in parts: a 30 s lease, renewed while the job runs, for two hours at most.
import redis

from lockguide import Lock, NotAcquired, RenewalFailed, Watchdog

r = redis.Redis()


def encode_video(video_id: str, parts: list[str]) -> str:
    lock = Lock(r, f"lock:encode:{video_id}", ttl_ms=30_000, timeout_ms=1_000)
    try:
        # Acquires; renews every 10 s until the block ends. The bound is the job's own
        # (the slowest encode measured took 50 min), not the default of ten TTLs (5 min).
        with Watchdog(lock, max_total_ms=2 * 3600_000) as dog:
            for part in parts:
                encode(part)
                dog.check()  # RenewalFailed as soon as a renewal found the lease gone
    except NotAcquired:
        return "busy"
    except RenewalFailed:
        return "lost the lock"  # stop: someone else may be encoding now
    return "done"


def encode(part: str) -> None: ...
