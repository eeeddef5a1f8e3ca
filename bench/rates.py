"""Redlock's failures as rates: each condition run many times, with a 95 % interval.

Run from the repository root::

    .venv/bin/python -m bench.rates --runs 200 --testbed fake
    .venv/bin/python -m bench.rates --runs 30 --split-runs 20 --testbed real

Each row is one condition (a scenario, a way, its settings) repeated; every
run's history is checked by :mod:`lockguide_lab.history`:

* **stale write**: the fenced-resource model rejects the resource's writes (a
  write accepted from an older grant than one already accepted, or a final
  value that is not the last accepted write);
* **overlap**: the lease-service model rejects the lock's grants (two holders'
  validity windows overlap);
* **no winner**: nobody acquired the lock (the split vote's failure is
  liveness, not safety).

Rates come with Wilson's 95 % score interval, which stays inside [0, 1] and
is honest at 0 and at n of n. The clock-jump rows draw the jump for each run
from a range (the seed is printed), so that the rate depends on how often the
jump exceeds what is left of A's lease; the other rows repeat one setting.
"""

from __future__ import annotations

import argparse
import math
import random
import sys
from collections.abc import Callable
from dataclasses import dataclass

from lockguide_lab.history.judge import judge
from lockguide_lab.scenarios import (
    ClockJumpOnOneNode,
    FakeTestbed,
    RealTestbed,
    RedlockRestartForgetsLock,
    Scenario,
    SplitVote,
    Testbed,
    Way,
)

Z95 = 1.959963984540054


def wilson(hits: int, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson's score interval for ``hits`` of ``n`` (both ends as fractions)."""
    if n <= 0:
        raise ValueError("n must be positive")
    if not 0 <= hits <= n:
        raise ValueError(f"hits must be between 0 and n, got {hits} of {n}")
    p = hits / n
    centre = p + z * z / (2 * n)
    spread = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    scale = 1 + z * z / n
    low = 0.0 if hits == 0 else max(0.0, (centre - spread) / scale)
    high = 1.0 if hits == n else min(1.0, (centre + spread) / scale)
    return low, high


@dataclass(frozen=True)
class Condition:
    """One row: what runs, and how its settings are drawn for each run."""

    label: str
    way: Way
    make: Callable[[random.Random], Scenario]
    failure: str  # "stale write" or "no winner": the rate this row is about
    split: bool = False


def conditions() -> list[Condition]:
    jump_low, jump_high = 5_000.0, 15_000.0

    def jump(rng: random.Random) -> Scenario:
        return ClockJumpOnOneNode(jump_ms=rng.uniform(jump_low, jump_high))

    return [
        Condition(
            "clock jump on master 3, drawn from 5-15 s (TTL 10 s); unchecked writes",
            Way.BROKEN, jump, "stale write",
        ),
        Condition(
            "clock jump on master 3, drawn from 5-15 s (TTL 10 s); versioned writes",
            Way.FIXED, jump, "stale write",
        ),
        Condition(
            "master 3 restarts empty (no persistence)",
            Way.BROKEN, lambda _: RedlockRestartForgetsLock(), "stale write",
        ),
        Condition(
            "master 3 restarts from appendonly, appendfsync always",
            Way.FIXED, lambda _: RedlockRestartForgetsLock(), "stale write",
        ),
        Condition(
            "master 3 stays down 11 s (TTL 10 s), restarts empty",
            Way.FIXED, lambda _: RedlockRestartForgetsLock(restart_delay_ms=11_000), "stale write",
        ),
        Condition(
            "3 contenders, constant retry delay (620 ms)",
            Way.BROKEN, lambda _: SplitVote(), "no winner", split=True,
        ),
        Condition(
            "3 contenders, random retry delay (20-1220 ms)",
            Way.FIXED, lambda _: SplitVote(), "no winner", split=True,
        ),
    ]  # fmt: skip


@dataclass
class Row:
    condition: Condition
    runs: int = 0
    failures: int = 0
    overlaps: int = 0

    def cells(self) -> list[str]:
        low, high = wilson(self.failures, self.runs)
        low_o, high_o = wilson(self.overlaps, self.runs)
        return [
            self.condition.label,
            str(self.condition.way),
            self.condition.failure,
            f"{self.failures} / {self.runs}",
            f"{100 * self.failures / self.runs:.1f} % ({100 * low:.1f}-{100 * high:.1f})",
            f"{self.overlaps} / {self.runs} ({100 * low_o:.1f}-{100 * high_o:.1f} %)",
        ]


def measure(testbed: Testbed, condition: Condition, runs: int, rng: random.Random) -> Row:
    row = Row(condition)
    for _ in range(runs):
        timeline = condition.make(rng).run(testbed, condition.way)
        judgement = judge(timeline.history)
        row.runs += 1
        if condition.failure == "no winner":
            row.failures += not any(
                op.f == "acquire" and op.required for op in judgement.operations
            )
        else:
            row.failures += not judgement.fenced.ok
        row.overlaps += not judgement.lease.ok
    return row


def table(rows: list[Row], testbed: str) -> str:
    head = ["condition", "way", "failure", "runs failed", "rate (95 % interval)", "lock overlapped"]
    lines = [f"on {testbed}", "", "| " + " | ".join(head) + " |"]
    lines.append("| --- | --- | --- | ---: | ---: | ---: |")
    lines += ["| " + " | ".join(row.cells()) + " |" for row in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=200, help="runs per safety condition")
    parser.add_argument("--split-runs", type=int, default=None, help="runs per split-vote row")
    parser.add_argument("--testbed", choices=["fake", "real"], default="fake")
    parser.add_argument("--seed", type=int, default=2026)
    parser.add_argument("--only", choices=["safety", "split"], default=None)
    args = parser.parse_args(argv)
    split_runs = args.runs if args.split_runs is None else args.split_runs
    if args.runs < 1 or split_runs < 1:
        parser.error("--runs and --split-runs must be at least 1")
    rng = random.Random(args.seed)
    testbed: Testbed = FakeTestbed() if args.testbed == "fake" else RealTestbed()
    rows = []
    with testbed:
        for condition in conditions():
            if args.only == "safety" and condition.split:
                continue
            if args.only == "split" and not condition.split:
                continue
            runs = split_runs if condition.split else args.runs
            rows.append(measure(testbed, condition, runs, rng))
            print(" | ".join(rows[-1].cells()), file=sys.stderr, flush=True)
    print(f"seed {args.seed}; " + table(rows, testbed.label))
    return 0


if __name__ == "__main__":
    sys.exit(main())
