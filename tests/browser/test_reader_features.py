"""The features a reader uses, exercised in Chromium: diagrams, notebook outputs, copy
buttons, search, the checklist and the validity calculator.

Pages are found from the nav and the built site, never listed by hand, so pages added
later are covered. Checks for pages that do not exist yet (the checklist, the validity
calculator) skip with the reason until they land, and then run.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from playwright.sync_api import Locator, Page

from lockguide.validity import judge
from tests.browser.conftest import Screen
from tests.browser.harness import SCREENSHOTS, first_number, pdf_page_count
from tests.browser.nav import NavPage, docs_dir, nav_page_for, nav_pages, page_url
from tests.browser.notebooks import CodeCell
from tests.sitebuild import SiteBuild

pytestmark = pytest.mark.browser

NotebookCells = Callable[[Path], tuple[CodeCell, ...]]

PAGES = nav_pages()
NOTEBOOK_PAGES = [p for p in PAGES if p.is_notebook]


def built_html(built_site: SiteBuild, nav: NavPage) -> str:
    return (built_site.site_dir / nav.url / "index.html").read_text("utf-8")


# --- Mermaid -------------------------------------------------------------------------

# A diagram's source as the Markdown build leaves it: <pre class="mermaid"> (or a div).
MERMAID_SOURCE = re.compile(r'<(?:pre|div)\b[^>]*\bclass="(?:[^"]*\s)?mermaid(?:\s[^"]*)?"')

RENDERED_DIAGRAMS = """
() => ({
  unrendered: [...document.querySelectorAll("pre.mermaid")]
    .map((pre) => pre.textContent.trim().replace(/\\s+/g, " ").slice(0, 80)),
  diagrams: [...document.querySelectorAll("div.mermaid")].map((host) => {
    const svg = host.shadowRoot ? host.shadowRoot.querySelector("svg") : null;
    const box = host.getBoundingClientRect();
    return {
      svg: svg !== null,
      width: box.width,
      height: box.height,
      labels: svg ? svg.querySelectorAll("text, foreignObject").length : 0,
      error: svg !== null && (svg.querySelector(".error-icon, .error-text") !== null
        || /syntax error/i.test(svg.textContent)),
    };
  }),
})
"""


def test_mermaid_diagrams_render_to_svg(desktop: Screen, built_site: SiteBuild) -> None:
    expected = {nav: len(MERMAID_SOURCE.findall(built_html(built_site, nav))) for nav in PAGES}
    expected = {nav: count for nav, count in expected.items() if count}
    assert expected, "no page has a Mermaid diagram, yet docs/deciding.md has one"
    failures = []
    for nav, count in expected.items():
        state = desktop.visit(nav).page.evaluate(RENDERED_DIAGRAMS)
        for source in state["unrendered"]:
            failures.append(f"{nav.src}: diagram left as source, Mermaid did not render: {source}")
        drawn = state["diagrams"]
        if len(drawn) != count:
            failures.append(f"{nav.src}: {count} diagram(s) in the page, {len(drawn)} rendered")
        for i, d in enumerate(drawn, 1):
            if not d["svg"] or d["error"] or not d["labels"] or d["width"] <= 0 or d["height"] <= 0:
                failures.append(f"{nav.src}: diagram {i} is not a drawn SVG: {d}")
    assert not failures, "\n".join(failures)


# --- Notebooks -----------------------------------------------------------------------

NOTEBOOK_CELLS = """
(cells) => {
  const innermost = [...document.querySelectorAll(".jp-CodeCell")]
    .filter((el) => !el.querySelector(".jp-CodeCell"));
  return cells.map(({ id, index }) => {
    const el = id ? document.getElementById("cell-id=" + id) : innermost[index];
    if (!el) return null;
    const outputs = [...el.querySelectorAll(".jp-OutputArea-output")];
    const images = outputs.filter((o) => o.matches(".jp-RenderedImage, .jp-RenderedSVG")
      || (o.dataset.mimeType || "").startsWith("image/"));
    const drawn = (o) => {
      const media = o.querySelector("img, svg");
      if (!media) return false;
      const box = media.getBoundingClientRect();
      const loaded = media.tagName !== "IMG" || (media.complete && media.naturalWidth > 0);
      return loaded && box.width > 0 && box.height > 0;
    };
    return {
      shown: outputs.filter((o) => o.getBoundingClientRect().height > 0
        && (o.innerText.trim() !== "" || o.querySelector("img, svg"))).length,
      images: images.length,
      drawn: images.filter(drawn).length,
    };
  });
}
"""


@pytest.mark.parametrize("nav", NOTEBOOK_PAGES, ids=str)
def test_notebook_page_shows_the_outputs_of_its_cells(
    nav: NavPage, desktop: Screen, notebook_cells: NotebookCells
) -> None:
    cells = notebook_cells(docs_dir() / nav.src)
    assert any(c.has_output for c in cells), f"{nav.src}: no cell prints or draws anything"
    shown = desktop.visit(nav).page.evaluate(
        NOTEBOOK_CELLS, [{"id": c.cell_id, "index": c.index} for c in cells]
    )
    failures = []
    for cell, page_cell in zip(cells, shown, strict=True):
        name = f"{nav.src} code cell {cell.index + 1} ({cell.cell_id})"
        if page_cell is None:
            failures.append(f"{name}: not on the page")
            continue
        if cell.has_output and not page_cell["shown"]:
            failures.append(f"{name}: has output when run, the page shows none")
        if page_cell["images"] != cell.images or page_cell["drawn"] != cell.images:
            failures.append(
                f"{name}: draws {cell.images} figure(s) when run; the page has "
                f"{page_cell['images']}, of which {page_cell['drawn']} displayed"
            )
    assert not failures, "\n".join(failures)


# --- Copy buttons --------------------------------------------------------------------


# What the clipboard holds once a click has written it (it is emptied before each click),
# with the confirmation dialog's text at that moment; it then empties the clipboard for the
# next click. Polled until the clipboard is written.
CLIPBOARD_WRITTEN = """
async () => {
  const text = await navigator.clipboard.readText();
  if (text === "") return false;
  const dialog = document.querySelector(".md-dialog__inner");
  await navigator.clipboard.writeText("");
  return { text, dialog: dialog ? dialog.textContent : null };
}
"""


def clipboard_after_click(page: Page, button: Locator) -> tuple[str, str | None]:
    """Click ``button`` with the clipboard empty; return what the clipboard then holds and
    the text of Material's confirmation dialog (``None``: no dialog). The clipboard is left
    empty again."""
    button.click()
    written = page.wait_for_function(CLIPBOARD_WRITTEN, timeout=5_000).json_value()
    return str(written["text"]), written["dialog"]


def same_code(a: str, b: str) -> bool:
    """Equal up to trailing whitespace on each line and at the end."""
    return [line.rstrip() for line in a.rstrip().splitlines()] == [
        line.rstrip() for line in b.rstrip().splitlines()
    ]


# Every Markdown code block's copy button, read in one pass: the block it copies, the text
# a reader sees in that block (without Material's annotation markers), and what a reader
# clicks to see it: the label of each content tab it sits in, outermost first (collapsed
# <details> around it are opened). With the number of code blocks, to match the buttons.
CODE_BLOCKS = """
() => {
  const buttons = [...document.querySelectorAll('.md-content pre button[data-md-type="copy"]')];
  return {
    blocks: document.querySelectorAll(".md-content pre:not(.mermaid) > code").length,
    buttons: buttons.map((button) => {
      const target = button.getAttribute("data-clipboard-target") || "";
      const labels = [];
      for (let node = document.querySelector(target); node; node = node.parentElement) {
        if (node.tagName === "DETAILS") node.open = true;
        if (node.classList.contains("tabbed-block")) {
          const index = [...node.parentElement.children].indexOf(node);
          const radio = node.closest(".tabbed-set").querySelectorAll(":scope > input")[index];
          labels.unshift(`label[for="${radio.id}"]`);
        }
      }
      const code = document.querySelector(target).cloneNode(true);
      code.querySelectorAll(".md-annotation").forEach((a) => a.remove());
      return { target, labels, expected: code.textContent };
    }),
  };
}
"""


def check_markdown_code_blocks(nav: NavPage, page: Page) -> tuple[int, list[str]]:
    failures = []
    found = page.evaluate(CODE_BLOCKS)
    blocks, listed = found["blocks"], found["buttons"]
    if len(listed) != blocks:
        failures.append(f"{nav.src}: {blocks} code blocks but {len(listed)} copy buttons")
    buttons = page.locator('.md-content pre button[data-md-type="copy"]')
    for i, block in enumerate(listed):
        target = block["target"]
        for label in block["labels"]:
            page.locator(label).click()
        copied, dialog = clipboard_after_click(page, buttons.nth(i))
        if not same_code(copied, block["expected"]):
            failures.append(f"{nav.src}: copy button of {target} copied {copied[:80]!r}")
        if "copied" not in (dialog or "").lower():
            failures.append(f"{nav.src}: no 'Copied' confirmation after copying {target}")
    return blocks, failures


# Whether each notebook code cell (by id, or by position among the innermost code cells)
# has exactly one copy button.
CELL_BUTTONS = """
(cells) => {
  const all = document.querySelectorAll(".jp-CodeCell");
  return cells.map(({ id, index }) => {
    const el = id ? document.querySelector(`[id="cell-id=${id}"]`) : all[index];
    return el ? el.querySelectorAll("clipboard-copy").length : 0;
  });
}
"""


def check_notebook_cells(
    nav: NavPage, page: Page, cells: tuple[CodeCell, ...]
) -> tuple[int, list[str]]:
    failures = []
    counts = page.evaluate(CELL_BUTTONS, [{"id": c.cell_id, "index": c.index} for c in cells])
    for cell, count in zip(cells, counts, strict=True):
        if count != 1:
            failures.append(f"{nav.src} cell {cell.index + 1}: no copy button")
            continue
        where = f'[id="cell-id={cell.cell_id}"]' if cell.cell_id else ".jp-CodeCell"
        element = page.locator(where).nth(0 if cell.cell_id else cell.index)
        element.hover()
        copied, _ = clipboard_after_click(page, element.locator("clipboard-copy"))
        if not same_code(copied, cell.source):
            failures.append(f"{nav.src} cell {cell.index + 1}: copied {copied[:80]!r}")
    return len(cells), failures


def test_code_blocks_copy_exactly_their_code_to_the_clipboard(
    desktop: Screen, notebook_cells: NotebookCells
) -> None:
    checked, failures = 0, []
    for nav in PAGES:
        page = desktop.visit(nav).page
        page.bring_to_front()  # the clipboard answers the focused tab only
        page.evaluate("navigator.clipboard.writeText('')")  # each read empties it again
        if nav.is_notebook:
            blocks, problems = check_notebook_cells(nav, page, notebook_cells(docs_dir() / nav.src))
        else:
            blocks, problems = check_markdown_code_blocks(nav, page)
        checked += blocks
        failures += problems
    assert checked, "no code block anywhere on the site"
    assert not failures, "\n".join(failures)


# --- Search --------------------------------------------------------------------------

# (query, page under docs/ it must find). A page that should be found by a word a
# reader would type goes here; an entry for a page that does not exist yet skips.
SEARCH_FINDS = [
    ("compare-and-delete", "single-instance.md"),
    ("fencing", "correct/fencing.md"),
    ("checklist", "checklist.md"),
    ("matrix", "matrix.md"),
]


@pytest.mark.parametrize(("query", "src"), SEARCH_FINDS)
def test_site_search_finds_the_page_for_a_query(query: str, src: str, desktop: Screen) -> None:
    if not (docs_dir() / src).exists():
        pytest.skip(f"docs/{src} does not exist yet: this search runs once it lands")
    assert nav_page_for(src) is not None, f"{src} is not in the nav"
    page = desktop.fresh(PAGES[0])
    try:
        box = page.locator("input.md-search__input")
        box.click()
        box.press_sequentially(query, delay=20)
        meta = page.locator(".md-search-result__meta")
        page.wait_for_function(
            "() => /matching document/i.test("
            "document.querySelector('.md-search-result__meta')?.textContent || '')"
        )
        hrefs: list[str] = page.eval_on_selector_all(
            ".md-search-result__link", "as => as.map(a => a.href)"
        )
        found = [urlsplit(h).path.lstrip("/") for h in hrefs]  # drops ?h=query#section
        assert page_url(src) in found, (
            f"searching {query!r}: {meta.text_content()!r}, results {found}, "
            f"expected {src} ({page_url(src)!r})"
        )
    finally:
        page.close()


# --- The checklist (docs/checklist.md, from another issue) ----------------------------

CHECKLIST = "checklist.md"


def checklist_page() -> NavPage:
    if not (docs_dir() / CHECKLIST).exists():
        pytest.skip(f"docs/{CHECKLIST} does not exist yet: these checks run once it lands")
    nav = nav_page_for(CHECKLIST)
    assert nav is not None, f"docs/{CHECKLIST} exists but is not in the nav"
    return nav


def test_checklist_boxes_toggle_when_clicked(desktop: Screen) -> None:
    nav = checklist_page()
    page = desktop.fresh(nav)
    try:
        boxes = page.locator(".md-content .task-list-item input[type=checkbox]")
        assert boxes.count() >= 3, f"{nav.src}: {boxes.count()} checkboxes"
        for i in range(boxes.count()):
            box = boxes.nth(i)
            assert box.is_enabled(), (
                f"{nav.src}: checkbox {i + 1} is disabled (pymdownx.tasklist needs "
                "clickable_checkbox: true)"
            )
            # custom_checkbox draws the box over the (transparent) input: click where a
            # reader sees it, and let whatever is drawn there take the click.
            box.scroll_into_view_if_needed()
            area = box.bounding_box()
            assert area, f"{nav.src}: checkbox {i + 1} takes no space on the page"
            x, y = area["x"] + area["width"] / 2, area["y"] + area["height"] / 2
            before = box.is_checked()
            page.mouse.click(x, y)
            assert box.is_checked() != before, f"{nav.src}: checkbox {i + 1} did not toggle"
            page.mouse.click(x, y)
            assert box.is_checked() == before, f"{nav.src}: checkbox {i + 1} did not toggle back"
    finally:
        page.close()


@pytest.mark.parametrize("paper", ["A4", "Letter"])
def test_checklist_prints_on_one_page(paper: str, desktop: Screen) -> None:
    nav = checklist_page()
    page = desktop.fresh(nav)
    try:
        page.emulate_media(media="print")
        out = SCREENSHOTS / "print" / f"{nav.slug}-{paper}.pdf"
        out.parent.mkdir(parents=True, exist_ok=True)
        pages = pdf_page_count(page.pdf(path=out, format=paper))
        assert pages == 1, f"{nav.src} prints on {pages} {paper} pages (see {out})"
    finally:
        page.close()


# --- The validity calculator (includes/validity-calculator.html, from another issue) ---
#
# The contract the widget follows, so that this test can drive it:
#   * its root element has the attribute  data-validity-calculator
#   * inputs  <input name="ttl_ms|elapsed_ms|drift_factor|nodes|answered">
#   * outputs <output name="drift_ms|validity_ms|majority"> and, if shown,
#     <output name="quorum|acquired">; a number is read from the text the reader sees
#     (data-value, when present, wins), a yes/no from data-value or the text.

CALCULATOR = "data-validity-calculator"
CALCULATOR_INPUTS = ("ttl", "elapsed", "factor", "nodes", "votes")

# ttl, elapsed, factor, nodes, votes (the widget's input names)
CALCULATOR_CASES = [
    (10_000, 50, 0.01, 5, 5),  # quick acquisition: most of the lease left
    (10_000, 9_850, 0.01, 5, 5),  # slow acquisition: 48 ms left
    (10_000, 9_950, 0.01, 5, 4),  # too slow: majority, but no time left
    (10_000, 120, 0.01, 5, 2),  # in time, but no majority
    (1_234, 17, 0.01, 5, 3),  # fractional drift (14.34 ms)
    (3_000, 40, 0.02, 3, 2),  # another drift factor, three nodes
    (30_000, 1_500, 0.005, 7, 4),  # seven nodes, the smallest majority
]


def calculator_pages(built_site: SiteBuild) -> list[NavPage]:
    pages = [nav for nav in PAGES if CALCULATOR in built_html(built_site, nav)]
    if not pages:
        near = [nav.src for nav in PAGES if "validity-calculator" in built_html(built_site, nav)]
        assert not near, (
            f"{near} mention validity-calculator but no element has {CALCULATOR}: "
            "the widget does not follow the contract this test drives"
        )
        pytest.skip(f"no page contains the validity calculator ({CALCULATOR}) yet")
    return pages


def read_output(root: Locator, name: str) -> str | None:
    """An output's exact value (``data-value``, set by the script), else its text."""
    output = root.locator(f'output[data-out="{name}"]')
    if output.count() == 0:
        return None
    return output.first.get_attribute("data-value") or output.first.inner_text()


