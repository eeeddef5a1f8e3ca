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
import contextlib
import gc
import inspect
import itertools
import os
import time
import warnings
from collections.abc import Awaitable, Callable, Iterator
from functools import partial
from typing import Any

import anyio
import pytest
import redis
import redis.asyncio
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

import lockguide
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
from lockguide import _core as core
from lockguide._core import TAKE
from lockguide.aio import FencedLock, FencedStore, Lock, Redlock, Watchdog
from lockguide.redlock import REDLOCK_DEFAULTS, RedlockOptions
from lockguide_lab.testbed import RedisServer
from lockguide_lab.testbed.deployments import ClusterDeployment
from tests.support import (
    Backend,
    LockKind,
    assert_the_limit_was_reported,
    empty_slot,
    real_backend,
    record_async_requests,
    script_sha,
)

KEY = "lock:aio"

AnyLock = Lock | Redlock


def run(main: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(main())  # type: ignore[arg-type]


class Kind(LockKind):
    """One kind of async lock on the test's backend, and sync eyes on its servers."""

    def __init__(self, name: str, backend: Backend) -> None:
        super().__init__(name, backend, KEY)
        self.real = backend.name == "redis-server"
        if name == "Redlock":
            self.clients = backend.async_masters()
            # 100 ms per master as in the sync tests: a loaded machine must not cost a vote.
            self.make: Callable[..., AnyLock] = partial(
                Redlock, self.clients, KEY, node_timeout_ms=100.0
            )
        else:
            self.clients = [backend.async_client()]
            cls = FencedLock if name == "FencedLock" else Lock
            self.make = partial(cls, self.clients[0], KEY)
        # What a blocking acquire sends: SET NX on each master, or take.lua on one server.
        self.set_marker = "SET" if name == "Redlock" else TAKE.sha


@pytest.fixture(params=LockKind.NAMES)
def kind(request: pytest.FixtureRequest, backend: Backend) -> Iterator[Kind]:
    made = Kind(request.param, backend)
    yield made
    made.close()


# -- acquire, refuse, extend, release -----------------------------------------------------


def test_acquire_refuse_extend_release(kind: Kind) -> None:
    async def main() -> None:
        lock, other = kind.make(ttl_ms=5_000), kind.make(ttl_ms=5_000)
        assert await lock.acquire(blocking=False)
        assert lock.value is not None
        assert len(lock.value.split(" ")[0]) == 40  # 20 random bytes; then who holds it
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
        held = kind.holding(lock.value)  # (a Redlock: a master slow to answer may lack it)
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
        assert kind.holding(lock.value) == held, "the holder's key is untouched"
        await lock.release()  # the holder itself still can

    run(main)


# -- 3. a release whose connection broke is asked again on a new one --------------------------


def test_a_release_that_could_not_be_sent_is_asked_again_on_a_new_connection(
    kind: Kind, monkeypatch: pytest.MonkeyPatch
) -> None:
    record_async_requests(monkeypatch, kind.clients, refuse_once=kind.release_sha)

    async def main() -> None:
        lock = kind.make(ttl_ms=30_000)
        assert await lock.acquire(blocking=False)
        assert kind.holding(lock.value) == len(kind.servers)
        await lock.release()
        assert not lock.held
        assert kind.with_key() == 0, "released at once: nothing waits for the TTL"

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
        lock = Redlock(clients, KEY, ttl_ms=10_000, node_timeout_ms=100.0, max_extensions=3)
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
        lock = Lock(backend.async_client(), KEY, ttl_ms=1_000)
        dog = Watchdog(lock, every_ms=40)
        assert await lock.acquire(blocking=False)
        dog.start()  # not `async with`: this task is told, not cancelled
        r.set(KEY, "someone else", px=10_000)
        await asyncio.wait_for(dog.lost_event.wait(), 5.0)
        await asyncio.sleep(0.05)
        task = asyncio.current_task()
        assert task is not None
        assert task.cancelling() == 0, "started with start(), the watchdog cancels nobody"
        with pytest.raises(RenewalFailed, match="held by another owner"):
            dog.check()
        with pytest.raises(RenewalFailed):
            await dog.release()
        assert r.get(KEY) == b"someone else"
        assert not dog.running

    run(main)


def test_a_holder_releasing_the_lock_itself_ends_the_watchdog_task_quietly(
    backend: Backend,
) -> None:
    r = backend.client()

    async def main() -> None:
        lock = Lock(backend.async_client(), KEY, ttl_ms=300)
        dog = Watchdog(lock, every_ms=40)
        assert await lock.acquire(blocking=False)
        dog.start()  # not `async with`: this task is told, not cancelled
        await lock.release()  # not through the watchdog: its next renewal finds no lock
        deadline = time.monotonic() + 5.0
        while dog.running and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        assert not dog.running
        assert not dog.lost_event.is_set()  # released by its holder is not a loss
        assert r.exists(KEY) == 0

    run(main)


def test_the_watchdog_is_bounded_then_the_loss_is_flagged(backend: Backend) -> None:
    async def main() -> None:
        lock = Lock(backend.async_client(), KEY, ttl_ms=150)
        dog = Watchdog(lock, every_ms=40, max_total_ms=100)
        assert await lock.acquire(blocking=False)
        dog.start()  # not `async with`: this task is told, not cancelled
        started = time.monotonic()
        await asyncio.wait_for(dog.lost_event.wait(), 5.0)
        # It renews for 100 ms (renewals at 40 and 80 ms; the second may come after the bound
        # on a busy machine), then lets the lease run out.
        assert 1 <= dog.renewals <= 2, "renewals stop once max_total_ms has passed"
        assert time.monotonic() - started >= 0.2
        with pytest.raises(RenewalFailed, match="max_total_ms"):
            dog.check()
        with pytest.raises(RenewalFailed):
            await dog.release()

    run(main)


def test_a_redlock_at_its_extension_limit_is_reported_as_the_limit(backend: Backend) -> None:
    async def main() -> None:
        masters = backend.async_masters()
        lock = Redlock(masters, KEY, ttl_ms=1_000, node_timeout_ms=250, max_extensions=2)
        dog = Watchdog(lock, every_ms=40)
        assert await lock.acquire(blocking=False)
        dog.start()  # not `async with`: this task is told, not cancelled
        await asyncio.wait_for(dog.lost_event.wait(), 5.0)
        assert_the_limit_was_reported(dog, 2)
        with pytest.raises(RenewalFailed):
            await dog.release()  # still held: deleted, then the failure raised
        assert not any(m.exists(KEY) for m in backend.masters())
        await lock.aclose()

    run(main)


# -- a lost lease stops the work: the body of `async with Watchdog` is cancelled ----------------


def key_taken(r: redis.Redis, lock: AnyLock) -> None:
    r.set(KEY, "someone else", px=10_000)  # a failover or an operator hands the key to B


def key_deleted(r: redis.Redis, lock: AnyLock) -> None:
    r.delete(KEY)


def redis_unreachable(r: redis.Redis, lock: AnyLock) -> None:
    async def unreachable(*args: Any) -> None:
        raise RedisConnectionError("no route to host")

    lock.extend = unreachable  # type: ignore[method-assign, assignment]
    lock.release = unreachable  # type: ignore[method-assign]  # (leaving: RenewalFailed still)


LOSSES: dict[str, tuple[Callable[[redis.Redis, AnyLock], None], dict[str, Any], str]] = {
    "key taken": (key_taken, {}, "held by another owner"),
    "key deleted": (key_deleted, {}, "gone"),
    "redis unreachable": (redis_unreachable, {}, "answer"),
    "bound reached": (lambda r, lock: None, {"max_total_ms": 100}, "max_total_ms"),
}


@pytest.mark.parametrize("loss", LOSSES, ids=str)
def test_a_lost_lease_cancels_the_body_of_async_with_and_leaving_raises(
    backend: Backend, loss: str
) -> None:
    """As ``asyncio.timeout`` cancels its body: the body stops, leaving raises ``RenewalFailed``."""
    r = backend.client()
    lose, options, reason = LOSSES[loss]

    async def main() -> None:
        # A lease that must run out is short; one a renewal finds lost is long, so that a
        # renewal delayed on a busy machine is still the one that notices.
        ttl_ms = 150 if loss in ("redis unreachable", "bound reached") else 1_000
        lock = Lock(backend.async_client(), KEY, ttl_ms=ttl_ms)
        reached: list[str] = []

        async def job() -> None:
            async with Watchdog(lock, every_ms=30, **options):
                lose(r, lock)
                await asyncio.sleep(3600)  # the work, waiting on something slow
                reached.append("the line after the work")

        started = time.monotonic()
        with pytest.raises(RenewalFailed, match=reason) as lost:
            await asyncio.wait_for(job(), 5.0)  # today: the body sleeps on, wait_for times out
        assert time.monotonic() - started < 4.0
        assert reached == [], "the body was stopped where it waited"
        chain, seen = lost.value.__context__, []
        while chain is not None:
            seen.append(type(chain))
            chain = chain.__context__
        assert asyncio.CancelledError in seen, "raised while the body's cancellation was handled"
        if loss == "redis unreachable":  # the release got no answer either: kept, retryable
            assert lock.held
            assert "releasing" in " ".join(getattr(lost.value, "__notes__", []))
        else:
            assert not lock.held
        task = asyncio.current_task()
        assert task is not None
        assert task.cancelling() == 0, "nothing left to cancel this task"
        await asyncio.sleep(0)  # and it runs on normally
        if loss == "key taken":
            assert r.get(KEY) == b"someone else", "the new owner's key is left alone"
        await lock.aclose()

    run(main)


def test_a_renewal_unanswered_at_the_leases_end_does_not_delay_the_cancellation(
    backend: Backend,
) -> None:
    """Redis frozen: the renewal waits out its request timeout; the body stops at the lease end."""

    async def main() -> None:
        lock = Lock(backend.async_client(), KEY, ttl_ms=150)

        async def frozen(ttl_ms: int | None = None) -> None:
            await asyncio.sleep(1.0)  # a request timeout far past the lease's rest
            raise RedisTimeoutError("no reply within 1000 ms")

        lock.extend = frozen  # type: ignore[method-assign]
        cancelled_after: list[float] = []

        async def job() -> None:
            async with Watchdog(lock, every_ms=50):
                started = time.monotonic()
                try:
                    await asyncio.sleep(3600)
                except asyncio.CancelledError:
                    cancelled_after.append(time.monotonic() - started)
                    raise

        with pytest.raises(RenewalFailed, match="no renewal was answered"):
            await asyncio.wait_for(job(), 5.0)
        assert cancelled_after, "the body was cancelled"
        assert cancelled_after[0] < 0.6, f"at the lease's end, not {cancelled_after[0]:.2f} s"
        await lock.aclose()

    run(main)


def test_a_redlock_at_its_extension_limit_cancels_the_body(backend: Backend) -> None:
    async def main() -> None:
        masters = backend.async_masters()
        lock = Redlock(masters, KEY, ttl_ms=1_000, node_timeout_ms=250, max_extensions=2)
        async with contextlib.AsyncExitStack() as stack:
            stack.push_async_callback(lock.aclose)
            with pytest.raises(RenewalFailed, match=r"max_extensions \(2\)"):
                async with asyncio.timeout(5.0), Watchdog(lock, every_ms=40):
                    await asyncio.sleep(3600)
        assert not lock.held
        assert not any(m.exists(KEY) for m in backend.masters())

    run(main)


def test_only_the_watchdogs_own_cancellation_becomes_renewal_failed(backend: Backend) -> None:
    """A cancellation from outside, arriving with the loss, still cancels the task."""
    r = backend.client()

    async def main() -> None:
        lock = Lock(backend.async_client(), KEY, ttl_ms=150)
        dog = Watchdog(lock, every_ms=30)
        entered = asyncio.Event()

        async def job() -> None:
            async with dog:
                entered.set()
                await asyncio.sleep(3600)

        task = asyncio.create_task(job())
        await asyncio.wait_for(entered.wait(), 5.0)
        r.set(KEY, "someone else", px=10_000)
        async with asyncio.timeout(5.0):  # (not wait_for: its own task would wake a turn late)
            await dog.lost_event.wait()
        assert not task.done()
        task.cancel()  # in the same turn: the task has not run since the watchdog cancelled it
        with pytest.raises(asyncio.CancelledError):
            await task
        assert task.cancelled()
        assert r.get(KEY) == b"someone else"

        # And a wait_for deadline around a healthy lease is a TimeoutError, the key released.
        healthy = Lock(backend.async_client(), KEY + ":2", ttl_ms=150)

        async def slow() -> None:
            async with Watchdog(healthy, every_ms=30):
                await asyncio.sleep(3600)

        with pytest.raises(TimeoutError):
            await asyncio.wait_for(slow(), 0.3)
        assert r.exists(KEY + ":2") == 0
        await lock.aclose()
        await healthy.aclose()

    run(main)


def test_a_body_that_handles_the_cancellation_still_hears_of_the_loss(backend: Backend) -> None:
    """A body that swallows the cancellation leaves with RenewalFailed; one that raises its
    own error keeps it, with the loss noted on it."""
    r = backend.client()

    async def main() -> None:
        lock = Lock(backend.async_client(), KEY, ttl_ms=1_000)

        async def swallows() -> None:
            async with Watchdog(lock, every_ms=30):
                r.delete(KEY)
                with contextlib.suppress(asyncio.CancelledError):
                    await asyncio.sleep(3600)

        with pytest.raises(RenewalFailed, match="gone"):
            await asyncio.wait_for(swallows(), 5.0)

        async def raises_its_own() -> None:
            async with Watchdog(lock, every_ms=30):
                r.delete(KEY)
                try:
                    await asyncio.sleep(3600)
                except asyncio.CancelledError:
                    raise ValueError("the body's own error") from None

        with pytest.raises(ValueError, match="the body's own error") as own:
            await asyncio.wait_for(raises_its_own(), 5.0)
        notes = " ".join(getattr(own.value, "__notes__", []))
        assert "the watchdog had cancelled this body" in notes
        task = asyncio.current_task()
        assert task is not None
        assert task.cancelling() == 0
        await lock.aclose()

    run(main)


def test_under_anyio_a_lost_lease_cancels_the_body_and_a_scope_keeps_its_own(
    backend: Backend,
) -> None:
    """anyio's scopes (Starlette, FastAPI): one in the body does not swallow the watchdog's
    cancellation; one around the block still catches its own deadline."""
    r = backend.client()

    async def main() -> None:
        lock = Lock(backend.async_client(), KEY, ttl_ms=1_000)
        reached: list[str] = []
        with anyio.CancelScope() as outer:

            async def job() -> None:
                async with Watchdog(lock, every_ms=30):
                    r.delete(KEY)
                    with anyio.move_on_after(60):  # the body's own scope: not its cancellation
                        await anyio.sleep(3600)
                    reached.append("the line after the inner scope")

            with pytest.raises(RenewalFailed, match="gone"):
                await job()
        assert not outer.cancelled_caught
        assert reached == []
        assert not lock.held

        dog = Watchdog(lock, every_ms=30)
        with anyio.move_on_after(0.3) as scope:
            async with dog:
                await anyio.sleep(3600)
        assert scope.cancelled_caught, "anyio's own deadline reached its scope"
        assert not dog.lost
        await lock.aclose()  # anyio cancels every await: the release finishes in the background
        assert r.exists(KEY) == 0, "released on the way out"

    anyio.run(main)


def test_on_lost_is_called_once_in_the_event_loop_with_the_error(backend: Backend) -> None:
    r = backend.client()

    async def main() -> None:
        lock = Lock(backend.async_client(), KEY, ttl_ms=1_000)
        told: list[tuple[BaseException, asyncio.Task[Any] | None]] = []
        dog = Watchdog(lock, every_ms=30, on_lost=lambda e: told.append((e, _current())))
        assert await lock.acquire(blocking=False)
        dog.start()  # not `async with`: this task is told, not cancelled
        r.delete(KEY)
        await asyncio.wait_for(dog.lost_event.wait(), 5.0)
        await asyncio.sleep(0.1)
        assert len(told) == 1
        assert told[0][0] is dog.error
        assert told[0][1] is not None
        assert told[0][1] is not asyncio.current_task()
        with pytest.raises(RenewalFailed):
            await dog.release()
        await lock.aclose()

    def _current() -> asyncio.Task[Any] | None:
        return asyncio.current_task()

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


# -- issue 20: the reference as users call it ------------------------------------------------

EXTEND_SHA = script_sha("extend.lua")


def slow_replies(
    monkeypatch: pytest.MonkeyPatch,
    clients: list[redis.asyncio.Redis],
    word: str,
    delay_s: float,
    *,
    on_the_way_there: bool = False,
) -> list[int]:
    """Replies to commands naming ``word`` arrive ``delay_s`` late; each such send is recorded.

    ``on_the_way_there``: the command itself reaches Redis ``delay_s`` late.

    For clients (and the locks made on them afterwards), as :func:`record_async_requests`.
    """
    sent: list[int] = []
    for index, client in enumerate(clients):
        base: type[Any] = client.connection_pool.connection_class

        class Slow(base):  # type: ignore[misc]
            slow = False
            server = index  # this class's client (the loop variable moves on)

            async def send_command(self, *args: Any, **kwargs: Any) -> None:
                self.slow = word in [str(a) for a in args]
                if self.slow:
                    sent.append(self.server)
                    if on_the_way_there:
                        self.slow = False
                        await asyncio.sleep(delay_s)
                await super().send_command(*args, **kwargs)

            async def read_response(self, *args: Any, **kwargs: Any) -> Any:
                reply = await super().read_response(*args, **kwargs)
                if self.slow:
                    self.slow = False
                    try:
                        await asyncio.sleep(delay_s)
                    except BaseException:
                        await self.disconnect(nowait=True)
                        raise
                return reply

        monkeypatch.setattr(client.connection_pool, "connection_class", Slow)
    return sent


async def until(condition: Callable[[], object], within_s: float = 5.0) -> None:
    async with asyncio.timeout(within_s):
        while not condition():
            await asyncio.sleep(0.001)


# -- D: ownership through wait_for, shield, gather; hand_over; owner="process" --------------

WRAPPERS: dict[str, Callable[[Any], Awaitable[Any]]] = {
    "wait_for": lambda work: asyncio.wait_for(work, 5),
    "shield": asyncio.shield,
    "gather": lambda work: asyncio.gather(work),
}


@pytest.mark.parametrize("wrap", list(WRAPPERS))
def test_a_lock_taken_and_released_through_a_wrapper_task_is_the_callers(
    kind: Kind, wrap: str
) -> None:
    """On 3.11 wait_for, shield and gather run the coroutine in a task of their own."""
    wrapped = WRAPPERS[wrap]

    async def main() -> None:
        lock = kind.make(ttl_ms=30_000)
        assert await wrapped(lock.acquire())
        await wrapped(lock.extend())
        await wrapped(lock.release())
        assert not lock.held
        assert kind.with_key() == 0, "released: nothing waits for the TTL"
        await lock.aclose()

    run(main)


def test_after_a_wait_for_acquire_an_unrelated_task_still_gets_wrong_owner(kind: Kind) -> None:
    async def main() -> None:
        lock = kind.make(ttl_ms=30_000)
        assert await asyncio.wait_for(lock.acquire(), 5)

        async def intruder() -> None:
            await lock.release()

        with pytest.raises(WrongOwner):
            await asyncio.create_task(intruder())
        assert kind.holding(lock.value) == len(kind.servers)
        await lock.release()
        await lock.aclose()

    run(main)


def test_hand_over_gives_a_held_lock_to_another_task(kind: Kind) -> None:
    async def main() -> None:
        lock = kind.make(ttl_ms=30_000)
        go = asyncio.Event()

        async def worker() -> None:
            await go.wait()
            await lock.extend()
            await lock.release()

        async with lock:
            task = asyncio.create_task(worker())
            lock.hand_over(task)
            with pytest.raises(WrongOwner):
                await lock.extend()  # the giver no longer may
        assert kind.holding(lock.value) == len(kind.servers), "leaving the block left it held"
        go.set()
        await task
        assert kind.with_key() == 0
        await lock.aclose()

    run(main)


def test_owner_process_lets_any_task_of_the_process_release(kind: Kind) -> None:
    async def main() -> None:
        lock = kind.make(ttl_ms=30_000, owner="process")
        assert await lock.acquire()

        async def other() -> None:
            await lock.release()

        await asyncio.create_task(other())
        assert kind.with_key() == 0
        await lock.aclose()

    run(main)


# -- A: a forked child neither holds nor releases the parent's lock --------------------------


def test_a_forked_child_sees_the_lock_as_not_held_and_sends_nothing(kind: Kind) -> None:
    if not kind.real:
        pytest.skip("a forked child shares nothing with the parent's in-process fakeredis")

    async def main() -> None:
        lock = kind.make(ttl_ms=30_000)
        assert await lock.acquire()
        pid = os.fork()
        if pid == 0:  # the child: release must refuse before any await
            code = 1
            try:
                try:
                    lock.release().send(None)
                except NotOwned:
                    code = 2 if lock.held else 0
                else:
                    code = 3  # it went on to a request
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0, "the child released (or thought it held)"
        assert lock.held
        assert kind.holding(lock.value) == len(kind.servers), "the parent's key is still there"
        await lock.release()
        await lock.aclose()

    run(main)


# -- E: a cancelled release finishes its request ----------------------------------------------


def test_a_second_cancellation_while_releasing_leaves_no_key_and_a_free_object(
    kind: Kind, monkeypatch: pytest.MonkeyPatch
) -> None:
    sent = slow_replies(monkeypatch, kind.clients, kind.release_sha, 0.03)

    async def main() -> None:
        lock = kind.make(ttl_ms=30_000)
        entered = asyncio.Event()

        async def handler() -> None:
            async with lock:
                entered.set()
                await asyncio.sleep(3600)

        task = asyncio.create_task(handler())
        await entered.wait()
        task.cancel()  # the client went away
        await until(lambda: sent)
        task.cancel()  # and again, while the release is in flight
        with pytest.raises(asyncio.CancelledError):
            await task
        assert not lock.held
        assert kind.with_key() == 0, "the release finished: no key waits for the TTL"
        assert await lock.acquire(blocking=False), "no AlreadyAcquired for a grant that is gone"
        await lock.release()
        await lock.aclose()

    run(main)


def test_under_anyio_cancel_scopes_leaving_async_with_releases_every_time(
    kind: Kind, monkeypatch: pytest.MonkeyPatch
) -> None:
    """anyio (Starlette, FastAPI) cancels again at every await inside a cancelled scope."""
    slow_replies(monkeypatch, kind.clients, kind.release_sha, 0.02)

    async def main() -> None:
        slow = {"node_timeout_ms": 1_000} if kind.name == "Redlock" else {}
        lock = kind.make(ttl_ms=30_000, **slow)  # a busy machine's delay is not a timeout
        for _ in range(5):
            with anyio.CancelScope() as scope:
                async with lock:
                    # The time runs from here: an acquire that outlasted it (a full garbage
                    # collection in a big session takes 100s of ms) would be cancelled
                    # instead, and its clean-up runs after the scope, in the background.
                    scope.deadline = anyio.current_time() + 0.05
                    await anyio.sleep(3600)
            assert scope.cancelled_caught
            assert not lock.held
            assert kind.with_key() == 0
        await lock.aclose()

    anyio.run(main)


# -- H: an extend that completes after a release and a new acquire ----------------------------


def test_a_late_extend_reply_leaves_the_new_grant_alone(
    kind: Kind, monkeypatch: pytest.MonkeyPatch
) -> None:
    slow_replies(monkeypatch, kind.clients, EXTEND_SHA, 0.2, on_the_way_there=True)

    async def main() -> None:
        slow = {"node_timeout_ms": 2_000} if kind.name == "Redlock" else {}
        lock = kind.make(ttl_ms=30_000, **slow)  # the extend's delay is not a timeout
        assert await lock.acquire()
        late = asyncio.ensure_future(lock.extend())
        await asyncio.sleep(0.05)  # the extend is in flight
        await lock.release()
        assert await lock.acquire()
        new_value = lock.value
        with pytest.raises(LockLost):  # it ran on the old value
            await late
        assert lock.held
        assert lock.value == new_value
        await lock.release()
        assert kind.with_key() == 0
        await lock.aclose()

    run(main)


# -- J: total deadlines, the library's own outcome, keyword-only TTL, a finite default -------


@pytest.mark.real_redis
@pytest.mark.parametrize("name", ["Lock", "FencedLock"])
def test_an_acquire_under_asyncio_timeout_returns_on_time_against_a_frozen_server(
    redis_server: RedisServer, name: str
) -> None:
    client = redis.asyncio.Redis(host=redis_server.host, port=redis_server.port)
    lock = (FencedLock if name == "FencedLock" else Lock)(client, KEY, ttl_ms=30_000)

    async def main() -> None:
        started = time.monotonic()
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.1):
                await lock.acquire()
        assert time.monotonic() - started < 0.25, "control returns at the caller's deadline"
        assert not lock.held

    with redis_server.frozen():
        run(main)


