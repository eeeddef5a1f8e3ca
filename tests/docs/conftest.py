"""A PostgreSQL server for the docs tests that need one (the recipes, the SQL on the pages)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import psycopg
import pytest

from tests.support import LOOPBACK, start_postgres


@pytest.fixture(scope="session")
def postgres_dsn() -> Iterator[str]:
    """A real PostgreSQL server for the session (skipped when absent); yields a conninfo."""
    executor, base = start_postgres()
    yield f"host={LOOPBACK} port={executor.port} user=postgres dbname=postgres"
    executor.stop()
    shutil.rmtree(base, ignore_errors=True)


def empty_schema(dsn: str) -> None:
    """Drop the ``public`` schema with everything in it and make it again, empty.

    Whatever a test made there (a recipe's table, a page's sequence) goes with it: a new
    recipe's tables are cleaned without naming them here.
    """
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute("DROP SCHEMA public CASCADE")
        admin.execute("CREATE SCHEMA public")


@pytest.fixture
def pg(postgres_dsn: str) -> str:
    """The server's conninfo, on an empty ``public`` schema (see :func:`empty_schema`)."""
    empty_schema(postgres_dsn)
    return postgres_dsn
