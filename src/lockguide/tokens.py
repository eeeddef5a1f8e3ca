"""Lock values, unique per acquisition and impossible to guess (defined in ``lockguide._core``)."""

from lockguide._core import VALUE_BYTES, new_lock_value

__all__ = ["VALUE_BYTES", "new_lock_value"]
