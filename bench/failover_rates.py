"""A failover's double grant, with and without ``replicas=1``, on real Sentinel and Cluster.

Run from the repository root::

    .venv/bin/python -m bench.failover_rates --runs 40

Each run races A's acquire against replication being cut: the replica is frozen and its
link killed (:func:`~lockguide_lab.testbed.deployments.hold_back_replication`) at a moment
drawn uniformly from the 20 ms around A's request, so about half of A's grants are made
after the cut, which the replica never sees. The primary is then killed and the replica
promoted: by the Sentinels, or by the Cluster. B then asks the new primary for the lock.

* **double grant**: A's acquire said ``True`` (its lease, 30 s, far from over) and so did B's;
* **A refused**: A's acquire said ``False`` (with ``replicas=1``: too few acknowledgements);
* **B refused**: the key was on the new primary (a grant A gave up, a delete that never
  reached the replica: the TTL frees it).

A is a ``Lock`` with ``replicas=0`` or ``replicas=1`` (its public arguments, nothing more);
B a plain ``Lock``, asking only whether the new primary has the key (with ``replicas=1`` it
would be refused until a replica rejoins: the only one was just promoted).
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import redis
from redis.cluster import RedisCluster

from bench.rates import wilson
from lockguide import Lock
from lockguide_lab.testbed import RedisServer
from lockguide_lab.testbed.deployments import (
    ClusterDeployment,
    SentinelDeployment,
    crash_before_replication,
    hold_back_replication,
    wait_until,
)

TTL_MS = 30_000
#: One run: (A still holds it after the failover, B got it, A's acquire said True).
Outcome = tuple[bool, bool, bool]
#: The Sentinels' failover-timeout (2 s) keeps a service from failing over again for twice
#: that: each run's crash waits until then, so the promotion is not held back.
SPACING_S = 4.5
#: The cut is drawn from [0, 2 * WINDOW_S] after the start; A asks at WINDOW_S.
WINDOW_S = 0.010


@dataclass
class Row:
    deployment: str
    replicas: int
    runs: int = 0
    double: int = 0
    a_refused: int = 0
    b_refused: int = 0

    def record(self, a_holds: bool, b_got: bool, a_got: bool) -> None:
        self.runs += 1
        self.double += a_holds and b_got
        self.a_refused += not a_got
        self.b_refused += not b_got

    def cells(self) -> list[str]:
        low, high = wilson(self.double, self.runs)
        way = "broken" if self.replicas == 0 else "fixed"
        return [
            f"{self.deployment} failover, `replicas={self.replicas}`",
            way,
            f"{self.double} / {self.runs}: {100 * self.double / self.runs:.1f} % "
            f"({100 * low:.1f}-{100 * high:.1f})",
            f"{self.a_refused} / {self.runs}",
            f"{self.b_refused} / {self.runs}",
        ]


def _synced(primary: RedisServer, tag: str) -> bool:
    """A write on ``primary`` in ``tag``'s slot that its replica acknowledges (``WAIT``)."""
    with primary.admin() as admin, admin.pipeline(transaction=False) as pipe:
        pipe.set(f"{{{tag}}}:sync", 1)
        pipe.wait(1, 500)
        return int(pipe.execute()[1]) >= 1


def race(cut: Callable[[], None], acquire: Callable[[], bool], rng: random.Random) -> bool:
    """Run ``cut`` at a random moment in the window, ``acquire`` in its middle; its answer."""
    at = rng.uniform(0.0, 2 * WINDOW_S)
    start = threading.Barrier(2)

    def cutter() -> None:
        start.wait()
        time.sleep(at)
        cut()

    thread = threading.Thread(target=cutter)
    thread.start()
    start.wait()
    time.sleep(WINDOW_S)
    try:
        return acquire()
    finally:
        thread.join()


def sentinel_run(
    deployment: SentinelDeployment, replicas: int, n: int, rng: random.Random
) -> Outcome:
    """One run on the Sentinel pair."""
    deployment.wait_ready()
    key = f"lock:{{failover-{n}}}"
    primary, replica = deployment.primary(), deployment.replica()
    client = cast(redis.Redis, deployment.sentinel().master_for(deployment.service))  # type: ignore[no-untyped-call]
    a = Lock(client, key, ttl_ms=TTL_MS, replicas=replicas)
    time.sleep(max(0.0, _LAST_FAILOVER.get(id(deployment), 0.0) + SPACING_S - time.monotonic()))
    a_got = race(lambda: hold_back_replication(primary, replica), _try(a), rng)
    _LAST_FAILOVER[id(deployment)] = time.monotonic()
    crash_before_replication(primary, replica)
    deployment.wait_for_new_primary(primary)
    new = cast(redis.Redis, deployment.sentinel().master_for(deployment.service))  # type: ignore[no-untyped-call]
    b_got = Lock(new, key, ttl_ms=TTL_MS).acquire(blocking=False)
    held = a.held and a.validity_remaining_ms() > 0
    return held and a_got, b_got, a_got


