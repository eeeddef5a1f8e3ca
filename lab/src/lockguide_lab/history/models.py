"""The sequential specifications a history is checked against.

A model says what one operation does to a state when operations run one at a
time: :meth:`Model.step` returns whether the operation is legal in that state
and the state after it. States are hashable (the search remembers them).

* :class:`Register`: ``read`` returns the value (``null`` before any write),
  ``write v`` stores ``v``, ``cas [from, to]`` stores ``to`` if the value is
  ``from`` (``ok`` when it swapped). Independent per ``key``.
* :class:`LeaseService`: ``acquire`` and ``renew`` grant the calling process
  the lease for a validity window ``{"window": [start_ms, end_ms]}``;
  ``release`` (``{"at": ms}``) ends the caller's own window early. A grant is
  legal only once every other holder's window has ended: no two holders'
  windows overlap. Independent per ``key`` (one lock each).
* :class:`FencedResource`: ``write {"token": t, "data": v}`` is accepted only
  if ``t`` is at least every accepted token; ``read`` returns the data of the
  last accepted write (``null`` before any). Independent per ``key``.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any, ClassVar

from lockguide_lab.history.history import HistoryError, Op, Status

__all__ = ["MODELS", "FencedResource", "LeaseService", "Model", "Register"]


def _number(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, int | float)


class Model:
    """A sequential specification. Subclasses set :attr:`name` and :attr:`fs`."""

    name: ClassVar[str] = ""
    fs: ClassVar[frozenset[str]] = frozenset()
    #: Operations on different keys are independent: each key is checked alone.
    by_key: ClassVar[bool] = True

    def init(self) -> Hashable:
        """The state before any operation."""
        raise NotImplementedError

    def step(self, state: Any, op: Op) -> tuple[bool, Hashable]:
        """Whether ``op`` is legal in ``state``, and the state after it."""
        raise NotImplementedError

    def validate(self, op: Op) -> None:
        """Raise :class:`HistoryError` for an unknown ``f`` or a value of the wrong shape."""
        if op.f not in self.fs:
            raise HistoryError(
                op.call,
                f"unknown f {op.f!r} for the {self.name} model (expected one of "
                f"{', '.join(sorted(self.fs))})",
            )

    def blame(self, op: Op, ops: Sequence[Op]) -> Op | None:
        """The operation ``op`` conflicts with, if the model can name one."""
        return None


class Register(Model):
    """A read/write/compare-and-set register."""

    name = "register"
    fs = frozenset({"read", "write", "cas"})

    def init(self) -> Hashable:
        return None

    def validate(self, op: Op) -> None:
        super().validate(op)
        if op.f == "cas" and not (isinstance(op.value, list) and len(op.value) == 2):
            raise HistoryError(op.call, f"cas needs [from, to], got {op.value!r}")

    def step(self, state: Any, op: Op) -> tuple[bool, Hashable]:
        if op.f == "read":
            if op.status is Status.UNKNOWN:
                return True, state  # nobody saw what it returned
            return _freeze(op.value) == state, state
        if op.f == "write":
            return True, _freeze(op.value)
        old, new = op.value
        return _freeze(old) == state, _freeze(new)

    def blame(self, op: Op, ops: Sequence[Op]) -> Op | None:
        if op.f != "read":
            return None
        # The latest write that completed before this read began.
        before = [o for o in ops if o.f != "read" and o.required and o.ret and o.ret < op.call]
        return before[-1] if before else None


def _freeze(value: Any) -> Hashable:
    if isinstance(value, list):
        return tuple(_freeze(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, _freeze(v)) for k, v in value.items()))
    return value  # type: ignore[no-any-return]


class LeaseService(Model):
    """Grants with validity windows: no two holders' windows overlap."""

    name = "lease"
    fs = frozenset({"acquire", "renew", "release"})

    def init(self) -> Hashable:
        return None  # or (holder, end of its window)

    def validate(self, op: Op) -> None:
        super().validate(op)
        value = op.value
        if op.f == "release":
            if value is not None and not (isinstance(value, dict) and _number(value.get("at"))):
                raise HistoryError(op.call, f"release takes {{'at': ms}} or null, got {value!r}")
            return
        window = value.get("window") if isinstance(value, dict) else None
        if not (
            isinstance(window, list)
            and len(window) == 2
            and all(_number(w) for w in window)
            and window[0] <= window[1]
        ):
            raise HistoryError(
                op.call, f"{op.f} needs {{'window': [start_ms, end_ms]}}, got {value!r}"
            )

    def step(self, state: Any, op: Op) -> tuple[bool, Hashable]:
        me = op.process
        if op.f == "release":
            at = op.value.get("at") if isinstance(op.value, dict) else None
            if state is not None and state[0] == me and at is not None:
                return True, (me, min(state[1], at))
            return True, state
        start, end = op.value["window"]
        if op.f == "renew":
            return state is not None and state[0] == me, (me, end)
        free = state is None or state[0] == me or state[1] <= start
        return free, (me, end)

    def blame(self, op: Op, ops: Sequence[Op]) -> Op | None:
        if op.f == "release":
            return None
        start, end = op.value["window"]
        clashes = [
            (other_start, other)
            for other in ops
            if other is not op
            and other.process != op.process
            and other.f != "release"
            and other.required
            for other_start, other_end in [self.effective(other, ops)]
            if other_start < end and start < other_end
        ]
        return max(clashes, key=lambda c: (c[0], c[1].index))[1] if clashes else None

    def effective(self, grant: Op, ops: Sequence[Op]) -> tuple[float, float]:
        """A grant's window, cut short by its holder's next release, if any."""
        start, end = grant.value["window"]
        for later in ops:
            if later.process != grant.process or later.call <= grant.call:
                continue
            if later.f == "release" and later.required and isinstance(later.value, dict):
                return start, min(end, later.value["at"])
            if later.f in ("acquire", "renew") and later.required:
                return start, end
        return start, end


class FencedResource(Model):
    """Writes carrying tokens: no write accepted with a token lower than an accepted one."""

    name = "fenced"
    fs = frozenset({"write", "read"})

    def init(self) -> Hashable:
        return (None, None)  # (highest accepted token, data)

    def validate(self, op: Op) -> None:
        super().validate(op)
        if op.f == "write":
            value = op.value
            if not (isinstance(value, dict) and _number(value.get("token"))):
                raise HistoryError(op.call, f"write needs {{'token': n, 'data': v}}, got {value!r}")

    def step(self, state: Any, op: Op) -> tuple[bool, Hashable]:
        highest, data = state
        if op.f == "read":
            if op.status is Status.UNKNOWN:
                return True, state
            return _freeze(op.value) == data, state
        token = op.value["token"]
        legal = highest is None or token >= highest
        return legal, (token, _freeze(op.value.get("data")))

    def blame(self, op: Op, ops: Sequence[Op]) -> Op | None:
        if op.f == "write":
            token = op.value["token"]
            higher = [
                o
                for o in ops
                if o.f == "write"
                and o.required
                and o.value["token"] > token
                and o.index != op.index
            ]
            before = [o for o in higher if o.ret is not None and o.ret < op.call]
            pool = before or higher
            return pool[0] if pool else None
        before = [o for o in ops if o.f == "write" and o.required and o.ret and o.ret < op.call]
        return before[-1] if before else None


#: The models by the name the command line takes.
MODELS: dict[str, type[Model]] = {m.name: m for m in (Register, LeaseService, FencedResource)}
