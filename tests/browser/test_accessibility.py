"""Every reader can use the site: axe-core on every page in both palettes, images that
say what they show, and the interactive parts used from the keyboard alone.

* axe-core (tests/browser/axe.py) runs the WCAG 2.0/2.1 A and AA rules on every page of
  the nav, once with the reader's system in light mode and once in dark mode; any
  serious or critical finding fails the page. No rule is switched off.
* Every ``<img>`` has an alt text that says something; a lab figure's alt carries the
  outcome of each run it draws, as the same cell printed it.
* The validity calculator and the checklist are used with Tab, typing, arrow keys and
  Space, never the mouse.
"""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page

from tests.browser.axe import blocking, run_axe
from tests.browser.conftest import Screen
from tests.browser.harness import screenshot_path
from tests.browser.nav import NavPage, docs_dir, nav_page_for, nav_pages
from tests.sitebuild import SiteBuild

pytestmark = pytest.mark.browser

PAGES = nav_pages()
SCHEMES = {"light": "default", "dark": "slate"}  # reader's system -> Material's palette


@pytest.mark.parametrize("scheme", list(SCHEMES))
@pytest.mark.parametrize("nav", PAGES, ids=str)
def test_page_has_no_serious_accessibility_findings(
    nav: NavPage, scheme: str, palettes: dict[str, Screen]
) -> None:
    following = PAGES[PAGES.index(nav) + 1 :]  # loaded while this page is checked
    page = palettes[scheme].fresh(nav, then=following[0] if following else None)
    try:
        shown = page.evaluate("() => document.body.getAttribute('data-md-color-scheme')")
        assert shown == SCHEMES[scheme], (
            f"{nav.src}: a reader in {scheme} mode gets the {shown!r} palette, "
            f"not {SCHEMES[scheme]!r}"
        )
        findings = blocking(run_axe(page))
        assert not findings, (
            f"{nav.src} ({scheme} palette): {len(findings)} serious or critical WCAG 2 A/AA "
            "finding(s):\n  " + "\n  ".join(str(f) for f in findings[:25])
        )
    finally:
        page.close()


# --- Text alternatives -----------------------------------------------------------

# Alt texts that say nothing: nbconvert's placeholder, a file name, a bare noun.
PLACEHOLDER_ALT = re.compile(
    r"^(no description has been provided for this image|image|img|figure|picture|graph|"
    r"plot|chart|photo|alt|untitled|.*\.(png|jpe?g|gif|svg|webp))$",
    re.IGNORECASE,
)

IMAGES = """
() => [...document.querySelectorAll("img")].map((img) => {
  const cell = img.closest(".jp-OutputArea");
  return {
    src: (img.getAttribute("src") || "").slice(0, 60),
    alt: img.getAttribute("alt"),
    hidden: img.getAttribute("aria-hidden") === "true"
      || img.getAttribute("role") === "presentation",
    printed: cell
      ? [...cell.querySelectorAll("pre")].map((pre) => pre.textContent).join("\\n") : "",
  };
})
"""


def alt_problem(image: dict[str, str | bool | None]) -> str | None:
    """Why an image's alt text does not describe it, or None if it does."""
    alt = str(image["alt"] or "").strip()
    if image["alt"] is None:
        return "has no alt attribute"
    if not alt:
        return None if image["hidden"] else "has an empty alt but is not marked decorative"
    if PLACEHOLDER_ALT.match(alt) or len(alt.split()) < 3:
        return f"has the alt text {alt!r}, which says nothing about it"
    # A lab figure: the same cell printed each run's outcome; the alt must carry it.
    for outcome in re.findall(r"^outcome: (.+)$", str(image["printed"]), flags=re.MULTILINE):
        if f"Outcome: {outcome}." not in alt:
            return f"draws a run whose outcome was {outcome!r}, but its alt does not say so"
    return None


