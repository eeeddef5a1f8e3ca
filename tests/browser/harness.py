"""What the browser suite drives: the built site on a loopback port, and Chromium.

* ``serve(site_dir, prefix)`` serves the built site with the standard library's HTTP
  server on 127.0.0.1 and a free port, in a thread, under a URL path (``/`` or, as on
  a GitHub project page, ``/lockguide/``), with the site's 404 page for missing paths.
* ``chromium_executable()`` is Debian's Chromium (``/usr/bin/chromium``); Playwright
  drives it through ``executable_path`` because its own browser download does not work
  on these machines. Without it the suite skips with the reason, or fails when
  ``LOCKGUIDE_REQUIRE_BROWSER=1`` (as ``.ci/run`` sets).
* ``Visit`` opens one page and records everything a reader would suffer from: console
  errors, uncaught exceptions, requests to the site that failed, and every request that
  tried to leave the site (refused: a page must not need a CDN to be read).
"""

from __future__ import annotations

import functools
import html.parser
import io
import os
import re
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urldefrag, urlsplit

import pytest
from playwright.sync_api import (
    BrowserContext,
    ConsoleMessage,
    Page,
    Request,
    Response,
    Route,
)
from playwright.sync_api import TimeoutError as PlaywrightTimeout

from tests.browser.nav import NavPage
from tests.sitebuild import ROOT

REQUIRE_BROWSER_ENV = "LOCKGUIDE_REQUIRE_BROWSER"
CHROMIUM_ENV = "LOCKGUIDE_CHROMIUM"
DEFAULT_CHROMIUM = "/usr/bin/chromium"
LOOPBACK = "127.0.0.1"

# Headless Chromium as root, with nothing that phones home (the machine has no network
# but the package registries; without these flags Chromium keeps trying Google's hosts).
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

SCREENSHOTS = ROOT / "artifacts" / "screenshots"

# Material renders each Mermaid diagram into a *closed* shadow root, which no test can
# look into. Before any page script runs, this makes every shadow root open, so the
# tests can find the SVG Mermaid produced. It changes nothing else on the page.
OPEN_SHADOW_ROOTS = """
(() => {
  const attach = Element.prototype.attachShadow;
  Element.prototype.attachShadow = function (init) {
    return attach.call(this, Object.assign({}, init, { mode: "open" }));
  };
})();
"""

# How often ``wait_for_answers`` looks whether the page's requests are all answered.
ANSWER_POLL_MS = 10

# True once Material has replaced every Mermaid source block (<pre class="mermaid">)
# by a rendered diagram. A block whose source Mermaid cannot parse stays a <pre>.
MERMAID_SETTLED = "() => document.querySelectorAll('pre.mermaid').length === 0"


def chromium_installed() -> bool:
    return os.access(os.environ.get(CHROMIUM_ENV, DEFAULT_CHROMIUM), os.X_OK)


def chromium_executable() -> str:
    """Path of the Chromium to drive; skips (or fails when required) if it is missing."""
    path = os.environ.get(CHROMIUM_ENV, DEFAULT_CHROMIUM)
    if chromium_installed():
        return path
    reason = (
        f"Chromium is not installed at {path}, so the browser suite cannot run "
        "(install it with: apt-get install chromium)"
    )
    if os.environ.get(REQUIRE_BROWSER_ENV) == "1":
        pytest.fail(f"{REQUIRE_BROWSER_ENV}=1 but {reason}", pytrace=False)
    pytest.skip(reason)


class _SiteHandler(SimpleHTTPRequestHandler):
    """Serves the site under ``prefix`` the way GitHub Pages does: a path that names no
    file gets the site's own ``404.html`` with status 404, wherever it is nested."""

    prefix = "/"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _inside(self) -> str | None:
        """The request path relative to the site root, or None if outside the prefix."""
        path = urlsplit(self.path).path
        if path + "/" == self.prefix:
            return "/"  # /lockguide -> /lockguide/ (GitHub redirects; serving it is enough)
        return "/" + path[len(self.prefix) :] if path.startswith(self.prefix) else None

    def translate_path(self, path: str) -> str:
        inside = self._inside()
        return super().translate_path(inside if inside is not None else "/__outside_the_site__/")

    def send_head(self) -> Any:
        target = Path(self.translate_path(self.path))
        missing = not (target.is_file() or (target / "index.html").is_file())
        page_404 = Path(self.directory) / "404.html"
        if missing and self._inside() is not None and page_404.is_file():
            body = page_404.read_bytes()
            self.send_response(404)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            return io.BytesIO(body)
        return super().send_head()


