"""One small hierarchy of errors, each saying what the caller should do next.

Everything the library raises on purpose is a :class:`LockError`, so one
``except LockError`` catches it all; the subclasses say which story happened.
(They are defined in ``lockguide._core``, the one file ``lock.py`` needs beside it.)
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