@pytest.mark.real_redis
def test_a_redlock_acquire_against_frozen_masters_keeps_its_total_deadline(
    redis_server: RedisServer, redis_masters: list[RedisServer]
) -> None:
    servers = [redis_server, *redis_masters]
    clients = [redis.asyncio.Redis(host=s.host, port=s.port) for s in servers]

    async def main() -> None:
        lock = Redlock(clients, KEY, ttl_ms=30_000, node_timeout_ms=50.0)
        started = time.monotonic()
        assert await lock.acquire(timeout_ms=150) is False
        assert time.monotonic() - started < 0.4, "the deadline, plus one per-node timeout at most"
        with pytest.raises(NoQuorum) as raised:
            async with Redlock(clients, KEY, ttl_ms=30_000, timeout_ms=150):
                pass
        assert isinstance(raised.value.__cause__, redis.exceptions.TimeoutError)
        started = time.monotonic()
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.1):
                await lock.acquire()
        assert time.monotonic() - started < 0.25, "control returns at the caller's deadline"

    with contextlib.ExitStack() as frozen:
        for server in servers:
            frozen.enter_context(server.frozen())
        run(main)


@pytest.mark.real_redis
def test_acquire_timeout_ms_is_total_and_ends_in_false_not_a_raw_timeout(
    redis_server: RedisServer,
) -> None:
    client = redis.asyncio.Redis(host=redis_server.host, port=redis_server.port)

    async def main() -> None:
        lock = Lock(client, KEY, ttl_ms=30_000)
        started = time.monotonic()
        assert await lock.acquire(timeout_ms=100) is False
        assert time.monotonic() - started < 0.3
        assert isinstance(lock.last_error, redis.exceptions.TimeoutError)
        with pytest.raises(NotAcquired) as raised:
            async with Lock(client, KEY, ttl_ms=30_000, timeout_ms=100):
                pass
        assert isinstance(raised.value.__cause__, redis.exceptions.TimeoutError)

    with redis_server.frozen():
        run(main)


