"""``lockguide-audit MODULE:FACTORY`` (or ``python -m lockguide_lab.audit``): audit a lock.

Exit status 1 when a must-have row fails, 2 on a usage error. The console
script is declared in the lab's ``pyproject.toml``.
"""

from __future__ import annotations

import argparse
import sys

from lockguide_lab.audit.adapter import Unsupported
from lockguide_lab.audit.checks import CHECKS
from lockguide_lab.audit.run import BUILTIN, audit
from lockguide_lab.testbed.process import ServerUnavailable


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="lockguide-audit",
        description=(
            "Run the lock checklist against a lock implementation and report one row per "
            "item. Exit status 1 when a must-have row fails, 2 on a usage error."
        ),
    )
    parser.add_argument(
        "target",
        nargs="?",
        help="MODULE:FACTORY of an adapter factory, or a built-in name: " + ", ".join(BUILTIN),
    )
    parser.add_argument(
        "--backend",
        choices=("real", "fake"),
        default="real",
        help="real: start redis-server processes on free loopback ports (default); "
        "fake: fakeredis, where the link and process checks are reported as not run",
    )
    parser.add_argument("--masters", type=int, default=5, help="independent servers (default 5)")
    parser.add_argument(
        "--check",
        action="append",
        choices=[c.id for c in CHECKS],
        help="run only this check (repeatable)",
    )
    parser.add_argument(
        "--format",
        choices=("text", "json", "markdown"),
        default="text",
        help="text (default), json, or markdown: a table to paste into a pull request",
    )
    parser.add_argument("--json", action="store_true", help="the same as --format json")
    parser.add_argument("--brief", action="store_true", help="text output without details")
    parser.add_argument("--list", action="store_true", help="list the built-in adapters")
    args = parser.parse_args(argv)
    if args.list:
        for name, spec in BUILTIN.items():
            print(f"{name:<18} {spec}")
        return 0
    if not args.target:
        parser.error("give MODULE:FACTORY (or --list)")
    if args.masters < 1:
        parser.error("--masters must be at least 1")
    try:
        report = audit(args.target, backend=args.backend, masters=args.masters, checks=args.check)
    except ServerUnavailable as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except Unsupported as error:
        print(f"error: {args.target} cannot run on this backend: {error}", file=sys.stderr)
        return 2
    except (ImportError, AttributeError, ValueError, TypeError) as error:
        print(f"error: cannot load {args.target!r}: {error}", file=sys.stderr)
        return 2
    form = "json" if args.json else args.format
    if form == "json":
        print(report.to_json())
    elif form == "markdown":
        print(report.markdown())
    else:
        print(report.text(details=not args.brief))
    return report.exit_code


if __name__ == "__main__":
    raise SystemExit(main())
