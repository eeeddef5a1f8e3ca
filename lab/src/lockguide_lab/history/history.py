"""Histories in Jepsen's shape: one JSON object per line, read into operations.

Each line is an *event*::

    {"process": 3, "type": "invoke", "f": "write", "value": 7}
    {"process": 3, "type": "ok", "f": "write", "value": 7}

``type`` is ``invoke`` (the call), or its completion: ``ok`` (it took effect,
with the value it returned), ``fail`` (it did not take effect) or ``info``
(nobody knows: it may have taken effect at any time after its invoke, or
never). An invoke with no completion at all means the same as ``info``. A
process has at most one operation in flight. Lines may carry more fields
(``time`` in milliseconds, ``key``, ``client``); ``key`` splits a history into
independent parts for models that allow it.

The order of the lines is the order in real time: an operation whose completion
comes before another's invoke happened before it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

__all__ = ["Event", "HistoryError", "Op", "Status", "events_from_lines", "operations", "parse"]

TYPES = ("invoke", "ok", "fail", "info")


class HistoryError(ValueError):
    """A malformed history; ``line`` is the 1-based line that is wrong."""

    def __init__(self, line: int, message: str) -> None:
        super().__init__(f"line {line}: {message}")
        self.line = line
        self.message = message


class Status(StrEnum):
    """How an operation ended."""

    OK = "ok"
    """It took effect, and returned its value."""
    FAIL = "fail"
    """It did not take effect."""
    UNKNOWN = "info"
    """It may have taken effect at any time after its invoke, or never."""


@dataclass(frozen=True)
class Event:
    """One line of a history."""

    line: int
    process: int | str
    type: str
    f: str
    value: Any = None
    key: Any = None
    time: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> str:
        """The line as written (``key`` and ``time`` only when set)."""
        data: dict[str, Any] = {"process": self.process, "type": self.type, "f": self.f}
        data["value"] = self.value
        if self.key is not None:
            data["key"] = self.key
        if self.time is not None:
            data["time"] = self.time
        data.update(self.extra)
        return json.dumps(data, sort_keys=False)


@dataclass(frozen=True)
class Op:
    """One operation: its invoke, and its completion if it had one.

    ``call`` and ``ret`` are positions in the history (line numbers); an
    operation whose outcome is unknown has ``ret`` ``None``.
    ``value`` is the completion's value when it has one, else the invoke's.
    """

    index: int
    process: int | str
    f: str
    value: Any
    status: Status
    call: int
    ret: int | None
    key: Any = None
    invoke: Event | None = None
    completion: Event | None = None

    @property
    def required(self) -> bool:
        """Whether a linearization must include it (it completed ``ok``)."""
        return self.status is Status.OK

    def describe(self) -> str:
        """``"process 1 write 3 (ok, lines 2-5)"``."""
        where = f"lines {self.call}-{self.ret}" if self.ret is not None else f"line {self.call}-"
        value = json.dumps(self.value)
        return f"process {self.process} {self.f} {value} ({self.status}, {where})"


def events_from_lines(lines: Iterable[str]) -> list[Event]:
    """Parse JSON lines (blank lines skipped); raise :class:`HistoryError` on bad JSON or shape."""
    events = []
    for number, text in enumerate(lines, start=1):
        if not text.strip():
            continue
        try:
            data = json.loads(text)
        except json.JSONDecodeError as error:
            raise HistoryError(number, f"bad JSON: {error.msg}") from None
        if not isinstance(data, dict):
            raise HistoryError(number, "each line must be a JSON object")
        process = data.get("process")
        if isinstance(process, bool) or not isinstance(process, int | str):
            raise HistoryError(number, f"'process' must be an integer or a name, got {process!r}")
        kind = data.get("type")
        if kind not in TYPES:
            raise HistoryError(number, f"'type' must be one of {', '.join(TYPES)}, got {kind!r}")
        f = data.get("f")
        if not isinstance(f, str):
            raise HistoryError(number, f"'f' must be a string, got {f!r}")
        time = data.get("time")
        if time is not None and (isinstance(time, bool) or not isinstance(time, int | float)):
            raise HistoryError(number, f"'time' must be a number, got {time!r}")
        known = {"process", "type", "f", "value", "key", "time"}
        extra = {k: v for k, v in data.items() if k not in known}
        events.append(
            Event(
                number,
                process,
                kind,
                f,
                data.get("value"),
                _hashable(data.get("key")),
                None if time is None else float(time),
                extra,
            )
        )
    return events


def _hashable(value: Any) -> Any:
    if isinstance(value, list):
        return tuple(_hashable(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, _hashable(v)) for k, v in value.items()))
    return value


def operations(events: Iterable[Event]) -> list[Op]:
    """Pair each invoke with its process's next completion; in invoke order.

    Raises :class:`HistoryError` for a completion without an invoke, an invoke
    while the same process has one in flight, or a completion whose ``f``
    differs from its invoke's.
    """
    pending: dict[int | str, tuple[int, Event]] = {}
    ops: dict[int, Op] = {}
    order = 0
    for event in events:
        if event.type == "invoke":
            if event.process in pending:
                first = pending[event.process][1].line
                raise HistoryError(
                    event.line,
                    f"process {event.process} invokes again while its invoke on line "
                    f"{first} has no completion (a crashed process must take a new number)",
                )
            pending[event.process] = (order, event)
            order += 1
            continue
        if event.process not in pending:
            raise HistoryError(
                event.line, f"a completion ({event.type}) without an invoke by {event.process}"
            )
        index, invoke = pending.pop(event.process)
        if event.f != invoke.f:
            raise HistoryError(
                event.line,
                f"completion of {event.f!r} but process {event.process} invoked {invoke.f!r} "
                f"on line {invoke.line}",
            )
        status = Status(event.type)
        value = event.value if event.type == "ok" else invoke.value
        ops[index] = Op(
            index,
            event.process,
            invoke.f,
            value,
            status,
            invoke.line,
            event.line if status is not Status.UNKNOWN else None,
            invoke.key if invoke.key is not None else event.key,
            invoke,
            event,
        )
    for index, invoke in pending.values():
        ops[index] = Op(
            index,
            invoke.process,
            invoke.f,
            invoke.value,
            Status.UNKNOWN,
            invoke.line,
            None,
            invoke.key,
            invoke,
            None,
        )
    return [ops[i] for i in sorted(ops)]


def parse(text: str) -> list[Op]:
    """A history's text (JSON lines) as its operations."""
    return operations(events_from_lines(text.splitlines()))
