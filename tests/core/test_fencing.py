"""FencedLock and the Redis fenced store, on fakeredis and on a real redis-server."""

from __future__ import annotations

import random
import threading
import time
from typing import Any

import pytest
import redis
from redis.exceptions import TimeoutError as RedisTimeoutError

from lockguide import (
    BadArgument,
    BadArgumentType,
    FencedLock,
    FencedStore,
    LockLost,
    NotAcquired,
    NotOwned,
    StaleToken,
    Stored,
    WriteResult,
)
from lockguide.fencing import FENCED_ACQUIRE, MAX_TOKEN
from tests.support import Backend, record_requests

KEY = "lock:ledger"
DATA = "ledger:balance"


def refuse_all_commands(monkeypatch: pytest.MonkeyPatch, client: redis.Redis) -> list[Any]:
    sent: list[Any] = []
    monkeypatch.setattr(client, "execute_command", lambda *a, **k: sent.append(a))
    return sent


# -- the lock side -------------------------------------------------------------------


def test_tokens_start_at_one_and_increase_with_every_acquisition(r: redis.Redis) -> None:
    lock = FencedLock(r, KEY, ttl_ms=5_000)
    tokens = []
    for _ in range(5):
        assert lock.acquire(blocking=False)
        tokens.append(lock.token)
        lock.release()
    assert tokens == [1, 2, 3, 4, 5]
    assert int(r.get(lock.counter_key) or 0) == 5


def test_tokens_keep_increasing_across_holders_and_expiry(r: redis.Redis) -> None:
    a = FencedLock(r, KEY, ttl_ms=50)
    assert a.acquire(blocking=False)
    time.sleep(0.08)  # A's lease runs out
    b = FencedLock(r, KEY, ttl_ms=5_000)
    assert b.acquire(blocking=False)
    assert b.token > a.token


