"""The site builds with ``mkdocs build --strict``: any warning (a broken link or
anchor, a missing include, a notebook cell that raises) fails it."""

from __future__ import annotations

import html
import re
from pathlib import Path

from tests.sitebuild import ROOT, SiteBuild


def test_strict_build_succeeds_and_renders_every_page(built_site: SiteBuild) -> None:
    # The session's one build (tests/sitebuild.py), which the browser suite also reads.
    assert built_site.returncode == 0, built_site.log
    # MkDocs's own warnings ("WARNING -  ..."); a kernel's chatter on stderr is not one.
    assert not built_site.warnings, built_site.log
    site = built_site.site_dir

    single = page_text(site / "single-instance" / "index.html")
    # The Lua shown on the page is the library's own file, included verbatim.
    for name in ("release.lua", "extend.lua"):
        script = (ROOT / "src/lockguide/scripts" / name).read_text("utf-8")
        assert script.strip() in single, f"{name} is not shown verbatim"
    # The executed notebook shows the output its cells printed during the build.
    notebook = page_text(site / "notebooks" / "lease-timeline" / "index.html")
    assert "release refused: the key is B's now (LockLost)" in notebook


def page_text(path: Path) -> str:
    """The text of a built page, without tags (code is split into highlight spans)."""
    return html.unescape(re.sub(r"<[^>]+>", "", path.read_text("utf-8")))
