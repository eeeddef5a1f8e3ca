"""The failure modes of a Redis lock, as scenarios that run and return a timeline.

Each scenario is a short script with two ways to run it: ``broken`` (the code
most projects have) and ``fixed`` (the guide's fix). A run records what
happened, time-stamped, and an outcome read from the events and from the
protected resource at the end::

    from lockguide_lab.scenarios import FakeTestbed, PausedHolder

    with FakeTestbed() as testbed:  # in-process servers, virtual clock
        broken, fixed = PausedHolder(ttl_ms=30_000, pause_ms=35_000).both(testbed)
    print(broken.outcome.summary())  # mutual exclusion BROKEN; data LOST; ...
    print(fixed.table())             # every event, then the outcome

Where they run is the :mod:`~lockguide_lab.testbed` (re-exported here):
:class:`FakeTestbed` needs no server (fakeredis, virtual time);
:class:`RealTestbed` runs the same scripts against ``redis-server`` processes
it starts; :class:`ClientTestbed` uses a server you already run. The
timelines draw themselves with :func:`lockguide_lab.scenarios.plot.figure`
(matplotlib).
"""

from lockguide_lab.scenarios.actor import Actor
from lockguide_lab.scenarios.failover import FailoverLosesLock, RestartForgetsLock
from lockguide_lab.scenarios.leader import LeaderFailover, PartitionedLeader, PausedLeader
from lockguide_lab.scenarios.lease import BareDelAfterExpiry, PausedHolder, WorkOutlastsTtl
from lockguide_lab.scenarios.locks import BareDelLock
from lockguide_lab.scenarios.redlock import ClockJumpOnOneNode, RedlockRestartForgetsLock, SplitVote
from lockguide_lab.scenarios.resources import (
    FencedResource,
    PlainResource,
    Resource,
    VersionedResource,
)
from lockguide_lab.scenarios.run import Run, Scenario, Way
from lockguide_lab.scenarios.timeline import Event, Interval, Kind, Outcome, Timeline
from lockguide_lab.testbed import ClientTestbed, FakeTestbed, RealTestbed, Testbed

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
    PausedLeader,
    PartitionedLeader,
    LeaderFailover,
)

__all__ = [
    "SCENARIOS",
    "Actor",
    "BareDelAfterExpiry",
    "BareDelLock",
    "ClientTestbed",
    "ClockJumpOnOneNode",
    "Event",
    "FailoverLosesLock",
    "FakeTestbed",
    "FencedResource",
    "Interval",
    "Kind",
    "LeaderFailover",
    "Outcome",
    "PartitionedLeader",
    "PausedHolder",
    "PausedLeader",
    "PlainResource",
    "RealTestbed",
    "RedlockRestartForgetsLock",
    "Resource",
    "RestartForgetsLock",
    "Run",
    "Scenario",
    "SplitVote",
    "Testbed",
    "Timeline",
    "VersionedResource",
    "Way",
    "WorkOutlastsTtl",
]
