# One controller drives a valve, which checks no token: a leader on etcd, with a lock-delay.
from collections.abc import Iterable

from lockguide import Leader, RenewalFailed

ENDPOINTS = ["http://10.0.0.1:2379", "http://10.0.0.2:2379", "http://10.0.0.3:2379"]


def control(name: str, readings: Iterable[float]) -> str:
    leader = Leader(
        ENDPOINTS,
        "lock:leader:valve-3",
        name=name,
        lease_ms=5_000,  # the cluster frees the role 5 s after the last keep-alive
        renew_deadline_ms=3_000,  # this process stops after 3 s without one
        retry_period_ms=1_000,
        lock_delay_ms=15_000,  # after a leader's crash, nobody is elected for 15 s more
    )
    try:
        with leader:  # a standby waits here until elected
            for reading in readings:
                leader.check()  # deposed: not one more command
                set_valve(decide(reading))
    except RenewalFailed:
        return "deposed"
    return "done"


def decide(reading: float) -> float: ...
def set_valve(opening: float) -> None: ...
