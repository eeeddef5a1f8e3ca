"""One hierarchy of errors, each saying what to do next: ``except LockError`` catches them all.

Defined in ``lockguide._core`` (the one file ``lock.py`` needs beside it), named in its ``__all__``.
"""

from lockguide._core import *  # noqa: F403
from lockguide._core import __all__ as __all__
