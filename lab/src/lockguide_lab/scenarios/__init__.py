"""The failure modes of a Redis lock, as scenarios that run and return a timeline.

Each scenario is a short script with two ways to run it: ``broken`` (the code
most projects have) and ``fixed`` (the guide's fix). A run records what
happened, time-stamped, and a verdict read from the events and from the
protected resource at the end::

    from lockguide_lab.scenarios import FakeBench, PausedHolder

    with FakeBench() as bench:  # in-process servers, virtual clock
        broken, fixed = PausedHolder(ttl_ms=30_000, pause_ms=35_000).both(bench)
    print(broken.verdict.summary())  # mutual exclusion BROKEN; data LOST; ...
    print(fixed.table())             # every event, then the verdict

:class:`FakeBench` needs no server (fakeredis, virtual time); :class:`RealBench`
runs the same scripts against ``redis-server`` processes it starts. The
timelines draw themselves with :func:`lockguide_lab.scenarios.plot.figure`
(matplotlib, a development dependency).
"""

from lockguide_lab.scenarios.bench import (
    Bench,
    ClientBench,
    FailoverPair,
    FakeBench,
    RealBench,
    ServerHandle,
)
from lockguide_lab.scenarios.clock import Clock, RealClock, VirtualClock
from lockguide_lab.scenarios.core import (
    BareDelLock,
    FencedResource,
    Holder,
    PlainResource,
    Resource,
    Run,
    Scenario,
    VersionedResource,
    Way,
)
from lockguide_lab.scenarios.failover import FailoverLosesLock, RestartForgetsLock
from lockguide_lab.scenarios.lease import BareDelAfterExpiry, PausedHolder, WorkOutlastsTtl
from lockguide_lab.scenarios.redlock import ClockJumpOnOneNode, RedlockRestartForgetsLock, SplitVote
from lockguide_lab.scenarios.timeline import Event, Interval, Kind, Timeline, Verdict

#: Every scenario, in the order the guide tells them.
SCENARIOS: tuple[type[Scenario], ...] = (
    PausedHolder,
    BareDelAfterExpiry,
    WorkOutlastsTtl,
    FailoverLosesLock,
    RestartForgetsLock,
    ClockJumpOnOneNode,
    RedlockRestartForgetsLock,
    SplitVote,
)

__all__ = [
    "SCENARIOS",
    "BareDelAfterExpiry",
    "BareDelLock",
    "Bench",
    "ClientBench",
    "Clock",
    "ClockJumpOnOneNode",
    "Event",
    "FailoverLosesLock",
    "FailoverPair",
    "FakeBench",
    "FencedResource",
    "Holder",
    "Interval",
    "Kind",
    "PausedHolder",
    "PlainResource",
    "RealBench",
    "RealClock",
    "RedlockRestartForgetsLock",
    "Resource",
    "RestartForgetsLock",
    "Run",
    "Scenario",
    "ServerHandle",
    "SplitVote",
    "Timeline",
    "Verdict",
    "VersionedResource",
    "VirtualClock",
    "Way",
    "WorkOutlastsTtl",
]
