"""The database's own lock, run: PostgreSQL advisory locks on a real server, broken and fixed.

The guide's database-primitive row: a lock the database itself keeps, with no
lease, so no timer to run out. Each scenario runs on a real PostgreSQL (the
test session's) and returns the same
:class:`~lockguide_lab.scenarios.timeline.Timeline` as every other run:

* **broken**: a *session-level* lock (``pg_try_advisory_lock``) taken on one
  connection, while the writes go through another (a pool hands out
  whichever is free). The lock belongs to the first connection's session:
  when that session ends, the server releases it, and nothing stops the
  write on the other connection.
* **fixed**: ``pg_advisory_xact_lock`` taken *inside the transaction that
  writes*, on the same connection. The lock ends with the transaction: if the
  connection drops or the server restarts, the transaction is rolled back
  with it, so the write cannot land without the lock.

The scenarios:

* :class:`AdvisoryPausedHolder`: A takes the lock and stops (2 s) before its
  write. Nothing expires: B is refused until A is done, both ways.
* :class:`AdvisoryLostConnection`: A's lock connection is ended by the server
  while A works (``pg_terminate_backend``, what the server does to a session
  whose connection it finds dropped). The lock goes with the session; B
  acquires and writes; A writes at the end of its work. (A connection cut
  without a word, no FIN, is not noticed by the server until TCP keep-alive
  says so: the lock is then held, and B kept out, for that long.)
* :class:`AdvisoryRestart`: the server is restarted (fast shutdown, no
  failover) while A holds the lock; every lock and connection is gone. B
  acquires on the restarted server and writes; A reconnects and writes.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from lockguide_lab.scenarios.consensus import Recorder
from lockguide_lab.scenarios.timeline import Kind, Timeline
from lockguide_lab.testbed.process import LOOPBACK

__all__ = [
    "ADVISORY_SCENARIOS",
    "AdvisoryLostConnection",
    "AdvisoryPausedHolder",
    "AdvisoryRestart",
    "AdvisoryScenario",
    "Postgres",
]

#: The advisory lock's key (any 64-bit number both clients agree on).
LOCK_KEY = 4242


@dataclass(frozen=True)
class Postgres:
    """Where the server is, and how to restart it (the test session's executor)."""

    port: int
    restart: Callable[[], None]

    def connect(self, *, autocommit: bool = True) -> Any:
        import psycopg

        return psycopg.connect(
            host=LOOPBACK,
            port=self.port,
            user="postgres",
            dbname="postgres",
            autocommit=autocommit,
            connect_timeout=5,
        )


class _Client:
    """One client: its lock connection, its write connection (broken way only), its way."""

    def __init__(self, pg: Postgres, name: str, fixed: bool) -> None:
        self.pg, self.name, self.fixed = pg, name, fixed
        self.lock_conn: Any = pg.connect(autocommit=not fixed)
        self.write_conn: Any = None if fixed else pg.connect()

    def try_lock(self) -> bool:
        """Broken: a session lock; fixed: begin the writing transaction and lock inside it."""
        if self.fixed:
            got = self.lock_conn.execute(
                "SELECT pg_try_advisory_xact_lock(%s)", (LOCK_KEY,)
            ).fetchone()[0]
            if not got:
                self.lock_conn.rollback()
            return bool(got)
        return bool(
            self.lock_conn.execute("SELECT pg_try_advisory_lock(%s)", (LOCK_KEY,)).fetchone()[0]
        )

    def write(self, value: str) -> None:
        """Broken: on the other connection, committed at once; fixed: in the lock's transaction."""
        if self.fixed:
            self.lock_conn.execute("UPDATE ledger SET value = %s", (value,))
            self.lock_conn.commit()  # ends the transaction, and the lock with it
            return
        try:
            self.write_conn.execute("UPDATE ledger SET value = %s", (value,))
        except Exception:  # the pool's connection was dropped too: take a fresh one
            self.write_conn = self.pg.connect()
            self.write_conn.execute("UPDATE ledger SET value = %s", (value,))

    def unlock(self) -> None:
        if not self.fixed:
            self.lock_conn.execute("SELECT pg_advisory_unlock(%s)", (LOCK_KEY,))

    def close(self) -> None:
        for conn in (self.lock_conn, self.write_conn):
            if conn is not None:
                with contextlib.suppress(Exception):
                    conn.close()


@dataclass(frozen=True)
class AdvisoryScenario:
    """A failure mode of a PostgreSQL advisory lock, on a real server, broken or fixed."""

    title: ClassVar[str] = ""
    work_ms: int = 2000

    def run(self, pg: Postgres, way: str) -> Timeline:
        if way not in ("broken", "fixed"):
            raise ValueError(f"way must be 'broken' or 'fixed', got {way!r}")
        with pg.connect() as admin:
            admin.execute("CREATE TABLE IF NOT EXISTS ledger (value text)")
            admin.execute("DELETE FROM ledger")
            admin.execute("INSERT INTO ledger VALUES (NULL)")
        record = Recorder()
        clients: list[_Client] = []
        try:
            self.script(pg, way == "fixed", record, clients)
        finally:
            for client in clients:
                client.close()
        with pg.connect() as admin:
            final = admin.execute("SELECT value FROM ledger").fetchone()[0]
        approach = (
            "pg_advisory_xact_lock inside the writing transaction"
            if way == "fixed"
            else "pg_try_advisory_lock on one connection, writes on another"
        )
        return Timeline(
            scenario=f"{self.title} (PostgreSQL advisory lock)",
            way=way,
            approach=approach,
            testbed="real PostgreSQL 15, one server, real time",
            events=tuple(sorted(record.events, key=lambda e: e.t_ms)),
            final_value=final,
            parameters={"work_ms": float(self.work_ms)},
        )

    def both(self, pg: Postgres) -> tuple[Timeline, Timeline]:
        return self.run(pg, "broken"), self.run(pg, "fixed")

    def script(self, pg: Postgres, fixed: bool, record: Recorder, clients: list[_Client]) -> None:
        raise NotImplementedError

    @staticmethod
    def _write(record: Recorder, client: _Client, value: str) -> bool:
        try:
            client.write(value)
        except Exception as error:
            record(client.name, Kind.WRITE_REFUSED, f"{type(error).__name__}: rolled back", value)
            return False
        record(client.name, Kind.WRITE_ACCEPTED, "committed", value)
        return True

    def _b_tries(self, record: Recorder, b: _Client, for_ms: float) -> bool:
        """B tries every 50 ms for ``for_ms``; records the outcome."""
        give_up = time.monotonic() + for_ms / 1000
        while True:
            try:
                if b.try_lock():
                    record("B", Kind.ACQUIRED, "the advisory lock is free")
                    return True
            except Exception:  # the server is restarting: reconnect and try again
                with contextlib.suppress(Exception):
                    b.lock_conn = b.pg.connect(autocommit=not b.fixed)
            if time.monotonic() >= give_up:
                record("B", Kind.NOT_ACQUIRED, f"refused for {for_ms:.0f} ms")
                return False
            time.sleep(0.05)

    def _b_writes(self, record: Recorder, b: _Client, for_ms: float) -> None:
        """B tries for ``for_ms``; if it acquires, it writes and releases."""
        if not self._b_tries(record, b, for_ms):
            return
        self._write(record, b, "B's update")
        time.sleep(0.005)  # the write is inside the lock: keep the two apart on the timeline
        b.unlock()
        record("B", Kind.RELEASED)

    @staticmethod
    def _clients(pg: Postgres, fixed: bool, clients: list[_Client], *names: str) -> list[_Client]:
        """A client for each of ``names``, kept in ``clients`` (closed at the end of the run)."""
        made = [_Client(pg, name, fixed) for name in names]
        clients += made
        return made

    @staticmethod
    def _a_takes(record: Recorder, a: _Client, detail: str) -> None:
        """The run's clock starts, and A takes the lock (free at the start of every run)."""
        record.t0 = time.monotonic()
        assert a.try_lock()
        record("A", Kind.ACQUIRED, detail)

    def _until_work_done(self, record: Recorder) -> None:
        """Until ``work_ms`` after the run's start."""
        time.sleep(max(0.0, self.work_ms / 1000 - (time.monotonic() - record.t0)))


@dataclass(frozen=True)
class AdvisoryPausedHolder(AdvisoryScenario):
    """A stops between taking the lock and writing; the lock has no lease to run out."""

    title: ClassVar[str] = "The holder paused"

    def script(self, pg: Postgres, fixed: bool, record: Recorder, clients: list[_Client]) -> None:
        a, b = self._clients(pg, fixed, clients, "A", "B")
        self._a_takes(record, a, "no lease: held until released or the session ends")
        record("A", Kind.PAUSED, f"stops {self.work_ms} ms before its write")
        self._b_tries(record, b, self.work_ms * 0.9)
        self._until_work_done(record)
        record("A", Kind.RESUMED)
        self._write(record, a, "A's update")
        time.sleep(0.005)
        a.unlock()
        record("A", Kind.RELEASED)
        self._b_writes(record, b, 2000)


@dataclass(frozen=True)
class AdvisoryLostConnection(AdvisoryScenario):
    """A's lock connection closed while A works; the server frees the lock at once."""

    title: ClassVar[str] = "The holder's connection lost"

    def script(self, pg: Postgres, fixed: bool, record: Recorder, clients: list[_Client]) -> None:
        a, b = self._clients(pg, fixed, clients, "A", "B")
        self._a_takes(record, a, f"starts {self.work_ms} ms of work")
        pid = a.lock_conn.info.backend_pid
        with pg.connect() as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        record("server", Kind.SERVER, "A's lock session ended (pg_terminate_backend)")
        record("A", Kind.EXPIRED, "its session ended, and the server released its lock")
        self._b_writes(record, b, 5000)
        self._until_work_done(record)
        self._write(record, a, "A's update")  # A does not know: it did not ask
        with contextlib.suppress(Exception):
            a.unlock()


@dataclass(frozen=True)
class AdvisoryRestart(AdvisoryScenario):
    """The server restarted while A holds the lock: every lock and session is gone."""

    title: ClassVar[str] = "The server restarted"

    def script(self, pg: Postgres, fixed: bool, record: Recorder, clients: list[_Client]) -> None:
        (a,) = self._clients(pg, fixed, clients, "A")
        self._a_takes(record, a, f"starts {self.work_ms} ms of work")
        pg.restart()
        give_up = time.monotonic() + 30
        while True:  # until the restarted server takes connections
            try:
                pg.connect().close()
                break
            except Exception:
                if time.monotonic() > give_up:
                    raise
                time.sleep(0.1)
        record("server", Kind.SERVER, "PostgreSQL restarted (fast shutdown): locks are in memory")
        record("A", Kind.EXPIRED, "its session ended with the server, and its lock with it")
        (b,) = self._clients(pg, fixed, clients, "B")
        self._b_writes(record, b, 5000)
        self._until_work_done(record)
        self._write(record, a, "A's update")


#: The advisory-lock runs, in the order the page tells them.
ADVISORY_SCENARIOS: tuple[AdvisoryScenario, ...] = (
    AdvisoryPausedHolder(),
    AdvisoryLostConnection(),
    AdvisoryRestart(),
)
