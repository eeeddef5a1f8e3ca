"""Split votes under contention: random retry delay against a fixed one.

Run from the repository root::

    .venv/bin/python -m bench.split_vote

It starts five ``redis-server`` processes of its own, then forks K client
processes (8 by default). In every round all K clients are released together
(a barrier) and race for a fresh Redlock key, each retrying until the round's
window closes; a winner keeps the lock. A round in which *nobody* won is a
split vote that never resolved: every try found the masters divided between
contenders, none with a majority.

The experiment runs twice with the same mean pause between tries: once drawn
at random from ``(low, high)``, as ``Redlock`` does, and once fixed at the
middle of that range, which is what a client with a constant retry delay
does. (``Redlock`` refuses a fixed range, so the fixed run hands it a random
source that always draws the midpoint.) It prints the share of rounds nobody
won in each mode, and checks that no round ever had two winners.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import random
import sys
from dataclasses import dataclass
from multiprocessing.sharedctypes import Synchronized
from multiprocessing.synchronize import Barrier

import redis

from bench.servers import five_masters
from lockguide import Redlock
from lockguide.redlock import Attempt


class Tries:
    """Counts a Redlock's tries (each one SET round on all masters), as its ``on_attempt``."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, attempt: Attempt) -> None:
        self.count += 1


class FixedDraw(random.Random):
    """A random source that always draws the middle of the range: a fixed retry delay."""

    def uniform(self, a: float, b: float) -> float:
        return (a + b) / 2


@dataclass(frozen=True)
class Setup:
    addresses: list[tuple[str, int]]
    rounds: int
    delay_ms: tuple[float, float]
    window_ms: float
    fixed: bool


def client(
    setup: Setup,
    barrier: Barrier,
    wins: list[Synchronized[int]],
    winner_tries: list[Synchronized[int]],
) -> None:
    masters = [redis.Redis(host=h, port=p) for h, p in setup.addresses]
    rng = FixedDraw() if setup.fixed else random.Random(os.getpid())
    mode = "fixed" if setup.fixed else "random"
    for r in range(setup.rounds):
        tries = Tries()
        lock = Redlock(
            masters,
            f"lock:split:{mode}:{r}",
            ttl_ms=10_000,
            retry_delay_ms=setup.delay_ms,
            rng=rng,
            on_attempt=tries,
        )
        if r == 0:  # open the connections before the first race
            lock.acquire(blocking=False) and lock.release()
            tries.count = 0
        barrier.wait()
        if lock.acquire(timeout_ms=setup.window_ms):
            winner_tries[r].value = tries.count
            with wins[r].get_lock():
                wins[r].value += 1
        barrier.wait()  # the winner holds until every contender has given up


@dataclass(frozen=True)
class Tally:
    first_try: int  # rounds the first try decided
    second_try: int  # the first try split; the next one decided
    later_try: int  # it took three tries or more
    unresolved: int  # nobody won within the window: the split never resolved
    double: int  # rounds with two winners: must be 0


def run(setup: Setup, clients: int) -> Tally:
    ctx = multiprocessing.get_context("fork")
    barrier = ctx.Barrier(clients)
    wins = [ctx.Value("i", 0) for _ in range(setup.rounds)]
    winner_tries = [ctx.Value("i", 0) for _ in range(setup.rounds)]
    procs = [
        ctx.Process(target=client, args=(setup, barrier, wins, winner_tries))
        for _ in range(clients)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
        if p.exitcode != 0:
            raise RuntimeError(f"a client process failed (exit code {p.exitcode})")
    counts = [w.value for w in wins]
    tries = [t.value for t, c in zip(winner_tries, counts, strict=True) if c]
    return Tally(
        first_try=tries.count(1),
        second_try=tries.count(2),
        later_try=sum(1 for t in tries if t > 2),
        unresolved=counts.count(0),
        double=sum(1 for c in counts if c > 1),
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--low-ms", type=float, default=10.0, help="shortest retry pause")
    parser.add_argument("--high-ms", type=float, default=30.0, help="longest retry pause")
    parser.add_argument("--window-ms", type=float, default=100.0, help="how long each round lasts")
    args = parser.parse_args(argv)
    with five_masters() as masters:
        addresses = [
            (
                m.connection_pool.connection_kwargs["host"],
                m.connection_pool.connection_kwargs["port"],
            )
            for m in masters
        ]
        print(
            f"{args.clients} clients, {len(masters)} masters, {args.rounds} rounds of "
            f"{args.window_ms:.0f} ms; pause between tries: random in "
            f"[{args.low_ms:.0f}, {args.high_ms:.0f}] ms, or fixed at "
            f"{(args.low_ms + args.high_ms) / 2:.0f} ms"
        )
        print()
        print(
            "| retry delay | won at the first try | at the second | third or later "
            "| never: split-vote rate | two winners |"
        )
        print("| --- | ---: | ---: | ---: | ---: | ---: |")
        for fixed in (False, True):
            setup = Setup(
                addresses, args.rounds, (args.low_ms, args.high_ms), args.window_ms, fixed
            )
            out = run(setup, args.clients)
            n = args.rounds
            print(
                f"| {'fixed' if fixed else 'random'} | {out.first_try} | {out.second_try} "
                f"| {out.later_try} | {out.unresolved} / {n} ({100 * out.unresolved / n:.1f}%) "
                f"| {out.double} |"
            )
            for m in masters:
                m.flushall()
    return 0


if __name__ == "__main__":
    sys.exit(main())
