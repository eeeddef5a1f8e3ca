"""axe-core, the accessibility engine, run inside a page of the built site.

axe-core comes from the npm registry at the exact version pinned in
``tests/browser/package.json`` and ``package-lock.json``, installed into
``tests/browser/node_modules/`` by ``npm ci`` (the Makefile's bootstrap step and
``.ci/run`` do it). Without it the accessibility checks skip with the command to run;
with ``LOCKGUIDE_REQUIRE_BROWSER=1`` (as ``.ci/run`` sets) that is a failure.

The checks run the rules axe tags as WCAG 2.0 and 2.1, levels A and AA, and a page
fails on any finding axe rates *serious* or *critical*.
"""

from __future__ import annotations

import functools
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Page

from tests.browser.harness import REQUIRE_BROWSER_ENV

HERE = Path(__file__).resolve().parent
AXE_PACKAGE = HERE / "node_modules" / "axe-core"

WCAG_TAGS = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"]
BLOCKING = ("serious", "critical")


def pinned_version() -> str:
    """The axe-core version the lock file pins."""
    lock = json.loads((HERE / "package-lock.json").read_text("utf-8"))
    return str(lock["packages"]["node_modules/axe-core"]["version"])


@functools.cache
def axe_source() -> str:
    """axe.min.js as installed by ``npm ci``; skips (or fails when required) without it."""
    want = pinned_version()
    manifest = AXE_PACKAGE / "package.json"
    script = AXE_PACKAGE / "axe.min.js"
    reason = None
    if not script.exists() or not manifest.exists():
        reason = "axe-core is not installed"
    else:
        have = json.loads(manifest.read_text("utf-8")).get("version")
        if have != want:
            reason = f"axe-core {have} is installed, the lock file pins {want}"
    if reason is None:
        return script.read_text("utf-8")
    reason += " (run: npm ci --prefix tests/browser; `make venv` does it when npm is present)"
    if os.environ.get(REQUIRE_BROWSER_ENV) == "1":
        pytest.fail(f"{REQUIRE_BROWSER_ENV}=1 but {reason}", pytrace=False)
    pytest.skip(reason)


# Runs the WCAG 2.0/2.1 A and AA rules on the whole document and returns each
# violation with the elements it was found on.
RUN_AXE = """
async (tags) => {
  const result = await axe.run(document, {
    runOnly: { type: "tag", values: tags },
    resultTypes: ["violations"],
  });
  return result.violations.map((v) => ({
    rule: v.id,
    impact: v.impact,
    help: v.help,
    nodes: v.nodes.map((n) => ({
      impact: n.impact,
      target: n.target.map(String).join(" "),
      html: n.html.slice(0, 160),
      summary: (n.failureSummary || "").replace(/\\s+/g, " ").slice(0, 240),
    })),
  }));
}
"""


@dataclass(frozen=True)
class Finding:
    """One element that breaks one rule."""

    rule: str
    impact: str
    help: str
    target: str
    html: str
    summary: str

    def __str__(self) -> str:
        return f"[{self.impact}] {self.rule} ({self.help}) at {self.target}: {self.summary}"


def run_axe(page: Page) -> list[Finding]:
    """Every WCAG 2 A/AA finding axe-core makes on the page as it is now, at any impact."""
    if not page.evaluate("() => typeof window.axe !== 'undefined'"):
        page.add_script_tag(content=axe_source())
    violations: list[dict[str, Any]] = page.evaluate(RUN_AXE, WCAG_TAGS)
    return [
        Finding(
            rule=v["rule"],
            impact=str(n["impact"] or v["impact"]),
            help=v["help"],
            target=n["target"],
            html=n["html"],
            summary=n["summary"],
        )
        for v in violations
        for n in v["nodes"]
    ]


def blocking(findings: list[Finding]) -> list[Finding]:
    """The findings that fail a page: serious or critical."""
    return [f for f in findings if f.impact in BLOCKING]
