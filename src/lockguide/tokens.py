"""Lock values: unique per acquisition and impossible to guess.

Defined in ``lockguide._core`` (the one file ``lock.py`` needs beside it).
"""

from lockguide._core import VALUE_BYTES, new_lock_value

__all__ = ["VALUE_BYTES", "new_lock_value"]
