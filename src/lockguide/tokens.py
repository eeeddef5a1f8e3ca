"""Lock values: unique per acquisition and impossible to guess."""

from __future__ import annotations

import secrets

#: Bytes of randomness in every lock value. The Redis documentation suggests
#: 20 bytes from ``/dev/urandom``; :mod:`secrets` reads the same OS source.
VALUE_BYTES = 20


def new_lock_value() -> str:
    """Return a fresh lock value: 20 random bytes from the OS CSPRNG, as 40 hex digits.

    Hex keeps the value printable and safe for clients created with
    ``decode_responses=True``; the randomness is the full 160 bits either way.
    """
    return secrets.token_hex(VALUE_BYTES)