@contextmanager
def serve(site_dir: Path, prefix: str = "/") -> Iterator[str]:
    """Serve ``site_dir`` on 127.0.0.1 at a free port, under the URL path ``prefix``;
    yields the site's base URL (ending in /)."""
    handler_class = type("Handler", (_SiteHandler,), {"prefix": prefix})
    handler = functools.partial(handler_class, directory=str(site_dir))
    server = ThreadingHTTPServer((LOOPBACK, 0), handler)
    thread = threading.Thread(target=server.serve_forever, name="site-server", daemon=True)
    thread.start()
    try:
        yield f"http://{LOOPBACK}:{server.server_address[1]}{prefix}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


@dataclass
class Visit:
    """One page opened in the browser, and what went wrong while it loaded."""

    nav: NavPage
    url: str
    page: Page
    console_errors: list[str] = field(default_factory=list)
    page_errors: list[str] = field(default_factory=list)
    failed_requests: list[str] = field(default_factory=list)
    external_requests: list[str] = field(default_factory=list)

    def problems(self) -> list[str]:
        """Everything that makes the page broken for a reader, one line each."""
        return (
            [f"console error: {m}" for m in self.console_errors]
            + [f"uncaught exception: {m}" for m in self.page_errors]
            + [f"failed request: {m}" for m in self.failed_requests]
            + [f"request outside the site (refused): {m}" for m in self.external_requests]
        )


def same_origin(url: str, base_url: str) -> bool:
    a, b = urlsplit(url), urlsplit(base_url)
    return (a.scheme, a.netloc) == (b.scheme, b.netloc)


def open_page(
    context: BrowserContext, base_url: str, nav: NavPage, *, network_idle: bool = True
) -> Visit:
    """Open ``nav`` in a new tab, wait until it has settled, and return the record.

    Settled: loaded, every diagram drawn, and the network quiet. With ``network_idle``
    (for checks that read what the page requested) that is Playwright's ``networkidle``,
    500 ms without a request; without it, until each request the page has started is
    answered (for checks of the page itself, which need no quiet half-second each).
    """
    return start_page(context, base_url, nav).settled(network_idle=network_idle)


@dataclass
class Opening:
    """A page whose loading has begun (:func:`start_page`) and goes on in the browser
    while the test does something else; :meth:`settled` waits for the rest."""

    visit: Visit
    pending: set[Request]
    response: Response | None

    def settled(self, *, network_idle: bool = True) -> Visit:
        """The page once loaded and settled, as :func:`open_page` describes."""
        visit, page = self.visit, self.visit.page
        page.wait_for_load_state("load")
        if self.response is None or self.response.status != 200:
            status = self.response.status if self.response else "none"
            visit.failed_requests.append(f"{visit.url}: {status}")
        if network_idle:
            page.wait_for_load_state("networkidle")
        else:
            wait_for_answers(page, self.pending)
        settle_mermaid(page)
        return visit


def start_page(context: BrowserContext, base_url: str, nav: NavPage) -> Opening:
    """Open ``nav`` in a new tab, recording what goes wrong, and return once the browser
    has its document (Playwright's ``commit``), with the page still loading."""
    page = context.new_page()
    visit = Visit(nav=nav, url=base_url + nav.url, page=page)
    pending: set[Request] = set()

    def guard(route: Route) -> None:
        url = route.request.url
        if url.startswith(("http:", "https:")) and not same_origin(url, base_url):
            visit.external_requests.append(url)
            route.abort("blockedbyclient")
        else:
            route.continue_()

    def on_console(message: ConsoleMessage) -> None:
        if message.type == "error":
            location = message.location.get("url", "")
            visit.console_errors.append(
                f"{message.text} ({location})" if location else message.text
            )

    def on_failed(request: Request) -> None:
        if same_origin(request.url, base_url):
            visit.failed_requests.append(f"{request.url}: {request.failure}")

    def on_finished(request: Request) -> None:
        response = request.response()
        if response is not None and response.status >= 400 and same_origin(request.url, base_url):
            visit.failed_requests.append(f"{request.url}: HTTP {response.status}")

    page.route("**/*", guard)
    page.on("console", on_console)
    page.on("pageerror", lambda error: visit.page_errors.append(str(error)))
    page.on("request", lambda request: pending.add(request))
    page.on("requestfailed", on_failed)
    page.on("requestfinished", on_finished)
    page.on("requestfailed", lambda request: pending.discard(request))
    page.on("requestfinished", lambda request: pending.discard(request))

    response = page.goto(visit.url, wait_until="commit")
    return Opening(visit, pending, response)


