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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from lockguide_lab.audit.checks import CHECKS
from lockguide_lab.audit.report import Report, Status
from lockguide_lab.audit.run import BUILTIN, audit_all, started

__all__ = [
    "LIBRARIES",
    "MASTERS",
    "MOVING",
    "NOTES",
    "RELEASED",
    "VERDICTS",
    "StaleVerdict",
    "StaleVersion",
    "Verdict",
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
    "redlock-ng",
    "redlock-ng-asyncio",
    "tooz",
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
    "redlock-ng": "2026-01",
    "redlock-ng-asyncio": "2026-01",
    "tooz": "2026-08",
    "sherlock": "2023-02-18",
    "portalocker": "2026-10-28",
}


@dataclass(frozen=True)
class Verdict:
    """One library's verdict: one sentence, and the rows it states (library, row, status).

    :func:`render` refuses a verdict that the reports contradict, so a rerun that changes a
    row a verdict rests on cannot leave the old sentence on the page.
    """

    library: str
    text: str
    rests_on: tuple[tuple[str, str, Status], ...]


P, F = Status.PASS, Status.FAIL
#: The page's lead: one sentence per library, in :data:`LIBRARIES` order of their first name.
VERDICTS: tuple[Verdict, ...] = (
    Verdict(
        "lockguide",
        "keep (the guide's own): every must-have kept, and `FencedLock` adds fencing tokens.",
        (
            ("lockguide", "renewal", P),
            ("lockguide-redlock", "partial", P),
            ("lockguide-fenced", "fencing", P),
        ),
    ),
    Verdict(
        "redis-py",
        "keep, with `timeout=` and `blocking_timeout=`, because by default its key never "
        "expires and its acquire never gives up (the asyncio twin too).",
        (("redis-py", "ttl", F), ("redis-py", "wait", F), ("redis-py-asyncio", "ttl", F)),
    ),
    Verdict(
        "pottery",
        "keep for five masters, with a timeout on its acquire, because it kept every Redlock "
        "rule but waits for ever by default.",
        (("pottery", "parallel", P), ("pottery", "partial", P), ("pottery", "wait", F)),
    ),
    Verdict(
        "python-redis-lock",
        "replace its renewal with [`Watchdog`](recipes.md#a-long-job-renewed-by-the-watchdog), "
        "because a failed renewal reaches the holder only at release, and a forked child "
        "deletes its parent's lock.",
        (("python-redis-lock", "renewal", F), ("python-redis-lock", "fork", F)),
    ),
    Verdict(
        "redlock-ng",
        "usable for efficiency, because it kept every must-have Redlock rule, but its sync "
        "`Redlock` asks the masters one by one, both read the wall clock, and a cancelled "
        "async release leaves the lock held.",
        (
            ("redlock-ng", "partial", P),
            ("redlock-ng", "parallel", F),
            ("redlock-ng-asyncio", "parallel", P),
            ("redlock-ng", "monotonic", F),
            ("redlock-ng-asyncio", "monotonic", F),
            ("redlock-ng-asyncio", "cancel", F),
        ),
    ),
    Verdict(
        "tooz",
        "pass a timeout to `acquire()` and do not rely on its heartbeat, because its acquire "
        "waits for ever, a failed renewal is only logged, and a forked child deletes the lock.",
        (("tooz", "wait", F), ("tooz", "renewal", F), ("tooz", "fork", F)),
    ),
    Verdict(
        "redlock-py",
        "replace with pottery or `lockguide.Redlock` (or one Redis and redis-py's `Lock`), "
        "because it is unmaintained since 2016 and leaves keys behind when a master errors.",
        (("redlock-py", "partial", F), ("redlock-py", "retry", F)),
    ),
    Verdict(
        "redlock",
        "replace, as redlock-py, because it is unmaintained since 2015 and leaves keys "
        "behind when a master errors.",
        (("redlock", "partial", F),),
    ),
    Verdict(
        "aioredlock",
        "usable on Python 3.11 only, because it imports `distutils`; it kept every Redlock "
        "rule, but a cancelled release leaves the lock held.",
        (("aioredlock", "partial", P), ("aioredlock", "cancel", F)),
    ),
    Verdict(
        "sherlock",
        "never use its no-expiry option, because with it a second holder gets in.",
        (("sherlock", "exclusion", F),),
    ),
    Verdict(
        "portalocker",
        "keep where a lock held by a connection fits, because it hands out fencing tokens "
        "and tells the holder when the connection dies.",
        (("portalocker", "fencing", P), ("portalocker", "renewal", P)),
    ),
)


class StaleVerdict(Exception):
    """A verdict states a row that the reports now contradict."""


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


def _check_verdicts(reports: Sequence[Report]) -> None:
    """Raise :class:`StaleVerdict` when a verdict states a row the reports contradict."""
    by_name = {name: r for r in reports for name, spec in BUILTIN.items() if spec == r.adapter}
    for verdict in VERDICTS:
        for library, check, status in verdict.rests_on:
            report = by_name.get(library)
            if report is None:
                continue
            found = report.row(check).status
            if found is not status:
                raise StaleVerdict(
                    f"the verdict on {verdict.library} says {library}'s {check} row is "
                    f"{status.value}; the runs say {found.value}: rewrite VERDICTS"
                )


