"""The site builds with ``mkdocs build --strict``: any warning (a broken link or
anchor, a missing include, a notebook cell that raises) fails it."""

from __future__ import annotations

import html
import re
from pathlib import Path

import pytest

from tests.browser.nav import nav_pages
from tests.sitebuild import ROOT, SiteBuild

DOCS = ROOT / "docs"


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


# --- Published correctly: addresses, sitemap, previews --------------------------------


def nav_urls() -> list[str]:
    return [p.url for p in nav_pages()]  # the nav, read from mkdocs.yml


def head_of(site: Path, url: str) -> str:
    text = (site / url / "index.html").read_text("utf-8")
    return text[: text.index("</head>")]


def meta(head: str, attribute: str, name: str) -> str | None:
    match = re.search(rf'<meta {attribute}="{re.escape(name)}" content="([^"]*)"', head)
    return html.unescape(match.group(1)) if match else None


def test_sitemap_lists_every_page_at_its_absolute_address(built_site: SiteBuild) -> None:
    sitemap = (built_site.site_dir / "sitemap.xml").read_text("utf-8")
    locs = re.findall(r"<loc>([^<]*)</loc>", sitemap)
    assert locs, "the sitemap lists no URL (is site_url set?)"
    relative = [loc for loc in locs if not loc.startswith(built_site.site_url)]
    assert not relative, f"sitemap URLs not under {built_site.site_url}: {relative[:5]}"
    missing = [u for u in nav_urls() if built_site.site_url + u not in locs]
    assert not missing, f"pages of the nav missing from the sitemap: {missing}"


def test_every_page_has_a_canonical_address_and_a_description_of_its_own(
    built_site: SiteBuild,
) -> None:
    problems, descriptions = [], {}
    for url in nav_urls():
        head = head_of(built_site.site_dir, url)
        canonical = re.search(r'<link rel="canonical" href="([^"]*)"', head)
        want = built_site.site_url + url
        if not canonical or canonical.group(1) != want:
            problems.append(f"{url or '/'}: canonical {canonical and canonical.group(1)!r}")
        description = meta(head, "name", "description")
        if not description or len(description) < 40:
            problems.append(f"{url or '/'}: description {description!r}")
        descriptions[url] = description
        for tag, value in (("og:title", None), ("og:description", description), ("og:url", want)):
            shown = meta(head, "property", tag)
            if not shown or (value is not None and shown != value):
                problems.append(f"{url or '/'}: {tag} is {shown!r}, want {value!r}")
    assert not problems, "\n".join(problems)
    # Each page says what it is about: not one sentence repeated over the site.
    assert len(set(descriptions.values())) > len(descriptions) * 0.9, descriptions


def test_404_page_loads_its_assets_from_the_sites_own_path(built_site: SiteBuild) -> None:
    # GitHub serves 404.html for a missing path at any depth, so its links cannot be
    # relative: they must be absolute paths under the site's own prefix.
    page = (built_site.site_dir / "404.html").read_text("utf-8")
    prefix = re.sub(r"^https?://[^/]+", "", built_site.site_url)
    assets = re.findall(r'(?:href|src)="([^"]*/assets/[^"]*)"', page)
    assert assets, "the 404 page loads no stylesheet or script"
    wrong = [a for a in assets if not a.startswith(prefix + "assets/")]
    assert not wrong, f"the 404 page loads assets outside {prefix}: {wrong[:5]}"


#: Emoji used as marks: with no emoji font (Debian's Chromium without one) they are boxes.
EMOJI_MARKS = re.compile("[\u2705\u274c\u26a0\u2714\u2716]")


def test_every_page_marks_with_icons_not_emoji() -> None:
    # docs/libraries.md too: its generator (lockguide_lab.audit.page) writes icon shortcodes.
    offenders = [
        str(p.relative_to(DOCS))
        for p in DOCS.rglob("*.md")
        if EMOJI_MARKS.search(p.read_text("utf-8"))
    ]
    assert not offenders, f"emoji marks (use :material-check-circle: and the like): {offenders}"


@pytest.mark.parametrize(("page", "least"), [("matrix", 40), ("libraries", 150)])
def test_the_table_marks_are_inline_svg_with_a_text_alternative(
    built_site: SiteBuild, page: str, least: int
) -> None:
    built = (built_site.site_dir / page / "index.html").read_text("utf-8")
    marks = re.findall(r'<span[^>]*class="twemoji[^"]*"[^>]*>\s*<svg', built)
    assert len(marks) >= least
    labelled = re.findall(
        r'<span aria-label="(yes|no|it depends|hazard|not run)"[^>]*role="img"', built
    )
    assert len(labelled) == len(marks)
    assert not EMOJI_MARKS.search(built)
