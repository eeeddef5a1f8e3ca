"""``python -m lockguide_lab.history check --model MODEL FILE``: check one history.

Exit status: 0 linearizable, 1 not linearizable, 2 a malformed history (the
message names the line) or a file that cannot be read.
"""

from __future__ import annotations

import argparse
import sys

from lockguide_lab.history.check import check
from lockguide_lab.history.history import HistoryError, parse
from lockguide_lab.history.models import MODELS


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m lockguide_lab.history",
        description="Check a history (JSON lines, Jepsen's shape) for linearizability.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    checking = commands.add_parser("check", help="check one history against a model")
    checking.add_argument("--model", choices=sorted(MODELS), required=True)
    checking.add_argument(
        "--key", help="check only the lines with this key (a lab run's 'lock' or 'resource')"
    )
    checking.add_argument("file", help="the history, one JSON object per line ('-': stdin)")
    args = parser.parse_args(argv)
    try:
        if args.file == "-":
            text = sys.stdin.read()
        else:
            with open(args.file, encoding="utf-8") as handle:
                text = handle.read()
    except OSError as error:
        print(f"{args.file}: {error.strerror}", file=sys.stderr)
        return 2
    try:
        ops = parse(text)
        if args.key is not None:
            ops = [op for op in ops if op.key == args.key]
        verdict = check(MODELS[args.model](), ops)
    except HistoryError as error:
        print(f"{args.file}: malformed history: {error}", file=sys.stderr)
        return 2
    print(verdict.report())
    return 0 if verdict.ok else 1


if __name__ == "__main__":
    sys.exit(main())
