"""The checklist, one function per row; each runs the lock and reports what happened.

Each row is declared once, by :func:`audit_row` on its function; :data:`CHECKS`
collects them. The rows are grouped by what they need: :mod:`.holding` (any lock),
:mod:`.pause` (a holder in its own process), :mod:`.renewal`,
:mod:`.redlock` (several masters) and :mod:`.timing` (several masters, their
replies held and the clocks moved).
"""

from __future__ import annotations

import importlib
import pkgutil
import time

from lockguide_lab.audit.adapter import Unsupported
from lockguide_lab.audit.checks.common import (
    DECLARED,
    LINK_DELAY_S,
    CheckFunction,
    NotApplicable,
    audit_row,
    row,
)
from lockguide_lab.audit.report import Check, Row, Status
from lockguide_lab.audit.session import AuditSession, CheckError, NotRunnable

__all__ = [
    "CHECKS",
    "CHECKS_BY_ID",
    "CHECK_FUNCTIONS",
    "LINK_DELAY_S",
    "TRIES",
    "audit_row",
    "run_check",
]

# Every module of this package declares its rows as it is imported: a new module (or a
# new row in one) needs no line here.
for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")

#: The audit's rows, in report order. ``must`` rows decide the exit status.
CHECKS: tuple[Check, ...] = tuple(sorted(DECLARED.values(), key=lambda check: check.order))
CHECKS_BY_ID: dict[str, Check] = {check.id: check for check in CHECKS}
#: The function that runs each row (the tests replace one to try run_check's retries).
CHECK_FUNCTIONS: dict[str, CheckFunction] = {
    check.id: check.run for check in CHECKS if check.run is not None
}


#: How many times a check is tried when it could not make its condition happen (a
#: :class:`CheckError`: no SET passed the links, the pause did not happen). That says
#: nothing about the lock, and a loaded machine makes it now and then (CI saw pottery's
#: monotonic row once): the verdict comes from a try whose condition did happen.
TRIES = 2


def run_check(session: AuditSession, check_id: str) -> Row:
    """Run one check, turning its exceptions into honest rows; always clean up."""
    for tries_left in range(TRIES - 1, -1, -1):
        started = time.monotonic()
        try:
            result = CHECK_FUNCTIONS[check_id](session)
            result.data["seconds"] = round(time.monotonic() - started, 2)
            return result
        except NotApplicable as why:
            return row(check_id, Status.NA, str(why))
        except Unsupported as why:  # an argument the library does not take: said, not guessed
            return row(check_id, Status.NOT_RUN, f"not supported by the library: {why}")
        except NotRunnable as why:
            status = Status.NA if str(why).startswith("not applicable") else Status.NOT_RUN
            return row(check_id, status, str(why))
        except CheckError as error:
            if not tries_left:
                return row(check_id, Status.ERROR, f"the check could not run: {error}")
        except Exception as error:
            return row(check_id, Status.ERROR, f"the check raised {type(error).__name__}: {error}")
        finally:
            session.cleanup()
    raise AssertionError("unreachable: the last try returns")