@pytest.mark.parametrize("nav", PAGES, ids=str)
def test_every_image_says_what_it_shows(nav: NavPage, desktop: Screen) -> None:
    images = desktop.visit(nav).page.evaluate(IMAGES)
    problems = [
        f"image {i} ({image['src']}...) {why}"
        for i, image in enumerate(images, 1)
        if (why := alt_problem(image))
    ]
    assert not problems, f"{nav.src}:\n  " + "\n  ".join(problems)


def test_the_lab_figures_are_described(desktop: Screen) -> None:
    """The check above has something to check: the lab draws figures, and each has alt text
    built from its runs (the per-page test passes vacuously on a page without images)."""
    figures = 0
    for nav in PAGES:
        if not nav.is_notebook:
            continue
        images = desktop.visit(nav).page.evaluate(IMAGES)
        figures += sum(1 for image in images if "Outcome:" in str(image["alt"] or ""))
    assert figures >= 5, f"only {figures} lab figures with a description of their runs"


# A figure is drawn in dark ink; on the dark palette it stays legible only on a light,
# opaque background of its own. Reads the corner pixels of each notebook figure.
FIGURE_BACKGROUNDS = """
() => [...document.querySelectorAll(".jp-RenderedImage img")].map((img) => {
  const canvas = document.createElement("canvas");
  canvas.width = img.naturalWidth;
  canvas.height = img.naturalHeight;
  const ctx = canvas.getContext("2d");
  ctx.drawImage(img, 0, 0);
  const corners = [[1, 1], [img.naturalWidth - 2, 1], [1, img.naturalHeight - 2]];
  return corners.map(([x, y]) => [...ctx.getImageData(x, y, 1, 1).data]);
})
"""


@pytest.mark.parametrize("scheme", list(SCHEMES))
def test_lab_figures_stay_legible_in_both_palettes(
    scheme: str, palettes: dict[str, Screen]
) -> None:
    figures, problems = 0, []
    for nav in PAGES:
        if not nav.is_notebook:
            continue
        page = palettes[scheme].fresh(nav)
        try:
            # Each figure with the page around it (and the description shown above it).
            figures_here = page.locator(".jp-OutputArea:has(.jp-RenderedImage)")
            for i in range(figures_here.count()):
                figures_here.nth(i).scroll_into_view_if_needed()
                path = screenshot_path(f"figures-{scheme}", nav, i + 1)
                figures_here.nth(i).screenshot(path=path)
            for i, corners in enumerate(page.evaluate(FIGURE_BACKGROUNDS), 1):
                figures += 1
                for r, g, b, a in corners:
                    if a < 255 or min(r, g, b) < 230:
                        problems.append(
                            f"{nav.src} figure {i}: background pixel {(r, g, b, a)} is not "
                            "opaque and light; its dark ink would vanish on the dark palette"
                        )
        finally:
            page.close()
    assert figures, "no notebook figure on the site"
    assert not problems, "\n".join(problems)


# --- Keyboard only -------------------------------------------------------------------

ACTIVE = """
() => {
  const el = document.activeElement;
  if (!el || el === document.body) return null;
  const style = getComputedStyle(el);
  const mark = el.nextElementSibling ? getComputedStyle(el.nextElementSibling, "::before") : null;
  return {
    tag: el.tagName.toLowerCase(),
    type: el.getAttribute("type"),
    name: el.getAttribute("name"),
    label: el.getAttribute("aria-label"),
    checked: el.checked === true,
    inCalculator: el.closest("[data-validity-calculator]") !== null,
    inChecklist: el.closest(".task-list-item") !== null,
    // A task-list box is drawn by the indicator next to the (transparent) input, so its
    // focus must show there; any other field shows it on itself.
    focusShown: el.closest(".task-list-control")
      ? mark !== null && mark.outlineStyle !== "none" && parseFloat(mark.outlineWidth) > 0
      : (style.outlineStyle !== "none" && parseFloat(style.outlineWidth) > 0)
        || style.boxShadow !== "none",
  };
}
"""


