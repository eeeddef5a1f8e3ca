"""The SQL fenced store, on SQLite (standard library) and on a real PostgreSQL.

PostgreSQL is started once per session on a free loopback port through
pytest-postgresql's executor (see ``tests/support.py``). Locally the PostgreSQL
half is skipped with a reason when ``pg_ctl`` is absent; with
``LOCKGUIDE_REQUIRE_POSTGRES=1`` (as ``.ci/run`` sets) its absence fails.
"""

from __future__ import annotations

import shutil
import sqlite3
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import redis

from lockguide import (
    BadArgument,
    BadArgumentType,
    FencedLock,
    SqlFencedStore,
    StaleToken,
    Stored,
    WriteResult,
)
from tests.support import LOOPBACK, start_postgres

Connect = Callable[[], Any]


@pytest.fixture(scope="session")
def postgres_port() -> Iterator[int]:
    """A real PostgreSQL server for the session; yields its loopback port."""
    executor, base = start_postgres()
    yield int(executor.port)
    executor.stop()
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def connect(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Connect]:
    """A factory of connections to one fresh database (several for concurrency tests)."""
    opened: list[Any] = []
    if request.param == "sqlite":
        path = tmp_path / "fenced.sqlite3"

        def factory() -> Any:
            connection = sqlite3.connect(path, timeout=30, check_same_thread=False)
            opened.append(connection)
            return connection

    else:
        port: int = request.getfixturevalue("postgres_port")
        with psycopg.connect(
            host=LOOPBACK, port=port, user="postgres", dbname="postgres", autocommit=True
        ) as admin:
            admin.execute("DROP TABLE IF EXISTS fenced_resource")
            admin.execute("DROP TABLE IF EXISTS ledger_fence")

        def factory() -> Any:
            connection = psycopg.connect(
                host=LOOPBACK, port=port, user="postgres", dbname="postgres"
            )
            opened.append(connection)
            return connection

    yield factory
    for connection in opened:
        connection.close()


def test_a_newer_token_is_accepted_and_an_older_one_refused(connect: Connect) -> None:
    store = SqlFencedStore(connect(), "ledger")
    store.setup()
    assert store.try_write(2, "from B") == WriteResult(accepted=True, token=2, highest=2)
    assert store.try_write(1, "from A") == WriteResult(accepted=False, token=1, highest=2)
    assert store.read() == Stored(value="from B", token=2)


def test_an_equal_token_is_refused(connect: Connect) -> None:
    store = SqlFencedStore(connect(), "ledger")
    store.setup()
    store.write(5, "first")
    assert not store.try_write(5, "second").accepted
    assert store.read().value == "first"


def test_write_raises_stale_token_and_commits_nothing(connect: Connect) -> None:
    store = SqlFencedStore(connect(), "ledger")
    store.setup()
    store.write(34, "from 34")
    with pytest.raises(StaleToken) as refused:
        store.write(33, "from 33")
    assert (refused.value.token, refused.value.highest) == (33, 34)
    # A second connection sees the committed state, not anything half-done.
    assert SqlFencedStore(connect(), "ledger").read() == Stored("from 34", 34)


def test_accepted_writes_are_committed_for_other_connections(connect: Connect) -> None:
    writer = SqlFencedStore(connect(), "ledger")
    writer.setup()
    writer.write(1, "one")
    assert SqlFencedStore(connect(), "ledger").read() == Stored("one", 1)


def test_setup_is_idempotent_and_starts_at_token_zero(connect: Connect) -> None:
    store = SqlFencedStore(connect(), "ledger")
    store.setup()
    assert store.read() == Stored(None, 0)
    store.write(3, "three")
    store.setup()  # a second setup must not reset the row
    assert store.read() == Stored("three", 3)


def test_resources_in_one_table_are_fenced_separately(connect: Connect) -> None:
    connection = connect()
    ledger = SqlFencedStore(connection, "ledger")
    audit = SqlFencedStore(connection, "audit")
    ledger.setup()
    audit.setup()
    ledger.write(10, "ledger at 10")
    assert audit.try_write(1, "audit at 1").accepted
    assert ledger.read().token == 10


