"""The guide's reference pages: the checklist, the glossary's tooltips and calculator,
and the API reference, checked in their Markdown and in the strictly built site."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import REQUIRE_REAL_ENV
from tests.test_docs import DOCS, ROOT

CHECKLIST = DOCS / "checklist.md"


def normalise(text: str) -> str:
    """Compare items as a reader would: no Markdown emphasis, one kind of dash."""
    text = text.replace("**", "").replace("`", "").replace("\u2013", "-")
    return re.sub(r"\s+", " ", text).strip()


def page_items() -> list[tuple[str, str, str]]:
    """(group, item title, rest of the item) for each checkbox on the checklist page."""
    body = CHECKLIST.read_text("utf-8").split('<div class="lg-checklist" markdown>')[1]
    body = body.split("</div>")[0]
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


def test_checklist_covers_the_review_items_in_groups() -> None:
    items = page_items()
    assert len(items) == 9
    groups = [group for group, _, _ in items]
    assert groups.count("If Redlock") == 4
    assert groups.count("If correctness") == 2


def test_every_checklist_item_has_a_reason_and_a_link() -> None:
    for _, title, rest in page_items():
        reason, _, link = rest.rpartition("[")
        assert len(normalise(reason)) > 20, f"{title!r} has no one-line why"
        assert re.match(r"[^\]]+\]\([^)]+\.md(#[\w-]+)?\)$", link.strip()), f"{title!r}: {link!r}"


def test_the_markdown_to_copy_lists_exactly_the_items_on_the_page() -> None:
    expected = []
    for group, title, _ in page_items():
        if group.startswith("If "):
            title = f"{group}: {title[0].lower()}{title[1:]}"
        expected.append(normalise(title))
    assert [normalise(item) for item in copy_block_items()] == expected


# -- the built site ----------------------------------------------------------------


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("guide-site") / "site"
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return out


def html(site: Path, page: str) -> str:
    return (site / page / "index.html").read_text("utf-8")


def test_the_calculator_renders_in_the_glossary_and_its_script_loads_everywhere(
    site: Path,
) -> None:
    glossary = html(site, "glossary")
    assert glossary.count("data-validity-calculator") == 1
    for name in ("ttl", "elapsed", "factor", "nodes", "votes"):
        assert f'name="{name}"' in glossary
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
    assert page.count('<li class="task-list-item">') == 9
    assert 'class="language-markdown' in page
    assert "stylesheets/print.css" in page
    css = (site / "stylesheets" / "print.css").read_text("utf-8")
    for hidden in (".md-header", ".md-sidebar", ".md-footer", ".lg-no-print"):
        assert hidden in css


def test_the_checklist_prints_on_one_page(site: Path, tmp_path: Path) -> None:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        reason = "chromium is not on PATH to print the page with (apt-get install chromium)"
        if os.environ.get(REQUIRE_REAL_ENV) == "1":
            pytest.fail(f"{REQUIRE_REAL_ENV}=1 (CI) but {reason}", pytrace=False)
        pytest.skip(reason)
    pdf = tmp_path / "checklist.pdf"
    subprocess.run(
        [
            browser,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-pdf-header-footer",
            f"--print-to-pdf={pdf}",
            (site / "checklist" / "index.html").as_uri(),
        ],
        capture_output=True,
        timeout=120,
        check=True,
    )
    pages = re.findall(rb"/Type\s*/Page(?![s\w])", pdf.read_bytes())
    assert len(pages) == 1
