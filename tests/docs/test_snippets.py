"""The files in snippets/ that the pages include are run like inline blocks:
each ``print`` is checked against the ``#>`` lines written under it, on both
backends. ``pytest --update-examples`` rewrites them in place."""

from __future__ import annotations

from pathlib import Path

import pytest
from pytest_examples import CodeExample, EvalExample

from tests.docs.test_docs import DOCS, INCLUDE_MARK, ROOT, run_checked
from tests.support import Backend

SNIPPETS = sorted((ROOT / "snippets").glob("*.py"))


def snippet_example(path: Path) -> CodeExample:
    source = path.read_text("utf-8")
    example: CodeExample = CodeExample.create(source, path=path, start_line=1, prefix="py")
    return example


def test_every_snippet_is_included_by_a_page() -> None:
    included = "\n".join(p.read_text("utf-8") for p in DOCS.rglob("*.md"))
    for path in SNIPPETS:
        assert f'{INCLUDE_MARK} "snippets/{path.name}"' in included, f"{path.name} is unused"


@pytest.mark.parametrize("path", SNIPPETS, ids=lambda p: p.name)
def test_snippet(
    path: Path,
    eval_example: EvalExample,
    backend: Backend,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    backend.patch_redis_module(monkeypatch)
    run_checked(snippet_example(path), eval_example)
