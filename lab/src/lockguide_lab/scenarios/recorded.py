"""Timelines kept as JSON: recorded on real clusters, drawn where no cluster runs.

The consensus runs need etcd and ZooKeeper; the site must build without
them. So each run's timeline is saved (:func:`save`) by the test that runs it
on the real clusters, kept in the repository, and drawn from the file at build
time (:func:`load`). The test fails when the verdicts it records
(:func:`verdicts`) no longer match what the clusters do, and rewrites the files
when asked to (``pytest --update-recorded``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from lockguide_lab.scenarios.timeline import Event, Kind, Timeline

__all__ = ["from_dict", "load", "save", "to_dict", "verdicts"]


def to_dict(timeline: Timeline) -> dict[str, Any]:
    """A timeline as plain JSON data."""
    return {
        "scenario": timeline.scenario,
        "way": timeline.way,
        "approach": timeline.approach,
        "testbed": timeline.testbed,
        "parameters": timeline.parameters,
        "final_value": timeline.final_value,
        "events": [
            {"t_ms": e.t_ms, "actor": e.actor, "kind": str(e.kind), "detail": e.detail}
            | ({"value": e.value} if e.value is not None else {})
            for e in timeline.events
        ],
        "outcome": verdicts(timeline),
    }


def from_dict(data: dict[str, Any]) -> Timeline:
    """The timeline :func:`to_dict` wrote."""
    return Timeline(
        scenario=data["scenario"],
        way=data["way"],
        approach=data["approach"],
        testbed=data["testbed"],
        events=tuple(
            Event(e["t_ms"], e["actor"], Kind(e["kind"]), e.get("detail", ""), e.get("value"))
            for e in data["events"]
        ),
        final_value=data["final_value"],
        parameters=data.get("parameters", {}),
    )


def verdicts(timeline: Timeline) -> dict[str, Any]:
    """What a rerun must reproduce: the outcome, without the timings in its reasons."""
    outcome = timeline.outcome
    return {
        "mutual_exclusion": outcome.mutual_exclusion,
        "data_intact": outcome.data_intact,
        "progress": outcome.progress,
        "overlapping": list(outcome.overlapping),
        "final_value": timeline.final_value,
    }


def save(path: Path, *timelines: Timeline) -> None:
    """Write ``timelines`` (broken, then fixed) to ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps([to_dict(t) for t in timelines], indent=1, ensure_ascii=False)
    path.write_text(text + "\n", encoding="utf-8")


def load(path: Path) -> list[Timeline]:
    """The timelines saved in ``path``."""
    return [from_dict(d) for d in json.loads(path.read_text(encoding="utf-8"))]
