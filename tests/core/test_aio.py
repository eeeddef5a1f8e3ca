"""The asyncio locks (``lockguide.aio``) through the behaviours the synchronous ones prove.

Each test runs on fakeredis (``FakeAsyncRedis``) and on real redis-server
processes, and, where it takes ``kind``, for ``Lock``, ``FencedLock`` and
``Redlock`` alike. The servers are looked at through synchronous clients on the
same servers. Every test body is one ``asyncio.run``: no pytest plugin needed.

The rules, as in tests/core/test_holder_rules.py: a lock belongs to the task
that acquired it; a cancelled acquire leaves no key; the body's exception wins
on leaving ``async with``; a release that got no answer can be retried;
contradictory options are refused before anything is sent; ``locked()`` and
``owned()`` ask the servers; an error no retry can fix is a ``MasterError``.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Awaitable, Callable, Iterator
from functools import partial
from importlib import resources
from typing import Any

import pytest
import redis
import redis.asyncio
from redis.exceptions import ConnectionError as RedisConnectionError

from lockguide import (
    AlreadyAcquired,
    BadArgument,
    BadArgumentType,
    LockLost,
    MajorityLost,
    MasterError,
    NoQuorum,
    NotAcquired,
    NotOwned,
    RenewalFailed,
    StaleToken,
    Stored,
    WrongOwner,
)
from lockguide.aio import FencedLock, FencedStore, Lock, Redlock, Watchdog
from lockguide.fencing import FENCED_ACQUIRE
from lockguide_lab.testbed import RedisServer
from tests.support import Backend, real_backend, record_async_requests

KEY = "lock:aio"
RELEASE_SHA = hashlib.sha1(
    resources.files("lockguide.scripts").joinpath("release.lua").read_bytes()
).hexdigest()

AnyLock = Lock | Redlock


def run(main: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(main())  # type: ignore[arg-type]


class Kind:
    """One kind of async lock on the test's backend, and sync eyes on its servers."""

    def __init__(self, name: str, backend: Backend) -> None:
        self.name = name
        if name == "Redlock":
            self.servers = backend.masters()
            self.clients = backend.async_masters()
            # 100 ms per master as in the sync tests: a loaded machine must not cost a vote.
            self.make: Callable[..., AnyLock] = partial(
                Redlock, self.clients, KEY, node_timeout_ms=100.0
            )
        else:
            self.servers = [backend.client()]
            self.clients = [backend.async_client()]
            cls = FencedLock if name == "FencedLock" else Lock
            self.make = partial(cls, self.clients[0], KEY)
        self.set_marker = FENCED_ACQUIRE.sha if name == "FencedLock" else "SET"

    def holding(self, value: str | None) -> int:
        """Servers whose key holds ``value``."""
        return sum(1 for s in self.servers if value and s.get(KEY) == value.encode())

    def with_key(self) -> int:
        return sum(1 for s in self.servers if s.exists(KEY))

    def expire_everywhere(self) -> None:
        for server in self.servers:
            server.delete(KEY)


@pytest.fixture(params=["Lock", "FencedLock", "Redlock"])
def kind(request: pytest.FixtureRequest, backend: Backend) -> Iterator[Kind]:
    made = Kind(request.param, backend)
    yield made
    for server in made.servers:
        server.close()


# -- acquire, refuse, extend, release -----------------------------------------------------


def test_acquire_refuse_extend_release(kind: Kind) -> None:
    async def main() -> None:
        lock, other = kind.make(ttl_ms=5_000), kind.make(ttl_ms=5_000)
        assert await lock.acquire(blocking=False)
        assert lock.value is not None
        assert len(lock.value) == 40
        assert kind.holding(lock.value) == len(kind.servers)
        assert not await other.acquire(blocking=False)
        assert not other.held
        await lock.extend(20_000)
        assert all(s.pttl(KEY) > 15_000 for s in kind.servers)
        assert lock.validity_remaining_ms() > 15_000
        await lock.release()
        assert kind.with_key() == 0
        assert not lock.held
        with pytest.raises(NotOwned):
            await lock.release()

    run(main)


def test_async_with_releases_on_exit_and_on_error(kind: Kind) -> None:
    async def main() -> None:
        async with kind.make(ttl_ms=5_000) as lock:
            assert kind.holding(lock.value) == len(kind.servers)
        assert kind.with_key() == 0
        with pytest.raises(RuntimeError):
            async with kind.make(ttl_ms=5_000):
                raise RuntimeError("work failed")
        assert kind.with_key() == 0

    run(main)


