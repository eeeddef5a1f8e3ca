"""The checklist, one function per row; each runs the lock and reports what happened.

The rows are grouped by what they need: :mod:`.holding` (any lock),
:mod:`.pause` (a holder in its own process), :mod:`.renewal`,
:mod:`.redlock` (several masters) and :mod:`.timing` (several masters, their
replies held and the clocks moved).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from lockguide_lab.audit.adapter import Unsupported
from lockguide_lab.audit.checks.common import LINK_DELAY_S, NotApplicable, row
from lockguide_lab.audit.checks.holding import (
    check_exclusion,
    check_fencing,
    check_release,
    check_ttl,
    check_unique,
    check_unpredictable,
)
from lockguide_lab.audit.checks.lifecycle import (
    check_cancel,
    check_fork,
    check_renewal_stops,
    check_wait,
)
from lockguide_lab.audit.checks.pause import check_pause
from lockguide_lab.audit.checks.redlock import check_parallel, check_partial, check_retry
from lockguide_lab.audit.checks.renewal import check_renewal
from lockguide_lab.audit.checks.timing import check_drift, check_monotonic
from lockguide_lab.audit.report import Row, Status
from lockguide_lab.audit.session import AuditSession, CheckError, NotRunnable

__all__ = ["CHECK_FUNCTIONS", "LINK_DELAY_S", "TRIES", "run_check"]


CHECK_FUNCTIONS: dict[str, Callable[[AuditSession], Row]] = {
    "unique": check_unique,
    "unpredictable": check_unpredictable,
    "release": check_release,
    "ttl": check_ttl,
    "exclusion": check_exclusion,
    "pause": check_pause,
    "fencing": check_fencing,
    "renewal": check_renewal,
    "wait": check_wait,
    "cancel": check_cancel,
    "renewal-stops": check_renewal_stops,
    "fork": check_fork,
    "parallel": check_parallel,
    "partial": check_partial,
    "retry": check_retry,
    "drift": check_drift,
    "monotonic": check_monotonic,
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
