"""Behaviour of the single-instance Lock, on fakeredis and on a real redis-server.

The tests that take ``contender`` run for Redlock too: they prove what both share.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

import pytest
import redis
from redis.exceptions import TimeoutError as RedisTimeoutError

from lockguide import (
    AlreadyAcquired,
    BadArgument,
    BadArgumentType,
    Lock,
    LockLost,
    NotAcquired,
    NotOwned,
    Redlock,
)
from tests.support import Backend, record_requests, script_code

KEY = "lock:test"
HAND_OFF_SOURCE = script_code("hand_off.lua")
TAKE_SOURCE = script_code("take.lua")


def test_acquire_stores_a_fresh_40_hex_digit_value_with_the_ttl(r: redis.Redis) -> None:
    lock = Lock(r, KEY, ttl_ms=5_000)
    assert lock.acquire(blocking=False)
    assert lock.value is not None
    digits, since, name = lock.value.split(" ")  # 20 random bytes; then who holds it
    assert len(digits) == 40
    int(digits, 16)  # hex digits only
    assert since.isdigit()
    assert name.endswith(":MainThread")
    assert r.get(KEY) == lock.value.encode()
    assert 0 < r.pttl(KEY) <= 5_000


def test_every_acquisition_gets_a_different_value(r: redis.Redis) -> None:
    lock = Lock(r, KEY, ttl_ms=5_000)
    seen = set()
    for _ in range(20):
        assert lock.acquire(blocking=False)
        seen.add(lock.value)
        lock.release()
    assert len(seen) == 20


def test_a_second_holder_is_refused_while_the_first_holds(r: redis.Redis) -> None:
    first = Lock(r, KEY, ttl_ms=5_000)
    second = Lock(r, KEY, ttl_ms=5_000)
    assert first.acquire(blocking=False)
    assert not second.acquire(blocking=False)
    assert not second.held
    assert r.get(KEY) == (first.value or "").encode()


def test_release_deletes_only_our_own_key(r: redis.Redis) -> None:
    lock = Lock(r, KEY, ttl_ms=5_000)
    lock.acquire()
    lock.release()
    assert r.exists(KEY) == 0
    assert not lock.held


def test_release_after_expiry_leaves_the_next_holders_lock_alone(r: redis.Redis) -> None:
    a = Lock(r, KEY, ttl_ms=50)
    assert a.acquire(blocking=False)
    time.sleep(0.1)  # A stalls past its lease
    b = Lock(r, KEY, ttl_ms=5_000)
    assert b.acquire(blocking=False)
    with pytest.raises(LockLost):
        a.release()
    assert r.get(KEY) == (b.value or "").encode(), "A's release must not touch B's lock"
    assert not Lock(r, KEY, ttl_ms=5_000).acquire(blocking=False)


class Contender:
    """Makes locks of one kind on the test's backend, and reads the key on its servers."""

    def __init__(self, make: Callable[..., Lock | Redlock], servers: list[redis.Redis]) -> None:
        self.make = make
        self.servers = servers
        self.majority = len(servers) // 2 + 1

    def servers_holding(self, value: str | None) -> int:
        return sum(1 for server in self.servers if server.get(KEY) == (value or "").encode())

    def servers_with_the_key(self) -> int:
        return sum(1 for server in self.servers if server.exists(KEY))


@pytest.fixture(params=["Lock", "Redlock"])
def contender(request: pytest.FixtureRequest, backend: Backend) -> Iterator[Contender]:
    """A Lock on one server, then a Redlock on five masters: a test that takes this
    fixture proves what the two share (owner checks, ``with``, the retry loop)."""
    if request.param == "Lock":
        servers = [backend.client()]
        make: Callable[..., Lock | Redlock] = partial(Lock, servers[0], KEY)
    else:
        servers = backend.masters()
        # 100 ms per master, as tests/core/test_redlock.py gives them: on a loaded machine a
        # healthy server left unscheduled for the 50 ms default must not cost a vote.
        make = partial(Redlock, servers, KEY, node_timeout_ms=100.0)
    yield Contender(make, servers)
    for server in servers:
        server.close()


def test_release_without_acquire_or_twice_is_not_owned(contender: Contender) -> None:
    lock = contender.make(ttl_ms=5_000)
    with pytest.raises(NotOwned) as never:
        lock.release()
    assert not isinstance(never.value, LockLost)
    lock.acquire()
    lock.release()
    with pytest.raises(NotOwned):
        lock.release()


def test_acquiring_twice_on_one_object_is_refused(contender: Contender) -> None:
    lock = contender.make(ttl_ms=5_000)
    lock.acquire()
    with pytest.raises(AlreadyAcquired):
        lock.acquire(blocking=False)
    assert lock.held


def test_blocking_acquire_gets_the_lock_once_the_holder_expires(contender: Contender) -> None:
    holder = contender.make(ttl_ms=150)
    holder.acquire()
    waiter = contender.make(ttl_ms=5_000, retry_delay_ms=(5.0, 15.0))
    started = time.monotonic()
    assert waiter.acquire(timeout_ms=3_000)
    waited = time.monotonic() - started
    assert waited >= 0.1, "it cannot have got in before the holder's lease ran out"
    # A Redlock wins as soon as a majority of the holder's keys have expired.
    assert contender.servers_holding(waiter.value) >= contender.majority


