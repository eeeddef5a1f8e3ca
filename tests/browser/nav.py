"""The pages a reader can reach from the navigation, read from ``mkdocs.yml``.

The browser suite is parametrized over this list, so a page that another change adds
to the nav is visited, screenshotted and checked without touching the tests.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from mkdocs.utils.yaml import yaml_load

from tests.sitebuild import ROOT

CONFIG = ROOT / "mkdocs.yml"


@dataclass(frozen=True)
class NavPage:
    """One page of the nav: its title, its source under ``docs/`` and its URL path."""

    position: int
    title: str
    src: str  # relative to docs_dir, e.g. "notebooks/lease-timeline.ipynb"
    url: str  # relative to the site root, e.g. "notebooks/lease-timeline/" ("" is the home page)

    @property
    def slug(self) -> str:
        """A file-name-safe id in nav order, e.g. ``02-single-instance``."""
        name = self.url.strip("/").replace("/", "--") or "index"
        return f"{self.position:02d}-{name}"

    @property
    def is_notebook(self) -> bool:
        return self.src.endswith(".ipynb")

    def __str__(self) -> str:
        return self.slug


def page_url(src: str) -> str:
    """The URL path MkDocs gives a page (``use_directory_urls``): ``a/b.md`` -> ``a/b/``."""
    path = PurePosixPath(src)
    parent = "" if str(path.parent) == "." else f"{path.parent}/"
    if path.stem in ("index", "README"):
        return parent
    return f"{parent}{path.stem}/"


def _config() -> dict[str, Any]:
    with CONFIG.open(encoding="utf-8") as f:
        config: dict[str, Any] = yaml_load(f)
    return config


def docs_dir() -> Path:
    return ROOT / str(_config().get("docs_dir", "docs"))


def nav_pages() -> list[NavPage]:
    """Every local page in the nav, in reading order (external links are left out)."""
    entries: list[tuple[str, str]] = []

    def walk(items: list[Any]) -> None:
        for item in items:
            if isinstance(item, str):
                entries.append((item, item))
            elif isinstance(item, dict):
                for title, value in item.items():
                    if isinstance(value, list):
                        walk(value)
                    else:
                        entries.append((str(title), str(value)))

    walk(_config().get("nav") or [])
    local = [(t, s) for t, s in entries if "://" not in s]
    return [NavPage(i, title, src, page_url(src)) for i, (title, src) in enumerate(local, 1)]


def nav_page_for(src: str) -> NavPage | None:
    """The nav entry built from ``docs/<src>``, if the nav has one."""
    return next((p for p in nav_pages() if p.src == src), None)
