"""The comparison of every library the guide audits, rendered as a Markdown page.

:func:`run_all` audits every library in :data:`LIBRARIES` on one set of
servers (or some of them, on some rows); :func:`render` turns the reports into the
page; :func:`save_results`, :func:`load_results` and :func:`splice` keep the reports
between runs, so one row can be run again and put in its place. Every cell comes from
a report row's ``status`` and ``summary``, which are deterministic by design
(no raw timings, no random values), so rendering on another machine gives the
same text. Writing it to the guide's ``docs/libraries.md`` is the repository's
business: ``tools/regenerate_libraries_page.py``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from lockguide_lab.audit.checks import CHECKS
from lockguide_lab.audit.report import MARKS, Report, Status
from lockguide_lab.audit.run import BUILTIN, audit_all, started

__all__ = [
    "FACTS",
    "LIBRARIES",
    "MASTERS",
    "NOTES",
    "RELEASED",
    "Fact",
    "StaleVersion",
    "load_results",
    "render",
    "run_all",
    "save_results",
    "splice",
]

#: The libraries on the page, in column order (built-in adapter names).
LIBRARIES: tuple[str, ...] = (
    "lockguide",
    "lockguide-redlock",
    "lockguide-fenced",
    "redis-py",
    "redis-py-asyncio",
    "pottery",
    "python-redis-lock",
    "redlock-py",
    "redlock",
    "aioredlock",
    "sherlock",
    "portalocker",
)
MASTERS = 5

#: The last release of each library on PyPI (upload date of the audited version's files),
#: checked by hand (the page's notes say how). Update with the version.
RELEASED: dict[str, str] = {
    "redis-py": "2026-07-30",
    "redis-py-asyncio": "2026-07-30",
    "redlock": "2015-12",
    "aioredlock": "2022-02",
    "pottery": "2025-03-21",
    "python-redis-lock": "2026-04-08",
    "redlock-py": "2016-03-08",
    "sherlock": "2023-02-18",
    "portalocker": "2026-10-28",
}


@dataclass(frozen=True)
class Fact:
    """A public claim about a library, and how a run confirms it."""

    claim: str
    library: str
    check: str
    confirmed: Callable[[Report], bool]


FACTS: tuple[Fact, ...] = (
    Fact(
        "redlock-py acquires sequentially",
        "redlock-py",
        "parallel",
        lambda r: r.row("parallel").status is Status.FAIL,
    ),
    Fact(
        "redlock-py's value does not come from a CSPRNG",
        "redlock-py",
        "unpredictable",
        lambda r: "random.seed" in r.row("unpredictable").summary,
    ),
    Fact(
        "redlock-py times the acquisition with the wall clock",
        "redlock-py",
        "monotonic",
        lambda r: r.row("monotonic").status is Status.FAIL,
    ),
    Fact(
        "pottery acquires in parallel",
        "pottery",
        "parallel",
        lambda r: r.row("parallel").status is Status.PASS,
    ),
    Fact(
        "redis-py's Lock has no timeout by default",
        "redis-py",
        "ttl",
        lambda r: r.row("ttl").status is Status.FAIL,
    ),
    Fact(
        "redis-py's Lock uses a uuid1 value",
        "redis-py",
        "unpredictable",
        lambda r: "uuid1" in r.row("unpredictable").summary,
    ),
    Fact(
        "sherlock with no expiry deletes the key it just set",
        "sherlock",
        "exclusion",
        lambda r: (
            "no-expiry" in r.row("exclusion").summary and r.row("exclusion").status is Status.FAIL
        ),
    ),
    Fact(
        "python-redis-lock's renewal thread can fail without telling the holder in time",
        "python-redis-lock",
        "renewal",
        lambda r: r.row("renewal").status is Status.FAIL,
    ),
    Fact(
        "redlock-py leaves a majority's keys behind when one master errors",
        "redlock-py",
        "partial",
        lambda r: r.row("partial").status is Status.FAIL,
    ),
)


def run_all(
    libraries: Sequence[str] = LIBRARIES,
    *,
    backend: str = "real",
    masters: int = MASTERS,
    checks: Sequence[str] | None = None,
) -> list[Report]:
    """Audit the libraries (every one by default) on one set of servers started here, on
    every row or only on ``checks``, and return the reports."""
    with started("real" if backend == "real" else "fake", masters) as servers:
        label = "redis-server" if backend == "real" else "fakeredis"
        return audit_all(
            [BUILTIN[name] for name in libraries], servers, backend=label, checks=checks
        )


def load_results(path: Path) -> dict[str, Report]:
    """The reports saved by :func:`save_results`, by built-in adapter name."""
    saved = json.loads(path.read_text("utf-8"))
    return {name: Report.from_dict(data) for name, data in saved.items()}


def save_results(path: Path, reports: Mapping[str, Report]) -> None:
    """Write the reports as JSON, by built-in adapter name, in :data:`LIBRARIES` order."""
    order = [*LIBRARIES, *sorted(set(reports) - set(LIBRARIES))]
    data = {name: reports[name].to_dict() for name in order if name in reports}
    path.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n", "utf-8")


class StaleVersion(Exception):
    """A library's saved rows are from another version than the one installed now."""


