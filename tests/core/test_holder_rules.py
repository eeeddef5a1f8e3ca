"""The rules a lock object keeps for the code holding it, for Lock, FencedLock and Redlock.

Each test is written from the intent of a peer library's test (redis-py's
``tests/test_lock.py``, pottery's ``tests/test_redlock.py``, python-redis-lock's
suite): the body's exception wins over the release's; a lock object belongs to
the thread that acquired it; a release that got no answer can be sent again; an
acquire interrupted half way leaves no key; options that contradict each other
are refused; ``locked()`` and ``owned()`` answer what their names ask.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from functools import partial

import pytest
import redis
from redis.exceptions import ConnectionError as RedisConnectionError

from lockguide import (
    AlreadyAcquired,
    BadArgument,
    FencedLock,
    Lock,
    LockLost,
    MajorityLost,
    MasterError,
    NoQuorum,
    NotOwned,
    Redlock,
    WrongOwner,
)
from lockguide_lab.testbed import RedisServer
from tests.support import Backend, LockKind, real_backend, record_requests

KEY = "lock:rules"

AnyLock = Lock | Redlock


class Kind(LockKind):
    """How to make one kind of lock on the test's backend, and how to look at its servers."""

    def __init__(self, name: str, backend: Backend) -> None:
        super().__init__(name, backend, KEY)
        if name == "Redlock":
            self.make: Callable[..., AnyLock] = partial(
                Redlock, self.servers, KEY, node_timeout_ms=100.0
            )
        else:
            cls = FencedLock if name == "FencedLock" else Lock
            self.make = partial(cls, self.servers[0], KEY)


@pytest.fixture(params=LockKind.NAMES)
def kind(request: pytest.FixtureRequest, backend: Backend) -> Iterator[Kind]:
    made = Kind(request.param, backend)
    yield made
    made.close()


# -- 1. leaving a `with` block ----------------------------------------------------------


def body_that_fails_after_the_lease_ran_out(kind: Kind) -> None:
    with kind.make(ttl_ms=5_000):
        kind.expire_everywhere()  # the lease ran out while the body worked
        raise ValueError("the body's own error")


def test_the_bodys_exception_wins_over_a_lost_lease(kind: Kind) -> None:
    with pytest.raises(ValueError, match="the body's own") as raised:
        body_that_fails_after_the_lease_ran_out(kind)
    notes = getattr(raised.value, "__notes__", [])
    assert any("also failed" in note for note in notes), "the lost lease is a note on it"


def test_a_loss_already_reported_by_extend_is_not_reported_again(kind: Kind) -> None:
    with kind.make(ttl_ms=5_000) as lock:
        kind.expire_everywhere()
        with pytest.raises(LockLost):
            lock.extend()
        assert not lock.held
    # Leaving the block raised nothing: no NotOwned for a loss the caller handled.


def test_a_loss_found_on_the_way_out_of_a_successful_body_is_raised_once(kind: Kind) -> None:
    expected = MajorityLost if kind.name == "Redlock" else LockLost
    lock = kind.make(ttl_ms=5_000)
    with pytest.raises(expected), lock:
        kind.expire_everywhere()
    assert not lock.held


def test_a_body_that_released_the_lock_itself_leaves_quietly(kind: Kind) -> None:
    with kind.make(ttl_ms=5_000) as lock:
        lock.release()
    assert kind.with_key() == 0


# -- 2. a lock object belongs to the thread that acquired it ---------------------------


def test_another_thread_cannot_release_or_extend_the_holders_lock(kind: Kind) -> None:
    lock = kind.make(ttl_ms=5_000)
    assert lock.acquire(blocking=False)
    seen: list[BaseException] = []

    def intruder() -> None:
        for action in (lambda: lock.acquire(blocking=False), lock.release, lock.extend):
            try:
                action()
            except BaseException as error:
                seen.append(error)

    thread = threading.Thread(target=intruder)
    thread.start()
    thread.join()
    assert [type(e) for e in seen] == [AlreadyAcquired, WrongOwner, WrongOwner]
    assert isinstance(seen[1], NotOwned)
    assert kind.holding(lock.value) == len(kind.servers), "the holder's key is untouched"
    lock.release()  # the holder itself still can


# -- 3. a release that got no answer can be sent again -----------------------------------


