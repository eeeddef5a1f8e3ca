"""MkDocs hook: the Audit page's table of rows, from the rows' declarations.

Each row of the audit is declared once, beside its check function
(``lockguide_lab.audit.checks``, ``audit_row(...)``): its title, its checklist items,
whether it is a must, what it does and when it passes. A page line
``<!-- audit: rows -->`` becomes the table of every declared row, in report order, so
a new row appears on the page with no edit to it.
"""

from __future__ import annotations

from typing import Any

from lockguide_lab.audit.checks import CHECKS

MARKER = "<!-- audit: rows -->"


def table() -> str:
    lines = [
        "| row | item | must | what the audit does | passes when |",
        "| --- | --- | :-: | --- | --- |",
    ]
    for check in CHECKS:
        items = ", ".join(f"[{i}](checklist.md#{i.lower()})" for i in check.items) or "\N{EN DASH}"
        cells = [check.title, items, "yes" if check.must else "", check.does, check.passes]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    if MARKER not in markdown:
        return markdown
    return markdown.replace(MARKER, table())
