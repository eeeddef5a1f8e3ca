"""A server that stops answering costs the caller at most the lock's request timeout.

Real servers only: the server process is frozen with SIGSTOP, which no fake can imitate.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from lockguide import Lock
from lockguide_lab.testbed import RedisServer
from tests.support import start_redis_server

pytestmark = pytest.mark.real_redis

REQUEST_TIMEOUT_MS = 200


@pytest.fixture
def frozen_server(tmp_path: Path) -> Iterator[RedisServer]:
    """A dedicated server, frozen with SIGSTOP for the test and stopped afterwards."""
    server = start_redis_server(tmp_path / "frozen")
    with server.frozen():
        yield server
    server.stop()


def test_acquire_on_a_frozen_server_fails_within_the_request_timeout(
    frozen_server: RedisServer,
) -> None:
    # A client as most code creates it: no socket timeout, redis-py's default retries.
    client = redis.Redis(host=frozen_server.host, port=frozen_server.port)
    lock = Lock(
        client,
        "lock:frozen",
        ttl_ms=10_000,
        timeout_ms=600,
        request_timeout_ms=REQUEST_TIMEOUT_MS,
    )
    started = time.monotonic()
    assert lock.acquire() is False, "no answer is a failed try, not a raw redis-py error"
    waited_ms = (time.monotonic() - started) * 1000
    # Each try (its connection's handshake included) waits at most one request timeout,
    # and no try starts after the deadline: not a retry schedule, not a hang. The margin
    # absorbs a noisy machine.
    assert waited_ms < 600 + REQUEST_TIMEOUT_MS + 500
    assert isinstance(lock.last_error, redis.exceptions.TimeoutError)
    assert not lock.held
