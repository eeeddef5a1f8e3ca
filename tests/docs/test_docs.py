"""Every Python block in docs/ is run, and its ``#>`` output lines are checked.

Blocks use plain ``redis.Redis()``; while a block runs, ``redis.Redis`` is the
test backend's client class, so the same block runs once on fakeredis and once
on a real redis-server. ``pytest --update-examples`` rewrites the ``#>`` lines
after an intended change.

Blocks that include a file (``--8<--``) are skipped here: the included files in
``snippets/`` are run by ``test_snippets.py``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import psycopg
import pytest
from pytest_examples import CodeExample, EvalExample, find_examples

from lockguide_lab.testbed import RedisServer
from tests.support import Backend, real_backend

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
INCLUDE_MARK = "--8<--"

EXAMPLES = [ex for ex in find_examples(DOCS) if INCLUDE_MARK not in ex.source]


def on_valkey9(example: CodeExample) -> bool:
    """Blocks fenced ``test="valkey9"`` use Valkey 9.0's ``DELIFEQ``: they run on the
    session's Valkey 9.1 only (``test_docs_example_on_valkey9``)."""
    return bool(example.prefix_settings().get("test") == "valkey9")


VALKEY9_EXAMPLES = [ex for ex in EXAMPLES if on_valkey9(ex)]


def run_checked(example: CodeExample, eval_example: EvalExample) -> None:
    """Lint the block, then run it and compare (or, on request, rewrite) its output."""
    eval_example.set_config(line_length=100, quotes="either", target_version="py310")
    if eval_example.update_examples:
        eval_example.run_print_update(example)
    else:
        eval_example.lint_ruff(example)
        eval_example.run_print_check(example)


def test_docs_have_examples() -> None:
    pages = {ex.path.name for ex in EXAMPLES}
    assert "single-instance.md" in pages
    assert len(EXAMPLES) >= 4


def _marked(example: CodeExample) -> Any:
    """Blocks fenced ``test="consensus"`` need the session's etcd and ZooKeeper clusters."""
    if example.prefix_settings().get("test") == "consensus":
        return pytest.param(example, marks=pytest.mark.consensus)
    return example


@pytest.mark.parametrize("example", [_marked(ex) for ex in EXAMPLES if not on_valkey9(ex)], ids=str)
def test_docs_example(
    example: CodeExample,
    eval_example: EvalExample,
    backend: Backend,
    monkeypatch: pytest.MonkeyPatch,
    request: pytest.FixtureRequest,
    tmp_path: Path,
) -> None:
    settings = example.prefix_settings()
    if settings.get("test") == "skip":
        reason = settings.get("reason")
        assert reason, f'{example}: a skipped block must say why on its fence: reason="..."'
        pytest.skip(reason)
    if settings.get("test") == "consensus":  # their addresses, as a deployment would set them
        etcd = request.getfixturevalue("etcd_cluster")
        zookeeper = request.getfixturevalue("zookeeper_ensemble")
        monkeypatch.setenv("ETCD_ENDPOINTS", ",".join(etcd.endpoints))
        monkeypatch.setenv("ZOOKEEPER_HOSTS", zookeeper.hosts)
        monkeypatch.chdir(tmp_path)  # the block's own files (ledger.db) stay out of the tree
    backend.patch_redis_module(monkeypatch)
    run_checked(example, eval_example)


@pytest.mark.valkey9
@pytest.mark.parametrize("example", VALKEY9_EXAMPLES, ids=str)
def test_docs_example_on_valkey9(
    example: CodeExample,
    eval_example: EvalExample,
    valkey9_server: RedisServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real_backend(valkey9_server, name="valkey9").patch_redis_module(monkeypatch)
    run_checked(example, eval_example)


def test_the_native_compare_and_delete_block_runs_on_valkey9() -> None:
    """The your-redis.md block that shows DELIFEQ is the one the Valkey 9.1 test runs."""
    pages = [str(ex.path.relative_to(DOCS)) for ex in VALKEY9_EXAMPLES]
    assert pages == ["your-redis.md"], pages
    assert "DELIFEQ" in VALKEY9_EXAMPLES[0].source


def test_skipped_blocks_are_only_where_their_owner_is_making_them_run() -> None:
    """No block is skipped; the consensus page's two are being made to run on the
    session's clusters (then this set is emptied)."""
    skipped = {
        str(ex.path.relative_to(DOCS))
        for ex in EXAMPLES
        if ex.prefix_settings().get("test") == "skip"
    }
    assert skipped <= {"correct/consensus.md"}, skipped


def sql_blocks(page: str) -> list[str]:
    text = (DOCS / page).read_text("utf-8")
    return re.findall(r"^```sql\n(.*?)^```", text, flags=re.S | re.M)


@pytest.mark.postgres
def test_the_fencing_pages_sql_accepts_each_token_once_and_refuses_older_ones(pg: str) -> None:
    """The schema and UPDATE shown under "In SQL", run on PostgreSQL as written
    (``:name`` parameters become psycopg's ``%(name)s``)."""
    (block,) = sql_blocks("correct/fencing.md")
    alter, update = (part.strip() for part in block.split(";") if part.strip())
    update = re.sub(r":(\w+)", r"%(\1)s", update)
    with psycopg.connect(pg, autocommit=True) as db:
        db.execute("CREATE TABLE accounts (id BIGINT PRIMARY KEY, balance BIGINT NOT NULL)")
        db.execute("INSERT INTO accounts VALUES (7, 100)")  # a row from before the column
        db.execute(alter)

        def write(token: int, balance: int) -> int:
            return db.execute(update, {"id": 7, "token": token, "balance": balance}).rowcount

        assert write(34, 250) == 1
        assert write(34, 260) == 0  # one write per token
        assert write(33, 100) == 0  # an older token
        assert db.execute("SELECT balance, fence_token FROM accounts").fetchone() == (250, 34)

        # Without NOT NULL DEFAULT 0 the old row's token is NULL, and NULL < 35 refuses all.
        db.execute("ALTER TABLE accounts ALTER COLUMN fence_token DROP NOT NULL")
        db.execute("UPDATE accounts SET fence_token = NULL")
        assert write(35, 300) == 0