def test_blocking_acquire_gives_up_at_its_timeout(contender: Contender) -> None:
    contender.make(ttl_ms=10_000).acquire()
    waiter = contender.make(ttl_ms=5_000, retry_delay_ms=(10.0, 30.0))
    started = time.monotonic()
    assert not waiter.acquire(timeout_ms=200)
    waited_ms = (time.monotonic() - started) * 1000
    assert waited_ms >= 200
    assert waited_ms < 200 + 2_000  # generous: shared machines are noisy
    assert not waiter.held


def test_retry_pauses_are_within_the_range_random_outside_a_line_the_longest_in_it(
    contender: Contender, monkeypatch: pytest.MonkeyPatch
) -> None:
    pauses: list[float] = []
    real_sleep = time.sleep

    def recording_sleep(seconds: float) -> None:
        pauses.append(seconds)
        real_sleep(seconds)

    monkeypatch.setattr(time, "sleep", recording_sleep)  # what redlock.py calls
    sent = record_requests(monkeypatch, contender.servers)  # a Lock's waiter: BLPOP's timeout
    contender.make(ttl_ms=10_000).acquire()
    waiter = contender.make(ttl_ms=1_000, retry_delay_ms=(10.0, 30.0))
    assert not waiter.acquire(timeout_ms=600)  # (a BLPOP's timeout ends on Redis's 100 ms tick)
    if len(contender.servers) == 1:  # in line: the line orders the tries, not chance
        blocks = [float(c[2]) for c in sent if isinstance(c, tuple) and c[0] == "BLPOP"]
        assert len(blocks) >= 2
        assert blocks[0] == 0.030, "in line, a waiter listens for the longest pause"
        assert all(0.010 <= p <= 0.030 for p in blocks), "near the deadline: less, or not"
        return
    full = pauses[:-1]  # the last pause may be cut short by the deadline
    assert len(full) >= 4
    assert all(0.010 <= p <= 0.030 for p in full)
    assert len(set(full)) > 1, "retry pauses must not be a fixed delay"


def test_timeout_zero_makes_one_attempt(r: redis.Redis) -> None:
    Lock(r, KEY, ttl_ms=10_000).acquire()
    assert not Lock(r, KEY, ttl_ms=1_000, timeout_ms=0).acquire()


def test_validity_counts_down_from_before_the_request(r: redis.Redis) -> None:
    lock = Lock(r, KEY, ttl_ms=1_000)
    assert lock.validity_remaining_ms() == 0.0
    lock.acquire()
    first = lock.validity_remaining_ms()
    # 1000 ms minus the drift allowance (1 % + 2 ms) is the most it can ever report.
    assert 0 < first <= 1_000 - 12
    time.sleep(0.05)
    assert lock.validity_remaining_ms() <= first - 40
    lock.release()
    assert lock.validity_remaining_ms() == 0.0


def test_validity_is_zero_once_the_lease_has_run_out(r: redis.Redis) -> None:
    lock = Lock(r, KEY, ttl_ms=50)
    lock.acquire()
    time.sleep(0.08)
    assert lock.held  # the holder still believes it holds the lock ...
    assert lock.validity_remaining_ms() == 0.0  # ... but its own clock says otherwise


def test_extend_resets_the_ttl_and_the_deadline(r: redis.Redis) -> None:
    lock = Lock(r, KEY, ttl_ms=300)
    lock.acquire()
    time.sleep(0.1)
    lock.extend(5_000)
    assert r.pttl(KEY) > 4_000
    assert lock.validity_remaining_ms() > 4_000
    lock.extend()  # back to the original TTL
    assert r.pttl(KEY) <= 300


def test_extend_cannot_revive_an_expired_lock(r: redis.Redis) -> None:
    lock = Lock(r, KEY, ttl_ms=50)
    lock.acquire()
    time.sleep(0.1)
    other = Lock(r, KEY, ttl_ms=5_000)
    assert other.acquire(blocking=False)
    with pytest.raises(LockLost):
        lock.extend(5_000)
    assert not lock.held
    assert r.get(KEY) == (other.value or "").encode()
    with pytest.raises(NotOwned):
        lock.extend()


def test_context_manager_releases_on_exit_and_on_error(contender: Contender) -> None:
    with contender.make(ttl_ms=5_000) as lock:
        assert contender.servers_holding(lock.value) == len(contender.servers)
    assert contender.servers_with_the_key() == 0
    with pytest.raises(RuntimeError), contender.make(ttl_ms=5_000):
        raise RuntimeError("work failed")
    assert contender.servers_with_the_key() == 0


def test_context_manager_raises_not_acquired_when_busy(r: redis.Redis) -> None:
    Lock(r, KEY, ttl_ms=10_000).acquire()
    with pytest.raises(NotAcquired, match="did not run"), Lock(r, KEY, ttl_ms=1_000, timeout_ms=50):
        pytest.fail("the body must not run without the lock")


