"""The contention benchmark runs (tiny sizes; no timing is asserted).

Its numbers are quoted in issue 27's closing note and on the performance page;
this test only keeps the command working: every library gets its row, the
targets are judged, and ``--json`` saves what was printed.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from bench import contention_bench


@pytest.mark.real_redis
def test_the_contention_benchmark_prints_every_library_and_the_targets(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    saved = tmp_path / "contention.json"
    argv = ["--seconds", "0.2", "--workers", "2", "--warmup", "0.05", "--alone-seconds", "0.05"]
    assert contention_bench.main([*argv, "--json", str(saved)]) == 0
    out = capsys.readouterr().out
    assert "| 2 workers, 5 ms holds, 0.2 s" in out
    for library in contention_bench.LIBRARIES:
        cells = r" +\| +\d+ \(\d+%\) \| +[\d.,]+ ms \| +[\d.,]+ ms \| +\d+\.\.\d+ \| +\d+ \|"
        assert re.search(rf"^\| {re.escape(library.label)}{cells}$", out, re.MULTILINE), library
        assert f"{library.label}: {library.settings}" in out
    assert re.search(r"W=2 +lockguide `Lock` +grants/s >= 90 % of ideal: \d+% +(met|MISSED)", out)
    assert "load average" in out
    assert re.search(r"the hold alone, no lock: time.sleep \d+/s, asyncio.sleep \d+/s", out)
    results = json.loads(saved.read_text("utf-8"))
    assert {run["library"] for run in results["runs"]} == set(contention_bench.BY_NAME)


@pytest.mark.real_redis
def test_a_subset_of_libraries_is_judged_without_the_missing_peers(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["--libraries", "lockguide", "--workers", "8", "--seconds", "0.1", "--warmup", "0.05"]
    assert contention_bench.main([*argv, "--alone-seconds", "0"]) == 0
    out = capsys.readouterr().out
    assert "python-redis-lock |" not in out
    assert re.search(r"commands/s per worker < python-redis-lock's: \d+ +n/a", out)
    assert re.search(r"wait p99 ahead of every peer: [\d.,]+ ms +n/a", out)
