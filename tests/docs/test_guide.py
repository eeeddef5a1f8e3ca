"""The guide's reference pages: the checklist, the glossary's tooltips and calculator,
and the API reference, checked in their Markdown and in the strictly built site."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType, SimpleNamespace

import pytest

from tests.docs.test_docs import DOCS
from tests.sitebuild import SiteBuild

CHECKLIST = DOCS / "checklist.md"


def normalise(text: str) -> str:
    """Compare items as a reader would: no Markdown emphasis, one kind of dash."""
    text = text.replace("**", "").replace("`", "").replace("\u2013", "-")
    return re.sub(r"\s+", " ", text).strip()


# Each item starts with its stable ID; hooks/review_form.py makes it the item's anchor.
ITEM_ID = re.compile(r"(?P<id>C-\d+) · (?P<title>.+)")


def page_items() -> list[tuple[str, str, str]]:
    """(group, item title with its ID, rest of the item) for each box on the checklist page."""
    body = CHECKLIST.read_text("utf-8").split('<div class="lg-checklist" markdown>')[1]
    body = body.split("**Evidence notes**")[0]
    items = []
    group = ""
    for block in re.split(r"\n(?=\*\*|- \[ \])", body):
        block = block.strip()
        if block.startswith("**") and block.endswith("**"):
            group = block.strip("*")
            continue
        match = re.match(r"- \[ \] \*\*(?P<title>.+?)\*\*\s*(?P<rest>.*)", block, re.DOTALL)
        if match:
            items.append((group, match["title"], match["rest"]))
    return items


def copy_block_items() -> list[str]:
    text = CHECKLIST.read_text("utf-8")
    block = re.search(r"```markdown\n(.*?)```", text, re.DOTALL)
    assert block, "the checklist page has no ```markdown block to copy"
    return [line[len("- [ ] ") :] for line in block[1].splitlines() if line.startswith("- [ ] ")]


def test_checklist_is_a_form_in_the_order_of_the_review() -> None:
    items = page_items()
    groups = list(dict.fromkeys(group for group, _, _ in items))
    assert groups == ["The question", "Every lock", "If correctness", "If Redlock"]
    # Stable IDs, numbered in page order (other pages cite them: never renumber).
    ids = [ITEM_ID.match(title) for _, title, _ in items]
    assert all(ids), [title for _, title, _ in items]
    assert [m["id"] for m in ids if m] == [f"C-{n}" for n in range(1, len(items) + 1)]
    # Redlock's rules collapsed to a few items; the common case and fencing in full.
    assert [group for group, _, _ in items].count("If Redlock") <= 4
    text = normalise(" ".join(title for _, title, _ in items))
    for needed in (
        "failover",
        "timeout",
        "NotAcquired",
        "LockLost",
        "measured worst case",
        "Eviction",
        "grant's atomic step",
        "write's atomic step",
        "Every writer",
        "survives failover",
        "one write per token",
        "refused write is safe to drop",
    ):
        assert needed.lower() in text.lower(), needed
    # The evidence notes the items' fields point to (the fields come from the hook).
    assert "{ #evidence-notes }" in CHECKLIST.read_text("utf-8")


def test_every_checklist_item_has_a_reason_and_a_link() -> None:
    for _, title, rest in page_items():
        reason, _, link = rest.rpartition("[")
        assert len(normalise(reason)) > 20, f"{title!r} has no one-line why"
        assert re.match(r"[^\]]+\]\([^)]+\.md(#[\w-]+)?\)$", link.strip()), f"{title!r}: {link!r}"


def test_the_markdown_to_copy_lists_exactly_the_items_on_the_page() -> None:
    expected = []
    for group, title, _ in page_items():
        match = ITEM_ID.match(title)
        assert match, title
        ident, title = match["id"], match["title"]
        if group.startswith("If "):
            title = f"{group}: {title[0].lower()}{title[1:]}"
        expected.append(normalise(f"{ident} {title}"))
    assert [normalise(item) for item in copy_block_items()] == expected


def load_hook(name: str) -> ModuleType:
    path = Path(__file__).resolve().parents[2] / "hooks" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"hooks_{name}", path)
    assert spec
    assert spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_review_form_hook_anchors_items_adds_fields_and_numbers_links() -> None:
    hook = load_hook("review_form")
    form = (
        '<div class="lg-checklist"><ul>'
        '<li class="task-list-item"><label><input type="checkbox"></label>'
        '<strong>C-1 · One.</strong> Why. <a href="../index/#q">Q</a> '
        '<a href="../deciding/">D</a></li>'
        '<li class="task-list-item"><label><input type="checkbox"></label>'
        '<strong>C-2 · Two.</strong> Why. <a href="../index/#q">Q again</a></li>'
        '<li class="task-list-item"><strong>Not a form item</strong></li>'
        "</ul></div>"
    )

    page = SimpleNamespace(url="checklist/", present_anchor_ids={"evidence-notes"})
    out = hook.on_page_content(form, page=page, config={"site_url": "https://x.test/g/"})
    assert re.findall(r'<li class="task-list-item" id="(c-\d)">', out) == ["c-1", "c-2"]
    assert page.present_anchor_ids == {"evidence-notes", "c-1", "c-2"}
    assert out.count('class="lg-fields"') == 2
    for field in ("N/A", "owner", "evidence"):
        assert out.count(field) == 2, field
    # Each URL once, in order of first use; a repeated link gets the same number.
    assert re.findall(r'<sup class="lg-print-only">\[(\d)\]</sup>', out) == ["1", "2", "1"]
    notes = re.search(r'<ol class="lg-print-only lg-link-notes">(.*)</ol>', out)
    assert notes
    assert re.findall(r"<li>([^<]+)</li>", notes[1]) == [
        "https://x.test/g/index/#q",
        "https://x.test/g/deciding/",
    ]
    # Pages without a form are returned as they were.
    assert hook.on_page_content("<p>x</p>", page=page, config={"site_url": None}) == "<p>x</p>"


# -- the built site ----------------------------------------------------------------


@pytest.fixture(scope="module")
def site(built_site: SiteBuild) -> Path:
    """The session's one strict build (tests/sitebuild.py), shared with the browser suite."""
    assert built_site.ok, built_site.log
    return built_site.site_dir


