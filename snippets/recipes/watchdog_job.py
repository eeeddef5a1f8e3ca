# Re-encode a video in parts: a 30 s lease, renewed for as long as the job runs.
import redis

from lockguide import Lock, NotAcquired, RenewalFailed, Watchdog

r = redis.Redis()


def encode_video(video_id: str, parts: list[str]) -> str:
    lock = Lock(r, f"lock:encode:{video_id}", ttl_ms=30_000, timeout_ms=1_000)
    try:
        # acquires; renews every 10 s until the block ends, for 2 h at most (slowest run: 70 min)
        with Watchdog(lock, max_total_ms=2 * 3_600_000) as dog:
            for part in parts:
                encode(part)
                dog.check()  # RenewalFailed as soon as a renewal found the lease gone
    except NotAcquired:
        return "busy"
    except RenewalFailed:
        return "lost the lock"  # lease lost or the 2 h bound passed: someone else may be encoding
    return "done"


def encode(part: str) -> None: ...
