"""The site builds with ``mkdocs build --strict``: any warning (a broken link or
anchor, a missing include, a notebook cell that raises) fails it."""

from __future__ import annotations

import html
import os
import re
import subprocess
import sys
from pathlib import Path

from tests.test_docs import ROOT


def test_strict_build_succeeds_and_renders_every_page(tmp_path: Path) -> None:
    site = tmp_path / "site"
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    log = result.stdout + result.stderr
    assert result.returncode == 0, log
    # MkDocs's own warnings ("WARNING -  ..."); a kernel's chatter on stderr is not one.
    assert not re.search(r"^WARNING\s+-", log, flags=re.MULTILINE), log

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
