"""Which server each backend is, and what differs between them: ``SET ... IFEQ``.

Valkey 8.1 answers ``SET key value IFEQ old`` (set only if the current value is
``old``: a native compare-and-set); Redis has it from 8.4, so the Redis 7.0 the
session starts refuses it. The reference sends only commands and Lua scripts both
servers run; the tests named in ``tests/conftest.py``'s ``ON_VALKEY`` run on both.
"""

from __future__ import annotations

import importlib

import fakeredis
import pytest
import redis

from lockguide_lab.testbed import RedisServer
from tests.conftest import ON_VALKEY
from tests.support import Backend


def test_the_backend_is_the_server_it_is_named_after(backend: Backend) -> None:
    client = backend.client()
    if backend.name == "fakeredis":
        assert isinstance(client, fakeredis.FakeRedis)
        return
    info = client.info("server")
    if backend.name == "valkey":
        assert info.get("server_name") == "valkey", info
        assert str(info["valkey_version"]).startswith("8.1."), info["valkey_version"]
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
    for path, names in ON_VALKEY.items():
        module = importlib.import_module(path.removesuffix(".py").replace("/", "."))
        missing = [name for name in names if not callable(getattr(module, name, None))]
        assert not missing, f"{path}: {missing}"