def splice(saved: Mapping[str, Report], fresh: Mapping[str, Report]) -> dict[str, Report]:
    """The saved reports with the rows of ``fresh`` put in their places (in report order).

    A library whose installed version differs from its saved one raises
    :class:`StaleVersion`: its other rows describe another release, so the whole of it
    must run again.
    """
    merged = dict(saved)
    for name, report in fresh.items():
        old = saved.get(name)
        if old is None:
            merged[name] = report
            continue
        if (old.name, old.version) != (report.name, report.version):
            raise StaleVersion(
                f"{name} is {report.name} {report.version} now, {old.name} {old.version} in "
                "the saved results: audit it on every row"
            )
        rows = {row.id: row for row in old.rows} | {row.id: row for row in report.rows}
        merged[name] = replace(old, rows=[rows[c.id] for c in CHECKS if c.id in rows])
    return merged


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _names(reports: Sequence[Report], keep: Callable[[Report], bool]) -> str:
    found = [r.name for r in reports if keep(r)]
    if not found:
        return "none"
    if len(found) == 1:
        return found[0]
    return ", ".join(found[:-1]) + " and " + found[-1]


def _redlock_clean(report: Report) -> bool:
    return report.multi_master and all(
        row.status in (Status.PASS, Status.NOT_RUN)
        for row in report.rows
        if row.id in ("parallel", "partial", "retry", "drift", "monotonic")
    )


def _what_to_use(reports: Sequence[Report]) -> list[str]:
    """The advice, with every library list computed from the rows it rests on."""

    def status(check: str, wanted: Status) -> Callable[[Report], bool]:
        return lambda r: r.row(check).status is wanted

    third = [r for r in reports if not r.name.startswith(("lockguide", "redis-py"))]
    forever = _names(third, status("wait", Status.FAIL))
    return [
        "**What to use.** For an efficiency lock on one Redis, redis-py's own `Lock` (or its "
        "asyncio twin) is sound once you pass `timeout=`, because its default lock has no TTL "
        "and a crashed holder keeps it for ever, and `blocking_timeout=`, because its default "
        "acquire has no deadline either (of the other libraries, the same holds for "
        f"{forever}). Its `uuid1` value is unique, which is all the Redis documentation asks. "
        "Of the Redlock libraries, "
        f"{_names(reports, _redlock_clean)} kept every Redlock rule the audit runs. Renewal "
        "is where the libraries differ most: see the renewal and fork rows before you rely on "
        "a watchdog. For correctness no column is enough: the resource must check a fencing "
        "token ([checklist C-8](checklist.md#c-8), [fencing](correct/fencing.md)).",
    ]


#: Hand-checked notes: what the runs cannot show. Each says how it was checked.
NOTES: tuple[str, ...] = (
    "*Last release* is the upload date of the audited version on PyPI (checked by hand in "
    "November 2026; `redlock` and `aioredlock` to the month, from the package index). "
    "redlock-py and redlock have had no release since 2016 and 2015.",
    "`redlock` shares its import name with redlock-py, and aioredlock needs aioredis 1.x, "
    "which would bring in `hiredis` and change redis-py's parser for every other test; both "
    "are installed apart (`requirements/audit-peers.txt`). aioredlock imports `distutils`, "
    "which Python 3.12 removed from the standard library; it runs on 3.11, the only Python "
    "here, and was not run on 3.12.",
    "On the error path of the *partial* row, redlock-py's `lock()` raises before its unlock "
    "loop, so the caller never learns the value it would need to release the keys; redlock "
    "lets the master's error escape the same way. pottery, aioredlock and lockguide count "
    "the error as a failed vote.",
    "python-redis-lock's renewal thread dies with `NotAcquired` when an extension fails; the "
    "holder hears of it only when its `release()` raises, after the work it should have "
    "stopped, so the row says *late* and fails.",
    "redis-py's `uuid1` value (a timestamp, the MAC address, a clock sequence) is unique, the "
    "Redis documentation's rule, but not unpredictable, the guide's stricter one: the value "
    "proves ownership, and one another client can produce lets it release a lock it does not "
    "hold. *Unique* is a must-have; *unpredictable* only reported.",
    "The code read for these notes: redlock-py 1.0.8 `redlock/__init__.py`, redlock 1.2.0 "
    "`redlock/lock.py`, pottery 3.0.1 `pottery/redlock.py`, python-redis-lock 4.0.1 "
    "`redis_lock/__init__.py`, aioredlock 0.7.3 `aioredlock/algorithm.py`, redis-py 8.1.0 "
    "`redis/lock.py`. See [Sources](sources.md).",
)