def test_ttl_is_keyword_only_and_acquire_does_not_wait_for_ever_by_default(
    backend: Backend,
) -> None:
    client = backend.async_client()
    with pytest.raises(TypeError):
        Lock(client, KEY, 30)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        FencedLock(client, KEY, 30)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        Redlock(backend.async_masters(), KEY, 30)  # type: ignore[call-arg]
    ticks = itertools.count(0.0, 0.5)  # the lock's clock: half a second per reading

    async def main() -> None:
        holder = Lock(client, KEY, ttl_ms=30_000)
        assert await holder.acquire()
        waiter = Lock(client, KEY, ttl_ms=30_000, clock=lambda: next(ticks))
        async with asyncio.timeout(10):  # without a default deadline it would wait here
            assert await waiter.acquire() is False
        assert next(ticks) >= 10.0, "it waited the 10 s default on its clock"
        await holder.release()

    run(main)


# -- N: the asyncio cluster client, MOVED and ASK --------------------------------------------


def _migrate(cluster: Any, key: str) -> tuple[Any, Any, str, str, int]:
    """Start moving ``key``'s slot to another master: (source, target, their ids, slot)."""
    slot = cluster.keyslot(key)
    source_node = cluster.get_node_from_key(key)
    target_node = next(n for n in cluster.get_primaries() if n.name != source_node.name)
    source: Any = redis.Redis(host=source_node.host, port=source_node.port)
    target: Any = redis.Redis(host=target_node.host, port=target_node.port)
    source_id, target_id = (
        source.execute_command("CLUSTER MYID"),
        target.execute_command("CLUSTER MYID"),
    )
    target.execute_command("CLUSTER SETSLOT", slot, "IMPORTING", source_id)
    source.execute_command("CLUSTER SETSLOT", slot, "MIGRATING", target_id)
    return source, target, source_id, target_id, slot