def wait_for_answers(page: Page, pending: set[Request], timeout_ms: float = 15_000) -> None:
    """Wait until ``pending`` (kept by the page's request events) is empty."""
    for _ in range(int(timeout_ms / ANSWER_POLL_MS)):
        if not pending:
            return
        page.wait_for_timeout(ANSWER_POLL_MS)  # lets Playwright deliver the next events
    raise AssertionError(f"{page.url}: requests unanswered after {timeout_ms} ms: {pending}")


def settle_mermaid(page: Page, timeout_ms: float = 10_000) -> bool:
    """Wait until every diagram is rendered; False if one is still source after the wait."""
    try:
        page.wait_for_function(MERMAID_SETTLED, timeout=timeout_ms)
    except PlaywrightTimeout:  # the Mermaid test then says which diagram failed
        return False
    return True


def screenshot_path(kind: str, nav: NavPage, part: int | None = None) -> Path:
    name = nav.slug if part is None else f"{nav.slug}-{part}"
    path = SCREENSHOTS / kind / f"{name}.png"
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


class _Ids(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.ids: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if value is not None and (name == "id" or (tag == "a" and name == "name")):
                self.ids.add(value)


def html_ids(text: str) -> set[str]:
    """Every fragment target in an HTML document (``id`` attributes, ``<a name>``)."""
    parser = _Ids()
    parser.feed(text)
    return parser.ids


@dataclass(frozen=True)
class Fetched:
    status: int
    content_type: str
    ids: frozenset[str]


@functools.cache
def fetch(url: str) -> Fetched:
    """GET a URL of the local site once (cached): its status and, for HTML, its anchors."""
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            content_type = response.headers.get_content_type()
            body = response.read().decode("utf-8", "replace")
            ids = html_ids(body) if content_type == "text/html" else set()
            return Fetched(response.status, content_type, frozenset(ids))
    except urllib.error.HTTPError as error:
        return Fetched(error.code, "", frozenset())


def broken_internal_links(
    hrefs: list[str], base_url: str, live_ids: set[str], here: str
) -> list[str]:
    """The same-site links among ``hrefs`` whose page or anchor does not exist."""
    broken = []
    for href in sorted(set(hrefs)):
        if not same_origin(href, base_url):
            continue
        target, fragment = urldefrag(href)
        fetched = fetch(target)
        if fetched.status != 200:
            broken.append(f"{href}: HTTP {fetched.status}")
            continue
        if not fragment or fetched.content_type != "text/html":
            continue
        ids = fetched.ids | (live_ids if target == here else set())
        if unquote(fragment) not in ids:
            broken.append(f"{href}: no element with id {unquote(fragment)!r} on {target}")
    return broken


def first_number(text: str) -> float | None:
    """The first number in a displayed value: ``"1,234.5 ms"`` -> ``1234.5``.

    A typographic minus (U+2212) counts as a sign; thousands separators are dropped.
    """
    cleaned = text.replace("\u2212", "-")
    for separator in (",", "\u202f", "\u00a0", "\u2009"):
        cleaned = cleaned.replace(separator, "")
    match = re.search(r"-?\d+(?:\.\d+)?", cleaned)
    return float(match.group()) if match else None


def pdf_page_count(pdf: bytes) -> int:
    """Pages in a PDF as Chromium writes it (one ``/Type /Page`` object per page)."""
    return len(re.findall(rb"/Type\s*/Page(?![a-zA-Z])", pdf))
