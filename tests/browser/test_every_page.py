"""Every page of the nav, opened in Chromium as a reader opens it.

Pages come from ``mkdocs.yml`` (tests/browser/nav.py), so a page added to the nav is
covered without a change here. Each page is also saved as a full-page screenshot under
``artifacts/screenshots/{desktop,phone}/``, which CI keeps as an artifact.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.browser.conftest import Screen
from tests.browser.harness import broken_internal_links, screenshot_path
from tests.browser.nav import NavPage, nav_pages

pytestmark = pytest.mark.browser

PAGES = nav_pages()


@pytest.mark.parametrize("nav", PAGES, ids=str)
def test_page_loads_without_errors_and_needs_nothing_outside_the_site(
    nav: NavPage, desktop: Screen
) -> None:
    visit = desktop.visit(nav)
    visit.page.screenshot(path=screenshot_path("desktop", nav), full_page=True)
    assert visit.page.title(), f"{nav.src} has no title"
    problems = visit.problems()
    assert not problems, f"{visit.url} ({nav.src}):\n  " + "\n  ".join(problems)


@pytest.mark.parametrize("nav", PAGES, ids=str)
def test_every_internal_link_and_anchor_on_the_page_resolves(nav: NavPage, desktop: Screen) -> None:
    visit = desktop.visit(nav)
    hrefs: list[str] = visit.page.eval_on_selector_all("a[href]", "as => as.map(a => a.href)")
    live_ids: list[str] = visit.page.eval_on_selector_all(
        "[id], a[name]", "es => es.flatMap(e => [e.id, e.getAttribute('name')]).filter(Boolean)"
    )
    internal = [h for h in hrefs if h.startswith(desktop.base_url)]
    assert internal, f"{nav.src}: no link to the rest of the site (is the nav rendered?)"
    broken = broken_internal_links(hrefs, desktop.base_url, set(live_ids), here=visit.url)
    assert not broken, f"{visit.url} ({nav.src}) links to:\n  " + "\n  ".join(broken)


# Elements allowed to be wider than a phone screen, because they scroll sideways inside
# their own box: code blocks, tables (Material wraps them in a scrolling box), notebook
# outputs, and the strip of content-tab labels.
SCROLLS_INSIDE = ", ".join(
    [
        "pre",
        ".highlight",
        "table",
        ".md-typeset__scrollwrap",
        ".jp-OutputArea-output",
        ".tabbed-labels",
    ]
)

SIDEWAYS_OVERFLOW = """
(allowed) => {
  const width = document.documentElement.clientWidth;
  const describe = (el) => {
    const id = el.id ? "#" + el.id : "";
    const cls = typeof el.className === "string" && el.className
      ? "." + el.className.trim().split(/\\s+/).join(".") : "";
    const text = (el.textContent || "").trim().replace(/\\s+/g, " ").slice(0, 60);
    const box = el.getBoundingClientRect();
    return `<${el.tagName.toLowerCase()}${id}${cls}> spans ${Math.round(box.left)}..` +
      `${Math.round(box.right)} px: "${text}"`;
  };
  const offenders = [];
  for (const el of document.querySelectorAll(".md-content *")) {
    if (el.closest(allowed)) continue;
    const box = el.getBoundingClientRect();
    if (box.width === 0 || box.height === 0) continue;
    if (box.right > width + 1 || box.left < -1) {
      // Report the outermost element only: its children overflow because it does.
      const parent = el.parentElement;
      const pbox = parent ? parent.getBoundingClientRect() : null;
      if (pbox && (pbox.right > width + 1 || pbox.left < -1)) continue;
      offenders.push(describe(el));
    }
  }
  return {
    viewport: width,
    scrollWidth: document.documentElement.scrollWidth,
    offenders: offenders.slice(0, 15),
  };
}
"""


@pytest.mark.parametrize("nav", PAGES, ids=str)
def test_page_reads_on_a_phone_without_sideways_scrolling(nav: NavPage, phone: Screen) -> None:
    visit = phone.visit(nav)
    visit.page.screenshot(path=screenshot_path("phone", nav), full_page=True)
    layout = visit.page.evaluate(SIDEWAYS_OVERFLOW, SCROLLS_INSIDE)
    assert layout["scrollWidth"] <= layout["viewport"], (
        f"{nav.src}: the page is {layout['scrollWidth']} px wide on a "
        f"{layout['viewport']} px screen: {layout['offenders']}"
    )
    assert not layout["offenders"], (
        f"{nav.src}: wider than the {layout['viewport']} px screen outside code blocks "
        "and tables:\n  " + "\n  ".join(layout["offenders"])
    )


# Text a table cell shows that only an emoji font draws: a character whose default is the
# emoji presentation (✅ ❌), or any pictograph asked to be one (⚠ followed by U+FE0F).
# The text inside an inline SVG icon is not drawn with a font, so it is left out.
CELLS_WITHOUT_EMOJI = r"""
() => {
  const emoji = /\p{Emoji_Presentation}|\p{Extended_Pictographic}\uFE0F/u;
  const found = [];
  let icons = 0;
  for (const cell of document.querySelectorAll(".md-content td, .md-content th")) {
    const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
    let text = "";
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      if (!node.parentElement.closest("svg")) text += node.data;
    }
    const row = cell.closest("tr");
    const name = (row ? row.cells[0] : cell).textContent.trim().replace(/\s+/g, " ");
    const where = `row "${name.slice(0, 50)}", column ${cell.cellIndex + 1}`;
    const hit = text.match(emoji);
    if (hit) found.push(`emoji ${JSON.stringify(hit[0])} in ${where}`);
    for (const icon of cell.querySelectorAll(".twemoji")) {
      icons += 1;
      const label = (icon.getAttribute("aria-label") || "").trim();
      if (!icon.querySelector("svg")) found.push(`an icon that is not inline SVG in ${where}`);
      else if (!label || icon.getAttribute("role") !== "img")
        found.push(`an icon with no text alternative in ${where}`);
    }
  }
  return {found, icons};
}
"""


@pytest.mark.parametrize("nav", PAGES, ids=str)
def test_no_table_cell_depends_on_an_emoji_font(nav: NavPage, desktop: Screen) -> None:
    # Debian's Chromium with no emoji font draws an emoji as an empty box: a table's marks
    # are Material icons, inline SVG with a text alternative (hooks/a11y.py).
    visit = desktop.visit(nav)
    seen: dict[str, Any] = visit.page.evaluate(CELLS_WITHOUT_EMOJI)
    assert not seen["found"], f"{visit.url} ({nav.src}):\n  " + "\n  ".join(seen["found"])
    if nav.src in ("matrix.md", "libraries.md"):
        assert seen["icons"] >= 40, f"{nav.src}: {seen['icons']} icons in its tables"