def as_bool(text: str) -> bool:
    word = text.strip().lower()
    if word.startswith(("yes", "true")):
        return True
    if word.startswith(("no", "false")):
        return False
    raise AssertionError(f"not a yes/no: {text!r}")


def test_validity_calculator_agrees_with_the_library(
    desktop: Screen, built_site: SiteBuild
) -> None:
    failures = []
    for nav in calculator_pages(built_site):
        page = desktop.fresh(nav)
        try:
            root = page.locator(f"[{CALCULATOR}]").first
            for case in CALCULATOR_CASES:
                ttl, elapsed, factor, nodes, answered = case
                for name, value in zip(CALCULATOR_INPUTS, case, strict=True):
                    field = root.locator(f'input[name="{name}"]')
                    field.fill(str(value))
                    field.dispatch_event("change")
                want = judge(ttl, elapsed, votes=answered, n_masters=nodes, drift_factor=factor)
                numbers = {"margin": want.drift_ms, "validity": want.validity_ms}
                for name, number in numbers.items():
                    shown = read_output(root, name)
                    got = first_number(shown or "")
                    if got is None or abs(got - number) > 1e-6:
                        failures.append(f"{nav.src} {case}: {name} shows {shown!r}, want {number}")
                for name, flag in (("majority", want.majority), ("verdict", want.acquired)):
                    shown = read_output(root, name)
                    if shown is None or as_bool(shown) != flag:
                        failures.append(f"{nav.src} {case}: {name} shows {shown!r}, want {flag}")
        finally:
            page.close()
    assert not failures, "\n".join(failures)
