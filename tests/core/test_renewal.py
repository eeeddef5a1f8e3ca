"""The lease-renewal watchdog, on fakeredis and on a real redis-server.

Real time, short TTLs: leases of 150-300 ms renewed every 50 ms, so the whole
file runs in a few seconds. Waits poll for an event with a generous ceiling
instead of assuming how fast a shared machine is.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from lockguide import (
    BadArgument,
    BadArgumentType,
    FencedLock,
    Lock,
    LockLost,
    NotAcquired,
    NotOwned,
    Redlock,
    RenewalFailed,
    Watchdog,
)
from tests.support import Backend, assert_the_limit_was_reported

KEY = "lock:report"


Watch = Callable[..., Watchdog]


@pytest.fixture
def watch() -> Iterator[Watch]:
    """``Watchdog(lock, **options)``, stopped at the end of the test whatever happened."""
    made: list[Watchdog] = []

    def watchdog(lock: Any, **options: Any) -> Watchdog:
        dog = Watchdog(lock, **options)
        made.append(dog)
        return dog

    yield watchdog
    for dog in made:
        dog.stop()


def extend_fails(
    monkeypatch: pytest.MonkeyPatch, lock: Lock, error: type[Exception], message: str
) -> None:
    """Every renewal of ``lock`` raises ``error(message)``."""

    def extend(ttl_ms: int | None = None) -> None:
        raise error(message)

    monkeypatch.setattr(lock, "extend", extend)


def wait_until(condition: Callable[[], bool], ceiling_s: float = 5.0) -> bool:
    deadline = time.monotonic() + ceiling_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.005)
    return condition()


def test_the_lease_outlives_its_ttl_while_the_watchdog_renews(r: redis.Redis, watch: Watch) -> None:
    lock = Lock(r, KEY, ttl_ms=200)
    dog = watch(lock, every_ms=50)
    with dog:
        time.sleep(0.6)  # three TTLs of work
        assert r.get(KEY) == (lock.value or "").encode()
        assert not Lock(r, KEY, ttl_ms=1_000).acquire(blocking=False)
        dog.check()
        assert dog.renewals >= 3
        assert not dog.lost
    assert r.exists(KEY) == 0
    assert not dog.running


def test_the_default_interval_is_a_third_of_the_ttl(r: redis.Redis, watch: Watch) -> None:
    lock = Lock(r, KEY, ttl_ms=240)
    dog = watch(lock)
    with dog:
        assert wait_until(lambda: dog.renewals >= 1)
        time.sleep(0.3)
        assert r.exists(KEY) == 1
    assert dog.renewals >= 2


def test_renewal_stops_at_release_and_never_revives_the_key(r: redis.Redis, watch: Watch) -> None:
    lock = Lock(r, KEY, ttl_ms=150)
    dog = watch(lock, every_ms=30)
    dog.__enter__()
    assert wait_until(lambda: dog.renewals >= 2)
    dog.release()
    count = dog.renewals
    assert not dog.running
    time.sleep(0.1)
    assert dog.renewals == count
    assert r.exists(KEY) == 0


def test_a_lost_key_is_flagged_and_the_new_owner_left_alone(r: redis.Redis, watch: Watch) -> None:
    lock = Lock(r, KEY, ttl_ms=1_000)
    dog = watch(lock, every_ms=40)
    dog.__enter__()
    r.set(KEY, "someone else", px=10_000)  # a failover or an operator hands it to B
    assert dog.lost_event.wait(5.0), "the failure must be signalled, not swallowed"
    assert dog.lost
    assert isinstance(dog.error, RenewalFailed)
    with pytest.raises(RenewalFailed, match="held by another owner"):
        dog.check()
    time.sleep(0.1)
    assert r.get(KEY) == b"someone else"
    assert r.pttl(KEY) > 9_000, "the watchdog must not renew someone else's key"
    with pytest.raises(RenewalFailed):
        dog.release()
    assert r.get(KEY) == b"someone else", "release must not delete the new owner's key"
    assert not dog.running


def test_renewal_is_bounded_then_the_loss_is_flagged(r: redis.Redis, watch: Watch) -> None:
    lock = Lock(r, KEY, ttl_ms=150)
    dog = watch(lock, every_ms=40, max_total_ms=100)
    dog.__enter__()
    assert dog.lost_event.wait(5.0)
    assert 1 <= dog.renewals <= 3, "renewals stop once max_total_ms has passed"
    assert wait_until(lambda: r.exists(KEY) == 0)
    with pytest.raises(RenewalFailed, match="max_total_ms"):
        dog.check()
    with pytest.raises(RenewalFailed):
        dog.release()


def test_a_bound_shorter_than_one_interval_means_the_lease_simply_runs_out(
    r: redis.Redis, watch: Watch
) -> None:
    lock = Lock(r, KEY, ttl_ms=100)
    dog = watch(lock, every_ms=30, max_total_ms=1)
    dog.__enter__()
    dog.check()  # fine while the lease lasts
    assert dog.lost_event.wait(5.0)
    assert dog.renewals == 0
    with pytest.raises(RenewalFailed):
        dog.check()


def test_a_crash_in_the_thread_is_reported_not_silent(
    r: redis.Redis, monkeypatch: pytest.MonkeyPatch, watch: Watch
) -> None:
    lock = Lock(r, KEY, ttl_ms=200)
    extend_fails(monkeypatch, lock, RuntimeError, "a bug in the renewal path")
    dog = watch(lock, every_ms=30)
    dog.__enter__()
    assert dog.lost_event.wait(5.0)
    with pytest.raises(RenewalFailed, match=r"crashed.*a bug in the renewal path"):
        dog.check()
    with pytest.raises(RenewalFailed):
        dog.release()
    assert r.exists(KEY) == 0, "the lock was still ours, so release deleted it"


def test_a_redis_hiccup_is_retried_within_the_lease(
    r: redis.Redis, monkeypatch: pytest.MonkeyPatch, watch: Watch
) -> None:
    lock = Lock(r, KEY, ttl_ms=300)
    real_extend = lock.extend
    failures = iter([True, True])

    def flaky_extend(ttl_ms: int | None = None) -> None:
        if next(failures, False):
            raise RedisConnectionError("connection reset")
        real_extend(ttl_ms)

    monkeypatch.setattr(lock, "extend", flaky_extend)
    dog = watch(lock, every_ms=60)
    with dog:
        assert wait_until(lambda: dog.renewals >= 3)
        assert not dog.lost
        assert r.exists(KEY) == 1


@pytest.mark.parametrize("error", [RedisConnectionError, OSError])
def test_redis_unreachable_until_the_lease_ends_is_flagged(
    r: redis.Redis, monkeypatch: pytest.MonkeyPatch, watch: Watch, error: type[Exception]
) -> None:
    lock = Lock(r, KEY, ttl_ms=150)
    extend_fails(monkeypatch, lock, error, "no route to host")
    dog = watch(lock, every_ms=40)
    dog.__enter__()
    assert dog.lost_event.wait(5.0)
    with pytest.raises(RenewalFailed, match="answer") as failed:
        dog.check()
    assert isinstance(failed.value.__cause__, error)


def test_a_fenced_lock_keeps_its_token_across_renewals(r: redis.Redis, watch: Watch) -> None:
    lock = FencedLock(r, KEY, ttl_ms=150)
    dog = watch(lock, every_ms=40)
    with dog:
        token = lock.token
        assert wait_until(lambda: dog.renewals >= 3)
        assert lock.token == token
    with pytest.raises(NotOwned):
        _ = lock.token


def test_a_held_lock_can_be_watched_and_a_busy_one_is_not_acquired(
    r: redis.Redis, watch: Watch
) -> None:
    lock = Lock(r, KEY, ttl_ms=1_000)
    assert lock.acquire()
    dog = watch(lock)
    with dog:
        assert lock.held
    busy = Watchdog(Lock(r, "lock:other", ttl_ms=1_000, timeout_ms=20))
    Lock(r, "lock:other", ttl_ms=5_000).acquire()
    with pytest.raises(NotAcquired), busy:
        pytest.fail("the body must not run without the lock")


def test_a_holder_releasing_the_lock_directly_stops_the_watchdog_quietly(
    r: redis.Redis, watch: Watch
) -> None:
    lock = Lock(r, KEY, ttl_ms=150)
    dog = watch(lock, every_ms=30)
    dog.__enter__()
    dog.stop()
    lock.release()
    assert not dog.lost
    assert r.exists(KEY) == 0


# -- a lost lease stops the work: a callback and an event ---------------------------------


def test_on_lost_is_called_once_from_the_watchdog_thread_with_the_error(
    r: redis.Redis, watch: Watch
) -> None:
    told: list[tuple[BaseException, threading.Thread]] = []
    lock = Lock(r, KEY, ttl_ms=1_000)
    dog = watch(lock, every_ms=30, on_lost=lambda e: told.append((e, threading.current_thread())))
    dog.__enter__()
    r.set(KEY, "someone else", px=10_000)
    assert dog.lost_event.wait(5.0)
    assert wait_until(lambda: bool(told))
    time.sleep(0.1)
    assert len(told) == 1, "called once"
    error, thread = told[0]
    assert error is dog.error
    assert isinstance(error, RenewalFailed)
    assert thread is not threading.current_thread()
    assert thread.name == f"lockguide-watchdog:{KEY}"
    with pytest.raises(RenewalFailed):
        dog.release()
    assert len(told) == 1, "not again on release"


def test_a_renewal_unanswered_at_the_leases_end_does_not_delay_the_loss(
    r: redis.Redis, monkeypatch: pytest.MonkeyPatch, watch: Watch
) -> None:
    """Redis frozen: the renewing thread waits out its request timeout; the loss is declared
    (event, on_lost) at the lease's end on this clock."""
    lock = Lock(r, KEY, ttl_ms=150)

    def frozen(ttl_ms: int | None = None) -> None:
        time.sleep(1.0)  # a request timeout far past the lease's rest
        raise RedisTimeoutError("no reply within 1000 ms")

    monkeypatch.setattr(lock, "extend", frozen)
    told: list[str] = []
    dog = watch(lock, every_ms=50, on_lost=lambda error: told.append(error.reason))
    started = time.monotonic()
    dog.__enter__()
    assert dog.lost_event.wait(5.0)
    assert time.monotonic() - started < 0.6, "at the lease's end, not when the request gave up"
    assert wait_until(lambda: bool(told))
    with pytest.raises(RenewalFailed, match="no renewal was answered"):
        dog.check()
    with pytest.raises(RenewalFailed):
        dog.release()
    assert told == [dog.error.reason if dog.error else None], "called once"


