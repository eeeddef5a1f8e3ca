"""The site works where it is published: under a sub-path, as a GitHub project page is.

GitHub publishes a project's site at ``https://OWNER.github.io/REPO/``, and answers any
missing path under it with the site's own ``404.html``. The session's build is made for
such an address (``site_url``; tests/sitebuild.py), and here it is served under that
address's path on 127.0.0.1: every page of the nav, and the 404 page for a nested
missing path, must load its stylesheets, its scripts and, where it has a diagram, the
vendored Mermaid, all from inside the site.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import pytest
from playwright.sync_api import Browser, BrowserContext, Page, Response
from playwright.sync_api import Error as PlaywrightError

from tests.browser.harness import serve
from tests.browser.nav import nav_pages
from tests.sitebuild import SITE_URL_ENV, SiteBuild

pytestmark = pytest.mark.browser

MISSING = "no/such/page/"  # nested, so that relative asset paths would go wrong
TARGETS = [p.url for p in nav_pages()] + [MISSING]
ASSETS = ("stylesheet", "script")

LOADED = """
() => ({
  styled: getComputedStyle(document.querySelector(".md-header")).position === "sticky",
  material: typeof window.document$ !== "undefined",
  mermaid: typeof window.mermaid !== "undefined",
  diagrams: document.querySelectorAll(".mermaid").length,
  stylesheets: [...document.querySelectorAll('link[rel="stylesheet"]')].map((l) => l.href),
  scripts: [...document.querySelectorAll("script[src]")].map((s) => s.src),
  heading: (document.querySelector("h1") || {}).textContent || "",
})
"""


@dataclass
class Loaded:
    status: int
    assets: dict[str, int] = field(default_factory=dict)  # URL -> HTTP status
    failed: list[str] = field(default_factory=list)


@pytest.fixture(scope="module")
def published(built_site: SiteBuild) -> Iterator[str]:
    """The built site, served under the path of its own ``site_url``."""
    if not built_site.ok:
        pytest.fail("the strict site build failed", pytrace=False)
    prefix = urlsplit(built_site.site_url).path or "/"
    with serve(built_site.site_dir, prefix) as url:
        yield url


def test_the_site_is_built_for_a_sub_path(built_site: SiteBuild, published: str) -> None:
    # Locally and on pull requests the tests build for /lockguide/; the deploy builds for
    # the real Pages URL, which for a project page is a sub-path too.
    assert urlsplit(published).path == urlsplit(built_site.site_url).path
    if SITE_URL_ENV not in os.environ:
        assert urlsplit(published).path == "/lockguide/", published


#: A target's load and what ``LOADED`` read on it, or what Playwright raised.
Result = tuple[Loaded, dict[str, Any]] | PlaywrightError

#: How many targets load at once (each in a context of its own, so none shares a cache):
#: each load ends with Playwright's ``networkidle``, half a second with no request, and
#: those quiet half-seconds now overlap instead of following one another.
AT_ONCE = 4


@pytest.fixture(scope="module")
def loads(published: str, chromium: Browser) -> dict[str, Result]:
    """Every target loaded (status, assets, failures) and read (``LOADED``), once."""
    found: dict[str, Result] = {}
    waiting = list(TARGETS)
    loading: list[tuple[str, BrowserContext, Page, Loaded, Response | None]] = []
    try:
        while waiting or loading:
            while waiting and len(loading) < AT_ONCE:
                loading.append(_start(published, chromium, waiting.pop(0)))
            target, context, page, loaded, response = loading.pop(0)
            try:
                page.wait_for_load_state("load")
                loaded.status = response.status if response is not None else 0
                page.wait_for_load_state("networkidle")
                found[target] = (loaded, page.evaluate(LOADED))
            except PlaywrightError as error:  # this target's test fails with it
                found[target] = error
            finally:
                context.close()
    finally:
        for _, context, *_ in loading:
            context.close()
    return found


def _start(
    published: str, chromium: Browser, target: str
) -> tuple[str, BrowserContext, Page, Loaded, Response | None]:
    """``target`` starts loading in a new context, its assets' answers and failures
    recorded; returns once the browser has the document (Playwright's ``commit``)."""
    context = chromium.new_context()
    page = context.new_page()
    loaded = Loaded(status=0)

    def on_response(response: Response) -> None:
        if response.request.resource_type in ASSETS:
            loaded.assets[response.url] = response.status

    page.on("response", on_response)
    page.on("requestfailed", lambda r: loaded.failed.append(f"{r.url}: {r.failure}"))
    response = page.goto(published + target, wait_until="commit")
    return target, context, page, loaded, response


@pytest.mark.parametrize("target", TARGETS)
def test_page_loads_its_assets_under_the_sub_path(
    target: str, published: str, loads: dict[str, Result]
) -> None:
    result = loads[target]
    if isinstance(result, PlaywrightError):
        raise result
    loaded, state = result
    want = 404 if target == MISSING else 200
    assert loaded.status == want, f"{published + target} answered {loaded.status}, not {want}"
    problems = [f"{url}: HTTP {status}" for url, status in loaded.assets.items() if status != 200]
    problems += [f"failed: {f}" for f in loaded.failed]
    problems += [
        f"{url} is outside the site ({published})"
        for url in state["stylesheets"] + state["scripts"]
        if not url.startswith(published)
    ]
    if not state["stylesheets"] or not state["styled"]:
        problems.append("Material's stylesheet did not apply (the header is not sticky)")
    if not state["material"]:
        problems.append("Material's script did not run (no document$)")
    if state["diagrams"] and not state["mermaid"]:
        problems.append("the page has a diagram but the vendored Mermaid did not load")
    if target == MISSING and "404" not in state["heading"]:
        problems.append(f"the 404 page's heading is {state['heading']!r}")
    assert not problems, f"{published + target}:\n  " + "\n  ".join(problems)
