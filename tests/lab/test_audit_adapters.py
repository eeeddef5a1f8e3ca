"""The audit's adapters pass on what a check asks for, or say they cannot: never something else.

An adapter is a translation, not a policy. A lease of 0 ms reaches a library that
takes seconds as 0 (what the library then does with it is the finding), and an
argument the library refuses is reported as not supported instead of being quietly
replaced by one it accepts. Run on fakeredis, except for the libraries that connect by URL.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any

import pytest

from lockguide_lab.audit import (
    DEFAULT,
    NO_EXPIRY,
    Adapter,
    Holder,
    Server,
    Status,
    TtlSpec,
    Unsupported,
    audit,
)
from lockguide_lab.audit.adapters import redlock_ng, seconds, tooz_redis
from lockguide_lab.audit.adapters.python_redis_lock import adapter as python_redis_lock
from lockguide_lab.audit.adapters.sherlock_redis import adapter as sherlock
from lockguide_lab.audit.servers import fake_servers, server_at
from lockguide_lab.testbed import RedisServer


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


# -- redlock-ng and tooz: they connect by URL, so these need real servers ------------------------


@pytest.fixture
def real(redis_server: RedisServer, redis_masters: list[RedisServer]) -> Iterator[list[Server]]:
    started = [redis_server, *redis_masters]
    found = [server_at(f"master-{i}", *s.address) for i, s in enumerate(started)]
    yield found
    for server in found:
        server.connect().flushall()


def test_redlock_ng_is_loaded_whole_when_threads_load_it_at_once() -> None:
    """The audit's wait row makes every adapter at once, each in a thread: a second
    thread must never get the package while the first is still executing it."""
    sys.modules.pop(redlock_ng.MODULE, None)
    gate = threading.Barrier(8)
    found: list[object] = []

    def load() -> None:
        gate.wait()
        found.append(getattr(redlock_ng.load(), "AsyncRedlock", None))

    threads = [threading.Thread(target=load) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(found) == 8
    assert all(made is not None for made in found), found


@pytest.mark.real_redis
def test_redlock_ng_makes_one_attempt_when_no_wait_is_asked(real: list[Server]) -> None:
    """``acquire(0)`` is one attempt (``retry_count=0``): no 0.1-0.3 s pause before a retry."""
    made = redlock_ng.adapter(real)
    try:
        for server in real:
            server.connect().set("busy", "someone else", px=10_000)
        started = time.monotonic()
        assert made.holder("busy", 10_000).acquire(0) is False
        assert time.monotonic() - started < 0.09
        assert redlock_ng.retries_for(600) == 3  # about 200 ms a retry
        with pytest.raises(Unsupported, match="required"):
            made.holder("busy")  # no default lease: the TTL is a required argument
    finally:
        made.close()


def test_redlock_ng_needs_servers_it_can_reach_by_url(servers: list[Server]) -> None:
    with pytest.raises(Unsupported, match="by URL"):
        redlock_ng.async_adapter(servers)


@pytest.mark.real_redis
def test_tooz_gets_the_lease_as_its_lock_timeout_in_whole_seconds(real: list[Server]) -> None:
    made = tooz_redis.adapter(real)
    try:
        assert made.holder("short", 1500).acquire(0)
        assert made.holder("long").acquire(0)  # the coordinator's default: 30 s
        lock_keys = {k: v for k, v in leases(real[0]).items() if k.endswith(b"_lock")}
        assert set(lock_keys) == {b"_tooz_short_lock", b"_tooz_long_lock"}
        assert 1000 < lock_keys[b"_tooz_short_lock"] <= 2000  # 1.5 s rounds up to 2
        assert 29_000 < lock_keys[b"_tooz_long_lock"] <= 30_000
        with pytest.raises(Unsupported, match="lock_timeout"):
            made.holder("never", NO_EXPIRY)
    finally:
        made.close()