def tab_to(page: Page, wanted: str, limit: int = 300) -> dict[str, str | bool | None]:
    """Press Tab until the focused element matches the JS predicate ``wanted``."""
    for _ in range(limit):
        page.keyboard.press("Tab")
        active = page.evaluate(ACTIVE)
        if active is not None and page.evaluate(f"(a) => ({wanted})", active):
            return dict(active)
    raise AssertionError(f"{limit} presses of Tab never reached an element with {wanted}")


def output(page: Page, name: str) -> str:
    return page.locator(f'[data-validity-calculator] output[data-out="{name}"]').inner_text()


def calculator_page(built_site: SiteBuild) -> NavPage:
    for nav in PAGES:
        html = (built_site.site_dir / nav.url / "index.html").read_text("utf-8")
        if "data-validity-calculator" in html:
            return nav
    pytest.fail("no page contains the validity calculator", pytrace=False)


def test_validity_calculator_works_from_the_keyboard(
    desktop: Screen, built_site: SiteBuild
) -> None:
    nav = calculator_page(built_site)
    page = desktop.fresh(nav)
    try:
        typed = {"ttl": "1000", "elapsed": "500", "factor": "0.01", "nodes": "5", "votes": "3"}
        first = tab_to(page, "a.inCalculator && a.tag === 'input'")
        assert first["name"] == "ttl", f"Tab reaches the calculator at {first['name']!r}, not ttl"
        for i, (name, value) in enumerate(typed.items()):
            active = first if i == 0 else page.evaluate(ACTIVE)
            assert active, f"Tab order: expected {name}, focus left the page"
            assert active["name"] == name, f"Tab order: expected {name}, at {active}"
            assert active["focusShown"], f"the {name} field shows no focus indicator"
            page.keyboard.press("Control+A")
            page.keyboard.type(value)
            if name != "votes":
                page.keyboard.press("Tab")
        # 1000 - 500 - (10 + 2) = 488 ms with 3 of 5: acquired.
        assert output(page, "validity").startswith("488 ms"), output(page, "validity")
        assert output(page, "verdict").startswith("Acquired"), output(page, "verdict")
        # One vote fewer with the arrow key: no majority, not acquired.
        page.keyboard.press("ArrowDown")
        assert page.locator('[data-validity-calculator] input[name="votes"]').input_value() == "2"
        assert output(page, "majority").startswith("no"), output(page, "majority")
        assert output(page, "verdict").startswith("Not acquired"), output(page, "verdict")
    finally:
        page.close()


def test_checklist_is_ticked_from_the_keyboard(desktop: Screen) -> None:
    if not (docs_dir() / "checklist.md").exists():
        pytest.skip("docs/checklist.md does not exist yet")
    nav = nav_page_for("checklist.md")
    assert nav is not None, "docs/checklist.md is not in the nav"
    page = desktop.fresh(nav)
    try:
        boxes = page.locator(".md-content .task-list-item input[type=checkbox]")
        total = boxes.count()
        assert total >= 3, f"{nav.src}: {total} checkboxes"
        labels = []
        for i in range(total):
            active = tab_to(page, "a.inChecklist && a.type === 'checkbox'", limit=300)
            assert active["label"], f"checkbox {i + 1} has no accessible name"
            assert active["focusShown"], f"checkbox {i + 1} shows no focus indicator"
            assert not active["checked"], f"checkbox {i + 1} starts ticked"
            page.keyboard.press("Space")
            assert page.evaluate(ACTIVE)["checked"], f"Space did not tick checkbox {i + 1}"
            labels.append(active["label"])
        assert boxes.evaluate_all("bs => bs.every((b) => b.checked)"), "not every box ticked"
        assert len(set(labels)) == total, f"checkboxes share names: {labels}"
    finally:
        page.close()
