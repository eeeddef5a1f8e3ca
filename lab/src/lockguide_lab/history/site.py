"""The histories the site draws: recorded from the lab's runs, kept as JSON lines.

``python -m lockguide_lab.history.site docs/lab/histories`` runs every Redis and
Redlock scenario both ways on fakeredis (virtual clock) and writes each run's
history as ``SLUG-broken.jsonl`` and ``SLUG-fixed.jsonl``. The site's hook
(``hooks/histories.py``) judges them again at build time and draws them, so
the verdict in a figure's alt text is the checker's, never typed in.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence
from pathlib import Path

from lockguide_lab.history.judge import Judgement, judge
from lockguide_lab.scenarios import SCENARIOS, FakeTestbed, Scenario

__all__ = ["describe", "record", "slug"]


def slug(scenario: type[Scenario]) -> str:
    """``PausedHolder`` -> ``paused-holder``."""
    return re.sub(r"(?<!^)(?=[A-Z])", "-", scenario.__name__).lower()


def record(folder: Path, scenarios: Sequence[type[Scenario]] = SCENARIOS) -> list[Path]:
    """Run each scenario both ways on a fresh FakeTestbed; write the histories."""
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    with FakeTestbed() as testbed:
        for scenario in scenarios:
            for timeline in scenario().both(testbed):
                path = folder / f"{slug(scenario)}-{timeline.way}.jsonl"
                path.write_text(timeline.history, encoding="utf-8")
                written.append(path)
    return written


def _verdict(label: str, judgement: Judgement, which: str) -> str:
    verdict = judgement.lease if which == "lease" else judgement.fenced
    model = "lease-service" if which == "lease" else "fenced-resource"
    if verdict.ok:
        return f"{label}: the {model} model finds it linearizable"
    pair = judgement.pair(verdict)
    if pair is None:
        return f"{label}: the {model} model finds it not linearizable"
    what = "grant overlaps" if which == "lease" else "stale write came after"
    first, second = pair
    return f"{label}: the {model} model finds it not linearizable ({second}'s {what} {first}'s)"


def describe(title: str, histories: list[tuple[str, str]]) -> str:
    """The alt text of a figure: what it shows and both models' verdicts on each history."""
    parts = []
    for label, history in histories:
        judgement = judge(history)
        clients = sorted({op.invoke.extra.get("client", "") for op in judgement.operations
                          if op.invoke is not None} - {"observer"})  # fmt: skip
        parts.append(
            f"{label} run, {len(judgement.operations)} operations by clients "
            f"{', '.join(map(str, clients))}; "
            + "; ".join(_verdict(label, judgement, which) for which in ("lease", "fenced"))
        )
    return f"History of {title}: one row per client, one bar per operation. " + ". ".join(parts)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    folder = Path(args[0] if args else "docs/lab/histories")
    for path in record(folder):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
