"""Compare-and-set on a version, on fakeredis and on a real redis-server."""

from __future__ import annotations

import threading
from typing import Any

import pytest
import redis

from lockguide import (
    BadArgument,
    BadArgumentType,
    CasResult,
    VersionConflict,
    Versioned,
    VersionedValue,
)
from tests.support import Backend

KEY = "profile:42"

# The pitfall, as a script: the version is compared but never written.
COMPARED_NEVER_WRITTEN = """
if tonumber(redis.call('HGET', KEYS[1], 'version') or '0') == tonumber(ARGV[1]) then
  redis.call('HSET', KEYS[1], 'value', ARGV[2])
  return {1, tonumber(ARGV[1]) + 1}
end
return {0, tonumber(redis.call('HGET', KEYS[1], 'version') or '0')}
"""


def test_a_missing_key_reads_as_nothing_at_version_zero(r: redis.Redis) -> None:
    assert VersionedValue(r, KEY).read() == Versioned(value=None, version=0)


def test_an_update_is_accepted_then_a_stale_one_refused(r: redis.Redis) -> None:
    value = VersionedValue(r, KEY)
    seen = value.read()
    assert value.compare_and_set(seen.version, "alice") == CasResult(accepted=True, version=1)
    # A second writer who read the same version 0 is refused and told the version now.
    assert value.compare_and_set(seen.version, "bob") == CasResult(accepted=False, version=1)
    assert value.read() == Versioned("alice", 1)


def test_value_and_version_are_written_together(r: redis.Redis) -> None:
    value = VersionedValue(r, KEY)
    value.compare_and_set(0, "first")
    assert r.hgetall(KEY) == {b"value": b"first", b"version": b"1"}


def test_the_version_moves_on_every_write_so_it_works_more_than_once(r: redis.Redis) -> None:
    """The pitfall's opposite: a caller carrying forward the version it wrote keeps
    succeeding, and a caller holding an old version keeps being refused."""
    value = VersionedValue(r, KEY)
    version = 0
    for n in range(20):
        result = value.compare_and_set(version, f"v{n}")
        assert result.accepted, f"update {n} was refused"
        assert not value.compare_and_set(version, "stale").accepted
        version = result.version
    assert value.read() == Versioned("v19", 20)


def test_the_pitfall_script_works_once_then_never_again(r: redis.Redis) -> None:
    """The check above fails against a script that compares the version but never
    writes it: the carried-forward version is refused from the second update on."""
    broken = r.register_script(COMPARED_NEVER_WRITTEN)
    r.hset(KEY, mapping={"value": "start", "version": 0})
    accepted, version = broken(keys=[KEY], args=[0, "first"])
    assert accepted == 1
    for _ in range(3):
        accepted, _current = broken(keys=[KEY], args=[version, "again"])
        assert accepted == 0  # never again
    # ... and a writer that re-reads is never refused, even with a stale read.
    assert broken(keys=[KEY], args=[0, "lost update"])[0] == 1
    assert broken(keys=[KEY], args=[0, "overwrites it"])[0] == 1


