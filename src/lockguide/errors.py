"""One hierarchy of errors, each saying what to do next: ``except LockError`` catches them all.

Defined in ``lockguide._core``, the one file ``lock.py`` needs beside it.
"""

from lockguide._core import (
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

__all__ = [
    "AlreadyAcquired",
    "BadArgument",
    "BadArgumentType",
    "ClusterUnavailable",
    "ExtensionLimitReached",
    "LockError",
    "LockLost",
    "MajorityLost",
    "MasterError",
    "NoQuorum",
    "NotAcquired",
    "NotOwned",
    "RenewalFailed",
    "StaleToken",
    "VersionConflict",
    "WrongOwner",
]
