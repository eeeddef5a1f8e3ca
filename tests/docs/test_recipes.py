"""The recipes page's templates (``snippets/recipes/``), run as a reader would call them.

A recipe is a module with no prints and no sleeps, so nothing is compared with
``#>`` lines: each test loads the file (with ``redis.Redis`` reaching the test's
backend, fakeredis or the session's real server), replaces the function that
stands for the real work, and checks what the template does when the lock is
free, when it is taken, and when the lease is lost. The PostgreSQL and etcd ones
run on the session's real servers (markers ``postgres``, ``consensus``).
"""

from __future__ import annotations

import asyncio
import datetime
import importlib.util
import re
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import psycopg
import pytest

from lockguide import FencedLock, Lock
from lockguide_lab.testbed.consensus import EtcdCluster
from tests.docs.conftest import empty_schema
from tests.docs.test_docs import DOCS, INCLUDE_MARK, ROOT
from tests.support import Backend, real_backend

RECIPES = ROOT / "snippets" / "recipes"
ALL = sorted(RECIPES.glob("*.py"))


def load(name: str, backend: Backend | None, monkeypatch: pytest.MonkeyPatch) -> Any:
    """Import snippets/recipes/NAME.py afresh, its ``redis.Redis()`` on the backend."""
    if backend is not None:
        backend.patch_redis_module(monkeypatch)
    spec = importlib.util.spec_from_file_location(f"recipe_{name}", RECIPES / f"{name}.py")
    assert spec is not None
    assert spec.loader is not None
    module: ModuleType = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# -- the page and the files agree ------------------------------------------------------


#: The template rules, written once in the Recipes page's source (an HTML comment, so the
#: reader does not see it and a recipe's author does): ``lines: N``, ``non-blank lines: N``
#: and ``never: TEXT`` lines inside ``<!-- Template rules ... -->``.
RULES = re.compile(r"<!-- Template rules.*?-->", re.DOTALL)
RULE = re.compile(r"^\s*(lines|non-blank lines|never):\s*(\S.*?)\s*$", re.MULTILINE)


def template_rules(page: str) -> dict[str, list[str]]:
    """The rules the page's source states: ``{"lines": ["30"], "never": ["print(", ...]}``."""
    found = RULES.search(page)
    assert found, "docs/recipes.md has lost its <!-- Template rules ... --> comment"
    rules: dict[str, list[str]] = {}
    for name, value in RULE.findall(found.group()):
        rules.setdefault(name, []).append(value)
    return rules


def broken_rules(source: str, rules: dict[str, list[str]]) -> list[str]:
    """The rules ``source`` breaks, each said as the page says it."""
    lines = source.splitlines()
    broken = [f"lines: {n}" for n in rules["lines"] if len(lines) > int(n)]
    filled = sum(1 for line in lines if line.strip())
    broken += [f"non-blank lines: {n}" for n in rules["non-blank lines"] if filled > int(n)]
    return broken + [f"never: {text}" for text in rules["never"] if text in source]


def test_every_recipe_is_on_the_page_and_keeps_the_template_rules() -> None:
    page = (DOCS / "recipes.md").read_text("utf-8")
    rules = template_rules(page)
    assert rules == {
        "lines": ["30"],
        "non-blank lines": ["25"],
        "never": ["print(", "sleep"],
    }, "the rules changed: change this line with them, on purpose"
    assert len(ALL) >= 9
    for path in ALL:
        assert f'{INCLUDE_MARK} "snippets/recipes/{path.name}"' in page, path.name
        assert not broken_rules(path.read_text("utf-8"), rules), path.name


def test_the_template_rules_catch_a_long_noisy_recipe() -> None:
    rules = template_rules((DOCS / "recipes.md").read_text("utf-8"))
    assert broken_rules("x = 1\n" * 26, rules) == ["non-blank lines: 25"]
    assert broken_rules("\n" * 31, rules) == ["lines: 30"]
    noisy = "import time\ntime.sleep(1)\nprint('done')\n"
    assert broken_rules(noisy, rules) == ["never: print(", "never: sleep"]
    assert broken_rules("x = 1\n", rules) == []


