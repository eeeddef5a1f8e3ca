"""Behaviour of Redlock over five masters, on five fakeredis servers and on five
real redis-server processes (``backend.masters()``: ports 6379-6383 under the harness).

What Redlock shares with Lock is tested for both in tests/core/test_lock.py (the
``contender`` fixture): blocking acquire, its timeout and the random retry pauses,
the NotOwned and AlreadyAcquired checks, and ``with`` releasing on exit and on error."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
import redis.asyncio

from lockguide import (
    BadArgument,
    BadArgumentType,
    ExtensionLimitReached,
    LockLost,
    MajorityLost,
    NoQuorum,
    Redlock,
    ttl_for_validity,
    validity_ms,
)
from lockguide.redlock import Attempt
from tests.support import Backend, record_requests

KEY = "lock:test"
OTHER = "someone else's value"


def redlock(*args: Any, **kwargs: Any) -> Redlock:
    """A Redlock with 100 ms per master instead of the 50 ms default.

    These tests are about behaviour, not timing (tests/core/test_faults.py covers
    that): a loaded test machine that leaves a healthy server unscheduled for
    50 ms must not turn it into a missing vote.
    """
    kwargs.setdefault("node_timeout_ms", 100.0)
    return Redlock(*args, **kwargs)


def test_the_default_node_timeout_is_in_the_range_the_redis_docs_suggest() -> None:
    from lockguide.redlock import DEFAULT_NODE_TIMEOUT_MS

    assert 5 <= DEFAULT_NODE_TIMEOUT_MS <= 50  # for a 10 s lock


@pytest.fixture
def masters(backend: Backend) -> Iterator[list[redis.Redis]]:
    clients = backend.masters()
    yield clients
    for client in clients:
        client.close()


def values(masters: list[redis.Redis]) -> list[Any]:
    return [m.get(KEY) for m in masters]


def hold_elsewhere(masters: list[redis.Redis], *indexes: int) -> None:
    """Another owner already holds the key on these masters."""
    for i in indexes:
        masters[i].set(KEY, OTHER, px=30_000)


class SteppedClock:
    """A monotonic clock that moves only when told to, so elapsed times are exact."""

    def __init__(self) -> None:
        self.now = time.monotonic()

    def __call__(self) -> float:
        return self.now

    def advance_ms(self, ms: float) -> None:
        self.now += ms / 1000.0


@pytest.fixture
def clock() -> SteppedClock:
    """Pass it as ``clock=``: the lock then measures every duration on it."""
    return SteppedClock()


class SlowReplies:
    """While ``ms`` is set, the replies of one request to every master take ``ms`` in all,
    on the stepped clock (each master's reply advances it by its share)."""

    def __init__(self) -> None:
        self.ms = 0.0


@pytest.fixture
def slow(
    masters: list[redis.Redis], clock: SteppedClock, monkeypatch: pytest.MonkeyPatch
) -> SlowReplies:
    """Give the masters' clients a connection class of the test's own, before any lock."""
    control = SlowReplies()
    for master in masters:
        base: type[Any] = master.connection_pool.connection_class

        class Slow(base):  # type: ignore[misc]
            def read_response(self, *args: Any, **kwargs: Any) -> Any:
                reply = super().read_response(*args, **kwargs)
                clock.advance_ms(control.ms / len(masters))
                return reply

        monkeypatch.setattr(master.connection_pool, "connection_class", Slow)
    return control


# -- acquiring ----------------------------------------------------------------------


def test_acquire_sets_one_fresh_value_with_the_ttl_on_every_master(
    masters: list[redis.Redis],
) -> None:
    lock = redlock(masters, KEY, ttl_ms=10_000)
    assert lock.acquire(blocking=False)
    assert lock.value is not None
    assert len(lock.value.split(" ")[0]) == 40  # 20 random bytes; then who holds it
    assert values(masters) == [lock.value.encode()] * 5
    assert all(0 < m.pttl(KEY) <= 10_000 for m in masters)
    attempt = lock.last_attempt
    assert attempt is not None
    assert (attempt.granted, attempt.refused, attempt.failed) == (5, 0, 0)
    lock.release()
    assert lock.acquire(blocking=False)
    assert values(masters) == [lock.value.encode()] * 5, "each acquisition gets a new value"


def test_a_second_client_is_refused_and_leaves_nothing_behind(
    masters: list[redis.Redis],
) -> None:
    first = redlock(masters, KEY, ttl_ms=10_000)
    second = redlock(masters, KEY, ttl_ms=10_000)
    assert first.acquire(blocking=False)
    assert not second.acquire(blocking=False)
    assert not second.held
    assert second.last_attempt is not None
    assert second.last_attempt.refused == 5
    assert values(masters) == [(first.value or "").encode()] * 5


def test_a_bare_majority_is_enough(masters: list[redis.Redis]) -> None:
    hold_elsewhere(masters, 3, 4)
    lock = redlock(masters, KEY, ttl_ms=10_000)
    assert lock.acquire(blocking=False)
    mine = (lock.value or "").encode()
    assert values(masters) == [mine, mine, mine, OTHER.encode(), OTHER.encode()]
    assert lock.last_attempt is not None
    assert (lock.last_attempt.granted, lock.last_attempt.refused) == (3, 2)


def test_without_a_majority_the_granted_masters_are_released_at_once(
    masters: list[redis.Redis],
) -> None:
    hold_elsewhere(masters, 0, 1, 2)
    lock = redlock(masters, KEY, ttl_ms=10_000)
    assert not lock.acquire(blocking=False)
    assert lock.last_attempt is not None
    assert (lock.last_attempt.granted, lock.last_attempt.refused) == (2, 3)
    # Not left to expire: the two masters that said yes are free again right away.
    assert values(masters) == [OTHER.encode()] * 3 + [None, None]


def test_a_master_whose_reply_was_lost_is_released_too(
    masters: list[redis.Redis], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Master 4 stores the key, but its answer never reaches the client.
    record_requests(monkeypatch, masters[4:], lose="SET")
    hold_elsewhere(masters, 0, 1, 2)
    lock = redlock(masters, KEY, ttl_ms=30_000)
    assert not lock.acquire(blocking=False)
    assert lock.last_attempt is not None
    assert (lock.last_attempt.granted, lock.last_attempt.failed) == (1, 1)
    assert masters[4].get(KEY) is None, "the release must go to masters that did not say yes"


def test_a_majority_that_came_too_late_does_not_count(
    masters: list[redis.Redis], slow: SlowReplies, clock: SteppedClock
) -> None:
    lock = redlock(masters, KEY, ttl_ms=1_000, clock=clock)
    lock.locked()  # connect first: the handshakes are not part of the try
    slow.ms = 1_000
    assert not lock.acquire(blocking=False)
    attempt = lock.last_attempt
    assert attempt is not None
    assert attempt.granted == 5
    assert attempt.verdict.validity_ms == pytest.approx(1_000 - 1_000 - 12)
    assert not lock.held
    assert values(masters) == [None] * 5


def test_validity_is_the_ttl_minus_elapsed_minus_drift(
    masters: list[redis.Redis], slow: SlowReplies, clock: SteppedClock
) -> None:
    lock = redlock(masters, KEY, ttl_ms=10_000, clock=clock)
    lock.locked()
    slow.ms = 40
    assert lock.validity_remaining_ms() == 0.0
    assert lock.acquire(blocking=False)
    # 10 000 - 40 elapsed - (1 % of 10 000 + 2) drift: the worked example of the guide.
    assert lock.validity_remaining_ms() == pytest.approx(9_858)
    assert lock.validity_remaining_ms() == pytest.approx(validity_ms(10_000, 40))
    clock.advance_ms(9_000)
    assert lock.validity_remaining_ms() == pytest.approx(858)
    clock.advance_ms(1_000)
    assert lock.held
    assert lock.validity_remaining_ms() == 0.0


# -- retrying -------------------------------------------------------------------------


def test_a_failed_attempt_waits_only_after_releasing(
    masters: list[redis.Redis], monkeypatch: pytest.MonkeyPatch
) -> None:
    hold_elsewhere(masters, 0, 1, 2)
    seen_while_sleeping: list[list[Any]] = []

    def look_then_stop(seconds: float) -> None:
        seen_while_sleeping.append(values(masters))
        raise KeyboardInterrupt  # one pause is enough to look at

    monkeypatch.setattr(time, "sleep", look_then_stop)
    with pytest.raises(KeyboardInterrupt):
        redlock(masters, KEY, ttl_ms=10_000).acquire(timeout_ms=1_000)
    assert seen_while_sleeping == [[OTHER.encode()] * 3 + [None, None]]


# -- releasing ------------------------------------------------------------------------


def test_release_deletes_on_every_master_and_says_how_many(
    masters: list[redis.Redis],
) -> None:
    lock = redlock(masters, KEY, ttl_ms=10_000)
    lock.acquire()
    assert lock.release() == 5
    assert values(masters) == [None] * 5
    assert not lock.held
    assert lock.validity_remaining_ms() == 0.0


def test_release_counts_only_masters_that_still_hold_our_value(
    masters: list[redis.Redis],
) -> None:
    lock = redlock(masters, KEY, ttl_ms=10_000)
    lock.acquire()
    masters[0].delete(KEY)  # expired there
    masters[1].set(KEY, OTHER)  # and someone else got that one
    assert lock.release() == 3
    assert values(masters) == [None, OTHER.encode(), None, None, None]


def test_release_with_less_than_a_majority_left_is_majority_lost(
    masters: list[redis.Redis],
) -> None:
    lock = redlock(masters, KEY, ttl_ms=10_000)
    lock.acquire()
    for i in (0, 1, 2):
        masters[i].set(KEY, OTHER)  # a second holder won a majority meanwhile
    with pytest.raises(MajorityLost) as lost:
        lock.release()
    assert (lost.value.confirmed, lost.value.needed, lost.value.masters) == (2, 3, 5)
    assert isinstance(lost.value, LockLost)
    assert values(masters) == [OTHER.encode()] * 3 + [None, None], "others' keys untouched"
    assert not lock.held


def test_release_survives_a_script_flush_on_every_master(masters: list[redis.Redis]) -> None:
    lock = redlock(masters, KEY, ttl_ms=10_000)
    for _ in range(2):
        for m in masters:
            m.script_flush()
        lock.acquire()
        assert lock.release() == 5  # NOSCRIPT is answered by loading the script again
    assert values(masters) == [None] * 5


# -- extending ------------------------------------------------------------------------


def test_extend_renews_the_ttl_on_every_master_and_the_validity(
    masters: list[redis.Redis],
) -> None:
    lock = redlock(masters, KEY, ttl_ms=2_000, max_extensions=3)
    lock.acquire()
    assert lock.extend(5_000) == 5
    assert all(m.pttl(KEY) > 4_000 for m in masters)
    assert lock.validity_remaining_ms() > 4_000
    assert lock.extensions_left == 2


def test_extensions_are_bounded_and_the_refusal_sends_nothing(
    masters: list[redis.Redis], monkeypatch: pytest.MonkeyPatch
) -> None:
    sent = record_requests(monkeypatch, masters)
    lock = redlock(masters, KEY, ttl_ms=10_000, max_extensions=2)
    lock.acquire()
    lock.extend()
    lock.extend()
    del sent[:]
    with pytest.raises(ExtensionLimitReached, match="2 times"):
        lock.extend()
    assert sent == []
    assert lock.held, "the lock stays held until its validity runs out"
    lock.release()
    lock.acquire()
    assert lock.extensions_left == 2, "a new acquisition gets a new allowance"


def test_extend_without_a_majority_releases_everywhere_and_raises(
    masters: list[redis.Redis],
) -> None:
    lock = redlock(masters, KEY, ttl_ms=10_000)
    lock.acquire()
    for i in (0, 1, 2):
        masters[i].delete(KEY)  # expired early, or restarted empty
    with pytest.raises(MajorityLost) as lost:
        lock.extend()
    assert lost.value.confirmed == 2
    assert not lock.held
    assert values(masters) == [None] * 5, "the two extended keys are released, not left"


def test_extend_after_the_validity_ran_out_is_lock_lost(
    masters: list[redis.Redis], clock: SteppedClock
) -> None:
    lock = redlock(masters, KEY, ttl_ms=10_000, clock=clock)
    lock.acquire()
    clock.advance_ms(9_900)  # past ttl - drift, though the keys may still exist
    with pytest.raises(LockLost):
        lock.extend()
    assert not lock.held
    assert values(masters) == [None] * 5


def test_an_extension_that_finishes_after_the_validity_does_not_count(
    masters: list[redis.Redis], slow: SlowReplies, clock: SteppedClock
) -> None:
    lock = redlock(masters, KEY, ttl_ms=10_000, clock=clock)
    lock.acquire()
    clock.advance_ms(9_800)  # 98 ms of validity left ...
    slow.ms = 150  # ... and the extension takes 150 ms
    with pytest.raises(LockLost):
        lock.extend()
    assert not lock.held
    assert values(masters) == [None] * 5


# -- the context manager ----------------------------------------------------------------


def test_context_manager_raises_no_quorum_with_the_counts(
    masters: list[redis.Redis], clock: SteppedClock
) -> None:
    """The counts are the last try's. The wait is over after the third try, on a clock that
    moves only then: on the real clock the last try has only the few ms left before the
    deadline, and a busy machine's late reply in them counted as a failed master."""
    hold_elsewhere(masters, 0, 1, 2)
    tries: list[Attempt] = []

    def on_attempt(attempt: Attempt) -> None:
        tries.append(attempt)
        if len(tries) == 3:
            clock.advance_ms(1_000)

    with (
        pytest.raises(NoQuorum, match="did not run") as refused,
        redlock(
            masters,
            KEY,
            ttl_ms=1_000,
            timeout_ms=1_000,
            retry_delay_ms=(5.0, 10.0),
            clock=clock,
            on_attempt=on_attempt,
        ),
    ):
        pytest.fail("the body must not run without the lock")
    assert len(tries) == 3
    assert (refused.value.granted, refused.value.refused, refused.value.failed) == (2, 3, 0)
    assert refused.value.needed == 3


# -- the failure modes the guide shows ------------------------------------------------


def test_a_forward_clock_jump_on_one_master_lets_a_second_majority_form(
    masters: list[redis.Redis],
) -> None:
    hold_elsewhere(masters, 3, 4)  # busy when A acquires: A wins with 0, 1, 2
    a = redlock(masters, KEY, ttl_ms=10_000)
    assert a.acquire(blocking=False)
    for i in (3, 4):
        masters[i].delete(KEY)  # the earlier owner releases those two
    masters[2].pexpire(KEY, 1)  # master 2's clock jumps ahead: A's key expires there now
    time.sleep(0.01)
    b = redlock(masters, KEY, ttl_ms=10_000)
    assert b.acquire(blocking=False), "B wins masters 2, 3, 4"
    assert a.validity_remaining_ms() > 9_000, "while A's own clock says it holds the lock"


def test_a_master_restarted_empty_lets_a_second_majority_form(
    masters: list[redis.Redis],
) -> None:
    hold_elsewhere(masters, 3, 4)
    a = redlock(masters, KEY, ttl_ms=10_000)
    assert a.acquire(blocking=False)
    for i in (3, 4):
        masters[i].delete(KEY)
    masters[2].flushall()  # master 2 crashed and came back without its data
    b = redlock(masters, KEY, ttl_ms=10_000)
    assert b.acquire(blocking=False)
    assert a.held
    assert a.validity_remaining_ms() > 9_000


# -- clients and connections -----------------------------------------------------------


def test_connections_are_reused_across_acquisitions(
    masters: list[redis.Redis], monkeypatch: pytest.MonkeyPatch
) -> None:
    seen = record_requests(monkeypatch, masters)
    entered = 0
    for _ in range(20):
        with redlock(masters, KEY, ttl_ms=10_000):
            entered += 1
    assert entered == 20
    handshakes = [c for c in seen if c[:3] == ("CLIENT", "SETINFO", "LIB-NAME")]
    assert len(handshakes) == 5, "one connection per master, made once"


def test_clients_that_decode_responses_work(backend: Backend) -> None:
    masters = backend.masters(decode_responses=True)
    lock = redlock(masters, KEY, ttl_ms=10_000)
    assert lock.acquire(blocking=False)
    assert [m.get(KEY) for m in masters] == [lock.value] * 5
    assert lock.extend() == 5
    assert lock.release() == 5


def test_a_single_master_works_as_a_majority_of_one(masters: list[redis.Redis]) -> None:
    lock = redlock(masters[:1], KEY, ttl_ms=10_000)
    assert lock.quorum == 1
    assert lock.acquire(blocking=False)
    assert lock.release() == 1


# -- bad input ------------------------------------------------------------------------

BadCall = Callable[[list[redis.Redis]], object]


@pytest.mark.parametrize(
    ("make", "error", "match"),
    [
        (lambda m: redlock([], KEY, ttl_ms=1_000), BadArgument, "must not be empty"),
        (lambda m: redlock(m[0], KEY, ttl_ms=1_000), BadArgumentType, "list of redis.Redis"),
        (lambda m: redlock([*m, m[0]], KEY, ttl_ms=1_000), BadArgument, "same Redis server"),
        (lambda m: redlock([*m[:4], 1], KEY, ttl_ms=1_000), BadArgumentType, r"masters\[4\]"),
        (lambda m: redlock(m, KEY, ttl_ms=0), BadArgument, "ttl_ms"),
        (lambda m: redlock(m, KEY, ttl_ms=-1), BadArgument, "ttl_ms"),
        (lambda m: redlock(m, KEY, ttl_ms=1.5), BadArgumentType, "ttl_ms"),
        (lambda m: redlock(m, "", ttl_ms=1_000), BadArgument, "key"),
        (
            lambda m: redlock(m, KEY, ttl_ms=1_000, node_timeout_ms=1_000),
            BadArgument,
            "node_timeout",
        ),
        (lambda m: redlock(m, KEY, ttl_ms=1_000, node_timeout_ms=990), BadArgument, "node_timeout"),
        (lambda m: redlock(m, KEY, ttl_ms=1_000, node_timeout_ms=0), BadArgument, "node_timeout"),
        (lambda m: redlock(m, KEY, ttl_ms=1_000, node_timeout_ms=-5), BadArgument, "node_timeout"),
        (
            lambda m: redlock(m, KEY, ttl_ms=1_000, retry_delay_ms=(80, 80)),
            BadArgument,
            "fixed delay",
        ),
        (
            lambda m: redlock(m, KEY, ttl_ms=1_000, retry_delay_ms=(90, 10)),
            BadArgument,
            "retry_delay",
        ),
        (
            lambda m: redlock(m, KEY, ttl_ms=1_000, retry_delay_ms=(0, 0)),
            BadArgument,
            "retry_delay",
        ),
        (lambda m: redlock(m, KEY, ttl_ms=1_000, timeout_ms=-1), BadArgument, "timeout_ms"),
        (lambda m: redlock(m, KEY, ttl_ms=1_000, max_extensions=-1), BadArgument, "max_extensions"),
        (lambda m: redlock(m, KEY, ttl_ms=1_000, max_extensions=True), BadArgumentType, "max_ext"),
        (lambda m: redlock(m, KEY, ttl_ms=1_000, rng=42), BadArgumentType, "rng"),
    ],
)
def test_bad_input_is_refused_before_any_request(
    masters: list[redis.Redis],
    monkeypatch: pytest.MonkeyPatch,
    make: BadCall,
    error: type[Exception],
    match: str,
) -> None:
    sent = record_requests(monkeypatch, masters)
    with pytest.raises(error, match=match):
        make(masters)
    assert sent == []


def test_an_asyncio_redis_cluster_given_as_the_masters_is_refused_by_name() -> None:
    """What the synchronous Redlock says of a RedisCluster (tests/core/test_deployments.py)."""
    from lockguide import aio

    cluster = redis.asyncio.RedisCluster(host="127.0.0.1", port=1)  # connects on first use
    with pytest.raises(BadArgument, match="is a Redis Cluster, and its masters are not indep"):
        aio.Redlock(cluster, KEY, ttl_ms=1_000)  # type: ignore[arg-type]


def test_two_clients_for_one_server_are_the_same_master(backend: Backend) -> None:
    twice = [*backend.masters(4), backend.client(port=6379, db=3)]
    with pytest.raises(BadArgument, match=r"masters\[0\] and masters\[4\]"):
        redlock(twice, KEY, ttl_ms=1_000)


def test_bad_arguments_to_acquire_and_extend_are_refused_before_any_request(
    masters: list[redis.Redis], monkeypatch: pytest.MonkeyPatch
) -> None:
    sent = record_requests(monkeypatch, masters)
    lock = redlock(masters, KEY, ttl_ms=1_000)
    with pytest.raises(BadArgument, match="timeout_ms"):
        lock.acquire(timeout_ms=-10)
    with pytest.raises(BadArgument, match="ttl_ms"):
        lock.extend(0)
    assert sent == []


def test_errors_are_one_hierarchy() -> None:
    from lockguide import LockError, NotAcquired

    assert issubclass(NoQuorum, NotAcquired)
    assert issubclass(MajorityLost, LockLost)
    for error in (NoQuorum, MajorityLost, ExtensionLimitReached):
        assert issubclass(error, LockError)


# -- the arithmetic added for Redlock --------------------------------------------------


@pytest.mark.parametrize(("validity", "elapsed"), [(5_000, 50), (9_858, 40), (1, 0), (0, 8)])
def test_ttl_for_validity_runs_the_validity_formula_backwards(
    validity: float, elapsed: float
) -> None:
    ttl = ttl_for_validity(validity, elapsed)
    assert validity_ms(ttl, elapsed) == pytest.approx(validity)


def test_five_seconds_of_work_after_a_50_ms_attempt_needs_a_5104_ms_ttl() -> None:
    assert ttl_for_validity(5_000, 50) == pytest.approx(5_103.03, abs=0.01)


def test_ttl_for_validity_refuses_a_drift_factor_that_eats_the_whole_ttl() -> None:
    with pytest.raises(ValueError, match="drift_factor"):
        ttl_for_validity(1_000, 10, drift_factor=1.0)


class _Enough(Exception):
    pass


def _pauses_in_a_forked_child(lock: Redlock, monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """Fork; in the child, acquire (every master held elsewhere) and send back the first
    four pauses it chose between tries (``time.sleep`` records them instead of sleeping)."""
    import json
    import os

    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never return into pytest
        chosen: list[float] = []

        def record(seconds: float) -> None:
            chosen.append(seconds)
            if len(chosen) == 4:
                raise _Enough

        try:
            monkeypatch.setattr(time, "sleep", record)
            lock.acquire(timeout_ms=60_000)
        except _Enough:
            os.write(write_end, json.dumps(chosen).encode())
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        said = pipe.read()
    os.waitpid(pid, 0)
    assert said, "the child made no four pauses"
    return list(json.loads(said))


def test_forked_workers_draw_their_own_retry_pauses(
    masters: list[redis.Redis], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A lock made before a fork (a module-level lock in a pre-fork server): if every child
    # drew the same pauses, contenders would retry in step and split the vote again.
    hold_elsewhere(masters, *range(len(masters)))
    lock = redlock(masters, KEY, ttl_ms=1_000)
    first = _pauses_in_a_forked_child(lock, monkeypatch)
    second = _pauses_in_a_forked_child(lock, monkeypatch)
    assert first != second, first
