"""Recording a history while code runs: an invoke now, its completion later.

::

    history = Recorder(clock=run.now)           # any function returning milliseconds
    op = history.invoke("A", "acquire", {"window": [t, t + ttl]}, key="lock")
    ...                                          # the real call
    op.ok({"window": [t, t + ttl]})              # or op.fail(), or op.info()

Clients are named (``"A"``); each name gets a process number in the order first
seen, kept in every line as ``client``. An operation left without a completion
is written as an invoke alone, which the checker reads as "may have happened".
Thread-safe: the scenarios' watchdogs and contenders record from their own threads.

What a lab run records (see :mod:`lockguide_lab.scenarios.run`): the lock's
grants (``acquire``, ``renew``, ``release`` with validity windows, on the lock's
key) for the lease-service model, and the resource's writes (``write`` with
the holder's token, ``read`` of the final value, on the resource's key) for the
fenced-resource model. Other code (the consensus scenarios) records the same
way: one :class:`Recorder` per run, :meth:`Recorder.grant` for each lease it
hands out, :meth:`Recorder.invoke` around each write.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lockguide_lab.history.history import Event, Op, events_from_lines, operations

__all__ = ["Pending", "Recorder"]

LEASE_KEY = "lock"
RESOURCE_KEY = "resource"


class Pending:
    """An operation invoked and not yet completed."""

    def __init__(self, recorder: Recorder, process: int, name: str, f: str, key: Any) -> None:
        self._recorder = recorder
        self._process = process
        self._name = name
        self._f = f
        self._key = key
        self.done = False

    def ok(self, value: Any = None) -> None:
        """It took effect and returned ``value``."""
        self._complete("ok", value)

    def fail(self, value: Any = None) -> None:
        """It did not take effect."""
        self._complete("fail", value)

    def info(self, value: Any = None) -> None:
        """Nobody knows whether it took effect."""
        self._complete("info", value)

    def _complete(self, kind: str, value: Any) -> None:
        if self.done:
            raise RuntimeError(f"{self._name}'s {self._f} is already complete")
        self.done = True
        self._recorder._line(self._process, self._name, kind, self._f, value, self._key)


class Recorder:
    """A history being recorded. ``clock`` gives each line its ``time`` (milliseconds)."""

    def __init__(self, clock: Callable[[], float] | None = None) -> None:
        self._clock = clock
        self._lines: list[dict[str, Any]] = []
        self._processes: dict[str, int] = {}
        self._mutex = threading.Lock()

    def process(self, name: str) -> int:
        """The process number of the client called ``name``."""
        with self._mutex:
            return self._processes.setdefault(name, len(self._processes))

    def invoke(self, name: str, f: str, value: Any = None, *, key: Any = None) -> Pending:
        """Record the call of ``f`` by client ``name``; complete the returned :class:`Pending`."""
        process = self.process(name)
        self._line(process, name, "invoke", f, value, key)
        return Pending(self, process, name, f, key)

    def grant(
        self, name: str, start_ms: float, end_ms: float, *, granted: bool = True, key: Any = None
    ) -> None:
        """A lease granted to ``name`` (or refused) for ``[start_ms, end_ms]``, as one operation."""
        window = {"window": [round(start_ms, 3), round(end_ms, 3)]}
        op = self.invoke(name, "acquire", window, key=LEASE_KEY if key is None else key)
        op.ok(window) if granted else op.fail(window)

    def _line(self, process: int, name: str, kind: str, f: str, value: Any, key: Any) -> None:
        with self._mutex:
            line: dict[str, Any] = {"process": process, "type": kind, "f": f, "value": value}
            if key is not None:
                line["key"] = key
            if self._clock is not None:
                line["time"] = round(self._clock(), 3)
            line["client"] = name
            self._lines.append(line)

    @property
    def clients(self) -> dict[int, str]:
        """Client names by process number."""
        with self._mutex:
            return {number: name for name, number in self._processes.items()}

    def text(self) -> str:
        """The history as JSON lines."""
        with self._mutex:
            return "".join(json.dumps(line) + "\n" for line in self._lines)

    def events(self) -> list[Event]:
        """The history's lines, parsed."""
        return events_from_lines(self.text().splitlines())

    def ops(self, key: Any = None) -> list[Op]:
        """The operations (only those on ``key``, if given)."""
        ops = operations(self.events())
        return ops if key is None else [op for op in ops if op.key == key]

    def save(self, path: str | Path) -> Path:
        """Write the history to ``path`` (JSON lines); return the path."""
        target = Path(path)
        target.write_text(self.text(), encoding="utf-8")
        return target

    def __len__(self) -> int:
        with self._mutex:
            return len(self._lines)
