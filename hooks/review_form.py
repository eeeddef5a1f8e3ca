"""MkDocs hook: the checklist page (``docs/checklist.md``) becomes a review form.

The Markdown keeps only what a reader reads: each item is a task-list box whose bold
lead starts with its stable ID (``**C-3 · Release is ...**``). On the built page:

* **Each item is its own anchor.** The ``<li>`` gets ``id="c-3"``, so other pages link
  to ``checklist.md#c-3`` (MkDocs validates those anchors in the strict build).
* **Each item has its fields**: N/A, owner and the number of an evidence note, as blanks
  to fill in on paper. On screen they are faint; screen readers skip them (the copy
  block is the form to fill in electronically).
* **Links print as numbered notes.** Printed, a link is a dead word, so every link
  inside the form gets a note number after it (print only), and the form ends with the
  numbered list of their absolute URLs (print only), each URL once.

Items without an ID are left alone; a page without ``.lg-checklist`` is not touched.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urljoin

from bs4 import BeautifulSoup, Tag

ITEM_ID = re.compile(r"^(C-\d+)\s*·")
FIELDS = ("N/A ☐", "owner ________", "evidence # ____")


def _fields(soup: BeautifulSoup) -> Tag:
    fields = soup.new_tag("span", attrs={"class": "lg-fields", "aria-hidden": "true"})
    for text in FIELDS:
        field = soup.new_tag("span")
        field.string = text
        fields.append(field)
    return fields


def anchor_and_fields(form: Tag, soup: BeautifulSoup) -> list[str]:
    """Give each item with an ID its anchor and its fields; return the IDs in order."""
    ids = []
    for item in form.select("li.task-list-item"):
        lead = item.find("strong")
        if not isinstance(lead, Tag) or lead.find_parent("li") is not item:
            continue
        match = ITEM_ID.match(lead.get_text().strip())
        if not match:
            continue
        item["id"] = match[1].lower()
        item.append(_fields(soup))
        ids.append(match[1])
    return ids


def number_links(form: Tag, soup: BeautifulSoup, page_url: str) -> list[str]:
    """After each link, its note number (print only); return the notes' URLs in order."""
    urls: list[str] = []
    for link in form.select("a[href]"):
        href = str(link["href"])
        if "headerlink" in (link.get("class") or []):
            continue
        url = urljoin(page_url, href)
        if url not in urls:
            urls.append(url)
        note = soup.new_tag("sup", attrs={"class": "lg-print-only"})
        note.string = f"[{urls.index(url) + 1}]"
        link.insert_after(note)
    if urls:
        notes = soup.new_tag("ol", attrs={"class": "lg-print-only lg-link-notes"})
        for url in urls:
            entry = soup.new_tag("li")
            entry.string = url
            notes.append(entry)
        heading = soup.new_tag("p", attrs={"class": "lg-print-only"})
        heading.string = "Links in this form:"
        form.append(heading)
        form.append(notes)
    return urls


def on_page_content(html_text: str, page: Any, config: Any, **kwargs: Any) -> str:
    if "lg-checklist" not in html_text:
        return html_text
    soup = BeautifulSoup(html_text, "html.parser")
    page_url = urljoin(str(config["site_url"] or "http://127.0.0.1:8000/"), page.url)
    for form in soup.select(".lg-checklist"):
        ids = anchor_and_fields(form, soup)
        # The strict build checks links to checklist.md#c-3 after every page's hooks have
        # run, against the anchors the page's Markdown made: add the items' anchors.
        if getattr(page, "present_anchor_ids", None) is not None:
            page.present_anchor_ids.update(ident.lower() for ident in ids)
        number_links(form, soup, page_url)
    return str(soup)