def html(site: Path, page: str) -> str:
    return (site / page / "index.html").read_text("utf-8")


def test_the_calculator_renders_on_the_arithmetic_page_and_its_script_loads_everywhere(
    site: Path,
) -> None:
    arithmetic = html(site, "redlock/validity")
    assert arithmetic.count("data-validity-calculator") == 1
    for name in ("ttl", "elapsed", "factor", "nodes", "votes"):
        assert f'name="{name}"' in arithmetic
    for page in ("", "deciding", "checklist", "debate/claim", "reference/validity"):
        assert "javascripts/validity-calculator.js" in html(site, page), page
    assert (site / "javascripts" / "validity-calculator.js").is_file()
    # includes/ is outside docs/: the fragment is reachable only by inclusion.
    assert not (site / "includes").exists()


def test_abbreviations_become_tooltips_on_every_page(site: Path) -> None:
    for page in ("glossary", "deciding", "single-instance"):
        assert '<abbr title="Time to live: how long Redis keeps a key' in html(site, page), page


def test_api_reference_renders_the_docstrings_without_raw_sphinx_roles(site: Path) -> None:
    pages = {name: html(site, f"reference/{name}") for name in ("lock", "errors", "validity")}
    pages["tokens"] = html(site, "reference/tokens")
    for name, text in pages.items():
        assert not re.search(r":(class|meth|func|attr|mod):", text), name
    assert 'id="lockguide.Lock.validity_remaining_ms"' in pages["lock"]
    assert 'id="lockguide.errors.LockLost"' in pages["errors"]
    # Sphinx roles became links to the objects they name.
    assert 'href="../errors/#lockguide.errors.NotAcquired"' in pages["lock"]
    # The constants behind the guide's numbers are shown with their values.
    flat = {name: re.sub(r"<[^>]+>", "", text) for name, text in pages.items()}
    assert "VALUE_BYTES = 20" in flat["tokens"]
    assert "DEFAULT_DRIFT_FACTOR = 0.01" in flat["validity"]
    assert "DEFAULT_DRIFT_FLOOR_MS = 2.0" in flat["validity"]


def test_the_checklist_page_has_checkboxes_a_copy_block_and_a_print_stylesheet(
    site: Path,
) -> None:
    page = html(site, "checklist")
    items = re.findall(r'<li class="task-list-item" id="(c-\d+)">', page)
    assert items == [f"c-{n}" for n in range(1, len(page_items()) + 1)]
    assert page.count('class="lg-fields"') == len(page_items())
    # Printed, the form's links are numbered notes listing absolute URLs.
    notes = re.search(r'<ol class="lg-print-only lg-link-notes">(.*?)</ol>', page, re.DOTALL)
    assert notes, "the checklist has no printed list of its links"
    assert re.findall(r"<li>(https?://[^<]+)</li>", notes[1])
    assert 'class="language-markdown' in page
    assert "stylesheets/print.css" in page
    css = (site / "stylesheets" / "print.css").read_text("utf-8")
    for hidden in (".md-header", ".md-sidebar", ".md-footer", ".lg-no-print"):
        assert hidden in css
