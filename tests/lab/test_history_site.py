"""The histories the site draws: current, judged at build time, drawn with the pair marked."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from matplotlib.patches import Rectangle

from lockguide_lab.history.judge import judge
from lockguide_lab.history.plot import figure
from lockguide_lab.history.site import describe, record, slug
from lockguide_lab.scenarios import SCENARIOS

ROOT = Path(__file__).resolve().parents[2]
KEPT = ROOT / "docs" / "lab" / "histories"
PAGE = ROOT / "docs" / "lab" / "histories.md"


def _hook() -> ModuleType:
    spec = importlib.util.spec_from_file_location("histories_hook", ROOT / "hooks" / "histories.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_kept_histories_are_what_the_runs_record_now(tmp_path: Path) -> None:
    kept = {path.name: path.read_text() for path in KEPT.glob("*.jsonl")}
    expected = {f"{slug(s)}-{way}.jsonl" for s in SCENARIOS for way in ("broken", "fixed")}
    assert set(kept) == expected, "rerun: python -m lockguide_lab.history.site"
    # On the standing virtual clock a rerun records the very same lines. (The real-time
    # runs differ in their timings; test_history_runs.py judges fresh ones of those.)
    scripted = [s for s in SCENARIOS if not s.real_time]
    for path in record(tmp_path, scripted):
        assert path.read_text() == kept[path.name], f"{path.name}: rerun the site command"
    for name, history in kept.items():
        judgement = judge(history)
        scenario = next(s for s in SCENARIOS if name.startswith(slug(s) + "-"))
        if name.endswith("-fixed.jsonl"):
            assert judgement.fenced.ok, name
        elif not scenario.liveness:
            assert not judgement.fenced.ok, name


class _File:
    def __init__(self, uri: str, content: bytes = b"") -> None:
        self.src_uri = uri
        self.content_bytes = content


class _Page:
    def __init__(self, uri: str) -> None:
        self.file = _File(uri)


def test_the_hook_draws_each_pair_with_the_verdicts_as_its_alt_text(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    hook = _hook()
    files = [_File(f"lab/histories/{p.name}", p.read_bytes()) for p in sorted(KEPT.glob("*.jsonl"))]
    added: list[str] = []

    class Files(list[Any]):
        def append(self, item: Any) -> None:
            added.append(item.src_uri)

    class Generated:
        @staticmethod
        def generated(config: Any, uri: str, content: bytes) -> _File:
            assert content.startswith(b"\x89PNG")
            return _File(uri, content)

    monkeypatch.setattr(hook, "File", Generated)
    hook.on_files(Files(files), {})
    assert sorted(added) == sorted(f"lab/histories/{slug(s)}.png" for s in SCENARIOS)
    page = PAGE.read_text()
    out = hook.on_page_markdown(page, _Page("lab/histories.md"), {}, None)
    assert "<!-- history" not in out
    assert "![History of A bare DEL after the lease expired" in out
    assert "broken: the lease-service model finds it not linearizable (C's grant overlaps B's)" in (
        out
    )
    assert "(A's stale write came after B's)" in out  # the paused holder, broken
    for scenario in SCENARIOS:
        assert f"| {scenario.title} | broken |" in out
    with pytest.raises(KeyError, match="no docs/lab/histories/nothing-"):
        hook.on_page_markdown("<!-- history: nothing -->", _Page("lab/histories.md"), {}, None)


def test_the_figure_marks_exactly_the_pairs_the_models_rejected() -> None:
    broken = (KEPT / "bare-del-after-expiry-broken.jsonl").read_text()
    fixed = (KEPT / "bare-del-after-expiry-fixed.jsonl").read_text()
    fig = figure(("broken", broken), ("fixed", fixed))
    marked = []
    for ax in fig.axes:
        edges = [p for p in ax.patches if isinstance(p, Rectangle) and p.get_linewidth() > 2]
        marked.append(len(edges))
    # Broken: B's and C's grants (lease), C's and B's writes (fenced). Fixed: nothing.
    assert marked == [4, 0]
    assert "NOT linearizable" in fig.axes[0].get_title(loc="left")
    assert "NOT" not in fig.axes[1].get_title(loc="left")


def test_the_alt_text_says_which_model_found_what() -> None:
    text = describe("a run", [("broken", (KEPT / "paused-holder-broken.jsonl").read_text())])
    assert "the lease-service model finds it linearizable" in text
    assert "the fenced-resource model finds it not linearizable (A's stale write" in text


def test_the_page_names_both_models_and_stays_short() -> None:
    page = PAGE.read_text()
    assert "**lease service**" in page
    assert "**fenced resource**" in page
    prose = [
        line
        for line in page.split("---", 2)[2].splitlines()
        if line and not line.startswith(("|", "<!--", "```", "python -m", "  docs/"))
    ]
    assert len(" ".join(prose).split()) < 450
