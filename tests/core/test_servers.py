"""Which server each backend is, and what differs between them: the native compares.

Valkey 8.1 answers ``SET key value IFEQ old`` (set only if the current value is
``old``: a native compare-and-set); Redis has it from 8.4, so the Redis 7.0 the
session starts refuses it. ``DELIFEQ key value`` (delete only if the value is
``value``: a native compare-and-delete) is Valkey 9.0's: Valkey 9.1 answers it,
Valkey 8.1 and Redis 7.0 refuse it (Redis 8.4's is ``DELEX key IFEQ value``, which
no server here has). The reference sends only commands and Lua scripts every
server runs; the tests named in ``tests/conftest.py``'s ``ON_VALKEY`` run on both.
"""

from __future__ import annotations

import importlib

import fakeredis
import pytest
import redis

from lockguide_lab.testbed import RedisServer
from tests.conftest import ON_VALKEY, ON_VALKEY9
from tests.support import Backend


def test_the_backend_is_the_server_it_is_named_after(backend: Backend) -> None:
    client = backend.client()
    if backend.name == "fakeredis":
        assert isinstance(client, fakeredis.FakeRedis)
        return
    info = client.info("server")
    if backend.name in ("valkey", "valkey9"):
        version = "9.1." if backend.name == "valkey9" else "8.1."
        assert info.get("server_name") == "valkey", info
        assert str(info["valkey_version"]).startswith(version), info["valkey_version"]
    else:
        assert backend.name == "redis-server"
        assert "valkey_version" not in info
        assert int(str(info["redis_version"]).split(".")[0]) >= 6
    client.close()


@pytest.mark.valkey
def test_valkey_answers_set_ifeq(valkey_servers: list[RedisServer]) -> None:
    server = valkey_servers[0]
    with redis.Redis(host=server.host, port=server.port) as client:
        client.delete("ifeq:k", "ifeq:missing")
        client.set("ifeq:k", "a")
        assert client.execute_command("SET", "ifeq:k", "b", "IFEQ", "a") is True
        assert client.get("ifeq:k") == b"b"
        assert client.execute_command("SET", "ifeq:k", "c", "IFEQ", "a") is None  # not "b"
        assert client.get("ifeq:k") == b"b"
        assert client.execute_command("SET", "ifeq:missing", "v", "IFEQ", "a") is None
        assert not client.exists("ifeq:missing")


@pytest.mark.valkey
def test_valkey_8_1_refuses_delifeq(valkey_servers: list[RedisServer]) -> None:
    server = valkey_servers[0]
    with redis.Redis(host=server.host, port=server.port) as client:
        client.set("delifeq:k", "a")
        with pytest.raises(redis.ResponseError, match="unknown command"):
            client.execute_command("DELIFEQ", "delifeq:k", "a")
        assert client.get("delifeq:k") == b"a"


@pytest.mark.valkey9
def test_valkey_9_1_answers_delifeq_and_set_ifeq(valkey9_server: RedisServer) -> None:
    with redis.Redis(host=valkey9_server.host, port=valkey9_server.port) as client:
        info = client.info("server")
        assert info.get("server_name") == "valkey", info
        assert str(info["valkey_version"]).startswith("9.1."), info["valkey_version"]
        client.flushall()
        client.set("k", "a")
        assert client.execute_command("DELIFEQ", "k", "b") == 0  # not ours: kept
        assert client.get("k") == b"a"
        assert client.execute_command("DELIFEQ", "missing", "a") == 0
        assert client.execute_command("SET", "k", "b", "IFEQ", "a", "PX", 60_000) is True
        assert client.execute_command("SET", "k", "c", "IFEQ", "a") is None
        assert client.get("k") == b"b"
        assert 0 < client.pttl("k") <= 60_000
        assert client.execute_command("DELIFEQ", "k", "b") == 1  # ours: deleted
        assert not client.exists("k")
        client.rpush("list", "b")
        with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
            client.execute_command("DELIFEQ", "list", "b")
        with pytest.raises(redis.ResponseError, match="unknown command"):  # Redis 8.4's
            client.execute_command("DELEX", "k", "IFEQ", "b")


@pytest.mark.real_redis
def test_redis_7_0_refuses_delifeq(redis_server: RedisServer) -> None:
    """No Redis has DELIFEQ (Redis 8.4's compare-and-delete is DELEX ... IFEQ)."""
    with redis.Redis(host=redis_server.host, port=redis_server.port) as client:
        client.set("delifeq:k", "a")
        with pytest.raises(redis.ResponseError, match="unknown command"):
            client.execute_command("DELIFEQ", "delifeq:k", "a")
        assert client.get("delifeq:k") == b"a"


@pytest.mark.real_redis
def test_redis_before_8_4_refuses_set_ifeq(redis_server: RedisServer) -> None:
    with redis.Redis(host=redis_server.host, port=redis_server.port) as client:
        version = tuple(int(p) for p in str(client.info("server")["redis_version"]).split("."))
        client.set("ifeq:k", "a")
        if version >= (8, 4):
            assert client.execute_command("SET", "ifeq:k", "b", "IFEQ", "a") is True
            return
        with pytest.raises(redis.ResponseError):
            client.execute_command("SET", "ifeq:k", "b", "IFEQ", "a")
        assert client.get("ifeq:k") == b"a"


def test_every_test_named_to_run_on_valkey_exists() -> None:
    """A renamed test would silently drop out of the Valkey runs: this catches it."""
    for path, names in ON_VALKEY9.items():
        assert set(names) <= set(ON_VALKEY[path]), path  # Valkey 9.1 runs a part of them
    for path, names in ON_VALKEY.items():
        module = importlib.import_module(path.removesuffix(".py").replace("/", "."))
        missing = [name for name in names if not callable(getattr(module, name, None))]
        assert not missing, f"{path}: {missing}"
