"""What a notebook page must show, derived from the notebook itself.

Notebooks are committed without outputs (mkdocs-jupyter executes them at build time),
so the expected outputs come from executing the ``.ipynb`` once here, with the same
kernel the build uses. A notebook committed *with* outputs is read as it is.

Executing them takes most of a minute, so the browser session starts it early
(``start_executing``, from tests/browser/conftest.py): one child process runs the
notebooks one after another, as the build does, while the first checks drive
Chromium; ``expected_cells`` then waits for its notebook's result. Run as
``python -m tests.browser.notebooks OUT_DIR NOTEBOOK...``, this module is that child.
"""

from __future__ import annotations

import functools
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import nbformat
from nbclient import NotebookClient

from tests.sitebuild import ROOT

IMAGE_TYPES = ("image/png", "image/jpeg", "image/gif", "image/svg+xml")
EXECUTION_TIMEOUT_S = 300


@dataclass(frozen=True)
class CodeCell:
    """One code cell: its id, its source, and what running it displays."""

    index: int
    cell_id: str | None
    source: str
    has_output: bool
    images: int


def _has_outputs(notebook: nbformat.NotebookNode) -> bool:
    return any(c.get("outputs") for c in notebook.cells if c.cell_type == "code")


def _execute(notebook: nbformat.NotebookNode, path: Path) -> None:
    client = NotebookClient(
        notebook,
        timeout=EXECUTION_TIMEOUT_S,
        kernel_name="python3",
        resources={"metadata": {"path": str(path.parent)}},
    )
    client.execute()


@dataclass
class _Background:
    """The child process executing notebooks, and where it writes each result."""

    process: subprocess.Popen[bytes]
    outputs: dict[Path, Path]
    log: Path


_background: _Background | None = None


def start_executing(paths: list[Path]) -> None:
    """Start executing, in one child process and in this order, those of ``paths`` that
    have no outputs committed; ``expected_cells`` picks up the results."""
    global _background
    stop_executing()
    todo = [p.resolve() for p in paths if not _has_outputs(nbformat.read(p, as_version=4))]  # type: ignore[no-untyped-call]
    if not todo:
        return
    out_dir = Path(tempfile.mkdtemp(prefix="lockguide-notebooks-"))
    outputs = {p: out_dir / f"{i}.ipynb" for i, p in enumerate(todo)}
    log = out_dir / "log.txt"
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [sys.executable, "-m", "tests.browser.notebooks", str(out_dir), *map(str, todo)],
            cwd=ROOT,
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    _background = _Background(process, outputs, log)


def stop_executing() -> None:
    """End the child process if it still runs, and remove what it wrote (at the end of
    the session; the results read by then stay cached in ``expected_cells``)."""
    global _background
    if _background is not None:
        if _background.process.poll() is None:
            _background.process.kill()
            _background.process.wait()
        shutil.rmtree(_background.log.parent, ignore_errors=True)
    _background = None


def _executed(path: Path) -> nbformat.NotebookNode:
    """The notebook at ``path`` with its outputs: as committed, from the child process
    when it was started for it, or else executed here and now."""
    if _background is not None and path.resolve() in _background.outputs:
        background, out = _background, _background.outputs[path.resolve()]
        try:
            background.process.wait(timeout=EXECUTION_TIMEOUT_S * len(background.outputs))
        except subprocess.TimeoutExpired:
            stop_executing()
            raise AssertionError(f"executing the notebooks took too long ({path})") from None
        if background.process.returncode != 0 or not out.exists():
            log = background.log.read_text("utf-8", "replace")
            raise AssertionError(f"executing {path} failed:\n{log[-4000:]}")
        executed: nbformat.NotebookNode = nbformat.read(out, as_version=4)  # type: ignore[no-untyped-call]
        return executed
    notebook: nbformat.NotebookNode = nbformat.read(path, as_version=4)  # type: ignore[no-untyped-call]
    if not _has_outputs(notebook):
        _execute(notebook, path)
    return notebook


@functools.cache
def expected_cells(path: Path) -> tuple[CodeCell, ...]:
    """The code cells of the notebook at ``path`` and their outputs (executed if needed)."""
    code = [c for c in _executed(path).cells if c.cell_type == "code"]
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


def main(out_dir: str, *paths: str) -> None:
    """Execute each notebook in turn and write it, with its outputs, to OUT_DIR/N.ipynb."""
    for i, name in enumerate(paths):
        path = Path(name)
        notebook = nbformat.read(path, as_version=4)  # type: ignore[no-untyped-call]
        _execute(notebook, path)
        nbformat.write(notebook, Path(out_dir) / f"{i}.ipynb")  # type: ignore[no-untyped-call]


if __name__ == "__main__":
    main(*sys.argv[1:])
