"""Report rows, the exit status, and the text and JSON renderings."""

from __future__ import annotations

import enum
import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from lockguide_lab.audit.session import AuditSession

__all__ = ["MARKS", "Check", "Control", "Report", "Row", "Status"]


class Status(enum.StrEnum):
    """The outcome of one checklist item."""

    PASS = "pass"
    FAIL = "fail"
    #: A known hazard every lock of this kind has (the paused holder).
    WARN = "warn"
    #: Does not apply to this lock (e.g. Redlock rows for a single instance).
    NA = "n/a"
    #: Could not run on this backend (it needs a real server, a link, a process).
    NOT_RUN = "not run"
    #: The check itself broke (the adapter raised something unexpected).
    ERROR = "error"


@dataclass(frozen=True)
class Control:
    """A broken control lock for one row: ``broken`` differs from its correct ``sibling`` in
    the one rule the row tests, so its report must differ from the sibling's in that row
    alone. Both name factories in the repository's ``tests/lab/audit_controls.py``."""

    broken: str
    sibling: str


@dataclass(frozen=True)
class Check:
    """One row of the audit, declared once, beside its check function (:func:`audit_row`).

    ``items`` are the checklist items (``C-n`` in docs/checklist.md) it tests; ``order``
    places it in the report; ``does`` and ``passes`` are its line on the Audit page;
    ``controls`` the broken locks that prove it catches its mistake.
    """

    id: str
    title: str
    must: bool
    redlock_only: bool = False
    items: tuple[str, ...] = ()
    order: int = 0
    does: str = ""
    passes: str = ""
    controls: tuple[Control, ...] = ()
    run: Callable[[AuditSession], Row] | None = field(default=None, compare=False, repr=False)


#: How each status is shown in Markdown (the comparison page and ``--format markdown``).
MARKS = {
    Status.PASS: "✅",
    Status.FAIL: "❌",
    Status.WARN: "⚠️",
    Status.NA: "n/a",
    Status.NOT_RUN: "not run",
    Status.ERROR: "error",
}


@dataclass
class Row:
    """The outcome of one check, as it ran.

    ``summary`` is deterministic (no raw timings or random values): it is what
    the comparison page shows. ``details`` and ``data`` carry the measurements.
    """

    id: str
    title: str
    must: bool
    status: Status
    summary: str
    details: list[str] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)

    @property
    def failed(self) -> bool:
        """A must-have that failed (or whose check broke)."""
        return self.must and self.status in (Status.FAIL, Status.ERROR)


@dataclass
class Report:
    """Everything one audit run found about one lock."""

    adapter: str
    name: str
    version: str
    backend: str
    masters: int
    multi_master: bool
    rows: list[Row]

    @property
    def exit_code(self) -> int:
        """``1`` when a must-have row failed, else ``0`` (for CI)."""
        return 1 if any(row.failed for row in self.rows) else 0

    def row(self, check_id: str) -> Row:
        """The row of one check, by id (``"value"``, ``"release"``, ...)."""
        for row in self.rows:
            if row.id == check_id:
                return row
        raise KeyError(check_id)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (statuses as their strings)."""
        out = asdict(self)
        for row in out["rows"]:
            row["status"] = str(row["status"])
        out["exit_code"] = self.exit_code
        return out

    def to_json(self) -> str:
        """The report as indented JSON."""
        return json.dumps(self.to_dict(), indent=2, sort_keys=False, default=str)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Report:
        """Rebuild a report from :meth:`to_dict` output (e.g. a saved JSON file)."""
        rows = [
            Row(
                id=r["id"],
                title=r["title"],
                must=r["must"],
                status=Status(r["status"]),
                summary=r["summary"],
                details=list(r.get("details", [])),
                data=dict(r.get("data", {})),
            )
            for r in data["rows"]
        ]
        return cls(
            adapter=data["adapter"],
            name=data["name"],
            version=data["version"],
            backend=data["backend"],
            masters=data["masters"],
            multi_master=data["multi_master"],
            rows=rows,
        )

    def markdown(self) -> str:
        """The report as a Markdown table, to paste into a pull request or a design review."""
        kind = f"Redlock over {self.masters} masters" if self.multi_master else "single instance"
        lines = [
            f"**{self.name} {self.version}** ({kind}, backend: {self.backend}): "
            + (
                "a must-have row **failed**"
                if self.exit_code
                else "every must-have row passed (or did not apply)"
            ),
            "",
            "| check | must | result | what the run showed |",
            "| --- | :-: | :-: | --- |",
        ]
        for row in self.rows:
            cells = [row.title, "yes" if row.must else "", MARKS[row.status], row.summary]
            lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
        lines += [
            "",
            "Passing is necessary, not sufficient: only a fencing token checked by the "
            "resource stops a paused holder's late writes.",
        ]
        return "\n".join(lines)

    def text(self, *, details: bool = True) -> str:
        """A plain-text report: one line per row, details indented under it."""
        kind = f"Redlock over {self.masters} masters" if self.multi_master else "single instance"
        lines = [f"{self.name} {self.version} ({kind}, backend: {self.backend})"]
        width = max(len(row.title) for row in self.rows)
        for row in self.rows:
            mark = "must" if row.must else "    "
            lines.append(f"  [{row.status.value:>7}] {mark} {row.title:<{width}}  {row.summary}")
            if details:
                lines.extend(f"{'':>20}{line}" for line in row.details)
        failed = [row.title for row in self.rows if row.failed]
        if failed:
            lines.append(f"FAILED must-have: {', '.join(failed)}")
        else:
            lines.append("every must-have row passed (or did not apply)")
        return "\n".join(lines)