def test_update_retries_after_a_conflict_and_applies_to_the_fresh_value(
    r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("lockguide.versioned.time.sleep", lambda s: None)
    value = VersionedValue(r, KEY)
    value.compare_and_set(0, "10")
    calls: list[str | None] = []

    def add_five(old: str | None) -> str:
        calls.append(old)
        if len(calls) == 1:  # somebody else writes between our read and our write
            VersionedValue(r, KEY).compare_and_set(1, "100")
        return str(int(old or "0") + 5)

    assert value.update(add_five) == Versioned("105", 3)
    assert calls == ["10", "100"]


def test_update_gives_up_after_its_retries_with_version_conflict(
    r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    pauses: list[float] = []
    monkeypatch.setattr("lockguide.versioned.time.sleep", pauses.append)
    value = VersionedValue(r, KEY)

    def always_interfered(old: str | None) -> str:
        other = VersionedValue(r, KEY)
        other.compare_and_set(other.read().version, "someone else")
        return "mine"

    with pytest.raises(VersionConflict) as gave_up:
        value.update(always_interfered, retries=4, backoff_ms=(10.0, 50.0))
    assert gave_up.value.attempts == 5
    assert value.read().value == "someone else"
    # One pause before each retry, random, and each within min(cap, base * 2**n) ms.
    assert len(pauses) == 4
    for n, pause in enumerate(pauses, start=1):
        assert 0 <= pause <= min(50.0, 10.0 * 2**n) / 1000.0
    assert len(set(pauses)) > 1


def test_zero_retries_means_exactly_one_attempt(
    r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("lockguide.versioned.time.sleep", lambda s: None)
    attempts = 0

    def interfered(old: str | None) -> str:
        nonlocal attempts
        attempts += 1
        VersionedValue(r, KEY).compare_and_set(VersionedValue(r, KEY).read().version, "x")
        return "mine"

    with pytest.raises(VersionConflict):
        VersionedValue(r, KEY).update(interfered, retries=0)
    assert attempts == 1


def test_concurrent_increments_lose_no_update(backend: Backend) -> None:
    def worker() -> None:
        client = backend.client()
        counter = VersionedValue(client, "counter")
        for _ in range(25):
            counter.update(lambda old: str(int(old or "0") + 1), retries=500, backoff_ms=(0.5, 5))
        client.close()

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert VersionedValue(backend.client(), "counter").read() == Versioned("100", 100)


def test_an_exception_in_change_writes_nothing(r: redis.Redis) -> None:
    value = VersionedValue(r, KEY)
    value.compare_and_set(0, "kept")

    def broken(old: str | None) -> str:
        raise RuntimeError("bad input data")

    with pytest.raises(RuntimeError):
        value.update(broken)
    assert value.read() == Versioned("kept", 1)


def test_a_value_written_under_decode_responses_reads_the_same(backend: Backend) -> None:
    client = backend.client(decode_responses=True)
    value = VersionedValue(client, KEY)
    value.compare_and_set(0, "é")
    assert value.read() == Versioned("é", 1)
    assert VersionedValue(backend.client(), KEY).read() == Versioned("é", 1)


# -- bad input, refused before any request --------------------------------------------


def refuse_all_commands(monkeypatch: pytest.MonkeyPatch, client: redis.Redis) -> list[Any]:
    sent: list[Any] = []
    monkeypatch.setattr(client, "execute_command", lambda *a, **k: sent.append(a))
    return sent


@pytest.mark.parametrize(
    ("retries", "error"),
    [
        (-1, BadArgument),
        (-100, BadArgument),
        (1.0, BadArgumentType),
        (True, BadArgumentType),
        ("3", BadArgumentType),
    ],
)
def test_a_bad_retry_count_is_refused_before_any_request(
    r: redis.Redis, monkeypatch: pytest.MonkeyPatch, retries: object, error: type[Exception]
) -> None:
    value = VersionedValue(r, KEY)
    sent = refuse_all_commands(monkeypatch, r)
    with pytest.raises(error, match="retries"):
        value.update(lambda old: "x", retries=retries)  # type: ignore[arg-type]
    assert sent == []


@pytest.mark.parametrize(
    ("version", "error"),
    [(-1, BadArgument), ("0", BadArgumentType), (0.0, BadArgumentType), (None, BadArgumentType)],
)
def test_a_bad_expected_version_is_refused_before_any_request(
    r: redis.Redis, monkeypatch: pytest.MonkeyPatch, version: object, error: type[Exception]
) -> None:
    value = VersionedValue(r, KEY)
    sent = refuse_all_commands(monkeypatch, r)
    with pytest.raises(error, match="expected_version"):
        value.compare_and_set(version, "x")  # type: ignore[arg-type]
    assert sent == []


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"backoff_ms": (50.0, 10.0)}, "backoff_ms"),
        ({"backoff_ms": 5}, "backoff_ms"),
        ({"change": "not callable"}, "change must be a function"),
    ],
)
def test_bad_update_arguments_are_refused_before_any_request(
    r: redis.Redis, monkeypatch: pytest.MonkeyPatch, kwargs: dict[str, Any], match: str
) -> None:
    value = VersionedValue(r, KEY)
    sent = refuse_all_commands(monkeypatch, r)
    args: dict[str, Any] = {"change": lambda old: "x", **kwargs}
    with pytest.raises(BadArgument, match=match):
        value.update(**args)
    assert sent == []


def test_a_non_string_value_and_a_bad_key_are_refused(r: redis.Redis) -> None:
    with pytest.raises(BadArgumentType, match="value must be a str"):
        VersionedValue(r, KEY).compare_and_set(0, 5)  # type: ignore[arg-type]
    with pytest.raises(BadArgument, match="key"):
        VersionedValue(r, "")


def test_update_does_not_sleep_before_its_first_attempt(
    r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    pauses: list[float] = []
    monkeypatch.setattr("lockguide.versioned.time.sleep", pauses.append)
    VersionedValue(r, KEY).update(lambda old: "x")
    assert pauses == []
