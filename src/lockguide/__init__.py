"""lockguide: the reference implementation behind the distributed-locks guide.

Every rule the guide teaches is enforced here: unpredictable lock values,
compare-and-delete release, monotonic deadlines measured from before the request,
and typed errors that say what to do next. The same locks on ``redis.asyncio``,
under the same names, are in :mod:`lockguide.aio`.
"""

from lockguide._core import DEFAULT_TIMEOUT_MS
from lockguide.errors import (
    AlreadyAcquired,
    BadArgument,
    BadArgumentType,
    ClusterUnavailable,
    ExtensionLimitReached,
    LockError,
    LockLost,
    MajorityLost,
    MasterError,
    NoQuorum,
    NotAcquired,
    NotOwned,
    RenewalFailed,
    StaleToken,
    VersionConflict,
    WrongOwner,
)
from lockguide.fencing import FencedLock, FencedStore, SqlFencedStore, Stored, WriteResult
from lockguide.lock import Lock
from lockguide.redlock import Attempt, Redlock
from lockguide.renewal import Watchdog
from lockguide.tokens import new_lock_value
from lockguide.validity import Verdict, drift_ms, judge, quorum, ttl_for_validity, validity_ms
from lockguide.versioned import CasResult, Versioned, VersionedValue

__all__ = [
    "DEFAULT_TIMEOUT_MS",
    "AlreadyAcquired",
    "Attempt",
    "BadArgument",
    "BadArgumentType",
    "CasResult",
    "ClusterUnavailable",
    "ExtensionLimitReached",
    "FencedLock",
    "FencedStore",
    "Lock",
    "LockError",
    "LockLost",
    "MajorityLost",
    "MasterError",
    "NoQuorum",
    "NotAcquired",
    "NotOwned",
    "Redlock",
    "RenewalFailed",
    "SqlFencedStore",
    "StaleToken",
    "Stored",
    "Verdict",
    "VersionConflict",
    "Versioned",
    "VersionedValue",
    "Watchdog",
    "WriteResult",
    "WrongOwner",
    "drift_ms",
    "judge",
    "new_lock_value",
    "quorum",
    "ttl_for_validity",
    "validity_ms",
]
