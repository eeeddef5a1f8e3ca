"""What a notebook page must show, derived from the notebook itself.

Notebooks are committed without outputs (mkdocs-jupyter executes them at build time),
so the expected outputs come from executing the ``.ipynb`` once here, with the same
kernel the build uses. A notebook committed *with* outputs is read as it is.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

import nbformat
from nbclient import NotebookClient

IMAGE_TYPES = ("image/png", "image/jpeg", "image/gif", "image/svg+xml")


@dataclass(frozen=True)
class CodeCell:
    """One code cell: its id, its source, and what running it displays."""

    index: int
    cell_id: str | None
    source: str
    has_output: bool
    images: int


@functools.cache
def expected_cells(path: Path) -> tuple[CodeCell, ...]:
    """The code cells of the notebook at ``path`` and their outputs (executed if needed)."""
    notebook = nbformat.read(path, as_version=4)  # type: ignore[no-untyped-call]
    code = [c for c in notebook.cells if c.cell_type == "code"]
    if not any(c.get("outputs") for c in code):
        client = NotebookClient(
            notebook,
            timeout=300,
            kernel_name="python3",
            resources={"metadata": {"path": str(path.parent)}},
        )
        client.execute()
        code = [c for c in notebook.cells if c.cell_type == "code"]
    cells = []
    for index, cell in enumerate(code):
        outputs = [o for o in cell.get("outputs", []) if _shows_something(o)]
        images = sum(
            1
            for o in outputs
            if o.get("output_type") in ("display_data", "execute_result")
            and any(kind in o.get("data", {}) for kind in IMAGE_TYPES)
        )
        cells.append(CodeCell(index, cell.get("id"), cell.source, bool(outputs), images))
    return tuple(cells)


def _shows_something(output: nbformat.NotebookNode) -> bool:
    if output.get("output_type") == "stream":
        return bool(str(output.get("text", "")).strip())
    return True
