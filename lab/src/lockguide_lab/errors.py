"""Errors of the lab itself (not of the locks it runs)."""

from __future__ import annotations

from lockguide.errors import LockError

__all__ = ["ScenarioError"]


class ScenarioError(LockError):
    """A failure scenario could not set up the state it needs on its testbed.

    Raised by :mod:`lockguide_lab.scenarios` when a server did not do what the
    scenario arranged (a replica that never caught up, a server that did not
    come back after a restart), or when a testbed cannot provide what a scenario
    asks for (real servers without ``redis-server`` installed). The scenario's
    outcome would mean nothing, so none is given: fix the testbed and run again.
    """
