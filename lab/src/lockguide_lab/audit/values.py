"""Heuristics on observed lock values: is this value guessable?

The audit cannot *prove* that values are random by looking at a handful of
them. It can catch the usual mistakes, and it says which one it caught:

* **repeats**: two acquisitions stored the same value;
* **uuid1**: the value is (or contains) a version-1 UUID, made of a
  timestamp and the machine's MAC address;
* **a number**: the part that changes between acquisitions is a decimal
  number (a counter or a timestamp, e.g. ``host:pid:17``);
* **too little room**: after removing what every value shares (a common
  prefix and suffix, and characters that never change position, such as
  the ``4`` of a uuid4), what is left could hold fewer than
  :data:`MIN_BITS` bits even if every character were random.

The estimate is generous on purpose (length x log2 of the alphabet the
characters come from), so a value that fails it is certainly too small. A
value that passes can still come from a predictable generator: the audit
tests that separately, by re-seeding Python's :mod:`random` and checking
whether the same values come back (see ``checks.check_value``).
"""

from __future__ import annotations

import math
import re
import string
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["MIN_BITS", "ValueJudgement", "judge_values"]

#: The floor for "enough entropy". A uuid4 carries 122 random bits and passes;
#: the Redis documentation suggests 20 bytes (160 bits), which passes easily.
MIN_BITS = 120

_SEPARATORS = "-:_.|/ "
_ALPHABETS: tuple[tuple[str, int], ...] = (
    ("decimal", 10),
    ("hex", 16),
    ("alphanumeric", 62),
    ("base64", 64),
    ("printable", 95),
    ("bytes", 256),
)
_HEX = set(string.hexdigits)
_ALNUM = set(string.ascii_letters + string.digits)
_B64 = _ALNUM | set("+/=")
_PRINTABLE = set(string.printable) - set("\t\n\r\x0b\x0c")
_UUID_DASHED = re.compile(
    r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
)
_UUID_PLAIN = re.compile(r"[0-9a-fA-F]{32}")


@dataclass(frozen=True)
class ValueJudgement:
    """What the heuristics found in a sample of values."""

    ok: bool
    problem: str | None
    bits: float
    alphabet: str
    length: int
    samples: int


def _alphabet(chars: set[str]) -> tuple[str, int]:
    if chars <= set(string.digits):
        return _ALPHABETS[0]
    if chars <= _HEX and (
        chars <= set(string.hexdigits.lower()) or chars <= set("0123456789ABCDEF")
    ):
        return _ALPHABETS[1]
    if chars <= _ALNUM:
        return _ALPHABETS[2]
    if chars <= _B64 | set("-_"):
        return _ALPHABETS[3]
    if chars <= _PRINTABLE:
        return _ALPHABETS[4]
    return _ALPHABETS[5]


def _common_prefix(values: Sequence[str]) -> int:
    """How many leading characters every value shares."""
    shortest = min(len(v) for v in values)
    for i in range(shortest):
        if len({v[i] for v in values}) > 1:
            return i
    return shortest


def _common_suffix(values: Sequence[str]) -> int:
    return _common_prefix([v[::-1] for v in values])


def _uuid1(value: str) -> bool:
    """The value is a version-1 UUID (32 hex digits), or contains one in its dashed form."""
    candidates = [m.group(0) for m in _UUID_DASHED.finditer(value)]
    if _UUID_PLAIN.fullmatch(value):
        candidates.append(value)
    for candidate in candidates:
        found = uuid.UUID(candidate)
        if found.version == 1 and found.variant == uuid.RFC_4122:
            return True
    return False


def judge_values(raw: Sequence[bytes]) -> ValueJudgement:
    """Judge lock values observed on the server across several acquisitions."""
    values = [v.decode("latin-1") for v in raw]
    n = len(values)
    if n < 2:
        raise ValueError("need at least two observed values")
    shortest = min(len(v) for v in values)
    if len(set(values)) < n:
        return ValueJudgement(False, "a value repeated across acquisitions", 0.0, "", shortest, n)
    if all(_uuid1(v) for v in values):
        return ValueJudgement(
            False, "uuid1: built from a timestamp and the MAC address", 0.0, "hex", shortest, n
        )
    prefix = _common_prefix(values)
    suffix = _common_suffix([v[prefix:] for v in values])
    varying = [v[prefix : len(v) - suffix] for v in values]
    if all(part.isdigit() for part in varying):
        return ValueJudgement(
            False,
            "only a number changes between values (a counter or a timestamp)",
            0.0,
            "decimal",
            shortest,
            n,
        )
    # Characters that sit in the same place in every value carry no entropy
    # (the "4" of a uuid4, separators at fixed positions).
    if len({len(part) for part in varying}) == 1:
        fixed = {i for i in range(len(varying[0])) if len({part[i] for part in varying}) == 1}
        stripped = ["".join(c for i, c in enumerate(part) if i not in fixed) for part in varying]
    else:
        stripped = varying
    stripped = [part.translate({ord(c): None for c in _SEPARATORS}) for part in stripped]
    chars = set("".join(stripped))
    name, size = _alphabet(chars) if chars else ("none", 1)
    length = min(len(part) for part in stripped)
    bits = length * math.log2(size)
    if bits < MIN_BITS:
        return ValueJudgement(
            False,
            f"room for at most {bits:.0f} bits ({length} {name} characters vary); below {MIN_BITS}",
            bits,
            name,
            shortest,
            n,
        )
    return ValueJudgement(True, None, bits, name, shortest, n)