def test_blocking_acquire_waits_for_the_holder_then_gives_up_at_its_timeout(kind: Kind) -> None:
    async def main() -> None:
        holder = kind.make(ttl_ms=150)
        assert await holder.acquire()
        waiter = kind.make(ttl_ms=5_000, retry_delay_ms=(5.0, 15.0))
        started = time.monotonic()
        assert await waiter.acquire(timeout_ms=3_000)
        assert time.monotonic() - started >= 0.1
        busy = kind.make(ttl_ms=5_000, retry_delay_ms=(10.0, 30.0))
        started = time.monotonic()
        assert not await busy.acquire(timeout_ms=200)
        assert 0.2 <= time.monotonic() - started < 2.2

    run(main)


def test_async_with_raises_not_acquired_when_busy(kind: Kind) -> None:
    async def main() -> None:
        assert await kind.make(ttl_ms=10_000).acquire()
        with pytest.raises(NotAcquired, match="did not run"):
            async with kind.make(ttl_ms=1_000, timeout_ms=50):
                pytest.fail("the body must not run without the lock")

    run(main)


def test_a_grant_whose_reply_arrives_after_the_lease_counts_as_a_failure(backend: Backend) -> None:
    r = backend.client()
    readings = iter(range(100))

    def slow_clock() -> float:
        return next(readings) * 0.2  # every reading is 200 ms after the last one

    async def main() -> None:
        lock = Lock(backend.async_client(), KEY, ttl_ms=100, clock=slow_clock)
        assert not await lock.acquire(blocking=False)
        assert not lock.held

    run(main)
    assert r.exists(KEY) == 0, "the late grant was deleted at once"


def test_clients_that_decode_responses_work(backend: Backend) -> None:
    async def main() -> None:
        single = Lock(backend.async_client(decode_responses=True), KEY, ttl_ms=5_000)
        many = Redlock(
            backend.async_masters(decode_responses=True),
            "lock:aio:5",
            ttl_ms=5_000,
            node_timeout_ms=100,
        )
        for lock in (single, many):
            assert await lock.acquire(blocking=False)
            assert await lock.owned()
            await lock.extend()
            await lock.release()
            assert not await lock.locked()

    run(main)


# -- 1. leaving `async with`: the body's exception wins --------------------------------------


def test_the_bodys_exception_wins_over_a_lost_lease(kind: Kind) -> None:
    async def main() -> None:
        async with kind.make(ttl_ms=5_000):
            kind.expire_everywhere()  # the lease ran out while the body worked
            raise ValueError("the body's own error")

    with pytest.raises(ValueError, match="the body's own") as raised:
        run(main)
    notes = getattr(raised.value, "__notes__", [])
    assert any("also failed" in note for note in notes), "the lost lease is a note on it"


def test_a_loss_found_on_the_way_out_of_a_successful_body_is_raised_once(kind: Kind) -> None:
    expected = MajorityLost if kind.name == "Redlock" else LockLost

    async def main() -> None:
        lock = kind.make(ttl_ms=5_000)
        with pytest.raises(expected):
            async with lock:
                kind.expire_everywhere()
        assert not lock.held

    run(main)


def test_a_loss_already_reported_by_extend_is_not_reported_again(kind: Kind) -> None:
    async def main() -> None:
        async with kind.make(ttl_ms=5_000) as lock:
            kind.expire_everywhere()
            with pytest.raises(LockLost):
                await lock.extend()
            assert not lock.held

    run(main)


def test_a_cancelled_body_releases_the_lock_on_the_way_out(kind: Kind) -> None:
    async def main() -> None:
        entered = asyncio.Event()

        async def holder() -> None:
            async with kind.make(ttl_ms=30_000):
                entered.set()
                await asyncio.sleep(3600)

        task = asyncio.create_task(holder())
        await entered.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert kind.with_key() == 0, "released, not left for the TTL"

    run(main)


# -- 2. a lock object belongs to the task that acquired it --------------------------------


def test_another_task_cannot_release_or_extend_the_holders_lock(kind: Kind) -> None:
    async def main() -> None:
        lock = kind.make(ttl_ms=5_000)
        assert await lock.acquire(blocking=False)
        seen: list[BaseException] = []

        async def intruder() -> None:
            for action in (partial(lock.acquire, blocking=False), lock.release, lock.extend):
                try:
                    await action()
                except BaseException as error:
                    seen.append(error)

        await asyncio.create_task(intruder())
        assert [type(e) for e in seen] == [AlreadyAcquired, WrongOwner, WrongOwner]
        assert "task" in str(seen[1])
        assert kind.holding(lock.value) == len(kind.servers), "the holder's key is untouched"
        await lock.release()  # the holder itself still can

    run(main)


