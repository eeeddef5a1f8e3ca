"""Regenerate the guide's comparison page, ``docs/libraries.md``, from audit runs.

The runs' reports are saved beside the page, in ``docs/libraries.results.json``; the
page is rendered from them. Run from anywhere in the repository::

    .venv/bin/python tools/regenerate_libraries_page.py                  # every library, every row
    .venv/bin/python tools/regenerate_libraries_page.py --only drift     # one row, every library
    .venv/bin/python tools/regenerate_libraries_page.py --library pottery  # after an upgrade
    .venv/bin/python tools/regenerate_libraries_page.py --render         # render only, run nothing

``--only ROW`` (repeatable) audits every library on that row alone and puts the rows in
their places in the saved results (a new row is added); ``--library NAME`` (repeatable)
audits that library on every row. A library whose installed version differs from its
saved one refuses ``--only``: run it whole with ``--library``. Auditing starts five
``redis-server`` processes of its own. The test suite (``tests/lab/test_audit.py``) fails
when the page differs from the saved results or misses a row, and re-audits a sample of
the libraries against them (every library with ``LOCKGUIDE_FULL_AUDIT=1``).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from lockguide_lab.audit.checks import CHECKS
from lockguide_lab.audit.page import (
    LIBRARIES,
    StaleVersion,
    load_results,
    render,
    run_all,
    save_results,
    splice,
)
from lockguide_lab.audit.report import Report

#: The page and its saved results, found from this file: tools/ sits at the repository's root.
PAGE = Path(__file__).resolve().parents[1] / "docs" / "libraries.md"
RESULTS = PAGE.with_suffix(".results.json")
#: What the saved results hold: the page's libraries, and the broken lock the tests read.
AUDITED = (*LIBRARIES, "broken")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="tools/regenerate_libraries_page.py", description=(__doc__ or "").split("\n\n")[0]
    )
    parser.add_argument(
        "--only",
        action="append",
        choices=[check.id for check in CHECKS],
        metavar="ROW",
        help="audit every library on this row alone and splice it in (repeatable)",
    )
    parser.add_argument(
        "--library",
        action="append",
        choices=AUDITED,
        help="audit this library on every row (repeatable; after upgrading it)",
    )
    parser.add_argument("--render", action="store_true", help="render the saved results only")
    parser.add_argument("--results", type=Path, default=RESULTS, help=f"default: {RESULTS}")
    parser.add_argument("--output", type=Path, default=PAGE, help=f"default: {PAGE}")
    args = parser.parse_args(argv)
    if args.render and (args.only or args.library):
        parser.error("--render runs nothing: leave out --only and --library")
    started = time.monotonic()
    if args.render:
        reports = load_results(args.results)
    elif args.only or args.library:
        saved = load_results(args.results)
        try:
            reports = splice(saved, audited(args.library or AUDITED, args.only))
        except StaleVersion as error:
            print(f"error: {error} (--library NAME)", file=sys.stderr)
            return 1
    else:
        reports = audited(AUDITED, None)
    missing = [(n, c.id) for n in AUDITED for c in CHECKS if c.id not in ids(reports, n)]
    save_results(args.results, reports)
    args.output.write_text(render([reports[name] for name in LIBRARIES]), "utf-8")
    took = time.monotonic() - started
    print(f"wrote {args.output} and {args.results.name} in {took:.1f} s", file=sys.stderr)
    if missing:
        print(f"error: rows never run (--only ROW): {missing}", file=sys.stderr)
        return 1
    return 0


def audited(names: Sequence[str], only: list[str] | None) -> dict[str, Report]:
    """Audit ``names`` (every row, or only the ``only`` rows), by name."""
    return dict(zip(names, run_all(names, checks=only), strict=True))


def ids(reports: Mapping[str, Report], name: str) -> set[str]:
    report = reports.get(name)
    return {row.id for row in report.rows} if report is not None else set()


if __name__ == "__main__":
    raise SystemExit(main())
