"""A lab run's history, judged by the two models that say what a lock owes.

* the **lease-service** model on the lock's grants (key ``"lock"``): did the
  lock ever promise two holders windows that overlap?
* the **fenced-resource** model on the resource's writes (key ``"resource"``):
  was a write accepted carrying an older token (or, without fencing, an older
  grant) than one already accepted, and does the final read return the last
  accepted write?

::

    from lockguide_lab.history.judge import judge
    j = judge(timeline.history)
    j.lease.ok, j.fenced.ok, j.pair(j.fenced)   # e.g. False, False, ("A", "B")
"""

from __future__ import annotations

from dataclasses import dataclass

from lockguide_lab.history.check import Verdict, check
from lockguide_lab.history.history import Op, parse
from lockguide_lab.history.models import FencedResource, LeaseService
from lockguide_lab.history.record import LEASE_KEY, RESOURCE_KEY

__all__ = ["Judgement", "client", "judge"]


def client(op: Op | None) -> str | None:
    """The client name an operation was recorded under (its process number otherwise)."""
    if op is None:
        return None
    name = op.invoke.extra.get("client") if op.invoke is not None else None
    return str(name) if name is not None else str(op.process)


@dataclass(frozen=True)
class Judgement:
    """Both models' verdicts on one run."""

    lease: Verdict
    fenced: Verdict
    operations: tuple[Op, ...]

    @property
    def ok(self) -> bool:
        """Both models accept the history."""
        return self.lease.ok and self.fenced.ok

    @staticmethod
    def pair(verdict: Verdict) -> tuple[str, str] | None:
        """The two clients of a violation: the one that came first, then the other."""
        if verdict.ok or verdict.unplaced is None:
            return None
        first, second = client(verdict.conflict), client(verdict.unplaced)
        if first is None or second is None:
            return None
        return first, second

    def summary(self) -> str:
        """One line per model."""
        lines = []
        for label, verdict in (("lease service", self.lease), ("fenced resource", self.fenced)):
            if verdict.ok:
                lines.append(f"{label}: linearizable ({verdict.operations} operations)")
                continue
            pair = self.pair(verdict)
            who = f": {pair[0]} and {pair[1]}" if pair else ""
            lines.append(f"{label}: NOT linearizable{who}")
        return "; ".join(lines)


def judge(history: str) -> Judgement:
    """Check a run's history (JSON lines) against the lease-service and fenced-resource models."""
    ops = parse(history)
    lease = check(LeaseService(), [op for op in ops if op.key == LEASE_KEY])
    fenced = check(FencedResource(), [op for op in ops if op.key == RESOURCE_KEY])
    return Judgement(lease, fenced, tuple(ops))
