"""``SqlFencedStore``: a fenced resource in a SQL table (SQLite, PostgreSQL).

The database side of :mod:`lockguide.fencing`: a write carries the lock's fencing
token and is accepted only if it beats every token the row has accepted, in the
same ``UPDATE`` that writes it.
"""

from __future__ import annotations

import contextlib
import re
import sqlite3
from typing import Any, Literal, Protocol

from lockguide._core import BadArgument, BadArgumentType, check_key
from lockguide.fencing import Stored, WriteResult, _check_write, _raise_if_refused

__all__ = ["SqlFencedStore"]


class Connection(Protocol):
    """The part of a DB-API 2.0 connection that :class:`SqlFencedStore` uses."""

    def cursor(self) -> Any: ...  # pragma: no cover - protocol
    def commit(self) -> None: ...  # pragma: no cover - protocol
    def rollback(self) -> None: ...  # pragma: no cover - protocol


_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")
_PSYCOPG = ("psycopg", "psycopg2")
Paramstyle = Literal["named", "pyformat"]


class SqlFencedStore:
    """A row in a SQL table that only accepts writes with a newer fencing token.

    A write is one ``UPDATE ... WHERE name = :name AND fence_token < :token``, check and
    write at once (one row changed means accepted). In PostgreSQL a concurrent ``UPDATE``
    waits for the first to commit and re-checks the ``WHERE``: two writers cannot both pass.

    Args:
        connection: a DB-API connection (``sqlite3``, ``psycopg``); each write commits.
        name: the resource's name (the row's key).
        table: the table's name (letters, digits and ``_``).
        paramstyle: ``"named"`` (``:token``, sqlite3) or ``"pyformat"``
            (``%(token)s``, psycopg); detected for those two drivers.
    """

    def __init__(
        self,
        connection: Connection,
        name: str,
        *,
        table: str = "fenced_resource",
        paramstyle: Paramstyle | None = None,
    ) -> None:
        if not all(hasattr(connection, m) for m in ("cursor", "commit", "rollback")):
            raise BadArgumentType(
                f"connection must be a DB-API connection (sqlite3, psycopg), not "
                f"{type(connection).__name__}"
            )
        self._connection = connection
        self._name = check_key(name)
        if not isinstance(table, str) or not _IDENTIFIER.match(table):
            raise BadArgument(
                f"table must be a plain SQL identifier (letters, digits, _), got {table!r}"
            )
        self._table = table
        if paramstyle is None and isinstance(connection, sqlite3.Connection):
            paramstyle = "named"
        elif paramstyle is None and type(connection).__module__.split(".")[0] in _PSYCOPG:
            paramstyle = "pyformat"
        elif paramstyle is None:
            raise BadArgument(
                f"cannot tell the parameter style of a {type(connection).__name__} connection: "
                "pass paramstyle='named' (:token) or paramstyle='pyformat' (%(token)s)"
            )
        if paramstyle not in ("named", "pyformat"):
            raise BadArgument(f"paramstyle must be 'named' or 'pyformat', got {paramstyle!r}")
        self._paramstyle: Paramstyle = paramstyle

    @property
    def name(self) -> str:
        """The resource's row name."""
        return self._name

    def setup(self) -> None:
        """Create the table (``name``, ``value``, ``fence_token``) if missing, and this row."""
        self._execute(
            f"CREATE TABLE IF NOT EXISTS {self._table} ("
            " name TEXT PRIMARY KEY, value TEXT, fence_token BIGINT NOT NULL)"
        )
        self._execute(
            f"INSERT INTO {self._table} (name, value, fence_token) VALUES (:name, NULL, 0)"
            " ON CONFLICT (name) DO NOTHING",
            name=self._name,
        )
        self._connection.commit()

    def try_write(self, token: int, value: str) -> WriteResult:
        """Store ``value`` if ``token`` beats every token accepted so far, and commit."""
        token, value = _check_write(token, value)
        sql = f"UPDATE {self._table} SET value = :value, fence_token = :token"
        sql += " WHERE name = :name AND fence_token < :token"
        try:
            changed, _ = self._execute(sql, name=self._name, value=value, token=token)
            if changed != 1:
                return WriteResult(accepted=False, token=token, highest=self.read().token)
            self._connection.commit()
        except BaseException:
            with contextlib.suppress(Exception):
                self._connection.rollback()
            raise
        return WriteResult(accepted=True, token=token, highest=token)

    def write(self, token: int, value: str) -> WriteResult:
        """Like :meth:`try_write`, but a refusal raises.

        Raises:
            StaleToken: a token at least as high was already accepted; nothing written.
        """
        return _raise_if_refused(self._name, self.try_write(token, value))

    def read(self) -> Stored:
        """The current value and the highest token accepted."""
        _, rows = self._execute(
            f"SELECT value, fence_token FROM {self._table} WHERE name = :name", name=self._name
        )
        self._connection.commit()
        if not rows:
            raise BadArgument(
                f"no row named {self._name!r} in table {self._table}: call setup() once first"
            )
        value, fence_token = rows[0]
        return Stored(value=value, token=int(fence_token))

    def _execute(self, sql: str, **params: object) -> tuple[int, list[Any]]:
        """Run one statement written with ``:name`` parameters; its row count and rows."""
        if self._paramstyle == "pyformat":
            sql = re.sub(r":([a-z_]+)", r"%(\1)s", sql)
        cursor = self._connection.cursor()
        try:
            cursor.execute(sql, params)
            return int(cursor.rowcount), list(cursor.fetchall()) if cursor.description else []
        finally:
            cursor.close()