def test_a_release_that_could_not_be_sent_can_be_retried(
    kind: Kind, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A request that could not be written is written once more on a new connection, and a
    # release whose connection broke is asked again: refused four times, it raises.
    record_requests(monkeypatch, kind.servers, refuse_once=kind.release_sha, refusals=4)
    lock = kind.make(ttl_ms=30_000)
    assert lock.acquire(blocking=False)
    with pytest.raises(RedisConnectionError):
        lock.release()
    assert lock.held, "the value is kept until a server has answered"
    assert kind.holding(lock.value) == len(kind.servers)
    lock.release()
    assert kind.with_key() == 0, "the retry released it: nothing waits for the TTL"


# -- 4. an interrupted acquire leaves nothing behind ----------------------------------------


def test_ctrl_c_while_the_set_reply_is_awaited_leaves_no_key(
    kind: Kind, monkeypatch: pytest.MonkeyPatch
) -> None:
    marker = "SET" if kind.name == "Redlock" else "EVALSHA"  # take.lua on one server
    record_requests(monkeypatch, kind.servers, lose=marker, raising=KeyboardInterrupt)
    lock = kind.make(ttl_ms=30_000)
    with pytest.raises(KeyboardInterrupt):
        lock.acquire()
    assert not lock.held
    assert kind.with_key() == 0, "the key the server stored was deleted, not left for a TTL"


# -- 6. options that contradict each other are refused ------------------------------------


def test_a_timeout_with_a_non_blocking_acquire_is_refused_before_any_request(
    kind: Kind, monkeypatch: pytest.MonkeyPatch
) -> None:
    sent = record_requests(monkeypatch, kind.servers)
    lock = kind.make(ttl_ms=1_000)
    with pytest.raises(BadArgument, match="blocking=False"):
        lock.acquire(blocking=False, timeout_ms=2_000)
    assert sent == []


# -- 9. locked() and owned() --------------------------------------------------------------


def test_locked_and_owned_say_who_holds_the_lock(kind: Kind) -> None:
    mine, theirs = kind.make(ttl_ms=5_000), kind.make(ttl_ms=5_000)
    assert not mine.locked()
    assert not mine.owned()
    assert mine.acquire(blocking=False)
    assert mine.locked()
    assert theirs.locked()
    assert mine.owned()
    assert not theirs.owned()
    kind.expire_everywhere()
    assert not mine.owned(), "owned() asks the servers, not the local clock"
    assert mine.held, "while the holder's belief is unchanged"


# -- 8. argument edges ----------------------------------------------------------------------


def test_whole_numbers_of_any_integer_type_are_ttls(kind: Kind) -> None:
    numpy = pytest.importorskip("numpy")
    lock = kind.make(ttl_ms=numpy.int64(5_000), timeout_ms=numpy.float64(500.0))
    assert lock.ttl_ms == 5_000
    assert type(lock.ttl_ms) is int
    assert lock.acquire()
    lock.release()


@pytest.mark.parametrize("ttl", [2**62, 10**20, 7 * 24 * 3600 * 1000 + 1])
def test_a_ttl_beyond_a_week_is_refused_before_any_request(
    kind: Kind, monkeypatch: pytest.MonkeyPatch, ttl: int
) -> None:
    sent = record_requests(monkeypatch, kind.servers)
    with pytest.raises(BadArgument, match="one week"):
        kind.make(ttl_ms=ttl)
    assert sent == []


def test_fenced_lock_takes_a_request_timeout(backend: Backend) -> None:
    lock = FencedLock(backend.client(), KEY, ttl_ms=1_000, request_timeout_ms=250)
    assert lock.acquire(blocking=False)
    lock.release()


def test_redlock_takes_its_masters_as_a_set(backend: Backend) -> None:
    lock = Redlock(set(backend.masters()), KEY, ttl_ms=5_000, node_timeout_ms=100.0)
    assert lock.acquire(blocking=False)
    assert lock.release() == 5


def test_three_sentinel_managed_masters_are_three_masters() -> None:
    """Their address is only known once they connect, so each is named by its service."""
    sentinel = redis.Sentinel([("127.0.0.1", 1)], socket_timeout=0.1)  # type: ignore[no-untyped-call]
    master_for: Callable[[str], redis.Redis] = sentinel.master_for
    masters = [master_for(name) for name in ("ledger-a", "ledger-b", "ledger-c")]
    assert Redlock(masters, KEY, ttl_ms=5_000).quorum == 2  # built, nothing sent
    with pytest.raises(BadArgument, match="same Redis server"):
        Redlock([*masters, master_for("ledger-a")], KEY, ttl_ms=5_000)


# -- 5. errors no retry can fix are raised at once, naming the master ----------------------


@pytest.mark.real_redis
def test_redlock_with_a_wrong_password_stops_at_once_naming_the_master(
    redis_server: RedisServer, redis_masters: list[RedisServer]
) -> None:
    """Real servers only: fakeredis accepts any credentials."""
    backend = real_backend(redis_server, redis_masters)
    masters = backend.masters(username="nobody", password="not-the-password")
    lock = Redlock(masters, KEY, ttl_ms=5_000, timeout_ms=None, node_timeout_ms=200.0)
    started = time.monotonic()
    with pytest.raises(MasterError, match=r"masters\[0\].*Authentication") as raised:
        lock.acquire()  # no timeout: without the fix this would retry forever
    assert time.monotonic() - started < 2.0
    assert isinstance(raised.value.__cause__, redis.exceptions.AuthenticationError)
    assert not lock.held


def test_no_quorum_says_why_the_masters_failed(backend: Backend) -> None:
    masters = backend.masters(3)
    masters[1].set(KEY, "someone else")
    masters[2].set(KEY, "someone else")
    with (
        pytest.raises(NoQuorum, match="1 granted, 2 refused"),
        Redlock(masters, KEY, ttl_ms=1_000, timeout_ms=0),
    ):
        pytest.fail("the body must not run")
