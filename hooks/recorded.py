"""MkDocs hook: the consensus runs' figures, drawn at build time from recorded timelines.

The consensus scenarios need a real etcd cluster and ZooKeeper ensemble, which
the site build does not have. ``tests/lab/test_consensus_runs.py`` runs them on
real clusters and keeps each run's timelines in ``docs/lab/recorded/NAME.json``
(and fails when a rerun's verdicts differ). This hook draws them with the lab's
own figure code, as the notebooks do for the Redis runs:

* every ``lab/recorded/NAME.json`` gets a generated ``lab/recorded/NAME.png``
  (broken above fixed);
* a page line ``<!-- recorded: NAME -->`` becomes that figure, its alt text
  the two outcomes, followed by the recorded events in a collapsed block.
"""

from __future__ import annotations

import posixpath
import re
from typing import Any

from mkdocs.structure.files import File, Files

from lockguide_lab.scenarios.plot import png
from lockguide_lab.scenarios.recorded import from_dict
from lockguide_lab.scenarios.timeline import Timeline

PREFIX = "lab/recorded/"
MARKER = re.compile(r"^<!-- recorded: ([a-z0-9-]+) -->$", re.MULTILINE)

_runs: dict[str, list[Timeline]] = {}


def on_files(files: Files, config: Any) -> Files:
    """Load each recorded JSON and add its figure as a generated file."""
    import json

    for file in list(files):
        if file.src_uri.startswith(PREFIX) and file.src_uri.endswith(".json"):
            name = file.src_uri[len(PREFIX) : -len(".json")]
            data = json.loads(file.content_bytes)
            runs = [from_dict(d) for d in data]
            _runs[name] = runs
            files.append(File.generated(config, f"{PREFIX}{name}.png", content=png(*runs)))
    return files


def _alt(runs: list[Timeline]) -> str:
    parts = [f"{t.way} ({t.approach}): {t.outcome.summary()}" for t in runs]
    return f"{runs[0].scenario}, recorded on {runs[0].testbed}. " + ". ".join(parts) + "."


def on_page_markdown(markdown: str, page: Any, config: Any, files: Files) -> str:
    """Replace each ``<!-- recorded: NAME -->`` with the figure and the events."""

    def figure(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in _runs:
            raise KeyError(f"{page.file.src_uri}: no docs/{PREFIX}{name}.json to draw")
        runs = _runs[name]
        here = posixpath.dirname(page.file.src_uri)
        src = posixpath.relpath(f"{PREFIX}{name}.png", here or ".")
        tables = "\n\n".join(t.table() for t in runs)
        block = "\n".join("    " + line if line else "" for line in tables.splitlines())
        alt = _alt(runs).replace("[", "(").replace("]", ")")
        return (
            f"![{alt}]({src})\n\n"
            f'??? note "The events of these two runs, as recorded"\n\n'
            f"    ```text\n{block}\n    ```\n"
        )

    return MARKER.sub(figure, markdown)