def _assign(cluster: Any, slot: int, node_id: str) -> None:
    for node in cluster.get_primaries():
        admin: Any
        with redis.Redis(host=node.host, port=node.port) as admin:
            empty_slot(admin, slot)
            admin.execute_command("CLUSTER SETSLOT", slot, "NODE", node_id)


@pytest.mark.real_redis
def test_the_async_locks_work_on_an_async_redis_cluster(redis_cluster: ClusterDeployment) -> None:
    node = redis_cluster.nodes[0]

    async def main() -> None:
        rc = redis.asyncio.RedisCluster(host=node.host, port=node.port)
        a = Lock(rc, "lock:aio:cluster", ttl_ms=30_000)
        b = Lock(rc, "lock:aio:cluster", ttl_ms=30_000)
        assert await a.acquire(blocking=False)
        assert not await b.acquire(blocking=False)
        await a.extend()
        assert await a.owned()
        assert await b.locked()
        await a.release()
        assert not await b.locked()
        first = FencedLock(rc, "lock:aio:fenced", ttl_ms=30_000)
        async with first:
            token = first.token
        async with FencedLock(rc, "lock:aio:fenced", ttl_ms=30_000) as second:
            assert second.token == token + 1
        await rc.aclose()

    run(main)


@pytest.mark.real_redis
def test_the_async_cluster_lock_follows_ask_during_a_migration_and_moved_after_it(
    redis_cluster: ClusterDeployment,
) -> None:
    key = "lock:aio:migrating"
    sync: Any = redis_cluster.client()
    node = redis_cluster.nodes[0]
    source, target, source_id, target_id, slot = _migrate(sync, key)
    migrated = False

    async def main() -> None:
        nonlocal migrated
        rc = redis.asyncio.RedisCluster(host=node.host, port=node.port)
        lock = Lock(rc, key, ttl_ms=30_000)
        for _ in range(3):  # the slot is migrating: the source answers ASK
            assert await lock.acquire(timeout_ms=3_000)
            with target.pipeline(transaction=False) as asking:  # read it where it went
                stored = asking.execute_command("ASKING").get(key).execute()[1]
            assert stored == (lock.value or "").encode()
            await lock.release()
        _assign(sync, slot, target_id)  # the move is done: the source answers MOVED
        migrated = True
        assert await lock.acquire(timeout_ms=3_000)
        assert target.get(key) == (lock.value or "").encode()
        await lock.release()
        await rc.aclose()

    try:
        run(main)
    finally:
        if migrated:
            target.execute_command("CLUSTER SETSLOT", slot, "MIGRATING", source_id)
            source.execute_command("CLUSTER SETSLOT", slot, "IMPORTING", target_id)
            _assign(sync, slot, source_id)
        else:
            for admin in (source, target):
                admin.execute_command("CLUSTER SETSLOT", slot, "STABLE")
        sync.close()


