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


@pytest.fixture
def pg(postgres_dsn: str) -> str:
    """The server's conninfo, with the tables the docs create dropped first."""
    with psycopg.connect(postgres_dsn, autocommit=True) as admin:
        for table in ("fenced_resource", "invoices", "accounts"):
            admin.execute(f"DROP TABLE IF EXISTS {table}")
    return postgres_dsn
