"""Draw a timeline: who believed they held the lock when, and what the resource did.

Needs matplotlib (a development dependency of lockguide, not a dependency of
the library). Figures are built with matplotlib's object API on the Agg
renderer, so nothing here touches ``pyplot``'s global state::

    from lockguide_lab.scenarios.plot import figure, png
    fig = figure(broken, fixed)      # a matplotlib Figure, one panel per timeline
    open("paused.png", "wb").write(png(broken, fixed))

One row per client. On each row:

* a pale band while the client *believes* it holds the lock (acquired, not yet
  released), hatched red where it believes so but its lease is already gone;
* a solid bar while the server really holds its lease, with a tick at each renewal;
* a grey hatched block while the client is paused;
* a green dot for each write the resource accepted, a red cross for each it refused.

Dotted vertical lines mark what the servers did (a crash, a promotion).
"""

from __future__ import annotations

import io

from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from lockguide_lab.scenarios.timeline import Interval, Kind, Timeline

__all__ = ["draw", "figure", "png"]

COLOURS = ["#3b6fb6", "#e08a1e", "#3a9a5b", "#8e5bb5", "#c2477f"]
ACCEPTED = "#2e9d48"
REFUSED = "#d12f2f"
STALE = "#d12f2f"


def _seconds(timeline: Timeline) -> bool:
    return timeline.end_ms >= 10_000


def _minus(spans: list[Interval], holes: list[Interval]) -> list[tuple[float, float]]:
    """The parts of ``spans`` not covered by ``holes``."""
    out = []
    for span in spans:
        pieces = [(span.start_ms, span.end_ms)]
        for hole in holes:
            cut = []
            for start, end in pieces:
                if hole.end_ms <= start or hole.start_ms >= end:
                    cut.append((start, end))
                    continue
                if start < hole.start_ms:
                    cut.append((start, hole.start_ms))
                if hole.end_ms < end:
                    cut.append((hole.end_ms, end))
            pieces = cut
        out += [p for p in pieces if p[1] - p[0] > 0]
    return out


def draw(ax: Axes, timeline: Timeline, *, scale: float | None = None) -> None:
    """Draw ``timeline`` on ``ax``. ``scale`` divides milliseconds (1000 for seconds)."""
    if scale is None:
        scale = 1000.0 if _seconds(timeline) else 1.0
    actors = timeline.actors
    rows = {actor: len(actors) - i for i, actor in enumerate(actors)}
    colour = {actor: COLOURS[i % len(COLOURS)] for i, actor in enumerate(actors)}
    leases = timeline.leases()
    end = timeline.end_ms

    for span in timeline.beliefs():
        y = rows[span.actor]
        ax.broken_barh(
            [(span.start_ms / scale, (span.end_ms - span.start_ms) / scale)],
            (y - 0.32, 0.64),
            facecolors=colour[span.actor],
            alpha=0.18,
            linewidth=0,
        )
        own = [lease for lease in leases if lease.actor == span.actor]
        stale = _minus([span], own)
        if stale:
            ax.broken_barh(
                [(a / scale, (b - a) / scale) for a, b in stale],
                (y - 0.32, 0.64),
                facecolors="none",
                edgecolors=STALE,
                hatch="////",
                linewidth=0.8,
            )
    for lease in leases:
        y = rows[lease.actor]
        ax.broken_barh(
            [(lease.start_ms / scale, (lease.end_ms - lease.start_ms) / scale)],
            (y - 0.11, 0.22),
            facecolors=colour[lease.actor],
        )
    for pause in timeline.pauses():
        y = rows[pause.actor]
        ax.broken_barh(
            [(pause.start_ms / scale, (pause.end_ms - pause.start_ms) / scale)],
            (y - 0.42, 0.84),
            facecolors="#9a9a9a",
            alpha=0.35,
            hatch="xx",
            edgecolors="#6d6d6d",
            linewidth=0.5,
        )

    for event in timeline.events:
        t = event.t_ms / scale
        if event.kind is Kind.SERVER:
            ax.axvline(t, color="#555555", linestyle=":", linewidth=1.2)
            label = event.detail.split(";")[0].split(":")[0].split(",")[0]
            note = ax.annotate(
                label,
                (t, 1.0),
                xycoords=("data", "axes fraction"),
                xytext=(2, -2),
                textcoords="offset points",
                rotation=90,
                va="top",
                fontsize=6.5,
                color="#555555",
            )
            note.set_in_layout(False)  # a label, not something to make room for
            note.set_clip_on(True)
            continue
        if event.actor not in rows:
            continue
        y = rows[event.actor]
        if event.kind is Kind.WRITE_ACCEPTED:
            ax.plot(t, y, "o", color=ACCEPTED, markersize=9, markeredgecolor="white", zorder=5)
        elif event.kind is Kind.WRITE_REFUSED:
            ax.plot(t, y, "X", color=REFUSED, markersize=10, markeredgecolor="white", zorder=5)
        elif event.kind is Kind.RENEWED:
            ax.plot(t, y, "|", color="black", markersize=12, markeredgewidth=1.2, zorder=4)
        elif event.kind is Kind.NOT_ACQUIRED:
            ax.plot(t, y, "o", color="#777777", markerfacecolor="white", markersize=7, zorder=4)
        elif event.kind is Kind.RELEASED_OTHERS:
            ax.plot(t, y, "v", color=STALE, markersize=9, zorder=5)

    outcome = timeline.outcome
    ok = outcome.safe and outcome.progress
    if not outcome.progress:
        title = "nobody acquired the lock"
    else:
        title = "mutual exclusion held, data intact" if ok else _bad(outcome.mutual_exclusion)
    ax.set_title(
        f"{timeline.way}: {timeline.approach}\n" + title,
        loc="left",
        fontsize=10,
        color="#1d6b34" if ok else "#a32121",
    )
    ax.set_yticks(list(rows.values()), [f"client {a}" for a in rows])
    ax.set_ylim(0.4, len(actors) + 0.6)
    end = end or 1.0  # a run whose only event is at 0 still gets an axis
    ax.set_xlim(-end * 0.02 / scale, end * 1.03 / scale)
    ax.set_xlabel("time since the run started (" + ("s" if scale == 1000.0 else "ms") + ")")
    ax.grid(axis="x", color="#dddddd", linewidth=0.6)
    ax.set_axisbelow(True)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)