async def _handed_over(holder: Lock, waiter: Lock, settle_s: float) -> None:
    """``holder`` (holding) releases while ``waiter`` waits in line: the waiter, woken by the
    release, gets the key, and the releaser cannot take it back first."""
    waiting = asyncio.create_task(waiter.acquire(timeout_ms=5_000))
    await asyncio.sleep(settle_s)  # refused: in line, blocked on its wake-up
    await holder.release()
    released = time.monotonic()
    assert not await holder.acquire(blocking=False), "the releaser took it back"
    assert await asyncio.wait_for(waiting, 5)
    assert time.monotonic() - released < 0.3, "woken by the release, not by its 1 s pause"


@pytest.mark.real_redis
def test_on_an_async_cluster_the_next_grant_goes_to_the_waiting_task(
    redis_cluster: ClusterDeployment,
) -> None:
    node = redis_cluster.nodes[0]

    async def main() -> None:
        rc = redis.asyncio.RedisCluster(host=node.host, port=node.port)
        key = "lock:aio:cluster-line"
        holder = FencedLock(rc, key, ttl_ms=10_000)
        waiter = FencedLock(rc, key, ttl_ms=10_000, retry_delay_ms=(900, 1_000))
        assert await holder.acquire()
        first = holder.token
        await _handed_over(holder, waiter, settle_s=0.2)
        assert waiter.token == first + 1, "the hand-over drew the next token"
        await waiter.release()
        await rc.aclose()

    run(main)


