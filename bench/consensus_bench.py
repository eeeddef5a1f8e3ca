"""What correctness costs: one acquire+release cycle of the consensus locks beside Redis's.

Run from the repository root (needs ``redis-server``, ``etcd`` and ZooKeeper)::

    .venv/bin/python -m bench.consensus_bench

It starts five ``redis-server`` processes, a three-member etcd cluster and a
three-server ZooKeeper ensemble (the lab's testbed, on loopback), then times
acquire+release of a lock nobody else wants for ``Lock``, ``FencedLock``,
``Redlock`` over five masters, ``EtcdLock`` and ``ZooKeeperLock``, in rotating
rounds as :mod:`bench.redlock_bench` does, with the same floor (``SET NX PX``
plus ``EVALSHA`` on one Redis). The consensus locks write through a quorum,
which is what the ratio shows; etcd always fsyncs its log before it answers.
ZooKeeper runs twice, in two ensembles: with ``forceSync=yes``, its default
(fsync before acknowledging, as etcd does), and with ``forceSync=no`` (what
the test suite's ensemble uses for speed), each row saying which. Both modes:
loopback, and every server behind a link that delays each direction.
"""

from __future__ import annotations

import argparse
import importlib.resources
import sys
import tempfile
from pathlib import Path
from typing import Protocol

import redis

from bench.redlock_bench import Contender, behind_links, links, measure, table_rows
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


def measure_mode(
    masters: list[redis.Redis],
    etcd_endpoints: list[str],
    zk_hosts: tuple[str, str],
    args: argparse.Namespace,
) -> list[str]:
    """One run of every contender against these addresses; the table's lines.

    ``zk_hosts``: the ensemble with ``forceSync=yes``, then the one with ``no``.
    """
    from kazoo.client import KazooClient

    one = masters[0]
    value = "f" * 40
    script = (importlib.resources.files("lockguide") / "scripts" / "release.lua").read_text()
    release = one.register_script(script)
    synced, unsynced = (KazooClient(hosts=h, timeout=10.0) for h in zk_hosts)
    for kazoo in (synced, unsynced):
        kazoo.start(timeout=10)
    try:
        locks: dict[str, Cycled] = {
            "lock": Lock(one, "bench:lock", ttl_ms=TTL_MS),
            "fenced": FencedLock(one, "bench:fenced", ttl_ms=TTL_MS),
            "redlock": Redlock(masters, "bench:redlock", ttl_ms=TTL_MS),
            "etcd": EtcdLock(etcd_endpoints, "bench:etcd", ttl_ms=TTL_MS),
            "zookeeper": ZooKeeperLock(synced, "/bench/zookeeper"),
            "zookeeper-nosync": ZooKeeperLock(unsynced, "/bench/zookeeper"),
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
            "zookeeper": "lockguide ZooKeeperLock, 3 servers, forceSync=yes (default)",
            "zookeeper-nosync": "lockguide ZooKeeperLock, 3 servers, forceSync=no",
        }
        group = [Contender("baseline: SET NX PX + EVALSHA, one node", floor, [])]
        group += [cycle(name) for name in labels]
        measure(group, args.rounds, args.cycles, args.warmup)
        return table_rows(group)
    finally:
        for kazoo in (synced, unsynced):
            kazoo.stop()
            kazoo.close()


def _address(url_or_host: str) -> tuple[str, int]:
    host, _, port = url_or_host.rpartition("//")[2].partition(":")
    return host, int(port.rstrip("/"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=10, help="turns each contender takes")
    parser.add_argument("--cycles", type=int, default=50, help="cycles per turn")
    parser.add_argument("--warmup", type=int, default=20, help="untimed cycles first")
    parser.add_argument(
        "--mode", choices=("loopback", "delayed", "both"), default="both", help="what to measure"
    )
    parser.add_argument("--delay-ms", type=float, default=0.5, help="delayed mode: ms each way")
    args = parser.parse_args(argv)
    with (
        tempfile.TemporaryDirectory(prefix="lockguide-bench-") as base,
        five_masters() as masters,
        EtcdCluster(Path(base) / "etcd") as etcd,
        ZooKeeperEnsemble(Path(base) / "zookeeper", force_sync=True) as zookeeper,
        ZooKeeperEnsemble(Path(base) / "zookeeper-nosync") as unsynced,
    ):
        ensembles = (zookeeper.hosts, unsynced.hosts)
        print(f"samples: {args.rounds * args.cycles} cycles per implementation, median shown")
        if args.mode in ("loopback", "both"):
            print("\nmode: loopback\n")
            print("\n".join(measure_mode(masters, etcd.endpoints, ensembles, args)))
        if args.mode in ("delayed", "both"):
            members = [_address(e) for e in etcd.endpoints]
            servers = [_address(h) for e in ensembles for h in e.split(",")]
            with (
                behind_links(masters, args.delay_ms) as slow_masters,
                links(members + servers, args.delay_ms) as addresses,
            ):
                endpoints = [f"http://{h}:{p}" for h, p in addresses[: len(members)]]
                behind = [f"{h}:{p}" for h, p in addresses[len(members) :]]
                half = len(behind) // 2
                hosts = (",".join(behind[:half]), ",".join(behind[half:]))
                print(f"\nmode: delayed link: +{args.delay_ms:g} ms each way to every server\n")
                print("\n".join(measure_mode(slow_masters, endpoints, hosts, args)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
