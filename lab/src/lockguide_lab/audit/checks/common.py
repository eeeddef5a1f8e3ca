"""What every check shares: its settings, how it writes its row, how it acquires."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from lockguide_lab.audit.adapter import Holder
from lockguide_lab.audit.report import Check, Control, Row, Status
from lockguide_lab.audit.session import AuditSession, CheckError, LockKey

#: Seed used to test whether values come from Python's ``random`` module.
SEED = 20160208
#: Lease used by the pause check (libraries with whole-second TTLs round up).
PAUSE_TTL_MS = 300
#: One-way delay the links add in the parallel-acquisition check.
LINK_DELAY_S = 0.03
#: How long the retry check lets a blocked acquire keep trying.
RETRY_WAIT_MS = 1000
#: The longer wait it makes once when the first fitted only two attempts (too few to judge).
RETRY_WAIT_MS_LOADED = 3000
#: Lease used by the drift check (and the clock warp of the monotonic check). Its drift
#: allowance (1 % + 2 ms = 42 ms) leaves a lock without one about 39 ms to accept the grant
#: "just inside" it: with 2 s (22 ms) a holder process continued after SIGSTOP missed that
#: window about one run in two, even on an idle machine.
DRIFT_TTL_MS = 4000
#: The lease of the drift check's other two holders (no pause, and a pause past the whole
#: lease): no allowance is at stake there, so a short one, that the pause must outlast.
PAST_TTL_MS = 1000
#: How far past the lease the drift check's paused holder is continued.
DRIFT_PAST_MS = 150


CheckFunction = Callable[[AuditSession], Row]

#: Every row the check modules declare with :func:`audit_row`, by id, as they are imported.
#: ``lockguide_lab.audit.checks.CHECKS`` is this, in report order.
DECLARED: dict[str, Check] = {}


def audit_row(
    check_id: str,
    title: str,
    *,
    must: bool,
    order: int,
    does: str,
    passes: str,
    items: tuple[str, ...] = (),
    redlock_only: bool = False,
    controls: tuple[Control, ...] = (),
) -> Callable[[CheckFunction], CheckFunction]:
    """Declare the row a check function runs: the one place a row is written.

    The report, the command line's ``--check`` choices, the libraries page's table, the
    Audit page's table and the control tests are all derived from these declarations.
    """

    def declare(function: CheckFunction) -> CheckFunction:
        if check_id in DECLARED:
            raise ValueError(f"audit row {check_id!r} is declared twice")
        if clash := [c.id for c in DECLARED.values() if c.order == order]:
            raise ValueError(f"audit rows {check_id!r} and {clash[0]!r} share order={order}")
        DECLARED[check_id] = Check(
            check_id,
            title,
            must,
            redlock_only,
            items,
            order=order,
            does=does,
            passes=passes,
            controls=controls,
            run=function,
        )
        return function

    return declare


def row(check_id: str, status: Status, summary: str, **extra: Any) -> Row:
    check = DECLARED[check_id]
    return Row(
        id=check.id,
        title=check.title,
        must=check.must,
        status=status,
        summary=summary,
        details=list(extra.pop("details", [])),
        data=dict(extra),
    )


def seconds(ms: float) -> str:
    """A lease for a summary: whole seconds rounded up, or ms below a second."""
    if ms >= 1000:
        return f"{math.ceil(ms / 1000)} s"
    return f"{math.ceil(ms / 100) * 100} ms"


def acquire(session: AuditSession, holder: Holder, wait_ms: float = 0) -> list[LockKey]:
    got, keys, _ = session.acquire_observed(holder, wait_ms)
    if not got:
        raise CheckError("could not acquire an uncontended lock")
    return keys


class NotApplicable(Exception):
    """The check does not apply to this lock (reported as n/a)."""


def redlock_only(session: AuditSession, check_id: str) -> None:
    """Raise :class:`NotApplicable` unless the lock under audit uses several masters."""
    adapter = session.adapter()
    if not adapter.multi_master:
        raise NotApplicable("single instance: applies to Redlock-style locks only")