# -- O: the async locks close what they open --------------------------------------------------


@pytest.mark.real_redis
def test_the_async_locks_close_their_connections(
    redis_server: RedisServer, redis_masters: list[RedisServer]
) -> None:
    backend = real_backend(redis_server, redis_masters)
    admins = backend.masters()
    name = "lockguide-aio-close-test"

    def open_here() -> list[int]:
        return [sum(1 for c in a.client_list() if c["name"] == name) for a in admins]

    async def main() -> None:
        async with backend.async_client(client_name=name) as r:
            for cls in (Lock, FencedLock):
                lock = cls(r, KEY, ttl_ms=30_000)
                async with lock:
                    pass
                await lock.aclose()
        masters = backend.async_masters(client_name=name)
        many = Redlock(masters, KEY, ttl_ms=30_000)
        async with many:
            assert open_here() == [1, 1, 1, 1, 1]  # one per master: the lock's own
        await many.aclose()
        for master in masters:
            await master.aclose()
        await asyncio.sleep(0.05)  # the servers see the sockets close
        assert open_here() == [0, 0, 0, 0, 0], "connections left open"

    with warnings.catch_warnings():  # what earlier tests left is not this test's
        warnings.simplefilter("ignore")
        for _ in range(3):
            gc.collect()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run(main)
        gc.collect()
    assert [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)] == []


