"""The audit's adapters pass on what a check asks for, or say they cannot: never something else.

An adapter is a translation, not a policy. A lease of 0 ms reaches a library that
takes seconds as 0 (what the library then does with it is the finding), and an
argument the library refuses is reported as not supported instead of being quietly
replaced by one it accepts. Run on fakeredis: nothing here needs a real server.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from lockguide_lab.audit import (
    DEFAULT,
    Adapter,
    Holder,
    Server,
    Status,
    TtlSpec,
    Unsupported,
    audit,
)
from lockguide_lab.audit.adapters import seconds
from lockguide_lab.audit.adapters.python_redis_lock import adapter as python_redis_lock
from lockguide_lab.audit.adapters.sherlock_redis import adapter as sherlock
from lockguide_lab.audit.servers import fake_servers


@pytest.fixture
def servers() -> list[Server]:
    return fake_servers(1)


def leases(server: Server) -> dict[Any, int]:
    """Every key on the server and its PTTL (-1: no expiry)."""
    client = server.connect()
    try:
        return {key: int(client.pttl(key)) for key in client.keys("*")}
    finally:
        client.close()


def test_seconds_keeps_a_zero_and_rounds_a_fraction_up() -> None:
    assert seconds(0) == 0
    assert seconds(1000) == 1
    assert seconds(1001) == 2
    assert seconds(300) == 1  # the library's unit is whole seconds: the row reads the PTTL
    with pytest.raises(ValueError, match="negative"):
        seconds(-1)


def test_a_zero_lease_reaches_python_redis_lock_as_zero(servers: list[Server]) -> None:
    """python-redis-lock reads ``expire=0`` as no expiry at all: that is the library's
    answer to a zero lease, and the one the audit must see (not a 1 s lease)."""
    made = python_redis_lock(servers)
    try:
        holder = made.holder("zero", 0)
        assert holder.acquire(0)
        assert leases(servers[0]) == {b"lock:zero": -1}
    finally:
        made.close()


def test_a_zero_lease_reaches_sherlock_as_zero(servers: list[Server]) -> None:
    """sherlock sends ``EXPIRE key 0`` after its ``SETNX``, which deletes the key it just
    set: the acquire says True and nothing is held."""
    made = sherlock(servers)
    try:
        holder = made.holder("zero", 0)
        assert holder.acquire(0)
        assert leases(servers[0]) == {}
    finally:
        made.close()


def test_a_wait_python_redis_lock_refuses_is_said_not_shortened(servers: list[Server]) -> None:
    """python-redis-lock refuses a timeout longer than its expire (``TimeoutTooLarge``);
    waiting less than asked would answer another question."""
    made = python_redis_lock(servers)
    try:
        assert made.holder("short", 1000).acquire(0)
        with pytest.raises(Unsupported, match="longer than its expire"):
            made.holder("short", 1000).acquire(3000)
    finally:
        made.close()


class _RefusesEveryWait:
    """A holder whose library takes no wait at all, as an adapter would say so."""

    def acquire(self, wait_ms: float = 0) -> bool:
        raise Unsupported("no waits")

    def release(self) -> bool | None:
        return None

    def extend(self, ttl_ms: int) -> bool | None:
        return None

    def token(self) -> int | None:
        return None

    def lost(self) -> bool | None:
        return None


class _RefusingAdapter:
    name, version, multi_master, ttl_required = "refuses every wait", "test", False, False

    def holder(self, key: str, ttl_ms: TtlSpec = DEFAULT, *, renew: bool = False) -> Holder:
        return _RefusesEveryWait()

    def close(self) -> None:
        pass


def refusing(servers: Sequence[Server]) -> Adapter:
    return _RefusingAdapter()


def test_a_row_the_library_cannot_take_is_reported_as_not_supported() -> None:
    row = audit(refusing, backend="fake", checks=["unique"]).row("unique")
    assert row.status is Status.NOT_RUN, row
    assert row.summary == "not supported by the library: no waits"
