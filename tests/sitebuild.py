"""The site, built once per test session with ``mkdocs build --strict``.

``tests/docs/test_site.py`` checks the build itself (no warning, pages rendered) and the
browser suite in ``tests/browser/`` reads the same files, so the notebooks are
executed once per session, not once per check.

With ``LOCKGUIDE_SITE_DIR`` set, the build goes to that folder and stays there after
the session: CI publishes exactly the site that the tests (the browser suite
included) passed, instead of building it a second time.

The site is built for the address in ``LOCKGUIDE_SITE_URL`` (mkdocs.yml's
``site_url``), which the GitHub deploy sets to the Pages URL. Without it, the test
session builds for ``SUBPATH_SITE_URL``: a project page under ``/lockguide/``, as
GitHub publishes one, so that the browser suite can check the site works there.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SITE_DIR_ENV = "LOCKGUIDE_SITE_DIR"
SITE_URL_ENV = "LOCKGUIDE_SITE_URL"
SUBPATH_SITE_URL = "http://127.0.0.1:8000/lockguide/"


@dataclass(frozen=True)
class SiteBuild:
    """One run of ``mkdocs build --strict``: where it wrote the site, and what it said."""

    site_dir: Path
    returncode: int
    log: str
    site_url: str

    @property
    def warnings(self) -> list[str]:
        """MkDocs's own warning lines ("WARNING -  ..."); a kernel's chatter is not one."""
        return re.findall(r"^WARNING\s+-.*$", self.log, flags=re.MULTILINE)

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.warnings


def site_dir_for_session(default: Path) -> Path:
    """The folder to build into: ``$LOCKGUIDE_SITE_DIR`` if set, else ``default``."""
    configured = os.environ.get(SITE_DIR_ENV)
    return Path(configured).resolve() if configured else default


def build_site(site_dir: Path) -> SiteBuild:
    """Build the site from the repository's ``mkdocs.yml`` into ``site_dir`` (emptied first)."""
    if site_dir.exists():
        shutil.rmtree(site_dir)
    site_url = os.environ.get(SITE_URL_ENV) or SUBPATH_SITE_URL
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site_dir)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1", SITE_URL_ENV: site_url},
    )
    return SiteBuild(site_dir, result.returncode, result.stdout + result.stderr, site_url)