# -- F: a retryable error reply from one master is a failed vote -----------------------------


@pytest.mark.real_redis
def test_one_master_out_of_memory_is_a_failed_vote_not_an_error(
    redis_server: RedisServer, redis_masters: list[RedisServer]
) -> None:
    backend = real_backend(redis_server, redis_masters)
    servers = backend.masters(3)
    servers[2].config_set("maxmemory", "1")  # every write there answers OOM

    async def main() -> None:
        lock = Redlock(backend.async_masters(3), KEY, ttl_ms=30_000, node_timeout_ms=100.0)
        assert await lock.acquire(blocking=False)
        attempt = lock.last_attempt
        assert attempt is not None
        assert attempt.failed == 1
        assert "OutOfMemory" in " ".join(attempt.causes) or "OOM" in " ".join(attempt.causes)
        await lock.release()
        await lock.aclose()

    try:
        run(main)
    finally:
        servers[2].config_set("maxmemory", "0")


# -- the watchdog renews a Redlock too --------------------------------------------------------


def test_the_watchdog_renews_a_redlock_past_its_ttl(backend: Backend) -> None:
    servers = backend.masters()

    async def main() -> None:
        lock = Redlock(
            backend.async_masters(), KEY, ttl_ms=1_000, node_timeout_ms=250.0, max_extensions=100
        )
        async with Watchdog(lock, every_ms=150) as dog:
            await asyncio.sleep(2.2)  # two TTLs of work and more
            dog.check()
            assert sum(1 for s in servers if s.get(KEY) == (lock.value or "").encode()) == 5
        assert dog.renewals >= 5
        assert sum(1 for s in servers if s.exists(KEY)) == 0
        await lock.aclose()

    run(main)


