"""What correctness costs: one acquire+release cycle of the consensus locks beside Redis's.

Run from the repository root (needs ``redis-server``, ``etcd`` and ZooKeeper)::

    .venv/bin/python -m bench.consensus_bench

It starts five ``redis-server`` processes, a three-member etcd cluster and a
three-server ZooKeeper ensemble (the lab's testbed, on loopback), then times
acquire+release of a lock nobody else wants for ``Lock``, ``FencedLock``,
``Redlock`` over five masters, ``EtcdLock`` and ``ZooKeeperLock``, in rotating
rounds as :mod:`bench.redlock_bench` does, with the same floor (``SET NX PX``
plus ``EVALSHA`` on one Redis). The consensus locks write through a quorum
(and etcd and ZooKeeper each fsync their log), which is what the ratio shows.
Loopback only: the delayed-link mode of the Redis benchmark is not run here.
"""

from __future__ import annotations

import argparse
import importlib.resources
import sys
import tempfile
from pathlib import Path
from typing import Protocol

from bench.redlock_bench import Contender, measure, table_rows
from bench.servers import five_masters
from lockguide import FencedLock, Lock, Redlock
from lockguide.etcd import EtcdLock
from lockguide.zookeeper import ZooKeeperLock
from lockguide_lab.testbed.consensus import EtcdCluster, ZooKeeperEnsemble

TTL_MS = 10_000


class Cycled(Protocol):
    """What the benchmark does with each lock."""

    def acquire(self, *, blocking: bool = True) -> bool: ...
    def release(self) -> object: ...


def main(argv: list[str] | None = None) -> int:
    from kazoo.client import KazooClient

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=10, help="turns each contender takes")
    parser.add_argument("--cycles", type=int, default=50, help="cycles per turn")
    parser.add_argument("--warmup", type=int, default=20, help="untimed cycles first")
    args = parser.parse_args(argv)
    with (
        tempfile.TemporaryDirectory(prefix="lockguide-bench-") as base,
        five_masters() as masters,
        EtcdCluster(Path(base) / "etcd") as etcd,
        ZooKeeperEnsemble(Path(base) / "zookeeper") as zookeeper,
    ):
        one = masters[0]
        value = "f" * 40
        script = (importlib.resources.files("lockguide") / "scripts" / "release.lua").read_text()
        release = one.register_script(script)
        kazoo = KazooClient(hosts=zookeeper.hosts, timeout=10.0)
        kazoo.start(timeout=10)
        locks: dict[str, Cycled] = {
            "lock": Lock(one, "bench:lock", ttl_ms=TTL_MS),
            "fenced": FencedLock(one, "bench:fenced", ttl_ms=TTL_MS),
            "redlock": Redlock(masters, "bench:redlock", ttl_ms=TTL_MS),
            "etcd": EtcdLock(etcd.endpoints, "bench:etcd", TTL_MS),
            "zookeeper": ZooKeeperLock(kazoo, "/bench/zookeeper"),
        }

        def floor() -> None:
            one.set("bench:floor", value, nx=True, px=TTL_MS)
            release(keys=["bench:floor"], args=[value])

        def cycle(name: str) -> Contender:
            lock = locks[name]

            def run() -> None:
                lock.acquire(blocking=False)
                lock.release()

            return Contender(labels[name], run, [])

        labels = {
            "lock": "lockguide Lock, one Redis",
            "fenced": "lockguide FencedLock, one Redis",
            "redlock": f"lockguide Redlock, {len(masters)} masters",
            "etcd": "lockguide EtcdLock, 3-member etcd",
            "zookeeper": "lockguide ZooKeeperLock, 3-server ZooKeeper",
        }
        group = [Contender("floor: SET NX PX + EVALSHA, one node", floor, [])]
        group += [cycle(name) for name in labels]
        measure(group, args.rounds, args.cycles, args.warmup)
        print(f"samples: {args.rounds * args.cycles} cycles per implementation, median shown")
        print("\n".join(table_rows(group)))
        kazoo.stop()
        kazoo.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
