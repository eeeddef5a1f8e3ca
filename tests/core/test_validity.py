"""The validity arithmetic: pure functions, checked against worked numbers."""

from __future__ import annotations

import pytest

from lockguide import drift_ms, judge, quorum, validity_ms


@pytest.mark.parametrize(("n", "needed"), [(1, 1), (2, 2), (3, 2), (4, 3), (5, 3), (7, 4)])
def test_quorum_is_a_strict_majority(n: int, needed: int) -> None:
    assert quorum(n) == needed


def test_quorum_of_nothing_is_an_error() -> None:
    with pytest.raises(ValueError, match="at least one"):
        quorum(0)


def test_drift_is_one_percent_plus_two_ms() -> None:
    assert drift_ms(10_000) == pytest.approx(102.0)
    assert drift_ms(100) == pytest.approx(3.0)


def test_validity_for_a_ten_second_lock_acquired_in_40_ms() -> None:
    assert validity_ms(10_000, 40) == pytest.approx(9_858.0)


def test_acquired_needs_both_majority_and_time_left() -> None:
    assert judge(10_000, 40, votes=3, n_masters=5).acquired
    assert not judge(10_000, 40, votes=2, n_masters=5).acquired
    late = judge(10_000, 9_950, votes=5, n_masters=5)
    assert late.majority
    assert late.validity_ms < 0
    assert not late.acquired
