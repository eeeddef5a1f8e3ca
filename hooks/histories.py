"""MkDocs hook: the lab's recorded histories, judged and drawn at build time.

``docs/lab/histories/SLUG-broken.jsonl`` and ``SLUG-fixed.jsonl`` are the
histories of one scenario's two runs (written by
``python -m lockguide_lab.history.site docs/lab/histories``). This hook:

* adds ``lab/histories/SLUG.png`` for each pair (broken above fixed), drawn by
  :mod:`lockguide_lab.history.plot`;
* replaces a page line ``<!-- history: SLUG -->`` with that figure, its alt
  text the checker's verdicts on both histories (judged here, at build time),
  followed by the checker's reports and the histories in a collapsed block;
* replaces ``<!-- history-verdicts -->`` with a table of every pair's verdicts.
"""

from __future__ import annotations

import posixpath
import re
from typing import Any

from mkdocs.structure.files import File, Files

from lockguide_lab.history.judge import judge
from lockguide_lab.history.plot import png
from lockguide_lab.history.site import describe, slug
from lockguide_lab.scenarios import SCENARIOS

PREFIX = "lab/histories/"
MARKER = re.compile(r"^<!-- history: ([a-z0-9-]+) -->$", re.MULTILINE)
TABLE = "<!-- history-verdicts -->"
TITLES = {slug(s): s.title for s in SCENARIOS}

_pairs: dict[str, list[tuple[str, str]]] = {}


def on_files(files: Files, config: Any) -> Files:
    """Read each pair of histories and add its figure as a generated file."""
    found: dict[str, dict[str, str]] = {}
    for file in list(files):
        uri = file.src_uri
        if uri.startswith(PREFIX) and uri.endswith(".jsonl"):
            name, _, way = uri[len(PREFIX) : -len(".jsonl")].rpartition("-")
            found.setdefault(name, {})[way] = file.content_bytes.decode("utf-8")
    for name, ways in sorted(found.items()):
        pair: list[tuple[str, str]] = [(w, ways[w]) for w in ("broken", "fixed") if w in ways]
        _pairs[name] = pair
        files.append(File.generated(config, f"{PREFIX}{name}.png", content=png(*pair)))
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Files) -> str:
    """Replace each ``<!-- history: SLUG -->`` with the figure, the verdicts, the lines."""

    def figure(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in _pairs:
            raise KeyError(f"{page.file.src_uri}: no docs/{PREFIX}{name}-*.jsonl to draw")
        pair = _pairs[name]
        here = posixpath.dirname(page.file.src_uri)
        src = posixpath.relpath(f"{PREFIX}{name}.png", here or ".")
        alt = describe(TITLES.get(name, name), pair).replace("[", "(").replace("]", ")")
        reports = []
        for way, history in pair:
            judgement = judge(history)
            reports.append(f"{way} run:\n{judgement.lease.report()}\n{judgement.fenced.report()}")
        text = (
            "\n\n".join(reports)
            + "\n\n"
            + "\n".join(f"{way}: {line}" for way, history in pair for line in history.splitlines())
        )
        block = "\n".join("    " + line if line else "" for line in text.splitlines())
        return (
            f"![{alt}]({src})\n\n"
            f'??? note "The checker\'s reports and the histories, line by line"\n\n'
            f"    ```text\n{block}\n    ```\n"
        )

    if TABLE in markdown:
        markdown = markdown.replace(TABLE, verdicts_table())
    return MARKER.sub(figure, markdown)


def _cell(verdict: Any, judgement: Any) -> str:
    if verdict.ok:
        return "linearizable"
    pair = judgement.pair(verdict)
    return "**not linearizable**" + (f": {pair[1]} after {pair[0]}" if pair else "")


def verdicts_table() -> str:
    """Scenario, way, and each model's verdict, judged now from the recorded histories."""
    lines = [
        "| scenario | way | lease service (the lock's grants) | fenced resource (the writes) |",
        "| --- | --- | --- | --- |",
    ]
    order = [slug(s) for s in SCENARIOS]
    for name in sorted(_pairs, key=lambda n: order.index(n) if n in order else len(order)):
        for way, history in _pairs[name]:
            judgement = judge(history)
            lines.append(
                f"| {TITLES.get(name, name)} | {way} | {_cell(judgement.lease, judgement)} "
                f"| {_cell(judgement.fenced, judgement)} |"
            )
    return "\n".join(lines)
