"""Regenerate the guide's comparison page, ``docs/libraries.md``, from audit runs.

Run from anywhere in the repository (the page's path is computed from this file)::

    .venv/bin/python tools/regenerate_libraries_page.py                  # audit, write
    .venv/bin/python tools/regenerate_libraries_page.py --json out.json  # also keep the JSON
    .venv/bin/python tools/regenerate_libraries_page.py --from-json out.json  # render only

Auditing starts five ``redis-server`` processes of its own. The test suite
(``tests/lab/test_audit.py``) fails when the committed page differs from a
fresh run.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from lockguide_lab.audit.page import render, run_all
from lockguide_lab.audit.report import Report

#: The page, found from this file: tools/ sits at the repository's root.
PAGE = Path(__file__).resolve().parents[1] / "docs" / "libraries.md"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="tools/regenerate_libraries_page.py", description=(__doc__ or "").split("\n\n")[0]
    )
    parser.add_argument("--from-json", type=Path, help="render saved reports instead of running")
    parser.add_argument("--json", type=Path, help="also write the reports as JSON here")
    parser.add_argument("--output", type=Path, default=PAGE, help=f"default: {PAGE}")
    args = parser.parse_args(argv)
    if args.from_json:
        reports = [Report.from_dict(d) for d in json.loads(args.from_json.read_text("utf-8"))]
    else:
        reports = run_all()
    if args.json:
        args.json.write_text(json.dumps([r.to_dict() for r in reports], indent=2) + "\n", "utf-8")
    args.output.write_text(render(reports), "utf-8")
    print(f"wrote {args.output} ({len(reports)} libraries)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