# -- 3. a release that got no answer can be sent again ---------------------------------------


def test_a_release_that_could_not_be_sent_can_be_retried(
    kind: Kind, monkeypatch: pytest.MonkeyPatch
) -> None:
    record_async_requests(monkeypatch, kind.clients, refuse_once=RELEASE_SHA)

    async def main() -> None:
        lock = kind.make(ttl_ms=30_000)
        assert await lock.acquire(blocking=False)
        with pytest.raises(RedisConnectionError):
            await lock.release()
        assert lock.held, "the value is kept until a server has answered"
        assert kind.holding(lock.value) == len(kind.servers)
        await lock.release()
        assert kind.with_key() == 0, "the retry released it: nothing waits for the TTL"

    run(main)


# -- 4. a cancelled acquire leaves nothing behind --------------------------------------------


def test_an_acquire_cancelled_while_the_set_reply_is_awaited_leaves_no_key(
    kind: Kind, monkeypatch: pytest.MonkeyPatch
) -> None:
    record_async_requests(monkeypatch, kind.clients, hang=kind.set_marker)

    async def main() -> None:
        # Per master, a timeout longer than the caller's patience: this is a cancellation.
        lock = (
            kind.make(ttl_ms=30_000, node_timeout_ms=2_000)
            if kind.name == "Redlock"
            else kind.make(ttl_ms=30_000)
        )
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.3):
                await lock.acquire()
        assert not lock.held
        await lock.aclose()  # the clean-up runs past the cancellation; aclose waits for it
        assert kind.with_key() == 0, "the key the server stored was deleted, not left for a TTL"

    run(main)


# -- 5. options that contradict each other are refused -----------------------------------


def test_a_timeout_with_a_non_blocking_acquire_is_refused_before_any_request(
    kind: Kind, monkeypatch: pytest.MonkeyPatch
) -> None:
    sent = record_async_requests(monkeypatch, kind.clients)

    async def main() -> None:
        lock = kind.make(ttl_ms=1_000)
        with pytest.raises(BadArgument, match="blocking=False"):
            await lock.acquire(blocking=False, timeout_ms=2_000)
        with pytest.raises(BadArgument, match="ttl_ms"):
            kind.make(ttl_ms=7 * 24 * 3600 * 1000 + 1)

    run(main)
    assert sent == []


# -- 6. locked() and owned() --------------------------------------------------------------


def test_locked_and_owned_say_who_holds_the_lock(kind: Kind) -> None:
    async def main() -> None:
        mine, theirs = kind.make(ttl_ms=5_000), kind.make(ttl_ms=5_000)
        assert not await mine.locked()
        assert not await mine.owned()
        assert await mine.acquire(blocking=False)
        assert await mine.locked()
        assert await theirs.locked()
        assert await mine.owned()
        assert not await theirs.owned()
        kind.expire_everywhere()
        assert not await mine.owned(), "owned() asks the servers, not the local clock"
        assert mine.held, "while the holder's belief is unchanged"

    run(main)


# -- 7. an error no retry can fix ------------------------------------------------------------


@pytest.mark.real_redis
def test_redlock_with_a_wrong_password_stops_at_once_naming_the_master(
    redis_server: RedisServer, redis_masters: list[RedisServer]
) -> None:
    """Real servers only: fakeredis accepts any credentials."""
    backend = real_backend(redis_server, redis_masters)
    masters = backend.async_masters(username="nobody", password="not-the-password")

    async def main() -> None:
        lock = Redlock(masters, KEY, ttl_ms=5_000, timeout_ms=None, node_timeout_ms=200.0)
        started = time.monotonic()
        with pytest.raises(MasterError, match=r"masters\[0\].*Authentication") as raised:
            async with asyncio.timeout(5):  # without the rule, retries until cancelled here
                await lock.acquire()
        assert time.monotonic() - started < 2.0
        assert isinstance(raised.value.__cause__, redis.exceptions.AuthenticationError)
        assert not lock.held

    run(main)


# -- Redlock: in flight at once, majority, quorum ------------------------------------------


@pytest.fixture
def async_masters(backend: Backend) -> tuple[list[redis.Redis], list[redis.asyncio.Redis]]:
    return backend.masters(), backend.async_masters()


