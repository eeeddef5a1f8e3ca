"""The guide's reference pages: the checklist, the glossary's tooltips and calculator,
and the API reference, checked in their Markdown and in the strictly built site."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.docs.test_docs import DOCS
from tests.sitebuild import SiteBuild

CHECKLIST = DOCS / "checklist.md"


def normalise(text: str) -> str:
    """Compare items as a reader would: no Markdown emphasis, one kind of dash."""
    text = text.replace("**", "").replace("`", "").replace("\u2013", "-")
    return re.sub(r"\s+", " ", text).strip()


FIELDS = re.compile(r'<span class="lg-fields">.*?</span>\s*')
# Each item starts with its ID, which is also its anchor (checklist.md#c-3).
ITEM_ID = re.compile(r'<span id="(?P<anchor>c-\d+)">(?P<id>C-\d+)</span> · (?P<title>.+)')


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
    assert all(m["anchor"] == m["id"].lower() for m in ids if m)
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
    # Every box has its N/A, owner and evidence fields, and the notes they point to exist.
    for _, title, rest in items:
        field = FIELDS.search(rest)
        assert field, f"{title!r} has no N/A, owner and evidence fields"
        assert all(w in field[0] for w in ("N/A", "owner", "evidence")), title
    assert "{ #evidence-notes }" in CHECKLIST.read_text("utf-8")


def test_every_checklist_item_has_a_reason_and_a_link() -> None:
    for _, title, rest in page_items():
        reason, _, link = FIELDS.sub("", rest).rpartition("[")
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
    assert page.count('<li class="task-list-item">') == len(page_items())
    assert 'class="language-markdown' in page
    assert "stylesheets/print.css" in page
    css = (site / "stylesheets" / "print.css").read_text("utf-8")
    for hidden in (".md-header", ".md-sidebar", ".md-footer", ".lg-no-print"):
        assert hidden in css
