"""A deliberately broken lock, kept to prove the audit catches the classic mistakes.

Do not use it. Everything about it is wrong on purpose:

* the value is ``hostname:pid:counter``, which anyone can predict;
* ``SET NX`` with no TTL, so a crashed holder keeps the lock forever;
* release is a bare ``DEL``, so a stale holder deletes whoever holds it now;
* waiting retries after a fixed 100 ms.
"""

from __future__ import annotations

import itertools
import os
import socket
import time
from collections.abc import Sequence

import redis

from lockguide_lab.audit.adapter import DEFAULT, Server, TtlSpec, Unsupported

_counter = itertools.count(1)


class BrokenLock:
    """The lock most first attempts look like. Broken on purpose; see the module."""

    def __init__(self, client: redis.Redis, key: str) -> None:
        self.client = client
        self.key = key

    def acquire(self, wait_ms: float = 0) -> bool:
        value = f"{socket.gethostname()}:{os.getpid()}:{next(_counter)}"
        give_up = time.monotonic() + wait_ms / 1000.0
        while not self.client.set(self.key, value, nx=True):
            if time.monotonic() >= give_up:
                return False
            time.sleep(0.1)
        return True

    def release(self) -> None:
        self.client.delete(self.key)


class BrokenHolder:
    def __init__(self, lock: BrokenLock) -> None:
        self.lock = lock

    def acquire(self, wait_ms: float = 0) -> bool:
        return self.lock.acquire(wait_ms)

    def acquire_default(self) -> bool:
        return self.lock.acquire(float("inf"))  # waits as long as it takes

    def release(self) -> bool | None:
        self.lock.release()
        return None

    def extend(self, ttl_ms: int) -> bool | None:
        raise Unsupported("the broken lock cannot extend")

    def token(self) -> int | None:
        return None

    def lost(self) -> bool | None:
        return None


class BrokenAdapter:
    name = "broken lock (bare DEL, predictable value, no TTL)"
    version = "test"
    multi_master = False
    ttl_required = False

    def __init__(self, servers: Sequence[Server]) -> None:
        self.client: redis.Redis = servers[0].connect()

    def holder(self, key: str, ttl_ms: TtlSpec = DEFAULT, *, renew: bool = False) -> BrokenHolder:
        if renew:
            raise Unsupported("no automatic renewal")
        return BrokenHolder(BrokenLock(self.client, key))  # ignores any TTL: that is the bug

    def close(self) -> None:
        self.client.close()


def adapter(servers: Sequence[Server]) -> BrokenAdapter:
    """``lockguide-audit lockguide_lab.audit.adapters.broken:adapter``"""
    return BrokenAdapter(servers)
