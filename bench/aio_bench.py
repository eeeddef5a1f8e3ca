"""One acquire+release cycle on ``redis.asyncio``: lockguide's async Redlock, pottery's, a floor.

Run from the repository root::

    .venv/bin/python -m bench.aio_bench

It starts five ``redis-server`` processes of its own on free loopback ports (the
lab's testbed servers, as ``bench.redlock_bench`` does), then times, in one
event loop, many acquire+release cycles of a lock nobody else wants over the
five masters:

* the floor: ``SET key value NX PX ttl`` on the five masters through
  ``asyncio.gather``, then ``EVALSHA`` of the release script on the five through
  ``asyncio.gather`` (two round trips in parallel: the least any Redlock with a
  safe release can do);
* ``lockguide.aio.Redlock``: ``acquire(blocking=False)`` and ``release()``;
* pottery's ``AIORedlock``: the same two calls.

The contenders take turns in rounds, in a rotating order, so a noisy moment on
the machine is shared. It prints the median cycle and its ratio to the floor,
in two modes, as ``bench.redlock_bench`` does: **loopback** (the servers
directly, which exaggerates client CPU) and **delayed** (the lab's testbed link
between the client and every server, adding ``--delay-ms``, 0.5 by default, each
way, in a process of its own).
Nothing here is part of the test suite; ``tests/lab/test_aio_bench.py`` only
checks that the command runs.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import importlib.metadata
import importlib.resources
import statistics
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import redis.asyncio

from bench.redlock_bench import links, machine
from lockguide import MajorityLost
from lockguide.aio import Redlock
from lockguide_lab.testbed import servers

TTL_MS = 10_000
#: Cycles that did not take the fast path (printed under the table; a busy machine).
MISSES: Counter[str] = Counter()


@dataclass
class Contender:
    name: str
    cycle: Callable[[], Awaitable[object]]
    samples: list[float]


def contenders(masters: list[redis.asyncio.Redis]) -> list[Contender]:
    """Each contender runs one acquire+release of its own key per call."""
    from pottery import AIORedlock

    n = len(masters)
    value = "f" * 40
    source = (importlib.resources.files("lockguide") / "scripts" / "release.lua").read_text("utf-8")
    sha: list[str] = []

    async def floor() -> None:
        if not sha:  # load once, untimed in practice (the warm-up runs it first)
            sha.extend(await asyncio.gather(*(m.script_load(source) for m in masters)))
        await asyncio.gather(*(m.set("bench:floor", value, nx=True, px=TTL_MS) for m in masters))
        await asyncio.gather(*(m.evalsha(sha[0], 1, "bench:floor", value) for m in masters))

    ours = Redlock(masters, "bench:aio-redlock", ttl_ms=TTL_MS)  # the default 50 ms per master

    async def lockguide_redlock() -> None:
        if not await ours.acquire(blocking=False):
            MISSES["lockguide.aio Redlock: acquire without a majority in time"] += 1
            return
        while True:  # a release without answers in time keeps the lock held: call it again
            try:
                await ours.release()
                return
            except MajorityLost:  # the first try's late answers had deleted it meanwhile
                MISSES["lockguide.aio Redlock: release found the keys already gone"] += 1
                return
            except redis.exceptions.RedisError:
                MISSES["lockguide.aio Redlock: release retried (no answers in time)"] += 1

    theirs = AIORedlock(
        key="bench:aio-pottery", masters=set(masters), auto_release_time=TTL_MS / 1000
    )

    async def pottery_redlock() -> None:
        if not await theirs.acquire(blocking=False):
            MISSES["pottery AIORedlock: acquire refused"] += 1
            return
        await theirs.release()

    return [
        Contender(f"floor: gather SET NX PX + gather EVALSHA, {n} masters", floor, []),
        Contender(f"lockguide.aio Redlock, {n} masters", lockguide_redlock, []),
        Contender(f"pottery AIORedlock, {n} masters", pottery_redlock, []),
    ]


async def measure(group: list[Contender], rounds: int, cycles: int, warmup: int) -> None:
    for contender in group:  # warm up: connections, script loads, caches
        for _ in range(warmup):
            await contender.cycle()
    clock = time.perf_counter_ns
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        for r in range(rounds):
            turn = r % len(group)
            for contender in group[turn:] + group[:turn]:
                cycle, samples = contender.cycle, contender.samples
                for _ in range(cycles):
                    start = clock()
                    await cycle()
                    samples.append(clock() - start)
            gc.collect()
    finally:
        if gc_was_enabled:
            gc.enable()


def table(group: list[Contender]) -> list[str]:
    medians = {c.name: statistics.median(c.samples) / 1000 for c in group}
    floor = medians[group[0].name]
    width = max(len(c.name) for c in group)
    lines = [
        f"| {'implementation':<{width}} | median cycle (us) | ratio to floor |",
        f"| {'-' * width} | ----------------: | -------------: |",
    ]
    for c in group:
        lines.append(
            f"| {c.name:<{width}} | {medians[c.name]:17.0f} | {medians[c.name] / floor:13.2f}x |"
        )
    ours, pottery = (medians[c.name] for c in group[1:3])
    lines += ["", f"lockguide.aio Redlock vs pottery AIORedlock: {pottery / ours:.1f}x faster"]
    return lines


async def run(addresses: list[tuple[str, int]], rounds: int, cycles: int, warmup: int) -> None:
    masters = [redis.asyncio.Redis(host=host, port=port) for host, port in addresses]
    MISSES.clear()
    try:
        group = contenders(masters)
        await measure(group, rounds, cycles, warmup)
        print()
        print("\n".join(table(group)))
        for what, count in sorted(MISSES.items()):
            print(f"slow path: {what}: {count} cycles")
    finally:
        for master in masters:
            await master.aclose()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=20, help="turns each contender takes")
    parser.add_argument("--cycles", type=int, default=100, help="cycles per turn")
    parser.add_argument("--warmup", type=int, default=50, help="untimed cycles first")
    parser.add_argument(
        "--mode", choices=("loopback", "delayed", "both"), default="both", help="what to measure"
    )
    parser.add_argument("--delay-ms", type=float, default=0.5, help="delayed mode: ms each way")
    args = parser.parse_args(argv)
    with servers(5) as started:
        sync_clients = [redis.Redis(host=s.host, port=s.port) for s in started]
        try:
            print("\n".join(machine(sync_clients)))
        finally:
            for client in sync_clients:
                client.close()
        print(f"pottery {importlib.metadata.version('pottery')} (AIORedlock), in one event loop")
        print(f"samples: {args.rounds * args.cycles} acquire+release cycles per implementation")
        direct = [(s.host, s.port) for s in started]
        for mode in ("loopback", "delayed") if args.mode == "both" else (args.mode,):
            with contextlib.ExitStack() as stack:
                addresses, title = direct, "loopback"
                if mode == "delayed":
                    addresses = stack.enter_context(links(direct, args.delay_ms))
                    title = f"delayed link: +{args.delay_ms:g} ms each way to every server"
                print()
                print(f"mode: {title}")
                asyncio.run(run(addresses, args.rounds, args.cycles, args.warmup))
    return 0


if __name__ == "__main__":
    sys.exit(main())
