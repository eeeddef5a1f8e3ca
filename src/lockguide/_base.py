"""Checks the consensus locks share with the Redis locks (defined in ``lockguide._core``)."""

from lockguide._core import check_delay_range, check_key, check_ms

__all__ = ["check_delay_range", "check_key", "check_ms"]
