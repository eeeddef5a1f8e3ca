"""Draw a history: each client a row, each operation a bar from its invoke to its completion.

Needs matplotlib (a development dependency), on the Agg renderer through the
object API, as :mod:`lockguide_lab.scenarios.plot` does::

    from lockguide_lab.history.plot import png
    open("history.png", "wb").write(png(("broken", broken.history), ("fixed", fixed.history)))

On each row: a solid bar for an operation that completed ``ok``, an outlined
bar for one that failed (it did not take effect), a hatched bar running to the
end for one whose outcome is unknown. A granted lease also draws its validity
window as a thin line under the bar. The pair each model rejected (the grant
that overlapped, the write that came after a newer one) is outlined in red and
labelled. On a virtual clock an operation takes no time, so every bar is drawn
at least a small fixed width.
"""

from __future__ import annotations

import io

from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch, Rectangle

from lockguide_lab.history.history import Op, Status
from lockguide_lab.history.judge import Judgement, client, judge

__all__ = ["draw", "figure", "png"]

COLOURS = {"acquire": "#3b6fb6", "renew": "#6a9ad6", "release": "#8e8e8e",
           "write": "#e08a1e", "read": "#3a9a5b"}  # fmt: skip
CLASH = "#d12f2f"


def _time(op: Op, which: str) -> float | None:
    event = op.invoke if which == "call" else op.completion
    return event.time if event is not None else None


def _label(op: Op) -> str:
    if op.f == "write" and isinstance(op.value, dict):
        return f"write t{op.value.get('token')}"
    return {"acquire": "grant", "release": "rel."}.get(op.f, op.f)


def draw(ax: Axes, history: str, *, title: str = "", judgement: Judgement | None = None) -> None:
    """Draw one history on ``ax``; the clashing pairs come from ``judgement`` (or are judged)."""
    judged = judgement or judge(history)
    ops = list(judged.operations)
    names = [*sorted({client(op) or "" for op in ops} - {"observer"}), "observer"]
    rows = {name: len(names) - i for i, name in enumerate(names)}
    times = [t for op in ops for t in (_time(op, "call"), _time(op, "ret")) if t is not None]
    end = max(times, default=1.0) or 1.0
    least = end * 0.012
    marked: dict[int, list[str]] = {}
    for label, verdict in (("lease", judged.lease), ("fenced", judged.fenced)):
        if not verdict.ok:
            for op, role in ((verdict.conflict, "first"), (verdict.unplaced, "clash")):
                if op is not None:
                    marked.setdefault(op.index, []).append(f"{label} {role}")
    per_row: dict[int, int] = {}
    for op in ops:
        y = rows[client(op) or ""]
        start = _time(op, "call") or 0.0
        stop = _time(op, "ret")
        unknown = op.status is Status.UNKNOWN or stop is None
        stop = end if unknown or stop is None else stop
        width = max(stop - start, least)
        colour = COLOURS.get(op.f, "#555555")
        if op.f in ("acquire", "renew") and op.required and isinstance(op.value, dict):
            w0, w1 = op.value["window"]
            ax.plot([w0, min(w1, end * 1.02)], [y - 0.3, y - 0.3], color=colour, lw=1.5,
                    alpha=0.6, solid_capstyle="butt")  # fmt: skip
        clash = op.index in marked
        ax.add_patch(
            Rectangle(
                (start, y - 0.18),
                width,
                0.36,
                facecolor=colour if op.status is Status.OK else "white",
                edgecolor=CLASH if clash else colour,
                linewidth=2.2 if clash else 1.0,
                hatch="///" if unknown else None,
            )
        )
        text = _label(op) + (" refused" if op.status is Status.FAIL else "")
        nth = per_row[y] = per_row.get(y, -1) + 1
        ax.annotate(text, (start, y + (0.22 if nth % 2 == 0 else 0.36)), fontsize=6.5,
                    color="#333333", annotation_clip=True)  # fmt: skip
        if clash:
            marks = per_row[-y] = per_row.get(-y, -1) + 1
            low = y - (0.5 if marks % 2 == 0 else 0.62)
            ax.annotate(", ".join(marked[op.index]), (start, low), fontsize=6.5,
                        color=CLASH, fontweight="bold")  # fmt: skip
    verdicts = []
    for label, verdict in (("lease service", judged.lease), ("fenced resource", judged.fenced)):
        pair = Judgement.pair(verdict)
        word = "linearizable" if verdict.ok else "NOT linearizable"
        verdicts.append(f"{label}: {word}" + (f" ({pair[0]}, {pair[1]})" if pair else ""))
    ax.set_title((title + "\n" if title else "") + "; ".join(verdicts), loc="left", fontsize=9)
    ax.set_yticks(list(rows.values()), [f"client {n}" if n != "observer" else n for n in rows])
    ax.set_ylim(0.3, len(names) + 0.7)
    ax.set_xlim(-end * 0.02, end * 1.06)
    ax.set_xlabel("time since the run started (ms)")
    ax.grid(axis="x", color="#dddddd", linewidth=0.6)
    ax.set_axisbelow(True)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)


def _legend() -> list[Patch | Line2D]:
    return [
        Patch(facecolor=COLOURS["acquire"], label="grant (ok)"),
        Patch(facecolor=COLOURS["write"], label="write (ok)"),
        Patch(facecolor=COLOURS["release"], label="release (ok)"),
        Patch(facecolor="white", edgecolor="#555555", label="refused: did not take effect"),
        Patch(facecolor="white", edgecolor="#555555", hatch="///", label="outcome unknown"),
        Line2D([0], [0], color=COLOURS["acquire"], lw=1.5, label="validity window"),
        Patch(facecolor="white", edgecolor=CLASH, linewidth=2.2, label="the pair a model rejected"),
    ]


def figure(*histories: tuple[str, str], width: float = 9.0) -> Figure:
    """One panel per ``(title, history)``, stacked."""
    fig = Figure(figsize=(width, 2.6 * len(histories) + 0.8), layout="constrained")
    axes = fig.subplots(len(histories), 1, squeeze=False)
    for ax, (title, history) in zip(axes[:, 0], histories, strict=True):
        draw(ax, history, title=title)
    fig.legend(handles=_legend(), loc="outside lower center", ncols=3, fontsize=8, frameon=False)
    return fig


def png(*histories: tuple[str, str], width: float = 9.0, dpi: int = 110) -> bytes:
    """The figure as PNG bytes."""
    buffer = io.BytesIO()
    figure(*histories, width=width).savefig(buffer, format="png", dpi=dpi)
    return buffer.getvalue()