#: The marks in the table; n/a is a dash, so an empty cell costs the reader no words.
_TABLE_MARK = {**MARKS, Status.NA: "\N{EN DASH}", Status.NOT_RUN: "○"}


def render(reports: Sequence[Report]) -> str:
    """The Markdown page for these reports (deterministic)."""
    by_adapter = {r.adapter: r for r in reports}
    names = {spec: name for name, spec in BUILTIN.items()}
    out: list[str] = []
    add = out.append
    add("# Python libraries")
    add("")
    add(
        "<!-- Generated by `tools/regenerate_libraries_page.py` from the audit's runs. "
        "Do not edit by hand: tests/lab/test_audit.py fails when this file differs from the saved "
        "results, docs/libraries.results.json. -->"
    )
    add("")
    add(
        "What each Python lock library does, established by **running it**: every cell is "
        "the outcome of [`lockguide-audit`](audit.md) against real `redis-server` processes "
        f"({MASTERS} independent masters for the Redlock-style locks), not a reading of its "
        "README. The *item* column names the [checklist](checklist.md) item a row tests; a "
        "row with none tests the library, not the design."
    )
    add("")
    for paragraph in _what_to_use(reports):
        add(paragraph)
        add("")
    add("## The table")
    add("")
    header = ["row", "item", "must"] + [f"{r.name} {r.version}" for r in reports]
    add("| " + " | ".join(header) + " |")
    add("| " + " | ".join(["---", "---", ":-:"] + [":-:"] * len(reports)) + " |")
    released = ["last release", "", ""] + [
        RELEASED.get(names.get(r.adapter, ""), "not published") for r in reports
    ]
    add("| " + " | ".join(released) + " |")
    for check in CHECKS:
        items = ", ".join(f"[{i}](checklist.md#{i.lower()})" for i in check.items) or "\N{EN DASH}"
        cells = [check.title, items, "yes" if check.must else ""]
        cells += [_TABLE_MARK[r.row(check.id).status] for r in reports]
        add("| " + " | ".join(_cell(c) for c in cells) + " |")
    add("")
    add(
        "✅ kept; ❌ not kept; ⚠️ the hazard every lock with a timeout has (only a fencing "
        "token checked by the resource closes it); \N{EN DASH} does not apply; ○ not run "
        "(the reason is in the run's output below). *must* rows make `lockguide-audit` exit 1 "
        "when they fail. Passing every row makes an **efficiency** lock, never a correctness one."
    )
    add("")
    add("## Public claims, checked by the runs")
    add("")
    add("| claim | the run | row |")
    add("| --- | --- | --- |")
    titles = {check.id: check.title for check in CHECKS}
    for fact in FACTS:
        report = by_adapter.get(BUILTIN[fact.library])
        if report is None:
            continue
        found = "confirmed" if fact.confirmed(report) else "**contradicted**"
        add(f"| {fact.claim} | {found} | {_cell(titles[fact.check])} |")
    token_holders = [r for r in reports if r.row("fencing").status is Status.PASS]
    if token_holders:
        who = ", ".join(f"{r.name}" for r in token_holders)
        add(f"| none of them issues fencing tokens | **contradicted**: {who} | fencing |")
    else:
        add("| none of them issues fencing tokens | confirmed | fencing |")
    add("")
    add("## What the runs cannot show")
    add("")
    for note in NOTES:
        add(f"- {note}")
    add("")
    add('??? info "What each run printed (`lockguide-audit NAME --brief`)"')
    add("")
    for r in reports:
        add(f"    `{names.get(r.adapter, r.adapter)}`:")
        add("")
        add("    ```text")
        for line in r.text(details=False).splitlines():
            add(f"    {line}".rstrip())
        add("    ```")
        add("")
    add("## How the rows are run")
    add("")
    add(
        "Each library is driven through an adapter in `lab/src/lockguide_lab/audit/adapters/` "
        "that calls its own API with its defaults; [Audit your lock](audit.md) explains each "
        "check. Options the adapters set: portalocker `fencing=True` and "
        "`interrupt_on_lost=False`; lockguide's `Redlock` a 90 ms per-master timeout (the "
        "parallel row delays each request by 30 ms); lockguide's `Lock` and `FencedLock` run "
        "under its `Watchdog` when a row asks for renewal; aioredlock gets one lock manager "
        "per holder, as separate processes would have. Regenerate after an upgrade with "
        "`.venv/bin/python tools/regenerate_libraries_page.py --library NAME`, or one row "
        "for every library with `--only ROW`."
    )
    add("")
    return "\n".join(out)
