"""Histories of lab runs, and a linearizability checker for them.

A history is a list of operations, each an invoke and its completion, in
Jepsen's shape (see :mod:`~lockguide_lab.history.history`). The checker
(:func:`check`) searches for an order of the operations that fits both the
real-time order and a model (:mod:`~lockguide_lab.history.models`): a register,
a lease service, a fenced resource. From the command line::

    python -m lockguide_lab.history check --model register FILE

prints ``linearizable`` or ``not linearizable`` (with the smallest failing
prefix and the operation it could not place) and exits 0 or 1; a malformed
history exits 2, naming its line.
"""

from lockguide_lab.history.check import Verdict, check, linearizable
from lockguide_lab.history.history import Event, HistoryError, Op, Status, operations, parse
from lockguide_lab.history.judge import Judgement, judge
from lockguide_lab.history.models import MODELS, FencedResource, LeaseService, Model, Register
from lockguide_lab.history.record import LEASE_KEY, RESOURCE_KEY, Pending, Recorder

__all__ = [
    "LEASE_KEY",
    "MODELS",
    "RESOURCE_KEY",
    "Event",
    "FencedResource",
    "HistoryError",
    "Judgement",
    "LeaseService",
    "Model",
    "Op",
    "Pending",
    "Recorder",
    "Register",
    "Status",
    "Verdict",
    "check",
    "judge",
    "linearizable",
    "operations",
    "parse",
]