def test_acquire_and_token_are_one_round_trip(
    r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    sent = record_requests(monkeypatch, [r])
    warm = FencedLock(r, KEY, ttl_ms=5_000)
    warm.acquire(blocking=False)
    warm.release()  # the script is loaded now
    del sent[:]
    lock = FencedLock(r, KEY, ttl_ms=5_000)
    assert lock.acquire(blocking=False)
    assert len(sent) == 1, "lock and token come from one request"
    assert sent[0][:2] == ("EVALSHA", FENCED_ACQUIRE.sha)
    assert sent[0][3:5] == (KEY, lock.counter_key)
    assert lock.token == 2


def test_a_refused_acquire_draws_no_token(r: redis.Redis) -> None:
    holder = FencedLock(r, KEY, ttl_ms=5_000)
    assert holder.acquire(blocking=False)
    other = FencedLock(r, KEY, ttl_ms=5_000)
    for _ in range(3):
        assert not other.acquire(blocking=False)
    assert int(r.get(holder.counter_key) or 0) == 1
    with pytest.raises(NotOwned):
        _ = other.token


def test_the_token_exists_only_while_the_lock_is_held(r: redis.Redis) -> None:
    lock = FencedLock(r, KEY, ttl_ms=5_000)
    with pytest.raises(NotOwned, match="fencing token"):
        _ = lock.token
    with lock:
        assert lock.token == 1
    with pytest.raises(NotOwned):
        _ = lock.token


def test_extend_keeps_the_token_and_a_lost_extend_forgets_it(r: redis.Redis) -> None:
    lock = FencedLock(r, KEY, ttl_ms=200)
    lock.acquire()
    token = lock.token
    lock.extend(5_000)
    assert lock.token == token
    assert r.pttl(KEY) > 4_000
    r.delete(KEY)  # the key is lost (failover, an operator, an expiry)
    with pytest.raises(LockLost):
        lock.extend()
    with pytest.raises(NotOwned):
        _ = lock.token


def test_release_after_expiry_leaves_the_next_holder_alone(r: redis.Redis) -> None:
    a = FencedLock(r, KEY, ttl_ms=50)
    a.acquire()
    time.sleep(0.08)
    b = FencedLock(r, KEY, ttl_ms=5_000)
    assert b.acquire(blocking=False)
    with pytest.raises(LockLost):
        a.release()
    assert r.get(KEY) == (b.value or "").encode()


def test_context_manager_raises_not_acquired_when_busy(r: redis.Redis) -> None:
    FencedLock(r, KEY, ttl_ms=5_000).acquire()
    with pytest.raises(NotAcquired), FencedLock(r, KEY, ttl_ms=1_000, timeout_ms=30):
        pytest.fail("the body must not run without the lock")


def test_fenced_acquire_survives_a_script_flush(r: redis.Redis) -> None:
    lock = FencedLock(r, KEY, ttl_ms=5_000)
    lock.acquire()
    lock.release()
    r.script_flush()
    assert lock.acquire(blocking=False)
    assert lock.token == 2


def test_a_lost_reply_does_not_leave_the_lock_behind(
    r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    record_requests(monkeypatch, [r], lose=FENCED_ACQUIRE.sha)
    lock = FencedLock(r, KEY, ttl_ms=30_000)
    # One try, with its whole request timeout: a try cut short by the deadline on a slow
    # machine skips its clean-up to keep the deadline (see the reference's _core).
    assert not lock.acquire(blocking=False), "a lost reply is a failed try, not an error"
    assert isinstance(lock.last_error, RedisTimeoutError)
    assert r.exists(KEY) == 0


# -- the resource side ---------------------------------------------------------------


def test_the_paused_holder_is_refused_after_the_next_holder_wrote(r: redis.Redis) -> None:
    a = FencedLock(r, KEY, ttl_ms=50)
    assert a.acquire(blocking=False)
    time.sleep(0.08)  # A pauses past its lease
    b = FencedLock(r, KEY, ttl_ms=5_000)
    assert b.acquire(blocking=False)
    store = FencedStore(r, DATA, lock=b)
    assert store.try_write(b.token, "B's balance") == WriteResult(True, b.token, b.token)
    late = store.try_write(a.token, "A's balance")  # A wakes up, still believing it holds
    assert late == WriteResult(accepted=False, token=a.token, highest=b.token)
    assert store.read().value == "B's balance"
    assert store.read().token == b.token


def test_an_equal_token_is_refused(r: redis.Redis) -> None:
    store = FencedStore(r, DATA)
    assert store.try_write(7, "first").accepted
    assert not store.try_write(7, "second with the same token").accepted
    assert store.read().value == "first"


def test_write_raises_stale_token_and_writes_nothing(r: redis.Redis) -> None:
    store = FencedStore(r, DATA)
    store.write(34, "from 34")
    with pytest.raises(StaleToken) as refused:
        store.write(33, "from 33")
    assert (refused.value.token, refused.value.highest) == (33, 34)
    assert "33" in str(refused.value)
    assert "34" in str(refused.value)
    assert store.read().value == "from 34"


def test_value_and_highest_token_are_stored_together(r: redis.Redis) -> None:
    store = FencedStore(r, DATA)
    store.write(3, "three")
    assert r.hgetall(DATA) == {b"value": b"three", b"token": b"3"}
    assert store.read().token == 3


def test_an_empty_store_reads_as_nothing_with_token_zero(r: redis.Redis) -> None:
    stored = FencedStore(r, DATA).read()
    assert (stored.value, stored.token) == (None, 0)


def test_the_check_and_the_write_are_one_step_under_concurrency(backend: Backend) -> None:
    """Eight threads write shuffled tokens at once. Whatever the interleaving, each
    thread's own accepted tokens must rise (each acceptance beat everything before
    it, including that thread's earlier ones), and the store ends on the largest."""
    tokens = list(range(1, 201))
    random.shuffle(tokens)
    accepted_by_thread: list[list[int]] = [[] for _ in range(8)]

    def writer(index: int) -> None:
        client = backend.client()
        store = FencedStore(client, DATA)
        for token in tokens[index::8]:
            if store.try_write(token, f"v{token}").accepted:
                accepted_by_thread[index].append(token)
        client.close()

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for accepted in accepted_by_thread:
        assert accepted == sorted(set(accepted))
    final = FencedStore(backend.client(), DATA).read()
    assert (final.value, final.token) == ("v200", 200)


def test_fenced_write_survives_a_script_flush(r: redis.Redis) -> None:
    store = FencedStore(r, DATA)
    store.write(1, "a")
    r.script_flush()
    store.write(2, "b")
    assert store.read() == Stored("b", 2)


# -- bad input, refused before any request --------------------------------------------


@pytest.mark.parametrize(
    ("token", "error", "match"),
    [
        ("1", BadArgumentType, "token must be an int"),
        (1.0, BadArgumentType, "token must be an int"),
        (True, BadArgumentType, "token must be an int"),
        (None, BadArgumentType, "token must be an int"),
        (0, BadArgument, "token must be >= 1"),
        (-1, BadArgument, "token must be >= 1"),
        (MAX_TOKEN + 1, BadArgument, "2\\*\\*53"),
    ],
)
def test_a_bad_token_is_refused_before_any_request(
    r: redis.Redis,
    monkeypatch: pytest.MonkeyPatch,
    token: object,
    error: type[Exception],
    match: str,
) -> None:
    store = FencedStore(r, DATA)
    sent = refuse_all_commands(monkeypatch, r)
    with pytest.raises(error, match=match):
        store.try_write(token, "x")  # type: ignore[arg-type]
    with pytest.raises(error, match=match):
        store.write(token, "x")  # type: ignore[arg-type]
    assert sent == []


def test_a_non_string_value_is_refused_before_any_request(
    r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = FencedStore(r, DATA)
    sent = refuse_all_commands(monkeypatch, r)
    with pytest.raises(BadArgumentType, match="value must be a str"):
        store.write(1, b"bytes")  # type: ignore[arg-type]
    assert sent == []


@pytest.mark.parametrize("data_key", [KEY, "{" + KEY + "}:fence"])
def test_a_store_key_colliding_with_the_lock_is_refused(
    r: redis.Redis, monkeypatch: pytest.MonkeyPatch, data_key: str
) -> None:
    lock = FencedLock(r, KEY, ttl_ms=1_000)
    sent = refuse_all_commands(monkeypatch, r)
    with pytest.raises(BadArgument, match="collides with the lock"):
        FencedStore(r, data_key, lock=lock)
    assert sent == []


def test_a_counter_key_equal_to_the_lock_key_is_refused(r: redis.Redis) -> None:
    with pytest.raises(BadArgument, match="counter_key must differ"):
        FencedLock(r, KEY, ttl_ms=1_000, counter_key=KEY)


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"ttl_ms": 0}, BadArgument),
        ({"ttl_ms": 1.5}, BadArgumentType),
        ({"key": ""}, BadArgument),
        ({"counter_key": ""}, BadArgument),
        ({"counter_key": 5}, BadArgumentType),
    ],
)
def test_bad_lock_arguments_are_refused_before_any_request(
    r: redis.Redis, monkeypatch: pytest.MonkeyPatch, kwargs: dict[str, Any], error: type[Exception]
) -> None:
    sent = refuse_all_commands(monkeypatch, r)
    args: dict[str, Any] = {"key": KEY, "ttl_ms": 1_000, **kwargs}
    with pytest.raises(error):
        FencedLock(r, **args)
    assert sent == []


def test_the_store_refuses_a_non_client_and_a_non_fenced_lock(r: redis.Redis) -> None:
    with pytest.raises(BadArgumentType, match=r"redis\.Redis"):
        FencedStore("redis://127.0.0.1", DATA)  # type: ignore[arg-type]
    with pytest.raises(BadArgumentType, match="FencedLock"):
        FencedStore(r, DATA, lock=object())  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("page", "script"),
    [
        ("fencing.md", "fenced_acquire.lua"),
        ("fencing.md", "fenced_write.lua"),
        ("optimistic.md", "cas_version.lua"),
    ],
)
def test_the_pages_show_the_scripts_the_library_runs(page: str, script: str) -> None:
    """The Lua on the site is the library's file, included verbatim (the strict
    build fails if the included path is missing)."""
    from tests.docs.test_docs import DOCS

    text = (DOCS / "correct" / page).read_text("utf-8")
    assert f'--8<-- "src/lockguide/scripts/{script}"' in text
