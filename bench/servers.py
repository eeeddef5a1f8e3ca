"""Five throw-away ``redis-server`` processes for a benchmark run.

They are started exactly as the test suite starts them (pytest-redis's
``RedisExecutor`` on free loopback ports, see ``tests/support.py``), with
snapshots switched off so no background save lands inside a measurement.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import redis

from tests.support import start_redis_servers


@contextmanager
def five_masters(count: int = 5) -> Iterator[list[redis.Redis]]:
    """Start ``count`` independent servers; yield one client for each."""
    with tempfile.TemporaryDirectory(prefix="lockguide-bench-") as tmp:
        executors = start_redis_servers(Path(tmp), count)
        clients = [redis.Redis(host=e.host, port=e.port) for e in executors]
        try:
            for client in clients:
                client.config_set("save", "")
            yield clients
        finally:
            for client in clients:
                client.close()
            for executor in executors:
                executor.stop()


def server_version(client: redis.Redis) -> str:
    info = client.info("server")
    return str(info["redis_version"])
