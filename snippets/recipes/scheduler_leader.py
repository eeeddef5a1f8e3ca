# One scheduler fires each tick: the elected leader runs the loop; a key per tick stops a repeat.
import time

import redis

from lockguide import Leader, RenewalFailed

r = redis.Redis()
TICK_S = 60


def lead(name: str) -> None:
    """One term: fire every tick while leading. Returns once deposed: call it again."""
    leader = Leader(r, "lock:leader:scheduler", name=name)  # lease 15 s, renewed every 2 s
    try:
        with leader:  # campaigns until elected; resigns on the way out
            while not leader.lost_event.wait(TICK_S - time.time() % TICK_S):
                tick = int(time.time() // TICK_S) * TICK_S
                leader.check()  # RenewalFailed: deposed while it waited
                # Left to expire, never deleted: a late or skewed instance finds it and skips.
                if r.set(f"tick:{tick}", name, nx=True, px=10 * TICK_S * 1000):
                    fire_due_jobs(tick, token=leader.token)
    except RenewalFailed:
        return  # another instance leads now, or will once the lease ends


def fire_due_jobs(tick: int, token: int) -> None: ...