def test_release_survives_a_script_flush(r: redis.Redis) -> None:
    lock = Lock(r, KEY, ttl_ms=5_000)
    lock.acquire()
    lock.release()
    r.script_flush()
    lock.acquire()
    lock.release()  # NOSCRIPT is answered by loading the script again
    assert r.exists(KEY) == 0


def test_scripts_are_loaded_once_then_called_by_sha(
    r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    r.script_flush()
    sent = record_requests(monkeypatch, [r])
    lock = Lock(r, KEY, ttl_ms=5_000)
    for _ in range(5):
        lock.acquire()
        lock.release()
    commands = [c for c in sent if isinstance(c, tuple)]
    loads = [c for c in commands if c[:2] == ("SCRIPT", "LOAD")]
    assert len(loads) == 2, "each script is loaded once, on its first NOSCRIPT"
    assert [load[2] for load in loads] == [TAKE_SOURCE, HAND_OFF_SOURCE]
    assert sum(c[0] == "EVALSHA" for c in commands) == 10 + 2  # five acquires and releases


def test_a_lost_set_reply_does_not_leave_the_key_behind(
    r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    record_requests(monkeypatch, [r], lose="SET")
    lock = Lock(r, KEY, ttl_ms=30_000)
    assert not lock.acquire(blocking=False), "a lost reply is a failed try, not an error"
    assert isinstance(lock.last_error, RedisTimeoutError)
    assert r.exists(KEY) == 0
    # Blocking, a try runs take.lua (whose reply comes), with a new value.
    assert lock.acquire(timeout_ms=2_000)
    assert r.get(KEY) == (lock.value or "").encode()
    lock.release()


@pytest.mark.parametrize(
    ("ttl", "error"),
    [
        (0, BadArgument),
        (-5, BadArgument),
        (1.5, BadArgumentType),
        (30_000.0, BadArgumentType),
        ("30000", BadArgumentType),
        (True, BadArgumentType),
        (None, BadArgumentType),
    ],
)
def test_bad_ttl_is_refused_before_any_request(
    r: redis.Redis, monkeypatch: pytest.MonkeyPatch, ttl: object, error: type[Exception]
) -> None:
    sent = record_requests(monkeypatch, [r])
    with pytest.raises(error, match="ttl_ms"):
        Lock(r, KEY, ttl_ms=ttl)  # type: ignore[arg-type]
    assert sent == []


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"key": ""}, "key must not be empty"),
        ({"key": b"lock"}, "key must be a str"),
        ({"timeout_ms": -1}, "timeout_ms"),
        ({"timeout_ms": math.nan}, "timeout_ms"),
        ({"retry_delay_ms": (100.0, 10.0)}, "retry_delay_ms"),
        ({"retry_delay_ms": (0.0, 0.0)}, "retry_delay_ms"),
        ({"retry_delay_ms": 50}, "retry_delay_ms"),
        ({"request_timeout_ms": 0}, "request_timeout_ms"),
        ({"request_timeout_ms": "1s"}, "request_timeout_ms"),
    ],
)
def test_bad_arguments_are_refused_before_any_request(
    r: redis.Redis, monkeypatch: pytest.MonkeyPatch, kwargs: dict[str, Any], match: str
) -> None:
    sent = record_requests(monkeypatch, [r])
    args: dict[str, Any] = {"key": KEY, "ttl_ms": 1_000, **kwargs}
    with pytest.raises(BadArgument, match=match):
        Lock(r, **args)
    assert sent == []


def test_negative_timeout_at_acquire_is_refused_before_any_request(
    r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    sent = record_requests(monkeypatch, [r])
    lock = Lock(r, KEY, ttl_ms=1_000)
    with pytest.raises(BadArgument, match="timeout_ms"):
        lock.acquire(timeout_ms=-10)
    assert sent == []


@pytest.mark.parametrize("client", [object(), "redis://127.0.0.1:6379", None])
def test_a_non_client_is_refused(client: object) -> None:
    with pytest.raises(BadArgumentType, match=r"redis\.Redis"):
        Lock(client, KEY, ttl_ms=1_000)  # type: ignore[arg-type]


def test_errors_are_one_hierarchy_and_catchable_as_builtins() -> None:
    from lockguide import LockError

    for error in (BadArgument, BadArgumentType, NotAcquired, NotOwned, LockLost, AlreadyAcquired):
        assert issubclass(error, LockError)
    assert issubclass(BadArgument, ValueError)
    assert issubclass(BadArgumentType, TypeError)
    assert issubclass(LockLost, NotOwned)


def test_a_grant_whose_reply_arrives_after_the_lease_counts_as_a_failure(
    r: redis.Redis,
) -> None:
    readings = iter(range(100))

    def slow_clock() -> float:
        return next(readings) * 0.2  # every reading is 200 ms after the last one

    lock = Lock(r, KEY, ttl_ms=100, clock=slow_clock)  # the reply takes the whole lease
    assert not lock.acquire(blocking=False)
    assert not lock.held
    assert r.exists(KEY) == 0
