"""The validity calculator's JavaScript computes exactly what ``lockguide.validity`` does.

The widget (``includes/validity-calculator.html``) runs its arithmetic in the
reader's browser, from ``docs/javascripts/validity-calculator.js``. These tests
run that same file under Node.js and compare every result with the Python
functions over a grid of inputs, so a change to either side that the other does
not follow fails here. Node ships with this project's machine image and
``.ci/run`` installs it where it is missing; locally a missing ``node`` skips,
and under ``LOCKGUIDE_REQUIRE_REAL_REDIS=1`` (CI) it fails.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import shutil
import subprocess
from html.parser import HTMLParser
from typing import Any

import pytest

from lockguide.validity import (
    DEFAULT_DRIFT_FACTOR,
    DEFAULT_DRIFT_FLOOR_MS,
    drift_ms,
    judge,
    quorum,
    validity_ms,
)
from tests.docs.test_docs import ROOT
from tests.support import REQUIRE_REAL_ENV

SCRIPT = ROOT / "docs" / "javascripts" / "validity-calculator.js"
WIDGET = ROOT / "includes" / "validity-calculator.html"

TTLS = [1, 3, 50, 100, 1_000, 10_000, 30_000, 123_457]
ELAPSED = [0, 0.5, 3, 40, 99.9, 1_001, 9_897, 9_898, 9_950, 40_000]
FACTORS = [0.0, 0.001, 0.01, 0.05, 0.1, 0.3]
NODES = range(1, 8)


def node_executable() -> str:
    exe = shutil.which("node")
    if exe is not None:
        return exe
    reason = "node is not on PATH, so the calculator's JavaScript cannot be run"
    if os.environ.get(REQUIRE_REAL_ENV) == "1":
        pytest.fail(f"{REQUIRE_REAL_ENV}=1 but {reason}", pytrace=False)
    pytest.skip(reason)


def run_js(program: str, payload: object) -> Any:
    """Run ``program`` under Node with the calculator loaded as ``calc``; JSON in, JSON out."""
    prelude = f"const calc = require({json.dumps(str(SCRIPT))});\n"
    prelude += "const input = JSON.parse(require('fs').readFileSync(0, 'utf8'));\n"
    result = subprocess.run(
        [node_executable(), "-e", prelude + program],
        input=json.dumps(payload),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def grid() -> list[tuple[float, float, float, int, int]]:
    return [
        (ttl, elapsed, factor, nodes, votes)
        for ttl, elapsed, factor, nodes in itertools.product(TTLS, ELAPSED, FACTORS, NODES)
        for votes in range(nodes + 1)
    ]


def test_js_judges_every_input_exactly_as_the_library_does() -> None:
    cases = grid()
    results = run_js(
        """
        const out = input.map(([ttl, elapsed, factor, nodes, votes]) => {
          const v = calc.judge(ttl, elapsed, votes, nodes, factor);
          return [calc.driftMs(ttl, factor), calc.validityMs(ttl, elapsed, factor),
                  calc.quorum(nodes), v.driftMs, v.validityMs, v.needed, v.majority, v.acquired];
        });
        process.stdout.write(JSON.stringify(out));
        """,
        cases,
    )
    assert len(results) == len(cases) > 10_000
    mismatches = []
    for (ttl, elapsed, factor, nodes, votes), got in zip(cases, results, strict=True):
        py = judge(ttl, elapsed, votes=votes, n_masters=nodes, drift_factor=factor)
        expected = [
            drift_ms(ttl, factor),
            validity_ms(ttl, elapsed, factor),
            quorum(nodes),
            py.drift_ms,
            py.validity_ms,
            py.needed,
            py.majority,
            py.acquired,
        ]
        # Exact equality: both sides do the same IEEE-754 operations in the same order.
        if got != expected:
            mismatches.append(((ttl, elapsed, factor, nodes, votes), got, expected))
    assert mismatches == [], f"{len(mismatches)} mismatches, first: {mismatches[:3]}"
    # The grid reaches every outcome, so an always-true or always-false verdict fails.
    outcomes = {(row[6], row[7]) for row in results}
    assert outcomes == {(True, True), (True, False), (False, False)}


def test_js_refuses_a_quorum_of_no_nodes_as_the_library_does() -> None:
    with pytest.raises(ValueError, match="at least one"):
        quorum(0)
    errors = run_js(
        """
        const out = input.map((n) => {
          try { calc.quorum(n); return null; } catch (e) { return e.name + ": " + e.message; }
        });
        process.stdout.write(JSON.stringify(out));
        """,
        [0, -1],
    )
    assert errors == ["RangeError: a quorum needs at least one master"] * 2


def test_js_uses_the_library_defaults() -> None:
    floor = run_js("process.stdout.write(JSON.stringify(calc.DRIFT_FLOOR_MS));", None)
    assert floor == DEFAULT_DRIFT_FLOOR_MS
    assert float(widget_inputs()["factor"]) == DEFAULT_DRIFT_FACTOR


def test_script_is_harmless_on_a_page_without_the_widget() -> None:
    # Load the file as a browser would (no `module`), with a document that has no widget.
    result = run_js(
        """
        const vm = require('vm');
        const queried = [];
        const documentStub = {
          readyState: 'complete',
          querySelectorAll: (selector) => { queried.push(selector); return []; },
        };
        const context = { document: documentStub };
        context.window = context;
        vm.runInNewContext(require('fs').readFileSync(input, 'utf8'), context);
        process.stdout.write(JSON.stringify({
          queried: queried,
          exported: typeof context.lockguideValidity.judge,
        }));
        """,
        str(SCRIPT),
    )
    assert result == {"queried": ["[data-validity-calculator]"], "exported": "function"}


class _WidgetParser(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.inputs: dict[str, str] = {}
        self.outputs: dict[str, str] = {}
        self._open: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        if tag == "input" and found.get("name"):
            self.inputs[str(found["name"])] = str(found.get("value"))
        if tag == "output":
            self._open = found.get("data-out")

    def handle_data(self, data: str) -> None:
        if self._open:
            self.outputs[self._open] = self.outputs.get(self._open, "") + data

    def handle_endtag(self, tag: str) -> None:
        if tag == "output":
            self._open = None


def widget_inputs() -> dict[str, str]:
    parser = _WidgetParser()
    parser.feed(WIDGET.read_text("utf-8"))
    return parser.inputs


def test_the_text_shown_before_the_script_runs_matches_the_library() -> None:
    parser = _WidgetParser()
    parser.feed(WIDGET.read_text("utf-8"))
    values = {name: float(value) for name, value in parser.inputs.items()}
    verdict = judge(
        values["ttl"],
        values["elapsed"],
        votes=int(values["votes"]),
        n_masters=int(values["nodes"]),
        drift_factor=values["factor"],
    )
    validity = re.sub(r"[^\d.]", "", parser.outputs["validity"])
    margin = re.sub(r"[^\d.]", "", parser.outputs["margin"].split("(")[0])
    assert float(validity) == verdict.validity_ms
    assert float(margin) == verdict.drift_ms
    assert parser.outputs["majority"].startswith("yes" if verdict.majority else "no")
    assert parser.outputs["verdict"].startswith("Acquired" if verdict.acquired else "Not")
