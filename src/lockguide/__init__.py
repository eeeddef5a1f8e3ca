"""lockguide: the reference implementation behind the distributed-locks guide.

Every rule the guide teaches is enforced here: unpredictable lock values,
compare-and-delete release, monotonic deadlines measured from before the
request, and typed errors that say what to do next.
"""

from lockguide.errors import (
    AlreadyAcquired,
    BadArgument,
    BadArgumentType,
    ExtensionLimitReached,
    LockError,
    LockLost,
    MajorityLost,
    NoQuorum,
    NotAcquired,
    NotOwned,
)
from lockguide.lock import Lock
from lockguide.redlock import Attempt, Redlock
from lockguide.tokens import new_lock_value
from lockguide.validity import (
    Verdict,
    drift_ms,
    judge,
    quorum,
    ttl_for_validity,
    validity_ms,
)

__all__ = [
    "AlreadyAcquired",
    "Attempt",
    "BadArgument",
    "BadArgumentType",
    "ExtensionLimitReached",
    "Lock",
    "LockError",
    "LockLost",
    "MajorityLost",
    "NoQuorum",
    "NotAcquired",
    "NotOwned",
    "Redlock",
    "Verdict",
    "drift_ms",
    "judge",
    "new_lock_value",
    "quorum",
    "ttl_for_validity",
    "validity_ms",
]