def cluster_run(cluster: ClusterDeployment, replicas: int, n: int, rng: random.Random) -> Outcome:
    """One run on the Cluster: the master of the key's slot fails over to its replica."""
    cluster.wait_ready()
    tag = f"failover-{n}"
    key = f"lock:{{{tag}}}"
    master = cluster.master_of(key)
    replica = cluster.replica_of(master)
    wait_until(lambda: _synced(master, tag), "the replica to be in sync")
    a = Lock(cluster.client(), key, ttl_ms=TTL_MS, replicas=replicas)
    a_got = race(lambda: hold_back_replication(master, replica), _try(a), rng)
    crash_before_replication(master, replica)
    cluster.wait_for_promotion(replica)
    b_client = RedisCluster(host=replica.host, port=replica.port, socket_timeout=5)
    b_got = Lock(b_client, key, ttl_ms=TTL_MS).acquire(blocking=False)
    b_client.close()
    held = a.held and a.validity_remaining_ms() > 0
    return held and a_got, b_got, a_got


_LAST_FAILOVER: dict[int, float] = {}


class Bed:
    """A deployment, healed after each run; made again from scratch (``make``) when it cannot
    be: rarely, the restarted primary and the Sentinels' own reconfiguration cross, and the
    state waited for never comes. A run's outcome is recorded before the heal."""

    def __init__(self, now: Any, make: Callable[[], Any] | None = None) -> None:
        self.now, self.make, self.remade = now, make, 0

    def heal(self) -> None:
        try:
            self.now.heal()
            return
        except TimeoutError as error:
            if self.make is None:
                raise
            print(f"(heal failed: {error}; a fresh deployment)", file=sys.stderr, flush=True)
        self.now.stop()
        self.now = self.make()
        self.remade += 1


def _try(lock: Lock) -> Callable[[], bool]:
    return lambda: lock.acquire(blocking=False)


def table(rows: list[Row]) -> str:
    head = ["condition", "way", "double grant (95 % interval)", "A refused", "B refused"]
    lines = ["| " + " | ".join(head) + " |", "| --- | --- | ---: | ---: | ---: |"]
    lines += ["| " + " | ".join(row.cells()) + " |" for row in rows]
    return "\n".join(lines)


@contextmanager
def deployments(which: str) -> Iterator[dict[str, Bed]]:
    """The deployments asked for, started in a temporary folder and stopped after."""
    beds: dict[str, Bed] = {}
    kinds = {"Sentinel": SentinelDeployment, "Cluster": ClusterDeployment}
    with tempfile.TemporaryDirectory(prefix="failover-rates-") as base:

        def maker(kind: Any) -> Callable[[], Any]:
            return lambda: kind(Path(tempfile.mkdtemp(dir=base)))

        try:
            for name, kind in kinds.items():
                if which in (name.lower(), "both"):
                    beds[name] = Bed(maker(kind)(), maker(kind))
            yield beds
        finally:
            for bed in beds.values():
                bed.now.stop()


def rows_for(bed: Bed, name: str, runs: int, rng: random.Random) -> list[Row]:
    """Both conditions on one deployment, their runs interleaved (so load hits them alike)."""
    rows = [Row(name, 0), Row(name, 1)]
    for n in range(runs):
        for row in rows:
            deployment = bed.now
            one = sentinel_run if isinstance(deployment, SentinelDeployment) else cluster_run
            row.record(*one(deployment, row.replicas, 2 * n + row.replicas, rng))
            bed.heal()
        print(f"{name}: {n + 1} of {runs} runs each", file=sys.stderr, flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=40, help="runs per condition")
    parser.add_argument("--on", choices=["sentinel", "cluster", "both"], default="both")
    parser.add_argument("--seed", type=int, default=2026)
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    rng = random.Random(args.seed)
    rows: list[Row] = []
    with deployments(args.on) as started:
        for name, bed in started.items():
            for row in rows_for(bed, name, args.runs, rng):
                rows.append(row)
                print(" | ".join(row.cells()), file=sys.stderr, flush=True)
    remade = sum(bed.remade for bed in started.values())
    print(f"seed {args.seed}, {args.runs} runs each, TTL {TTL_MS} ms, {remade} remade\n")
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
