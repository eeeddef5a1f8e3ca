"""lockguide: the reference implementation behind the distributed-locks guide.

The same locks on ``redis.asyncio``, under the same names, are in :mod:`lockguide.aio`.
"""

from lockguide import _core
from lockguide._core import *  # noqa: F403 - the errors (lockguide.errors), named in _core.__all__
from lockguide._core import DEFAULT_TIMEOUT_MS, Holder
from lockguide.fencing import FencedLock, FencedStore, SqlFencedStore, Stored, WriteResult
from lockguide.leader import Leader, Term
from lockguide.lock import Lock
from lockguide.redlock import Attempt, Redlock
from lockguide.renewal import Watchdog
from lockguide.tokens import new_lock_value
from lockguide.validity import Verdict, drift_ms, judge, quorum, ttl_for_validity, validity_ms
from lockguide.versioned import CasResult, Versioned, VersionedValue

__all__ = ["DEFAULT_TIMEOUT_MS", "Attempt", "CasResult", "FencedLock", "FencedStore", "Holder"]
__all__ += ["Leader", "Lock", "Term"]
__all__ += ["Redlock", "SqlFencedStore", "Stored", "Verdict", "Versioned", "VersionedValue"]
__all__ += ["Watchdog", "WriteResult", "drift_ms", "judge", "new_lock_value", "quorum"]
__all__ += ["ttl_for_validity", "validity_ms"]
__all__ += _core.__all__  # the errors
