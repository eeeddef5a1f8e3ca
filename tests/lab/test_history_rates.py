"""The rates command: Wilson's interval, and a tiny run of every safety condition."""

from __future__ import annotations

import math

import pytest

from bench import rates


@pytest.mark.parametrize(
    ("hits", "n", "low", "high"),
    [
        # The score interval at z = 1.96, as tables of it give it (0 of 10: 0 to 27.8 %).
        (0, 10, 0.0, 0.2775),
        (10, 10, 0.7225, 1.0),
        (5, 10, 0.2366, 0.7634),
        (108, 200, 0.4708, 0.6076),
        (0, 200, 0.0, 0.01884),
    ],
)
def test_wilson_interval_matches_worked_values(hits: int, n: int, low: float, high: float) -> None:
    got_low, got_high = rates.wilson(hits, n)
    assert math.isclose(got_low, low, abs_tol=5e-4)
    assert math.isclose(got_high, high, abs_tol=5e-4)
    assert got_low <= hits / n <= got_high


def test_wilson_refuses_impossible_counts() -> None:
    with pytest.raises(ValueError, match="n must be positive"):
        rates.wilson(0, 0)
    with pytest.raises(ValueError, match="between 0 and n"):
        rates.wilson(3, 2)


def test_the_rates_command_prints_a_row_per_condition(capsys: pytest.CaptureFixture[str]) -> None:
    assert rates.main(["--runs", "2", "--only", "safety", "--testbed", "fake"]) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith("| ") and " / 2 " in line]
    assert len(rows) == 5
    restart_broken = next(r for r in rows if "restarts empty (no persistence)" in r)
    assert "| 2 / 2 | 100.0 % (34.2-100.0) |" in restart_broken
    for row in rows:
        if "| fixed |" in row:
            assert "| 0 / 2 | 0.0 %" in row
