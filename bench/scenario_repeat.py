"""Run one lab scenario many times, both ways, and count how often each outcome came out.

Run from the repository root::

    .venv/bin/python -m bench.scenario_repeat SplitVote --runs 20 --testbed fake
    .venv/bin/python -m bench.scenario_repeat SplitVote --runs 20 --testbed real

The scenarios that run in real time (``SplitVote``, ``WorkOutlastsTtl``) depend
on thread scheduling; the test suite checks one run of each. This command
says how stable that one run is on this machine, now: for each way it prints
how many runs were safe, made progress, and matched what the lab says (broken:
unsafe or no progress; fixed: safe with progress). Nothing is timed.
"""

from __future__ import annotations

import argparse
import sys

from lockguide_lab import scenarios
from lockguide_lab.scenarios import FakeTestbed, RealTestbed, Scenario, Testbed, Timeline


def expected(scenario: type[Scenario], timeline: Timeline) -> bool:
    """Whether a run came out as the lab says it does."""
    outcome = timeline.outcome
    if timeline.way == "fixed":
        return outcome.safe and outcome.progress
    if scenario.liveness:
        return outcome.safe and not outcome.progress
    return not outcome.safe


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    names = [s.__name__ for s in scenarios.SCENARIOS]
    parser.add_argument("scenario", choices=names)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--testbed", choices=["fake", "real"], default="fake")
    parser.add_argument("--show", action="store_true", help="print every unexpected timeline")
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    scenario: type[Scenario] = getattr(scenarios, args.scenario)
    testbed: Testbed = FakeTestbed() if args.testbed == "fake" else RealTestbed()
    counts = {way: {"safe": 0, "progress": 0, "as expected": 0} for way in ("broken", "fixed")}
    with testbed:
        for _ in range(args.runs):
            for timeline in scenario().both(testbed):
                tally = counts[timeline.way]
                tally["safe"] += timeline.outcome.safe
                tally["progress"] += timeline.outcome.progress
                ok = expected(scenario, timeline)
                tally["as expected"] += ok
                if not ok and args.show:
                    print(timeline.table(), end="\n\n")
    print(f"{args.scenario}, {args.runs} runs each way on {testbed.label}")
    print()
    print("| way | safe | made progress | as the lab says |")
    print("| --- | ---: | ---: | ---: |")
    for way, tally in counts.items():
        cells = " | ".join(f"{tally[k]} / {args.runs}" for k in ("safe", "progress", "as expected"))
        print(f"| {way} | {cells} |")
    unexpected = sum(args.runs - tally["as expected"] for tally in counts.values())
    return 1 if unexpected else 0


if __name__ == "__main__":
    sys.exit(main())