# -- one set of defaults: the asyncio classes take the synchronous ones' arguments --------------


@pytest.mark.parametrize(
    ("sync", "aio"),
    [
        (lockguide.Lock, Lock),
        (lockguide.FencedLock, FencedLock),
        (lockguide.Redlock, Redlock),
        (lockguide.Watchdog, Watchdog),
        (lockguide.FencedStore, FencedStore),
    ],
    ids=lambda c: c.__name__,
)
def test_each_asyncio_class_takes_the_same_arguments_and_defaults(sync: type, aio: type) -> None:
    """The same names, kinds, defaults and ``**options`` declaration (``owner``'s default aside)."""

    def arguments(cls: type) -> dict[str, tuple[Any, Any, Any]]:
        params = inspect.signature(cls).parameters.values()
        return {  # and which options ``**options`` takes: the one declaration of them
            p.name: (p.kind, p.default, p.annotation if p.kind is p.VAR_KEYWORD else None)
            for p in params
            if p.name != "owner"
        }

    assert arguments(aio) == arguments(sync)
    if "owner" in inspect.signature(sync).parameters:
        assert inspect.signature(aio).parameters["owner"].default == "task"


@pytest.mark.parametrize(
    ("options", "defaults"),
    [(core.LockOptions, core.LOCK_DEFAULTS), (RedlockOptions, REDLOCK_DEFAULTS)],
    ids=["Lock", "Redlock"],
)
def test_every_declared_option_has_its_one_default(options: type, defaults: dict[str, Any]) -> None:
    assert set(options.__optional_keys__) == set(defaults)  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "cls", [lockguide.Lock, lockguide.FencedLock, lockguide.Redlock, Lock, FencedLock, Redlock]
)
def test_an_option_no_lock_has_is_refused_by_name_before_anything_is_sent(cls: type) -> None:
    """``**options`` takes any name at run time: a misspelt one must not pass in silence."""
    flavour: Any = redis.asyncio if cls.__module__ == "lockguide.aio" else redis
    clients = [flavour.Redis(port=port) for port in (1, 2, 3)]  # nothing listens: nothing sent
    target = clients if "Redlock" in cls.__name__ else clients[0]
    with pytest.raises(BadArgumentType, match="no option 'timeout' \\(did you mean 'timeout_ms'"):
        cls(target, "lock:k", ttl_ms=1_000, timeout=5)


# -- many waiters: the next grant goes to the waiting task, woken by the release ------------------


def test_the_next_grant_goes_to_the_waiting_task_not_back_to_the_releaser(
    backend: Backend,
) -> None:
    async def main() -> None:
        client = backend.async_client()
        holder = Lock(client, KEY, ttl_ms=10_000)
        waiter = Lock(client, KEY, ttl_ms=10_000, retry_delay_ms=(900, 1_000), owner="process")
        assert await holder.acquire()
        await _handed_over(holder, waiter, settle_s=0.1)
        owner = await Lock(client, KEY, ttl_ms=1_000).holder()
        assert owner is not None
        assert owner.value == waiter.value
        caller = asyncio.current_task()  # who called acquire() (the wrapping task is not it)
        assert caller is not None
        assert owner.name.endswith(":" + caller.get_name())
        await waiter.release()
        await client.aclose()

    run(main)