#: What to change when leaving a library (the page's "Moving from" section): anchor, who, what.
MOVING: tuple[tuple[str, str, str], ...] = (
    (
        "from-redlock-py",
        "redlock-py",
        "For efficiency, one Redis and [redis-py's `Lock`](recipes.md#redis-pys-own-lock) or "
        "[`lockguide.Lock`](recipes.md#a-lockguidelock-in-a-request-handler); with five "
        "masters, `dlm.lock(name, ttl)` and `dlm.unlock(lock)` become "
        "`with Redlock(masters, name, ttl_ms=ttl):`",
    ),
    (
        "from-redis-py",
        "redis-py `Lock`",
        "Pass `timeout=` and `blocking_timeout=`; catch `LockNotOwnedError`",
    ),
    ("from-pottery", "pottery `Redlock`", "Give its acquire a timeout"),
    (
        "from-python-redis-lock",
        "python-redis-lock",
        "Set an expiry; renew with [`Watchdog`](recipes.md#a-long-job-renewed-by-the-watchdog) "
        "and `dog.check()`",
    ),
)

#: Hand-checked notes: what the runs cannot show. Each says how it was checked.
NOTES: tuple[str, ...] = (
    "*Last release*: the audited version's upload date on PyPI, checked by hand in "
    "November 2026 (`redlock`, `aioredlock`, redlock-ng and tooz to the month).",
    "Installed apart (`requirements/audit-peers*.txt`): `redlock` and redlock-ng share "
    "redlock-py's import name; aioredlock needs aioredis 1.x, which brings `hiredis`; "
    "redlock-ng declares `redis<6`, so it ran on redis-py 8.1, outside its declared range. "
    "tooz ran through its Redis driver, one coordinator per holder, on redis-py's `Lock`.",
    "On the *partial* row's error path, redlock-py and redlock raise before releasing, so "
    "the caller never learns the value that would release the keys.",
    "redis-py's `uuid1` value is unique (the Redis documentation's rule, a must) but "
    "predictable (the guide's stricter one, only reported).",
    "Code read: redlock-py 1.0.8 `redlock/__init__.py`, redlock 1.2.0 `redlock/lock.py`, "
    "redlock-ng 2.0.4 `redlock/lock.py`, pottery 3.0.1 `pottery/redlock.py`, "
    "python-redis-lock 4.0.1 `redis_lock/__init__.py`, aioredlock 0.7.3 "
    "`aioredlock/algorithm.py`, tooz 9.1.0 `tooz/drivers/redis.py`, redis-py 8.1.0 "
    "`redis/lock.py`. See [Sources](sources.md).",
)

#: The table's marks: Material icons, inlined as SVG by pymdownx.emoji (no emoji font
#: needed); hooks/a11y.py gives each its text alternative. n/a is a dash.
_TABLE_MARK = {
    Status.PASS: ":material-check-circle:",
    Status.FAIL: ":material-close-circle:",
    Status.WARN: ":material-alert:",
    Status.NA: "\N{EN DASH}",
    Status.NOT_RUN: ":material-help-circle-outline:",
    Status.ERROR: "error",
}


def render(reports: Sequence[Report]) -> str:
    """The Markdown page for these reports (deterministic)."""
    _check_verdicts(reports)
    names = {spec: name for name, spec in BUILTIN.items()}
    shown = {names.get(r.adapter) for r in reports}
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
        "Every verdict and cell here comes from running the library with "
        f"[`lockguide-audit`](audit.md) on real `redis-server` processes ({MASTERS} masters "
        "for Redlock-style locks). None makes a correctness lock: for that the resource "
        "checks a [fencing token](correct/fencing.md)."
    )
    add("")
    add("## Verdicts")
    add("")
    for verdict in VERDICTS:
        if verdict.library in shown:
            add(f"- **{verdict.library}**: {verdict.text}")
    add("")
    add("## Moving from another library { #moving-from-another-library }")
    add("")
    add("| From | What to change |")
    add("| --- | --- |")
    for anchor, who, what in MOVING:
        add(f"| **{who}**{{ #{anchor} }} | {_cell(what)} |")
    add("")
    add("## The full table")
    add("")
    add(f'??? abstract "Every row for every library ({len(CHECKS)} rows, {len(reports)} locks)"')
    add("")
    header = ["row", "item", "must"] + [f"{r.name} {r.version}" for r in reports]
    table = ["| " + " | ".join(header) + " |"]
    table.append("| " + " | ".join(["---", "---", ":-:"] + [":-:"] * len(reports)) + " |")
    released = ["last release", "", ""] + [
        RELEASED.get(names.get(r.adapter, ""), "not published") for r in reports
    ]
    table.append("| " + " | ".join(released) + " |")
    for check in CHECKS:
        items = ", ".join(f"[{i}](checklist.md#{i.lower()})" for i in check.items) or "\N{EN DASH}"
        cells = [check.title, items, "yes" if check.must else ""]
        cells += [_TABLE_MARK[r.row(check.id).status] for r in reports]
        table.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    table += [
        "",
        ":material-check-circle: kept; :material-close-circle: not kept; :material-alert: the "
        "hazard of every lock with a timeout; \N{EN DASH} does not apply; "
        ":material-help-circle-outline: not run (why: below). A failed *must* row makes "
        "`lockguide-audit` exit 1.",
    ]
    for line in table:
        add(f"    {line}".rstrip())
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
        "Adapters in `lab/src/lockguide_lab/audit/adapters/` call each library's own API "
        "with its defaults ([Audit your lock](audit.md) explains each check), except: "
        "portalocker `fencing=True`, `interrupt_on_lost=False`; lockguide's `Redlock` a 90 ms "
        "per-master timeout; aioredlock one lock manager per holder. Regenerate with "
        "`.venv/bin/python tools/regenerate_libraries_page.py --library NAME` or `--only ROW`."
    )
    add("")
    return "\n".join(out)
