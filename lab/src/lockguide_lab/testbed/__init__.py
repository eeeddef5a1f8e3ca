"""The testbed: servers, a network link and a clock that the lab can break on purpose.

One mechanism per job, used by the scenarios, the audit, the test suite and
the benchmarks alike:

* :mod:`~lockguide_lab.testbed.process`: :class:`RedisServer`, a real
  ``redis-server`` to start, freeze (``SIGSTOP``), crash (``SIGKILL``) and
  restart (pytest-redis's executor underneath);
* :mod:`~lockguide_lab.testbed.fakeserver`: :class:`FakeServer`, an in-process
  fakeredis server, optionally on a lab clock;
* :mod:`~lockguide_lab.testbed.link`: :class:`Link`, the one loopback TCP link
  that delays, cuts, retargets, observes and gates;
* :mod:`~lockguide_lab.testbed.clock`: :class:`RealClock` and the one fake
  clock, :class:`VirtualClock` (passed to locks as ``clock=``);
* the testbeds a scenario runs on, built from those parts:
  :class:`FakeTestbed` (no server, virtual time), :class:`RealTestbed` (real
  processes, real time) and :class:`ClientTestbed` (a server you already run).
"""

from __future__ import annotations

from lockguide_lab.testbed.base import FailoverPair, LockServer, Testbed
from lockguide_lab.testbed.client import ClientTestbed
from lockguide_lab.testbed.clock import Clock, ProcessClocks, RealClock, VirtualClock
from lockguide_lab.testbed.fake import FakeTestbed
from lockguide_lab.testbed.fakeserver import FakeServer
from lockguide_lab.testbed.link import Link
from lockguide_lab.testbed.process import RedisServer, ServerUnavailable, servers
from lockguide_lab.testbed.real import RealTestbed

__all__ = [
    "ClientTestbed",
    "Clock",
    "FailoverPair",
    "FakeServer",
    "FakeTestbed",
    "Link",
    "LockServer",
    "ProcessClocks",
    "RealClock",
    "RealTestbed",
    "RedisServer",
    "ServerUnavailable",
    "Testbed",
    "VirtualClock",
    "servers",
]
