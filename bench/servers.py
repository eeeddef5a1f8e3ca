"""Five throw-away ``redis-server`` processes for a benchmark run.

They are the lab's testbed servers (:class:`lockguide_lab.testbed.RedisServer`,
pytest-redis's executor on free loopback ports), the same the test suite
starts, with snapshots off so no background save lands inside a measurement.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import redis

from lockguide_lab.testbed import servers


@contextmanager
def five_masters(count: int = 5) -> Iterator[list[redis.Redis]]:
    """Start ``count`` independent servers; yield one client for each."""
    with servers(count) as started:
        clients = [redis.Redis(host=s.host, port=s.port) for s in started]
        try:
            yield clients
        finally:
            for client in clients:
                client.close()


def server_version(client: redis.Redis) -> str:
    info = client.info("server")
    return str(info["redis_version"])
