"""The check that a rerun of the recorded scenarios still gives the verdicts the site draws."""

from __future__ import annotations

from pathlib import Path

import pytest

from lockguide_lab.scenarios.recorded import load, save, verdicts
from lockguide_lab.scenarios.timeline import Timeline


def matches_recorded(
    request: pytest.FixtureRequest, path: Path, broken: Timeline, fixed: Timeline, what: str
) -> None:
    """The runs' verdicts are the ones recorded in ``path`` (which the site draws); with
    ``--update-recorded``, or no file yet, the runs are recorded there instead."""
    if request.config.getoption("--update-recorded") or not path.exists():
        save(path, broken, fixed)
        return
    kept = load(path)
    assert [verdicts(t) for t in kept] == [verdicts(broken), verdicts(fixed)], (
        f"{path.name} no longer matches what {what} does; rerun with --update-recorded "
        "if the change is intended"
    )
