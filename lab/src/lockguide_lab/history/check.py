"""The linearizability search: Wing and Gong's, with Lowe's memoisation.

A history is linearizable when every operation that completed ``ok`` can be
given one instant between its invoke and its completion, operations with an
unknown outcome an instant after their invoke or none at all, so that taken
in that order they are legal for the model, one at a time.

The search (Wing & Gong 1993; Lowe 2017, as Porcupine does it) walks a list of
calls and returns in history order. At a call it tries to linearize that
operation now: if the model allows it, the operation's call and return leave
the list and the walk starts again from the front; at a return it has met an
operation it failed to place in time, so it undoes the last choice and tries
the next call after it. Every (set of linearized operations, state) reached is
remembered, and never explored twice: two paths that linearized the same
operations into the same state have the same future. Operations that may never
have happened return "at infinity", after everything, and the search succeeds
when the first return it meets is one of theirs.

On a history whose model allows it, each ``key`` is searched on its own.
"""

from __future__ import annotations

import time
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field

from lockguide_lab.history.history import Op, Status
from lockguide_lab.history.models import Model

__all__ = ["Verdict", "check", "linearizable"]


def linearizable(model: Model, ops: Sequence[Op]) -> bool:
    """Whether ``ops`` (one key) are linearizable for ``model``."""
    live = [op for op in ops if op.status is not Status.FAIL]
    count = len(live)
    if count == 0:
        return True
    # Entries 0..count-1 are calls, count..2*count-1 returns; ordered by line.
    infinity = float("inf")
    positions: list[tuple[float, int, int]] = []
    for i, op in enumerate(live):
        positions.append((float(op.call), 0, i))
        positions.append((float(op.ret) if op.ret is not None else infinity, 1, count + i))
    positions.sort()
    order = [entry for _, _, entry in positions]
    size = 2 * count
    head = size  # the sentinel
    nxt = [0] * (size + 1)
    prv = [0] * (size + 1)
    previous = head
    for entry in order:
        nxt[previous] = entry
        prv[entry] = previous
        previous = entry
    nxt[previous] = -1

    def lift(i: int) -> None:
        for entry in (i, count + i):
            nxt[prv[entry]] = nxt[entry]
            if nxt[entry] != -1:
                prv[nxt[entry]] = prv[entry]

    def unlift(i: int) -> None:
        for entry in (count + i, i):
            nxt[prv[entry]] = entry
            if nxt[entry] != -1:
                prv[nxt[entry]] = entry

    required = [op.required for op in live]
    state: Hashable = model.init()
    linearized = 0
    stack: list[tuple[int, Hashable]] = []
    seen: set[tuple[int, Hashable]] = set()
    entry = nxt[head]
    while True:
        if entry == -1:
            return True
        if entry < count:
            legal, after = model.step(state, live[entry])
            if legal:
                memo = (linearized | (1 << entry), after)
                if memo not in seen:
                    seen.add(memo)
                    stack.append((entry, state))
                    state, linearized = after, memo[0]
                    lift(entry)
                    entry = nxt[head]
                    continue
            entry = nxt[entry]
            continue
        if not required[entry - count]:
            return True  # only operations that may never have happened are left
        if not stack:
            return False
        i, state = stack.pop()
        linearized &= ~(1 << i)
        unlift(i)
        entry = nxt[i]


@dataclass(frozen=True)
class Verdict:
    """What the checker found.

    Attributes:
        ok: the history is linearizable.
        model: the model's name.
        operations: how many operations were checked.
        keys: how many independent parts (keys) were searched.
        prefix: for a failure, the smallest failing prefix's last line.
        unplaced: the operation completed on that line, which no order could place.
        conflict: the operation the model names as its clash (the overlapping
            grant, the higher accepted token), if any.
        seconds: how long the search took.
    """

    ok: bool
    model: str
    operations: int
    keys: int
    prefix: int | None = None
    unplaced: Op | None = None
    conflict: Op | None = None
    seconds: float = 0.0
    failing_key: object = field(default=None)

    def report(self) -> str:
        """The verdict in a few lines, as the command line prints it."""
        head = "linearizable" if self.ok else "not linearizable"
        lines = [
            f"{head} ({self.model} model, {self.operations} operations, "
            f"{self.keys} key{'s' if self.keys != 1 else ''}, {self.seconds:.3f} s)"
        ]
        if not self.ok:
            if self.failing_key is not None:
                lines.append(f"key: {self.failing_key}")
            if self.prefix is not None:
                lines.append(f"smallest failing prefix: lines 1-{self.prefix}")
            if self.unplaced is not None:
                lines.append(f"could not place: {self.unplaced.describe()}")
            if self.conflict is not None:
                lines.append(f"conflicts with: {self.conflict.describe()}")
        return "\n".join(lines)


def _parts(model: Model, ops: Sequence[Op]) -> dict[object, list[Op]]:
    if not model.by_key:
        return {None: list(ops)}
    parts: dict[object, list[Op]] = {}
    for op in ops:
        parts.setdefault(op.key, []).append(op)
    return parts


def _prefix(ops: Sequence[Op], last_line: int) -> list[Op]:
    """The operations as they stood after ``last_line``: later completions unknown."""
    out = []
    for op in ops:
        if op.call > last_line:
            continue
        if op.ret is not None and op.ret > last_line:
            op = Op(op.index, op.process, op.f, op.invoke.value if op.invoke else op.value,
                    Status.UNKNOWN, op.call, None, op.key, op.invoke, None)  # fmt: skip
        out.append(op)
    return out


def check(model: Model, ops: Sequence[Op]) -> Verdict:
    """Check every key; on a failure, find the smallest failing prefix and name the clash."""
    started = time.perf_counter()
    for op in ops:
        model.validate(op)
    parts = _parts(model, ops)
    for key, part in parts.items():
        if linearizable(model, part):
            continue
        # Only an ok completion can turn a linearizable prefix into one that is not.
        ends = sorted(op.ret for op in part if op.ret is not None and op.required)
        low, high = 0, len(ends) - 1  # ends[high] fails (the whole part does)
        while low < high:
            middle = (low + high) // 2
            if linearizable(model, _prefix(part, ends[middle])):
                low = middle + 1
            else:
                high = middle
        line = ends[low]
        unplaced = next(op for op in part if op.ret == line)
        conflict = model.blame(unplaced, _prefix(part, line))
        return Verdict(
            False,
            model.name,
            len(ops),
            len(parts),
            line,
            unplaced,
            conflict,
            time.perf_counter() - started,
            key,
        )
    return Verdict(True, model.name, len(ops), len(parts), seconds=time.perf_counter() - started)