def _bad(exclusion: bool) -> str:
    parts = []
    parts.append("mutual exclusion held" if exclusion else "mutual exclusion BROKEN")
    parts.append("data LOST")
    return ", ".join(parts)


def _legend() -> list[Patch | Line2D]:
    return [
        Patch(facecolor="#3b6fb6", alpha=0.25, label="believes it holds the lock"),
        Patch(facecolor="#3b6fb6", label="lease held on the server"),
        Patch(facecolor="none", edgecolor=STALE, hatch="////", label="believes it, lease gone"),
        Patch(facecolor="#9a9a9a", alpha=0.35, hatch="xx", label="paused"),
        Line2D([], [], marker="o", color=ACCEPTED, linestyle="", label="write accepted"),
        Line2D([], [], marker="X", color=REFUSED, linestyle="", label="write refused"),
        Line2D([], [], marker="|", color="black", linestyle="", label="renewed"),
        Line2D(
            [],
            [],
            marker="o",
            color="#777777",
            markerfacecolor="white",
            linestyle="",
            label="tried, refused",
        ),
        Line2D([], [], marker="v", color=STALE, linestyle="", label="deleted another's lock"),
        Line2D([], [], color="#555555", linestyle=":", label="server event"),
    ]


def figure(*timelines: Timeline, width: float = 9.0) -> Figure:
    """One panel per timeline, stacked, on a shared time axis, with one legend."""
    if not timelines:
        raise ValueError("figure() needs at least one timeline")
    seconds = any(_seconds(t) for t in timelines)
    scale = 1000.0 if seconds else 1.0
    heights = [0.9 + 0.55 * len(t.actors) for t in timelines]
    fig = Figure(figsize=(width, sum(heights) + 1.4), layout="constrained")
    axes = fig.subplots(len(timelines), 1, sharex=True, height_ratios=heights, squeeze=False)
    for ax, timeline in zip(axes[:, 0], timelines, strict=True):
        draw(ax, timeline, scale=scale)
    for ax in axes[:-1, 0]:
        ax.set_xlabel("")
    last = max(t.end_ms for t in timelines) or 1.0
    axes[0, 0].set_xlim(-last * 0.02 / scale, last * 1.03 / scale)
    fig.suptitle(timelines[0].scenario, x=0.01, ha="left", fontsize=12, fontweight="bold")
    fig.legend(handles=_legend(), loc="outside lower center", ncols=4, fontsize=8, frameon=False)
    return fig


def png(*timelines: Timeline, width: float = 9.0, dpi: int = 110) -> bytes:
    """:func:`figure` rendered to PNG bytes (Agg)."""
    buffer = io.BytesIO()
    figure(*timelines, width=width).savefig(buffer, format="png", dpi=dpi)
    return buffer.getvalue()
