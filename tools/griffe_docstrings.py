"""A Griffe extension that lets the API reference render ``lockguide``'s docstrings.

The library's docstrings are written for readers of the source: Google-style
sections, Sphinx roles (``:class:`LockError```) and ``#:`` comments on constants.
mkdocstrings renders Markdown, so before rendering this extension

* turns each Sphinx role into a cross-reference to the object it names when that
  object is part of ``lockguide`` (``[`LockError`][lockguide.errors.LockError]``),
  and into inline code otherwise (``:class:`TypeError``` becomes `` `TypeError` ``);
* turns a reStructuredText ``Example::`` literal block into a Google-style
  ``Example:`` section holding a fenced Python code block;
* gives a module-level constant the ``#:`` comment written above it as its docstring.

The source files are not changed. Loaded from ``mkdocs.yml``
(``plugins.mkdocstrings.handlers.python.options.extensions``).
"""

from __future__ import annotations

import re
from typing import Any

import griffe

ROLE = re.compile(r":(?:class|meth|func|attr|mod|exc|data|obj):`~?([\w.]+)`")
LITERAL_BLOCK = re.compile(
    r"^(?P<indent>[ \t]*)Example::[ \t]*\n(?P<blank>(?:[ \t]*\n)*)"
    r"(?P<body>(?:(?P=indent)[ \t]+\S.*\n?|[ \t]*\n)+)",
    re.MULTILINE,
)


def _fence(match: re.Match[str]) -> str:
    """``Example::`` plus an indented block becomes an ``Example:`` section with a fence."""
    indent = match.group("indent")
    body = match.group("body").rstrip()
    inner = indent + "    "
    return f"{indent}Example:\n{inner}```python\n{body}\n{inner}```\n"


def _find(scope: griffe.Object | None, dotted: str) -> griffe.Object | griffe.Alias | None:
    """Resolve ``dotted`` the way a reader would: from the innermost scope outwards."""
    while scope is not None:
        current: Any = scope
        for part in dotted.split("."):
            members = getattr(current, "members", {})
            if part not in members:
                current = None
                break
            current = members[part]
        if current is not None:
            return current  # type: ignore[no-any-return]
        scope = scope.parent
    return None


def _link(obj: griffe.Object, match: re.Match[str]) -> str:
    name = match.group(1)
    shown = name.rsplit(".", 1)[-1] if match.group(0).count("~") else name
    target = _find(obj, name) or _find(obj.package, name)
    if target is None:
        return f"`{shown}`"
    if isinstance(target, griffe.Alias):
        try:
            path = target.final_target.path
        except griffe.AliasResolutionError:
            return f"`{shown}`"
    else:
        path = target.path
    return f"[`{shown}`][{path}]"


class SphinxRolesToMarkdown(griffe.Extension):
    """Rewrite Sphinx roles and ``Example::`` blocks; attach ``#:`` comments."""

    def on_object(self, *, obj: griffe.Object, loader: griffe.GriffeLoader, **kwargs: Any) -> None:
        if obj.is_attribute and obj.docstring is None:
            self._attach_comment(obj)
        if obj.docstring is None:
            return
        text = ROLE.sub(lambda m: _link(obj, m), obj.docstring.value)
        obj.docstring.value = LITERAL_BLOCK.sub(_fence, text)

    @staticmethod
    def _attach_comment(obj: griffe.Object) -> None:
        """Use the ``#:`` lines directly above a module constant as its docstring."""
        if obj.lineno is None or not obj.parent or not obj.parent.is_module:
            return
        lines = obj.parent.lines
        comment: list[str] = []
        index = obj.lineno - 2
        while index >= 0 and lines[index].lstrip().startswith("#:"):
            comment.insert(0, lines[index].lstrip()[2:].strip())
            index -= 1
        if comment:
            obj.docstring = griffe.Docstring(" ".join(comment), parent=obj, lineno=index + 2)
