"""Session fixtures of the browser suite: the served site, Chromium, two screens.

The site is the session's one strict build (``built_site``, tests/sitebuild.py), served
on 127.0.0.1. Chromium is launched once; ``desktop`` is a 1280x800 window that keeps
each page open once visited (several checks read the same page), and ``phone`` is a
375x740 touch screen.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, BrowserContext, Page, ViewportSize, sync_playwright

from tests.browser.harness import (
    CHROMIUM_ARGS,
    OPEN_SHADOW_ROOTS,
    SCREENSHOTS,
    Opening,
    Visit,
    chromium_executable,
    chromium_installed,
    open_page,
    serve,
    start_page,
)
from tests.browser.nav import NavPage, docs_dir, nav_pages
from tests.browser.notebooks import CodeCell, expected_cells, start_executing, stop_executing
from tests.sitebuild import SiteBuild

DESKTOP: ViewportSize = {"width": 1280, "height": 800}
PHONE: ViewportSize = {"width": 375, "height": 740}
TIMEOUT_MS = 15_000


class Screen:
    """One browser window size, with its own tabs; ``visit`` opens each page once."""

    def __init__(self, context: BrowserContext, base_url: str) -> None:
        self.context = context
        self.base_url = base_url
        self._visits: dict[str, Visit] = {}
        self._ahead: dict[str, Opening] = {}

    def visit(self, nav: NavPage) -> Visit:
        """The page, opened on first use and kept open for the other checks."""
        if nav.url not in self._visits:
            self._visits[nav.url] = open_page(self.context, self.base_url, nav)
        return self._visits[nav.url]

    def fresh(self, nav: NavPage, *, then: NavPage | None = None) -> Page:
        """The page in a new tab of its own (for checks that click and type, or read the
        page as it loads); no check reads its requests, so it waits for no quiet time.

        ``then``: the page the next such check will ask for, which starts loading in a
        tab of its own as this one is returned (while this check runs), for that check.
        """
        ahead = self._ahead.pop(nav.url, None)
        opening = ahead or start_page(self.context, self.base_url, nav)
        page = opening.settled(network_idle=False).page
        if then is not None and then.url not in self._ahead:
            self._ahead[then.url] = start_page(self.context, self.base_url, then)
        return page


@pytest.fixture(scope="session", autouse=True)
def notebooks_executing(request: pytest.FixtureRequest) -> Iterator[None]:
    """Start executing the nav's notebooks (tests/browser/notebooks.py) in a child process
    as the browser session begins, if a collected test reads their cells (and Chromium is
    there for it to run), so that the result is ready when that test runs. After the
    site build: never two kernels at once."""
    wanted = any(
        "notebook_cells" in getattr(item, "fixturenames", ()) for item in request.session.items
    )
    if wanted and chromium_installed():
        request.getfixturevalue("built_site")
        start_executing([docs_dir() / nav.src for nav in nav_pages() if nav.is_notebook])
    yield
    stop_executing()


@pytest.fixture(scope="session")
def notebook_cells() -> Callable[[Path], tuple[CodeCell, ...]]:
    """``expected_cells``: what each code cell of a notebook shows when run."""
    return expected_cells


@pytest.fixture(scope="session")
def chromium() -> Iterator[Browser]:
    executable = chromium_executable()  # skips (or fails under .ci/run) without Chromium
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=executable, headless=True, args=CHROMIUM_ARGS
        )
        yield browser
        browser.close()


@pytest.fixture(scope="session")
def base_url(built_site: SiteBuild) -> Iterator[str]:
    """The built site, served on 127.0.0.1 at a free port."""
    if not built_site.ok:
        pytest.fail(
            "the strict site build failed, so there is nothing to open in a browser "
            "(see test_strict_build_succeeds_and_renders_every_page)",
            pytrace=False,
        )
    with serve(built_site.site_dir) as url:
        yield url


@pytest.fixture(scope="session")
def screenshots() -> None:
    """Start each session with an empty screenshots folder (artifacts/ is git-ignored)."""
    shutil.rmtree(SCREENSHOTS, ignore_errors=True)
    SCREENSHOTS.mkdir(parents=True)


def _prepare(context: BrowserContext) -> BrowserContext:
    context.set_default_timeout(TIMEOUT_MS)
    context.add_init_script(OPEN_SHADOW_ROOTS)
    return context


@pytest.fixture(scope="session")
def desktop(chromium: Browser, base_url: str, screenshots: None) -> Iterator[Screen]:
    context = _prepare(
        chromium.new_context(viewport=DESKTOP, permissions=["clipboard-read", "clipboard-write"])
    )
    yield Screen(context, base_url)
    context.close()


@pytest.fixture(scope="session")
def palettes(chromium: Browser, base_url: str, screenshots: None) -> Iterator[dict[str, Screen]]:
    """The desktop window twice: with the reader's system set to light, and to dark.

    The site follows the system's colour scheme (the palette's ``media`` queries), so
    this is how a reader with a dark desktop first sees it.
    """
    contexts = {
        scheme: _prepare(chromium.new_context(viewport=DESKTOP, color_scheme=scheme))
        for scheme in ("light", "dark")
    }
    yield {scheme: Screen(context, base_url) for scheme, context in contexts.items()}
    for context in contexts.values():
        context.close()


@pytest.fixture(scope="session")
def phone(chromium: Browser, base_url: str, screenshots: None) -> Iterator[Screen]:
    context = _prepare(chromium.new_context(viewport=PHONE, is_mobile=True, has_touch=True))
    yield Screen(context, base_url)
    context.close()
