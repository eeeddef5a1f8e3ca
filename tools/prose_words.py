"""Count the words of prose a reader meets in the site's nav.

Prose is Markdown outside fenced code blocks, HTML comments and ``--8<--`` snippet
includes, and the markdown cells of notebooks (code cells and outputs are not prose).
Only pages listed in ``mkdocs.yml``'s ``nav`` count. A word is a run that starts with a
letter or digit and goes on through letters, digits, ``_``, apostrophes, dots and hyphens
(so ``N//2+1`` is two words, ``don't`` and ``e.g.`` one).

usage: python tools/prose_words.py [ROOT] [--pages] [--only PAGE ...]

Prints one line per page (words, page) with ``--pages``, then the total, the number of
pages and the longest page.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml  # type: ignore[import-untyped]  # PyYAML ships no type information

WORD = re.compile(r"[A-Za-z0-9][\w'\u2019.-]*")
COMMENT = re.compile(r"<!--.*?-->", re.DOTALL)
INCLUDE = re.compile(r"^\s*-{1,2}8<-{1,2}.*$", re.MULTILINE)
FENCE_OPEN = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,}|~{3,})")


# mkdocs.yml carries ``!ENV`` and ``!!python/name`` tags: a loader that reads them as plain
# values (built with type() because PyYAML ships no type information).
_AnyTagLoader: Any = type("_AnyTagLoader", (yaml.SafeLoader,), {})


def _any_tag(loader: Any, suffix: str, node: Any) -> Any:
    if isinstance(node, yaml.ScalarNode):
        return loader.construct_scalar(node)
    if isinstance(node, yaml.SequenceNode):
        return loader.construct_sequence(node)
    return loader.construct_mapping(node)


_AnyTagLoader.add_multi_constructor("!", _any_tag)
_AnyTagLoader.add_multi_constructor("tag:yaml.org,2002:python/", _any_tag)


def nav_pages(config: Path) -> list[str]:
    """The Markdown and notebook pages of the nav, in nav order (``docs/``-relative)."""
    nav = yaml.load(config.read_text("utf-8"), Loader=_AnyTagLoader).get("nav") or []

    def walk(entry: Any) -> Iterator[str]:
        if isinstance(entry, str):
            if entry.endswith((".md", ".ipynb")):
                yield entry
        elif isinstance(entry, list):
            for item in entry:
                yield from walk(item)
        elif isinstance(entry, dict):
            for value in entry.values():
                yield from walk(value)

    return list(walk(nav))


def strip_code(markdown: str) -> str:
    """``markdown`` without its fenced blocks (closed by the same fence, at least as long)."""
    kept: list[str] = []
    closing: str | None = None
    for line in markdown.splitlines():
        if closing is not None:
            stripped = line.strip()
            if stripped.startswith(closing) and set(stripped) == {closing[0]}:
                closing = None
            continue
        opened = FENCE_OPEN.match(line)
        if opened:
            closing = opened["fence"]
            continue
        kept.append(line)
    return "\n".join(kept)


def prose(markdown: str) -> str:
    text = COMMENT.sub("", strip_code(markdown))
    return INCLUDE.sub("", text)


def count_words(markdown: str) -> int:
    return len(WORD.findall(prose(markdown)))


def page_markdown(path: Path) -> str:
    if path.suffix == ".ipynb":
        cells = json.loads(path.read_text("utf-8"))["cells"]
        return "\n\n".join(
            "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
            for cell in cells
            if cell["cell_type"] == "markdown"
        )
    return path.read_text("utf-8")


def page_words(root: Path) -> list[tuple[str, int]]:
    """(page, words) for each nav page that exists, in nav order."""
    docs = root / "docs"
    return [
        (page, count_words(page_markdown(docs / page)))
        for page in nav_pages(root / "mkdocs.yml")
        if (docs / page).is_file()
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", nargs="?", default=".", type=Path)
    parser.add_argument("--pages", action="store_true", help="one line per page")
    parser.add_argument("--only", nargs="+", metavar="PAGE", help="count only these pages")
    args = parser.parse_args(argv)
    rows = page_words(args.root)
    if args.only:
        wanted = set(args.only)
        rows = [(page, n) for page, n in rows if page in wanted]
    if not rows:
        print("no nav pages found", file=sys.stderr)
        return 1
    if args.pages:
        for page, n in rows:
            print(f"{n:6d} {page}")
    longest = max(rows, key=lambda row: row[1])
    total = sum(n for _, n in rows)
    print(f"total {total} words in {len(rows)} pages; longest {longest[0]} ({longest[1]})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