@pytest.mark.postgres
def test_each_test_starts_on_an_empty_schema_whatever_a_recipe_created(pg: str) -> None:
    with psycopg.connect(pg, autocommit=True) as db:
        db.execute("CREATE TABLE a_new_recipes_table (id SERIAL PRIMARY KEY)")
    empty_schema(pg)
    with psycopg.connect(pg) as db:
        left = db.execute(
            "SELECT relname FROM pg_class WHERE relnamespace = 'public'::regnamespace"
        )
        assert left.fetchall() == []


# -- plain redis-py ---------------------------------------------------------------------


def test_cron_runs_once_skips_when_held_and_reports_a_lost_lease(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    cron = load("cron_redis_py", backend, monkeypatch)
    r = backend.client()
    runs: list[int] = []
    monkeypatch.setattr(cron, "build_report", lambda: runs.append(1))
    assert cron.main() == 0
    assert runs == [1]
    assert not r.exists(cron.KEY)

    r.set(cron.KEY, "another run", px=60_000)
    assert cron.main() == 0
    assert runs == [1]
    assert r.get(cron.KEY) == b"another run"  # and left alone
    r.delete(cron.KEY)

    def lease_lost() -> None:
        r.set(cron.KEY, "the next run", px=60_000)  # our key expired; another run took it

    monkeypatch.setattr(cron, "build_report", lease_lost)
    assert cron.main() == 3
    assert r.get(cron.KEY) == b"the next run"


# -- redis-py's own Lock ----------------------------------------------------------------


def test_redis_py_lock_renders_answers_busy_and_survives_a_lost_lease(
    backend: Backend, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    handler = load("redis_py_lock", backend, monkeypatch)
    r = backend.client()
    rendered: list[int] = []
    monkeypatch.setattr(handler, "render_pdf", rendered.append)
    assert handler.invoice_pdf(7) == 200
    assert rendered == [7]
    assert not r.exists("lock:invoice-pdf:7")

    monkeypatch.setattr(handler, "render_pdf", lambda i: r.delete(f"lock:invoice-pdf:{i}"))
    assert handler.invoice_pdf(7) == 200
    assert "lease lost" in caplog.text

    r.set("lock:invoice-pdf:8", "someone else", px=60_000)
    started = time.monotonic()
    original = handler.r.lock
    # the template's blocking_timeout=5 is kept; the test waits less by shortening it
    monkeypatch.setattr(
        handler.r, "lock", lambda name, **kw: original(name, **{**kw, "blocking_timeout": 0.3})
    )
    assert handler.invoice_pdf(8) == 503
    assert time.monotonic() - started < 3


def test_redis_py_lock_without_timeout_never_expires(backend: Backend) -> None:
    """What the page warns about: redis-py's Lock has no lease unless given timeout=."""
    r = backend.client()
    lock = r.lock("lock:no-timeout")
    assert lock.acquire(blocking=False)
    assert r.pttl("lock:no-timeout") == -1  # no expiry: a crashed holder keeps it
    lock.release()


# -- lockguide.Lock ---------------------------------------------------------------------


def test_worker_answers_409_when_held_and_200_with_a_warning_when_the_lease_is_lost(
    backend: Backend, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    worker = load("worker_lock", backend, monkeypatch)
    r = backend.client()
    left: list[float] = []
    monkeypatch.setattr(
        worker, "rebuild_index", lambda t, time_left_ms: left.append(time_left_ms())
    )
    assert worker.reindex("acme") == 200
    assert 100_000 < left[0] <= 120_000  # it was handed the lease's real clock

    holder = Lock(r, "lock:reindex:acme", ttl_ms=60_000)
    with holder:
        assert worker.reindex("acme") == 409

    monkeypatch.setattr(worker, "rebuild_index", lambda t, **_: r.delete(f"lock:reindex:{t}"))
    assert worker.reindex("acme") == 200
    assert "outlived its lease" in caplog.text


# -- the watchdog -------------------------------------------------------------------------


def test_watchdog_job_outlasts_its_ttl_and_stops_when_the_lease_is_lost(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = load("watchdog_job", backend, monkeypatch)
    r = backend.client()
    real_lock = job.Lock

    def short_lock(client: Any, key: str, **kw: Any) -> Lock:
        lock: Lock = real_lock(client, key, **{**kw, "ttl_ms": 300})  # 300 ms, not 30 s
        return lock

    monkeypatch.setattr(job, "Lock", short_lock)
    done: list[str] = []

    def encode(part: str) -> None:
        time.sleep(0.2)  # the work: four parts take almost three TTLs
        done.append(part)

    monkeypatch.setattr(job, "encode", encode)
    assert job.encode_video("v1", ["a", "b", "c", "d"]) == "done"
    assert done == ["a", "b", "c", "d"]

    with Lock(r, "lock:encode:v1", ttl_ms=10_000):
        assert job.encode_video("v1", ["a"]) == "busy"

    def lose(part: str) -> None:
        r.set("lock:encode:v1", "B", px=10_000)  # a failover, then B acquires
        time.sleep(0.3)  # long enough for a renewal to find B's key

    monkeypatch.setattr(job, "encode", lose)
    assert job.encode_video("v1", ["a", "b"]) == "lost the lock"
    assert r.get("lock:encode:v1") == b"B"

    real_watchdog = job.Watchdog
    monkeypatch.setattr(  # the 2 h bound, shortened: renewals stop after 400 ms
        job, "Watchdog", lambda lock, **kw: real_watchdog(lock, **{**kw, "max_total_ms": 400})
    )
    monkeypatch.setattr(job, "encode", encode)
    r.delete("lock:encode:v1")
    assert job.encode_video("v2", ["a", "b", "c", "d", "e"]) == "lost the lock"


# -- asyncio ------------------------------------------------------------------------------


def test_aio_worker_syncs_is_busy_when_held_and_releases_when_timed_out(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    worker = load("aio_worker", backend, monkeypatch)
    r = backend.client()

    async def fetch(customer_id: int) -> None:
        await asyncio.sleep(0)

    async def scenario() -> list[str]:
        monkeypatch.setattr(worker, "fetch_and_store", fetch)
        results = [await worker.sync_mailbox(1)]
        r.set("lock:mailbox:2", "another worker", px=60_000)
        results.append(await worker.sync_mailbox(2))

        async def stuck(customer_id: int) -> None:
            await asyncio.sleep(3600)

        monkeypatch.setattr(worker, "fetch_and_store", stuck)
        real_timeout = asyncio.timeout
        monkeypatch.setattr(worker.asyncio, "timeout", lambda s: real_timeout(0.2))
        results.append(await worker.sync_mailbox(3))
        monkeypatch.setattr(worker.asyncio, "timeout", real_timeout)

        async def lose(customer_id: int) -> None:
            r.delete(f"lock:mailbox:{customer_id}")

        monkeypatch.setattr(worker, "fetch_and_store", lose)
        results.append(await worker.sync_mailbox(4))
        return results

    assert asyncio.run(scenario()) == ["synced", "busy", "too slow", "lease lost"]
    assert not r.exists("lock:mailbox:3")  # the cancelled holder released on the way out
    assert r.get("lock:mailbox:2") == b"another worker"


# -- the idempotency key ------------------------------------------------------------------


def test_idempotency_key_credits_once_per_order(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    points = load("idempotency_key", backend, monkeypatch)
    r = backend.client()
    outcomes = [points.on_order_paid("o-1", "c-9", 120) for _ in range(3)]
    assert outcomes == [True, False, False]
    assert points.on_order_paid("o-2", "c-9", 30)
    assert r.get("points:{c-9}") == b"150"
    assert 0 < r.ttl("points:{c-9}:order:o-1") <= 90 * 86_400


# -- PostgreSQL -----------------------------------------------------------------------------


@pytest.mark.postgres
def test_fenced_postgres_writes_once_and_drops_a_stale_result(
    backend: Backend, pg: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    prices = load("fenced_postgres", backend, monkeypatch)
    monkeypatch.setattr(prices, "DSN", pg)
    r = backend.client()
    monkeypatch.setattr(prices, "compute_prices", lambda c: "v1")
    assert prices.publish_prices("eu")

    def newer_holder_wrote_first(catalogue: str) -> str:
        # our lease ran out while computing; a newer holder took the lock and wrote
        r.delete("lock:prices:eu")
        newer = FencedLock(r, "lock:prices:eu", ttl_ms=10_000)
        newer.acquire(blocking=False)
        with psycopg.connect(pg) as db:
            prices.SqlFencedStore(db, "prices:eu").write(newer.token, "from the newer holder")
        return "stale"

    monkeypatch.setattr(prices, "compute_prices", newer_holder_wrote_first)
    assert not prices.publish_prices("eu")
    with psycopg.connect(pg) as db:
        assert prices.SqlFencedStore(db, "prices:eu").read().value == "from the newer holder"


@pytest.mark.postgres
def test_unique_constraint_issues_one_invoice_among_racing_workers(
    pg: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    invoices = load("unique_constraint", None, monkeypatch)
    monkeypatch.setattr(invoices, "DSN", pg)
    with psycopg.connect(pg, autocommit=True) as db:
        db.execute(invoices.SCHEMA)
    month = datetime.date(2026, 11, 1)
    results: list[bool] = []
    workers = [
        threading.Thread(target=lambda: results.append(invoices.issue_invoice(42, month, 990)))
        for _ in range(6)
    ]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert sorted(results) == [False] * 5 + [True]
    with psycopg.connect(pg) as db:
        assert db.execute("SELECT count(*) FROM invoices").fetchone() == (1,)


@pytest.mark.postgres
def test_advisory_lock_serialises_concurrent_credits(
    pg: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    accounts = load("advisory_lock", None, monkeypatch)
    monkeypatch.setattr(accounts, "DSN", pg)
    with psycopg.connect(pg, autocommit=True) as db:
        db.execute("CREATE TABLE accounts (id BIGINT PRIMARY KEY, balance BIGINT NOT NULL)")
        db.execute("INSERT INTO accounts VALUES (7, 0)")
    workers = [threading.Thread(target=accounts.credit, args=(7, 5)) for _ in range(8)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    with psycopg.connect(pg) as db:
        assert db.execute("SELECT balance FROM accounts WHERE id = 7").fetchone() == (40,)


# -- etcd ------------------------------------------------------------------------------------


@pytest.mark.consensus
@pytest.mark.parametrize(
    "database", ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)]
)
def test_etcd_rotation_writes_with_the_revision_and_drops_a_stale_one(
    etcd_cluster: EtcdCluster,
    database: str,
    request: pytest.FixtureRequest,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    rotation = load("etcd_fenced", None, monkeypatch)
    monkeypatch.setattr(rotation, "ENDPOINTS", etcd_cluster.endpoints)
    key = f"lock:signing-key:{time.monotonic_ns()}"
    real_lock = rotation.EtcdLock
    monkeypatch.setattr(rotation, "EtcdLock", lambda e, _k, **kw: real_lock(e, key, **kw))
    if database == "sqlite":
        db: Any = sqlite3.connect(tmp_path / "keys.sqlite3")
    else:
        db = psycopg.connect(request.getfixturevalue("pg"))
    try:
        monkeypatch.setattr(rotation, "new_key", lambda: "key-1")
        assert rotation.rotate_signing_key(db)
        first = rotation.SqlFencedStore(db, "signing-key").read()
        assert first.value == "key-1"
        assert first.token > 0

        def newer_rotation_first() -> str:
            # while we waited, a holder with a later revision stored its key
            rotation.SqlFencedStore(db, "signing-key").write(first.token + 10_000, "key-3")
            return "key-2"

        monkeypatch.setattr(rotation, "new_key", newer_rotation_first)
        assert not rotation.rotate_signing_key(db)
        assert rotation.SqlFencedStore(db, "signing-key").read().value == "key-3"

        with real_lock(etcd_cluster.endpoints, key, ttl_ms=2_000):
            assert not rotation.rotate_signing_key(db)  # busy: NotAcquired after 2 s
    finally:
        db.close()


# -- optimistic concurrency in SQL ------------------------------------------------------------


@pytest.mark.postgres
def test_optimistic_sql_loses_no_update_among_racing_writers_and_gives_up_when_bounded(
    pg: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    ledger = load("optimistic_sql", None, monkeypatch)
    monkeypatch.setattr(ledger, "DSN", pg)
    with psycopg.connect(pg, autocommit=True) as db:
        db.execute(
            "CREATE TABLE accounts (id BIGINT PRIMARY KEY, balance BIGINT NOT NULL,"
            " version BIGINT NOT NULL DEFAULT 0)"
        )
        db.execute("INSERT INTO accounts (id, balance) VALUES (7, 0)")

    def slow_settle(balance: int, cents: int) -> int:
        time.sleep(0.01)  # the work between read and write, where races happen
        return balance + cents

    monkeypatch.setattr(ledger, "settle", slow_settle)
    failures: list[BaseException] = []

    def pay() -> None:
        try:
            ledger.apply_payment(7, 5)
        except ledger.Conflict as error:  # bounded: some writers may give up
            failures.append(error)

    workers = [threading.Thread(target=pay) for _ in range(6)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    with psycopg.connect(pg) as db:
        balance, version = db.execute("SELECT balance, version FROM accounts").fetchone()  # type: ignore[misc]
    assert balance == 5 * (6 - len(failures))  # every accepted payment counted once
    assert version == 6 - len(failures)

    def always_overtaken(balance: int, cents: int) -> int:
        with psycopg.connect(pg, autocommit=True) as other:
            other.execute("UPDATE accounts SET version = version + 1 WHERE id = 7")
        return balance + cents

    monkeypatch.setattr(ledger, "settle", always_overtaken)
    with pytest.raises(ledger.Conflict, match="5 attempts"):
        ledger.apply_payment(7, 5)


# -- a payment with an idempotency key from the order ----------------------------------------


@pytest.mark.postgres
def test_payment_charges_once_through_retries_and_a_crash_before_commit(
    pg: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    shop = load("payment_idempotency", None, monkeypatch)
    monkeypatch.setattr(shop, "DSN", pg)
    with psycopg.connect(pg, autocommit=True) as db:
        db.execute("CREATE TABLE orders (id BIGINT PRIMARY KEY, status TEXT, charge_id TEXT)")
        db.execute("INSERT INTO orders VALUES (1, 'new', NULL), (2, 'new', NULL)")
    charges: dict[str, str] = {}  # the provider: one charge per idempotency key

    def provider(cents: int, idempotency_key: str) -> str:
        return charges.setdefault(idempotency_key, f"ch_{len(charges) + 1}")

    monkeypatch.setattr(shop, "charge", provider)
    assert shop.pay(1, 990) == "ch_1"
    assert shop.pay(1, 990) == "ch_1"  # a retry: recorded, the provider not called again

    def crash_after_charging(cents: int, idempotency_key: str) -> str:
        provider(cents, idempotency_key)
        raise ConnectionError("the worker died before COMMIT")

    monkeypatch.setattr(shop, "charge", crash_after_charging)
    with pytest.raises(ConnectionError):
        shop.pay(2, 500)
    monkeypatch.setattr(shop, "charge", provider)
    assert shop.pay(2, 500) == "ch_2"  # the same key: the provider's first charge, recorded
    assert len(charges) == 2
    with psycopg.connect(pg) as db:
        assert db.execute("SELECT status, charge_id FROM orders WHERE id = 2").fetchone() == (
            "paid",
            "ch_2",
        )


# -- serving stale while one task rebuilds --------------------------------------------------


def test_stale_prices_are_served_while_one_worker_rebuilds(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = load("stale_while_rebuild", backend, monkeypatch)
    r = backend.client()
    builds: list[int] = []

    async def compute() -> bytes:
        builds.append(1)
        await asyncio.sleep(0.05)
        return f"prices v{len(builds)}".encode()

    async def scenario() -> list[bytes | None]:
        monkeypatch.setattr(cache, "compute_prices", compute)
        cache.r = backend.async_client()
        served = [await cache.get_prices()]  # nothing cached: None, and a build starts
        await asyncio.gather(*cache.tasks)
        served.append(await cache.get_prices())  # fresh: served, no build
        r.delete("cache:prices:fresh")  # 60 s later: stale
        served += await asyncio.gather(*(cache.get_prices() for _ in range(5)))
        await asyncio.gather(*list(cache.tasks))
        served.append(await cache.get_prices())
        await cache.r.aclose()
        return served

    served = asyncio.run(scenario())
    assert served[0] is None
    assert served[1:7] == [b"prices v1"] * 6  # the stale value, at once, to every request
    assert served[7] == b"prices v2"
    assert len(builds) == 2  # five stale requests, one rebuild
    assert r.ttl("cache:prices:fresh") > 0


# -- the cron job on Sentinel -----------------------------------------------------------------


@pytest.mark.real_redis
def test_cron_on_sentinel_runs_on_the_primary_skips_when_held_and_reports_a_lost_key(
    sentinel_deployment: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import redis.sentinel

    sentinel_deployment.wait_ready()
    addresses = sentinel_deployment.sentinel_addresses

    class TestSentinel(redis.sentinel.Sentinel):
        def __init__(self, _sentinels: Any, **kwargs: Any) -> None:
            super().__init__(addresses, **kwargs)  # type: ignore[no-untyped-call]

    monkeypatch.setattr(redis.sentinel, "Sentinel", TestSentinel)
    cron = load("cron_sentinel", None, monkeypatch)
    primary = sentinel_deployment.sentinel().master_for("mymaster")
    primary.delete("lock:sync-invoices")
    runs: list[int] = []
    monkeypatch.setattr(
        cron, "sync_invoices", lambda: runs.append(primary.pttl("lock:sync-invoices"))
    )
    assert cron.main() == 0
    assert len(runs) == 1
    assert 0 < runs[0] <= 15 * 60_000
    assert not primary.exists("lock:sync-invoices")

    primary.set("lock:sync-invoices", "another run", px=60_000)
    assert cron.main() == 0
    assert len(runs) == 1  # skipped
    primary.delete("lock:sync-invoices")

    monkeypatch.setattr(cron, "sync_invoices", lambda: primary.delete("lock:sync-invoices"))
    assert cron.main() == 3  # as after a failover that lost the key


# -- the eviction policy ---------------------------------------------------------------------


def test_eviction_check_accepts_noeviction_and_refuses_what_can_evict_a_lock(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    check = load("eviction_check", backend, monkeypatch)
    if backend.name == "fakeredis":  # fakeredis has no CONFIG, as some managed services
        assert check.check_eviction() == "unknown"
        return
    r = backend.client()
    saved = r.config_get("maxmemory", "maxmemory-policy")
    try:
        r.config_set("maxmemory", "0")
        r.config_set("maxmemory-policy", "allkeys-lru")
        assert check.check_eviction() == "allkeys-lru"  # no memory limit: nothing is evicted
        r.config_set("maxmemory", "100mb")
        with pytest.raises(check.UnsafeEviction, match="any key"):
            check.check_eviction()
        r.config_set("maxmemory-policy", "volatile-ttl")
        with pytest.raises(check.UnsafeEviction, match="with a TTL"):
            check.check_eviction()
        r.config_set("maxmemory-policy", "noeviction")
        assert check.check_eviction() == "noeviction"
    finally:
        r.config_set("maxmemory", str(saved["maxmemory"]))
        r.config_set("maxmemory-policy", str(saved["maxmemory-policy"]))


# -- native compare: SET ... IFEQ ------------------------------------------------------------


@pytest.mark.parametrize(
    "servers",
    [
        pytest.param("valkey_servers", marks=pytest.mark.valkey, id="valkey-8.1"),
        pytest.param("valkey9_server", marks=pytest.mark.valkey9, id="valkey-9.1"),
    ],
)
def test_native_renewal_runs_on_valkey_and_stops_when_the_key_is_not_ours(
    servers: str, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The recipe as the page shows it, on the session's Valkey 8.1 and Valkey 9.1."""
    server = request.getfixturevalue(servers)
    backend = real_backend(server[0] if isinstance(server, list) else server, name=servers)
    search = load("native_renew", backend, monkeypatch)
    r = backend.client()
    ttls: list[int] = []
    monkeypatch.setattr(search, "index", lambda b: ttls.append(r.pttl(search.KEY)))
    with pytest.warns(UserWarning, match="ifeq"):  # redis-py 8.1 calls ifeq experimental
        assert search.rebuild_search(["a", "b", "c"]) == "done"
    assert len(ttls) == 3
    assert not r.exists(search.KEY)

    r.set(search.KEY, "another holder", px=60_000)
    assert search.rebuild_search(["a"]) == "busy"
    r.delete(search.KEY)

    monkeypatch.setattr(search, "index", lambda b: r.set(search.KEY, "B", px=60_000))
    with pytest.warns(UserWarning, match="ifeq"):
        assert search.rebuild_search(["a", "b"]) == "lost the lock"
    assert r.get(search.KEY) == b"B"  # neither renewed nor deleted: B's lock stands


# -- a scheduler that fires once ------------------------------------------------------------

#: A lease of a second, so that a deposed leader notices within a retry period (150 ms).
LEADER_TIMING: dict[str, Any] = {
    "lease_ms": 1000,
    "renew_deadline_ms": 600,
    "retry_period_ms": 150,
}


def _until(condition: Any, ceiling_s: float = 10.0) -> bool:
    deadline = time.monotonic() + ceiling_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def test_scheduler_fires_each_tick_once_even_when_a_skewed_instance_takes_over(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A leads and fires a tick, then is deposed; B, whose clock runs 0.8 s behind, is
    elected at once and reaches the same tick on its clock: the tick's key, left to expire,
    makes B skip it. Each leader waits while the other leads and stops once deposed."""
    r = backend.client()
    role = "lock:leader:scheduler"
    r.delete(role)
    fired: list[tuple[str, int, int]] = []
    deposed = threading.Event()

    def instance(name: str, behind_s: float) -> Any:
        module = load("scheduler_leader", backend, monkeypatch)
        real = module.Leader
        monkeypatch.setattr(module, "TICK_S", 1)  # a tick a second, not a minute
        monkeypatch.setattr(
            module, "Leader", lambda c, k, **kw: real(c, k, **{**kw, **LEADER_TIMING})
        )
        skewed = type("SkewedTime", (), {"time": staticmethod(lambda: time.time() - behind_s)})
        monkeypatch.setattr(module, "time", skewed)

        def fire(tick: int, token: int) -> None:
            fired.append((name, tick, token))
            if name == "A" and not deposed.is_set():
                deposed.set()
                r.pexpire(role, 1)  # A's role ends on the server (a pause, a failover)

        monkeypatch.setattr(module, "fire_due_jobs", fire)
        return module

    a, b = instance("A", 0.0), instance("B", 0.8)
    threads = [threading.Thread(target=m.lead, args=(n,)) for n, m in (("A", a), ("B", b))]
    threads[0].start()
    assert _until(lambda: r.exists(role))
    threads[1].start()  # B campaigns while A leads
    assert _until(lambda: deposed.is_set())
    threads[0].join(5)
    assert not threads[0].is_alive(), "A went on after it was deposed"
    assert _until(lambda: len(fired) >= 3)
    r.pexpire(role, 1)  # depose B too: B returns, as A did
    threads[1].join(5)
    assert not threads[1].is_alive()

    (first, *rest) = fired
    assert first[0] == "A"
    assert [who for who, _, _ in rest] == ["B"] * len(rest), fired
    ticks = [tick for _, tick, _ in fired]
    assert len(set(ticks)) == len(ticks), f"a tick fired twice: {fired}"
    assert ticks == sorted(ticks)
    assert rest[0][2] > first[2], "B's term has a larger token"
    assert r.get(f"tick:{first[1]}") == b"A"  # kept, not released: B found it
    assert 0 < r.pttl(f"tick:{first[1]}") <= 10_000


# -- a device controller: a leader on etcd with a lock-delay --------------------------------


def _revoke(endpoints: list[str], key: str) -> None:
    """End the lease the key is on, as a crashed or paused leader's lease ends."""
    import base64

    import urllib3

    found = urllib3.request(
        "POST", endpoints[0] + "/v3/kv/range", json={"key": base64.b64encode(key.encode()).decode()}
    ).json()
    lease = found["kvs"][0]["lease"]
    urllib3.request("POST", endpoints[0] + "/v3/lease/revoke", json={"ID": lease})


@pytest.mark.consensus
def test_device_controller_commands_while_leading_waits_while_taken_and_honours_the_delay(
    etcd_cluster: EtcdCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    valve = load("device_controller", None, monkeypatch)
    endpoints = etcd_cluster.endpoints
    monkeypatch.setattr(valve, "ENDPOINTS", endpoints)
    role = f"lock:leader:valve-{time.monotonic_ns()}"
    real = valve.Leader
    timing = {"lease_ms": 2000, "renew_deadline_ms": 1200, "retry_period_ms": 300}
    delay_ms = 2000  # the recipe's 15 s, shortened

    def leader(e: Any, _role: str, **kw: Any) -> Any:
        shortened = min(kw.get("lock_delay_ms", 0), delay_ms)  # the recipe's, if it has one
        return real(e, role, **{**kw, **timing, "lock_delay_ms": shortened})

    monkeypatch.setattr(valve, "Leader", leader)
    monkeypatch.setattr(valve, "decide", lambda reading: reading / 10)
    commands: list[tuple[float, float]] = []
    monkeypatch.setattr(valve, "set_valve", lambda o: commands.append((time.monotonic(), o)))

    assert valve.control("a", [1.0, 2.0]) == "done"
    assert [o for _, o in commands] == [0.1, 0.2]

    other = real(endpoints, role, name="other", **timing)
    assert other.campaign()
    result: list[str] = []
    standby = threading.Thread(target=lambda: result.append(valve.control("b", [3.0])))
    standby.start()
    time.sleep(1.0)
    assert len(commands) == 2, "a standby commanded while another led"
    other.resign()
    standby.join(10)
    assert result == ["done"]
    assert commands[-1][1] == 0.3

    revoked: list[float] = []

    def readings() -> Iterator[float]:
        yield 4.0
        _revoke(endpoints, role)  # the leader's lease ends unreleased: a crash, a pause
        revoked.append(time.monotonic())
        time.sleep(1.0)  # the keep-alive finds the lease gone within a retry period
        yield 5.0

    assert valve.control("a", readings()) == "deposed"
    assert [o for _, o in commands][-1] == 0.4, "no command after the lease ended"
    assert valve.control("b", [6.0]) == "done"
    waited = commands[-1][0] - revoked[0]
    assert waited >= delay_ms / 1000, f"commanded {waited:.2f} s after the crash"
