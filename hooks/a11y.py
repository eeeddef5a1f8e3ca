"""MkDocs hook: what the built HTML needs so that every reader can use it.

* **Checklist boxes get a name.** ``pymdownx.tasklist`` draws each box as an
  ``<input type="checkbox">`` inside an empty ``<label>``, so a screen reader announces
  "checkbox, not checked" and nothing else. Each box gets ``aria-label`` with its
  item's text: the item's bold lead sentence when it has one, else its first line.
* **Notebook figures say what they show.** nbconvert gives every image it renders the
  alt text "No description has been provided for this image". A figure drawn by a
  notebook cell is described by the Markdown that the same cell displayed just before
  it (the lab's ``show()`` builds that text from the same runs it draws). That text
  becomes the image's alt, and the visible copy is hidden from assistive technology so
  that it is not read twice. A notebook image with no description before it is a
  warning, which the strict build turns into a failure.
* **Every page has a description.** A page without ``description`` in its front
  matter gets the first sentence-sized paragraph of its content, which Material puts
  in ``<meta name="description">`` (and ``overrides/main.html`` in the Open Graph
  tags); the site's ``site_description`` stays the default for pages with no text.
"""

from __future__ import annotations

import functools
import html
import logging
import re
from pathlib import Path
from typing import Any

import material
from bs4 import BeautifulSoup, Tag

log = logging.getLogger("mkdocs.hooks.a11y")

GENERIC_ALT = "No description has been provided for this image"
DESCRIPTION_CHARS = 160


def _text(element: Tag) -> str:
    return re.sub(r"\s+", " ", element.get_text()).strip()


def _shorten(text: str, limit: int) -> str:
    """``text`` in at most ``limit`` characters: whole sentences if they fill at least
    half of it, else cut at a word with an ellipsis."""
    if len(text) <= limit:
        return text
    sentence_end = text[:limit].rfind(". ")
    if sentence_end >= limit // 2:
        return text[: sentence_end + 1]
    return text[: limit - 1].rsplit(" ", 1)[0].rstrip(",;:.") + "…"


def name_checkboxes(soup: BeautifulSoup) -> int:
    """Give each task-list checkbox the text of its item as its accessible name."""
    named = 0
    for item in soup.select("li.task-list-item"):
        box = item.select_one("input[type=checkbox]")
        if box is None or box.get("aria-label") or box.get("aria-labelledby"):
            continue
        lead = item.find("strong")
        if isinstance(lead, Tag) and lead.find_parent("li") is item:
            name = _text(lead)
        else:
            # The item's own text, without any nested list under it.
            own = BeautifulSoup(str(item), "html.parser")
            for nested in own.select("ul, ol"):
                nested.decompose()
            name = _text(own).split(". ")[0]
        if name:
            box["aria-label"] = _shorten(name, 200)
            named += 1
    return named


def describe_figures(soup: BeautifulSoup, where: str) -> int:
    """Alt text for each notebook image from the Markdown output shown just before it."""
    described = 0
    for img in soup.select(".jp-OutputArea-child img"):
        alt = str(img.get("alt") or "").strip()
        if alt and alt != GENERIC_ALT:
            continue
        child = img.find_parent(class_="jp-OutputArea-child")
        before = child.find_previous_sibling(class_="jp-OutputArea-child") if child else None
        caption = before.select_one(".jp-RenderedMarkdown") if isinstance(before, Tag) else None
        text = _text(caption) if caption is not None else ""
        if not text:
            log.warning(
                "%s: a notebook figure has no description: display it with the Markdown "
                "text that says what it shows just before the image (see hooks/a11y.py)",
                where,
            )
            continue
        img["alt"] = text
        caption["aria-hidden"] = "true"  # the same words are the image's alt
        caption["class"] = [*caption.get("class", []), "lg-figure-description"]
        described += 1
    return described


#: The table marks, by icon name: what each says, and its class (colour).
MARKS = {
    "check-circle": ("yes", "lg-mark-yes"),
    "close-circle": ("no", "lg-mark-no"),
    "alert-circle": ("it depends", "lg-mark-depends"),
    # The libraries page: the hazard every lock with a timeout has, and a row not run.
    "alert": ("hazard", "lg-mark-depends"),
    "help-circle-outline": ("not run", "lg-mark-not-run"),
}
_ICONS = Path(material.__file__).parent / "templates" / ".icons" / "material"


@functools.cache
def _mark_paths() -> dict[str, tuple[str, str]]:
    """Each mark's SVG path (its ``d``, which identifies the icon) to its label and class."""
    paths = {}
    for name, mark in MARKS.items():
        svg = BeautifulSoup((_ICONS / f"{name}.svg").read_text("utf-8"), "html.parser")
        paths[str(svg.find("path")["d"])] = mark  # type: ignore[index]
    return paths


def label_marks(soup: BeautifulSoup) -> int:
    """Give every icon that is a table mark a text alternative; the count labelled."""
    marks = _mark_paths()
    count = 0
    for span in soup.find_all("span", class_="twemoji"):
        svg, path = span.find("svg"), span.find("path")
        mark = marks.get(str(path.get("d"))) if path is not None else None
        if svg is None or mark is None:
            continue
        label, css = mark
        span["role"] = "img"
        span["aria-label"] = span["title"] = label
        span["class"] = [*span.get("class", []), css]
        svg["aria-hidden"] = "true"
        count += 1
    return count


def first_paragraph(soup: BeautifulSoup) -> str | None:
    """The first paragraph of real prose (not a code cell, admonition title or caption)."""
    for paragraph in soup.find_all("p"):
        if paragraph.find_parent(class_=["admonition", "highlight", "jp-OutputArea"]):
            continue
        text = _text(paragraph)
        if len(text) >= 40:
            return _shorten(text, DESCRIPTION_CHARS)
    return None


def on_page_content(html_text: str, page: Any, **kwargs: Any) -> str:
    soup = BeautifulSoup(html_text, "html.parser")
    if not page.meta.get("description"):
        description = first_paragraph(soup)
        if description:
            # Material writes it into content="..." as it is, without escaping.
            page.meta["description"] = html.escape(description, quote=True)
    changed = name_checkboxes(soup) + describe_figures(soup, page.file.src_uri) + label_marks(soup)
    return str(soup) if changed else html_text