def test_a_custom_table_name_is_used(connect: Connect) -> None:
    store = SqlFencedStore(connect(), "ledger", table="ledger_fence")
    store.setup()
    store.write(1, "x")
    assert store.read() == Stored("x", 1)


def test_writing_before_setup_is_a_clear_error(connect: Connect) -> None:
    connection = connect()
    other = SqlFencedStore(connection, "other")
    other.setup()  # the table exists, but not the 'ledger' row
    with pytest.raises(BadArgument, match="call setup"):
        SqlFencedStore(connection, "ledger").write(1, "x")


def test_concurrent_writers_never_go_backwards(connect: Connect) -> None:
    """Four connections write interleaved tokens at once; each connection's accepted
    tokens must rise, and the row ends with the largest token."""
    SqlFencedStore(connect(), "ledger").setup()
    accepted_by_writer: list[list[int]] = [[] for _ in range(4)]
    connections = [connect() for _ in range(4)]

    def writer(index: int) -> None:
        store = SqlFencedStore(connections[index], "ledger")
        for token in range(index + 1, 121, 4)[::-1] if index % 2 else range(index + 1, 121, 4):
            if store.try_write(token, f"v{token}").accepted:
                accepted_by_writer[index].append(token)

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for accepted in accepted_by_writer:
        assert accepted == sorted(set(accepted))
    assert SqlFencedStore(connect(), "ledger").read() == Stored("v120", 120)


def test_tokens_from_a_fenced_lock_fence_a_sql_row(r: redis.Redis) -> None:
    """The lock lives in Redis, the resource in SQLite: the token links them."""
    store = SqlFencedStore(sqlite3.connect(":memory:"), "ledger")
    store.setup()
    a = FencedLock(r, "lock:ledger", ttl_ms=5_000)
    a.acquire()
    r.delete("lock:ledger")  # A's lease is gone (it paused past its TTL)
    b = FencedLock(r, "lock:ledger", ttl_ms=5_000)
    b.acquire()
    store.write(b.token, "B")
    with pytest.raises(StaleToken):
        store.write(a.token, "A")
    assert store.read() == Stored("B", b.token)


# -- bad input, refused before any statement ----------------------------------------


class RecordingConnection:
    """A DB-API connection that only records: any statement sent is a failure."""

    def __init__(self) -> None:
        self.sent: list[str] = []

    def cursor(self) -> Any:
        raise AssertionError("no statement may be sent for bad input")

    def commit(self) -> None:
        self.sent.append("commit")

    def rollback(self) -> None:
        self.sent.append("rollback")


@pytest.mark.parametrize(
    ("token", "error"),
    [
        ("1", BadArgumentType),
        (2.0, BadArgumentType),
        (False, BadArgumentType),
        (0, BadArgument),
        (-3, BadArgument),
    ],
)
def test_a_bad_token_is_refused_before_any_statement(token: object, error: type[Exception]) -> None:
    connection = RecordingConnection()
    store = SqlFencedStore(connection, "ledger", paramstyle="named")
    with pytest.raises(error, match="token"):
        store.write(token, "x")  # type: ignore[arg-type]
    assert connection.sent == []


@pytest.mark.parametrize("table", ["fenced; DROP TABLE x", "1table", "", "a-b", 5])
def test_a_table_name_that_is_not_an_identifier_is_refused(table: object) -> None:
    with pytest.raises(BadArgument, match="identifier"):
        SqlFencedStore(RecordingConnection(), "ledger", table=table, paramstyle="named")  # type: ignore[arg-type]


def test_an_unknown_driver_must_state_its_paramstyle() -> None:
    with pytest.raises(BadArgument, match="paramstyle"):
        SqlFencedStore(RecordingConnection(), "ledger")
    with pytest.raises(BadArgument, match="paramstyle"):
        SqlFencedStore(RecordingConnection(), "ledger", paramstyle="qmark")  # type: ignore[arg-type]


def test_a_non_connection_is_refused() -> None:
    with pytest.raises(BadArgumentType, match="DB-API"):
        SqlFencedStore("sqlite:///x", "ledger")  # type: ignore[arg-type]
    with pytest.raises(BadArgument, match="key must not be empty"):
        SqlFencedStore(RecordingConnection(), "", paramstyle="named")
