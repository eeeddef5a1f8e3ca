"""The benchmark and the split-vote experiment run (tiny sizes; no timing is asserted).

Their numbers are quoted on the site's performance page; these tests only keep
the commands working, and check the one property that is not a measurement:
no round of the contention experiment ever had two winners.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bench import redlock_bench, split_vote

ROWS = (
    "baseline: SET NX PX + EVALSHA, one node",
    "lockguide Lock, one node",
    "redis-py Lock, one node",
    "floor: both commands on 5 masters, all sent before any read",
    "lockguide Redlock, 5 masters",
    "pottery Redlock, 5 masters",
    "redlock-py, 5 masters",
)
#: Rows the benchmark prints that the performance page does not quote (yet).
UNQUOTED = ("tooz (Redis driver), one node", "redlock-ng Redlock, 5 masters")


def row(name: str) -> str:
    """A table row as the benchmark prints it: name, median, ratio."""
    return rf"\| {re.escape(name)} +\| +\d+ \| +\d+\.\d\dx \|"


@pytest.mark.real_redis
def test_the_benchmark_prints_every_implementation_with_its_ratio(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert redlock_bench.main(["--rounds", "1", "--cycles", "5", "--warmup", "2"]) == 0
    out = capsys.readouterr().out
    loopback, _, delayed = out.partition("mode: delayed link")
    assert "mode: loopback" in loopback
    for name in ROWS + UNQUOTED:
        assert re.search(row(name), loopback), name
        assert re.search(row(name), delayed), name
    assert "machine:" in out
    assert "lockguide Redlock vs pottery:" in out
    assert re.search(r"vs the floor for all masters: \d+\.\d\dx", out)


@pytest.mark.real_redis
def test_the_split_vote_experiment_never_has_two_winners(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert split_vote.main(["--clients", "4", "--rounds", "4", "--window-ms", "40"]) == 0
    out = capsys.readouterr().out
    rows = re.findall(r"^\| (random|fixed) \|.*\| (\d+) \|$", out, flags=re.MULTILINE)
    assert [mode for mode, _ in rows] == ["random", "fixed"]
    assert [two for _, two in rows] == ["0", "0"]


def test_the_performance_page_quotes_the_benchmark_s_own_rows() -> None:
    page = (Path(__file__).resolve().parents[2] / "docs/redlock/performance.md").read_text("utf-8")
    for name in ROWS:
        assert re.search(row(name), page), name
    assert "$ .venv/bin/python -m bench.redlock_bench" in page
    assert "$ .venv/bin/python -m bench.split_vote" in page