def test_redlock_sends_to_every_master_before_awaiting_any_reply(
    async_masters: tuple[list[redis.Redis], list[redis.asyncio.Redis]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _, clients = async_masters
    seen = record_async_requests(monkeypatch, clients)

    async def main() -> None:
        lock = Redlock(clients, KEY, ttl_ms=10_000, node_timeout_ms=100.0)
        await lock.locked()  # connect first: the handshakes are not part of the try
        del seen[:]
        assert await lock.acquire(blocking=False)

    run(main)
    events = [(e[0], e[1]) for e in seen if isinstance(e, tuple)]
    first_reply = next(i for i, e in enumerate(events) if e[0] == "reply")
    assert sorted(events[:first_reply]) == [("send", i) for i in range(5)]


def test_a_master_that_does_not_answer_costs_one_node_timeout(
    async_masters: tuple[list[redis.Redis], list[redis.asyncio.Redis]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    servers, clients = async_masters
    record_async_requests(monkeypatch, clients[4:], hang="SET")

    async def main() -> None:
        lock = Redlock(clients, KEY, ttl_ms=10_000, node_timeout_ms=100.0)
        await lock.locked()
        started = time.monotonic()
        assert await lock.acquire(blocking=False)
        assert time.monotonic() - started < 0.1 + 0.4  # one timeout, plus a loaded machine
        attempt = lock.last_attempt
        assert attempt is not None
        assert (attempt.granted, attempt.failed) == (4, 1)
        assert "no reply within 100 ms" in attempt.causes[0]
        await lock.release()

    run(main)
    assert [s.get(KEY) for s in servers] == [None] * 5, "the silent master is released too"


def test_redlock_without_a_majority_releases_at_once_and_says_why(
    async_masters: tuple[list[redis.Redis], list[redis.asyncio.Redis]],
) -> None:
    servers, clients = async_masters
    for server in servers[:3]:
        server.set(KEY, "someone else", px=30_000)

    async def main() -> None:
        with pytest.raises(NoQuorum, match="2 granted, 3 refused"):
            async with Redlock(clients, KEY, ttl_ms=1_000, timeout_ms=0, node_timeout_ms=100.0):
                pytest.fail("the body must not run")

    run(main)
    assert [s.get(KEY) for s in servers][3:] == [None, None]


def test_a_bare_majority_is_enough_and_a_release_reports_it(
    async_masters: tuple[list[redis.Redis], list[redis.asyncio.Redis]],
) -> None:
    servers, clients = async_masters
    for server in servers[3:]:
        server.set(KEY, "someone else", px=30_000)

    async def main() -> None:
        lock = Redlock(clients, KEY, ttl_ms=10_000, node_timeout_ms=100.0)
        assert await lock.acquire(blocking=False)
        assert await lock.extend() == 3
        assert lock.extensions_left == 2
        assert await lock.release() == 3

    run(main)


def test_redlock_survives_a_script_flush(
    async_masters: tuple[list[redis.Redis], list[redis.asyncio.Redis]],
) -> None:
    servers, clients = async_masters

    async def main() -> None:
        lock = Redlock(clients, KEY, ttl_ms=10_000, node_timeout_ms=100.0)
        for _ in range(2):
            for server in servers:
                server.script_flush()
            assert await lock.acquire()
            assert await lock.release() == 5

    run(main)


# -- FencedLock -------------------------------------------------------------------------------


def test_tokens_increase_with_every_acquisition_and_only_while_held(backend: Backend) -> None:
    async def main() -> None:
        lock = FencedLock(backend.async_client(), KEY, ttl_ms=5_000)
        with pytest.raises(NotOwned, match="fencing token"):
            _ = lock.token
        tokens = []
        for _ in range(3):
            async with lock:
                tokens.append(lock.token)
        assert tokens == [1, 2, 3]
        assert lock.counter_key == "{lock:aio}:fence"

    run(main)


def test_a_paused_holders_late_write_is_refused_by_the_store(backend: Backend) -> None:
    async def main() -> None:
        r = backend.async_client()
        a = FencedLock(r, KEY, ttl_ms=200)
        assert await a.acquire(blocking=False)
        await asyncio.sleep(0.25)  # A pauses past its lease
        b = FencedLock(r, KEY, ttl_ms=5_000)
        assert await b.acquire(blocking=False)
        store = FencedStore(r, "ledger:balance", lock=b)
        assert (await store.write(b.token, "written by B")).accepted
        late = await store.try_write(a.token, "written by A")
        assert (late.accepted, late.highest) == (False, 2)
        with pytest.raises(StaleToken):
            await store.write(a.token, "written by A")
        assert await store.read() == Stored(value="written by B", token=2)
        with pytest.raises(BadArgument, match="collides"):
            FencedStore(r, b.counter_key, lock=b)

    run(main)


# -- the watchdog, as a task --------------------------------------------------------------


def test_the_watchdog_task_keeps_the_lease_past_its_ttl(backend: Backend) -> None:
    r = backend.client()

    async def main() -> None:
        lock = FencedLock(backend.async_client(), KEY, ttl_ms=200)
        async with Watchdog(lock, every_ms=50) as dog:
            token = lock.token
            await asyncio.sleep(0.6)  # three TTLs of work
            assert r.get(KEY) == (lock.value or "").encode()
            dog.check()
            assert dog.renewals >= 3
            assert lock.token == token
        assert not dog.running
        assert r.exists(KEY) == 0

    run(main)


def test_the_watchdog_flags_a_lost_key_and_leaves_the_new_owner_alone(backend: Backend) -> None:
    r = backend.client()

    async def main() -> None:
        lock = Lock(backend.async_client(), KEY, ttl_ms=200)
        dog = Watchdog(lock, every_ms=40)
        await dog.__aenter__()
        r.set(KEY, "someone else", px=10_000)
        await asyncio.wait_for(dog.lost_event.wait(), 5.0)
        with pytest.raises(RenewalFailed, match="held by another owner"):
            dog.check()
        with pytest.raises(RenewalFailed):
            await dog.release()
        assert r.get(KEY) == b"someone else"
        assert not dog.running

    run(main)


def test_the_watchdog_is_bounded_then_the_loss_is_flagged(backend: Backend) -> None:
    async def main() -> None:
        lock = Lock(backend.async_client(), KEY, ttl_ms=150)
        dog = Watchdog(lock, every_ms=40, max_total_ms=100)
        await dog.__aenter__()
        started = time.monotonic()
        await asyncio.wait_for(dog.lost_event.wait(), 5.0)
        # It renews for 100 ms (two renewals at 40 and 80 ms), then lets the lease run out.
        assert dog.renewals == 2
        assert time.monotonic() - started >= 0.2
        with pytest.raises(RenewalFailed, match="max_total_ms"):
            dog.check()
        with pytest.raises(RenewalFailed):
            await dog.release()

    run(main)


# -- bad input ----------------------------------------------------------------------------


def test_a_synchronous_client_is_refused_with_what_to_pass_instead(backend: Backend) -> None:
    sync = backend.client()
    with pytest.raises(BadArgumentType, match=r"redis\.asyncio\.Redis"):
        Lock(sync, KEY, ttl_ms=1_000)  # type: ignore[arg-type]
    with pytest.raises(BadArgumentType, match=r"masters\[0\] must be a redis\.asyncio\.Redis"):
        Redlock([sync], KEY, ttl_ms=1_000)  # type: ignore[list-item]
    with pytest.raises(BadArgumentType, match=r"lockguide\.aio Lock"):
        Watchdog(object(), every_ms=10)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("make", "error", "match"),
    [
        (lambda m: Redlock([], KEY, ttl_ms=1_000), BadArgument, "must not be empty"),
        (lambda m: Redlock(m[0], KEY, ttl_ms=1_000), BadArgumentType, "list of redis.asyncio"),
        (lambda m: Redlock([*m, m[0]], KEY, ttl_ms=1_000), BadArgument, "same Redis server"),
        (lambda m: Redlock(m, KEY, ttl_ms=1_000, node_timeout_ms=990), BadArgument, "node_timeout"),
        (
            lambda m: Redlock(m, KEY, ttl_ms=1_000, retry_delay_ms=(80, 80)),
            BadArgument,
            "fixed delay",
        ),
        (lambda m: Redlock(m, KEY, ttl_ms=1_000, max_extensions=-1), BadArgument, "max_extensions"),
        (lambda m: Lock(m[0], "", ttl_ms=1_000), BadArgument, "key"),
        (lambda m: Lock(m[0], KEY, ttl_ms=1.5), BadArgumentType, "ttl_ms"),  # type: ignore[arg-type]
        (
            lambda m: FencedLock(m[0], KEY, ttl_ms=1_000, counter_key=KEY),
            BadArgument,
            "counter_key",
        ),
    ],
)
def test_bad_input_is_refused_before_any_request(
    backend: Backend,
    monkeypatch: pytest.MonkeyPatch,
    make: Callable[[list[redis.asyncio.Redis]], Any],
    error: type[Exception],
    match: str,
) -> None:
    clients = backend.async_masters()
    sent = record_async_requests(monkeypatch, clients)
    with pytest.raises(error, match=match):
        make(clients)
    assert sent == []