def test_on_lost_stops_work_in_a_child_process_and_wakes_a_waiting_worker(
    r: redis.Redis, watch: Watch
) -> None:
    """The pattern the page shows: work that cannot check is run where it can be killed."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        lock = Lock(r, KEY, ttl_ms=1_000)
        dog = watch(lock, every_ms=30, on_lost=lambda error: child.kill())
        dog.__enter__()
        r.delete(KEY)
        assert child.wait(timeout=5.0) == -signal.SIGKILL
        assert dog.lost_event.is_set()
        with pytest.raises(RenewalFailed):
            dog.release()
    finally:
        child.kill()
        child.wait()


def test_an_on_lost_that_raises_is_noted_on_the_error_and_the_loss_still_reported(
    r: redis.Redis, watch: Watch
) -> None:
    def broken(error: RenewalFailed) -> None:
        raise RuntimeError("a bug in the callback")

    lock = Lock(r, KEY, ttl_ms=1_000)
    dog = watch(lock, every_ms=30, on_lost=broken)
    dog.__enter__()
    r.delete(KEY)
    assert dog.lost_event.wait(5.0)
    with pytest.raises(RenewalFailed, match="gone") as lost:
        dog.release()
    assert wait_until(lambda: bool(getattr(lost.value, "__notes__", None)))
    assert "a bug in the callback" in " ".join(lost.value.__notes__)
    assert not dog.running


# -- bad input -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"every_ms": 0}, BadArgument, "every_ms"),
        ({"every_ms": 1_000}, BadArgument, "below the TTL"),
        ({"every_ms": 5_000}, BadArgument, "below the TTL"),
        ({"every_ms": -5}, BadArgument, "every_ms"),
        ({"every_ms": "100"}, BadArgumentType, "every_ms"),
        ({"max_total_ms": -1}, BadArgument, "max_total_ms"),
        ({"max_total_ms": 0}, BadArgument, "max_total_ms"),
        ({"max_total_ms": "60s"}, BadArgumentType, "max_total_ms"),
        ({"max_total_ms": True}, BadArgumentType, "max_total_ms"),
        ({"max_renewals": 10}, TypeError, "max_renewals"),
        ({"on_lost": "print"}, BadArgumentType, "on_lost"),
    ],
)
def test_bad_arguments_are_refused(
    r: redis.Redis, kwargs: dict[str, Any], error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        Watchdog(Lock(r, KEY, ttl_ms=1_000), **kwargs)


def test_only_a_held_lock_can_be_watched_and_only_once(r: redis.Redis, watch: Watch) -> None:
    with pytest.raises(BadArgumentType, match="Lock"):
        Watchdog("lock:report")  # type: ignore[arg-type]
    lock = Lock(r, KEY, ttl_ms=1_000)
    dog = watch(lock)
    with pytest.raises(NotOwned):
        dog.start()
    lock.acquire()
    dog.start()
    with pytest.raises(BadArgument, match="already been started"):
        dog.start()
    dog.release()
    with pytest.raises((NotOwned, LockLost)):
        lock.release()


# -- renewing until released; a Redlock too -------------------------------------------


def test_by_default_renewal_is_bounded_at_ten_ttls_then_the_loss_is_flagged(
    r: redis.Redis, watch: Watch
) -> None:
    """The Redis docs: limit the extensions, or a stuck holder keeps everyone out for ever."""
    lock = Lock(r, KEY, ttl_ms=100)
    dog = watch(lock, every_ms=20)
    started = time.monotonic()
    dog.__enter__()
    assert dog.lost_event.wait(10.0), "the default bound (ten TTLs, 1000 ms) ends the renewals"
    assert time.monotonic() - started >= 1.0
    assert dog.renewals >= 10, "it renewed until the bound, not less"
    with pytest.raises(RenewalFailed, match=r"max_total_ms \(1000 ms, the default: ten TTLs\)"):
        dog.check()
    assert wait_until(lambda: r.exists(KEY) == 0)
    with pytest.raises(RenewalFailed):
        dog.release()


def test_max_total_ms_none_renews_until_the_holder_releases_as_a_leader_must(
    r: redis.Redis, watch: Watch
) -> None:
    lock = Lock(r, KEY, ttl_ms=100)
    dog = watch(lock, every_ms=20, max_total_ms=None)
    with dog:
        time.sleep(1.3)  # past the default bound of ten TTLs (1000 ms)
        assert dog.renewals >= 15
        assert not dog.lost
        dog.check()
        assert r.get(KEY) == (lock.value or "").encode()
    assert r.exists(KEY) == 0


def test_the_watchdog_renews_a_redlock_on_a_majority(backend: Backend, watch: Watch) -> None:
    masters = backend.masters()
    lock = Redlock(masters, KEY, ttl_ms=300, node_timeout_ms=100)
    dog = watch(lock, every_ms=60)
    with dog:
        assert wait_until(lambda: dog.renewals >= 4, 10.0), "the lease outlives its TTL"
        assert not dog.lost
        assert lock.validity_remaining_ms() > 0
        assert sum(m.get(KEY) == (lock.value or "").encode() for m in masters) >= 3
    assert not any(m.exists(KEY) for m in masters)


def test_a_redlock_at_its_extension_limit_is_reported_as_the_limit(
    backend: Backend, watch: Watch
) -> None:
    lock = Redlock(backend.masters(), KEY, ttl_ms=1_000, node_timeout_ms=250, max_extensions=2)
    dog = watch(lock, every_ms=40)
    dog.__enter__()
    assert dog.lost_event.wait(5.0)
    assert_the_limit_was_reported(dog, 2)
    with pytest.raises(RenewalFailed):
        dog.release()  # still held: deleted, then the failure raised
    assert not any(m.exists(KEY) for m in backend.masters())
