"""The asyncio benchmark runs (tiny sizes; no timing is asserted)."""

from __future__ import annotations

import re

import pytest

from bench import aio_bench

ROWS = (
    "floor: gather SET NX PX + gather EVALSHA, 5 masters",
    "lockguide.aio Redlock, 5 masters",
    "pottery AIORedlock, 5 masters",
)


@pytest.mark.real_redis
def test_the_async_benchmark_prints_every_implementation_with_its_ratio(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert aio_bench.main(["--rounds", "1", "--cycles", "5", "--warmup", "2"]) == 0
    out = capsys.readouterr().out
    for name in ROWS:
        assert re.search(rf"\| {re.escape(name)} +\| +\d+ \| +\d+\.\d\dx \|", out), name
    assert "lockguide.aio Redlock vs pottery AIORedlock:" in out
