"""One acquire+release cycle, side by side: lockguide against the Python peers.

Run from the repository root::

    .venv/bin/python -m bench.redlock_bench

It starts five ``redis-server`` processes of its own on free loopback ports,
then times, for each implementation, many acquire+release cycles of a lock
nobody else wants (the uncontended fast path). The implementations take turns
in rounds, in a rotating order, so a noisy moment on the machine is shared
rather than landing on one of them. It prints the median cycle and its ratio to
the baseline: ``SET NX PX`` plus ``EVALSHA`` of the release script on one node,
issued through redis-py's client, which is what those two round trips cost
through redis-py (a reference point, not a floor: a lock can do them cheaper).

It measures in two modes. **loopback** talks to the servers directly, which
exaggerates client CPU. **delayed** puts the lab's testbed link between the
client and every server, the one-node baseline included, adding a fixed delay
each way (``--delay-ms``, 0.5 by default), as a network would; the links run in
a process of their own, so their threads do not share the benchmark's
interpreter.

Nothing here is part of the test suite; ``tests/lab/test_redlock_bench.py`` only
checks that the command runs.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib.metadata
import importlib.resources
import multiprocessing
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from multiprocessing.connection import Connection

import redis

from bench.servers import five_masters, server_version
from lockguide import Lock, Redlock

TTL_MS = 10_000


@dataclass
class Contender:
    name: str
    cycle: Callable[[], object]
    samples: list[float]


def _serve_links(targets: list[tuple[str, int]], delay_s: float, pipe: Connection) -> None:
    """In the link process: one delaying link per server until told to stop."""
    from lockguide_lab.testbed import Link

    links = [Link(target, delay_s=delay_s) for target in targets]
    pipe.send([link.address for link in links])
    pipe.recv()
    for link in links:
        link.close()


@contextlib.contextmanager
def links(targets: list[tuple[str, int]], delay_ms: float) -> Iterator[list[tuple[str, int]]]:
    """Addresses that reach each ``(host, port)`` through a link adding ``delay_ms`` each way.

    The links run in a process of their own, so their threads do not share the
    benchmark's interpreter.
    """
    ours, theirs = multiprocessing.get_context("spawn").Pipe()
    process = multiprocessing.get_context("spawn").Process(
        target=_serve_links, args=(targets, delay_ms / 1000.0, theirs), daemon=True
    )
    process.start()
    try:
        yield [(str(host), int(port)) for host, port in ours.recv()]
    finally:
        ours.send("stop")
        process.join(5)


@contextlib.contextmanager
def behind_links(masters: list[redis.Redis], delay_ms: float) -> Iterator[list[redis.Redis]]:
    """Clients that reach each server through a link adding ``delay_ms`` each way."""
    targets = []
    for master in masters:
        kwargs = master.connection_pool.connection_kwargs
        targets.append((str(kwargs["host"]), int(kwargs["port"])))
    with links(targets, delay_ms) as addresses:
        clients = [redis.Redis(host=host, port=port) for host, port in addresses]
        try:
            yield clients
        finally:
            for client in clients:
                client.close()


def url(client: redis.Redis) -> str:
    """The ``redis://`` URL of the server (or link) a client talks to."""
    kwargs = client.connection_pool.connection_kwargs
    return f"redis://{kwargs['host']}:{kwargs['port']}/0"


def contenders(masters: list[redis.Redis]) -> list[Contender]:
    """Each contender runs one acquire+release of its own key per call."""
    from pottery import Redlock as PotteryRedlock
    from redlock import Redlock as RedlockPy
    from tooz.coordination import get_coordinator

    from lockguide_lab.audit.adapters.redlock_ng import load as load_redlock_ng

    one = masters[0]
    value = "f" * 40
    # lockguide's own compare-and-delete script (package data), run by redis-py with EVALSHA.
    release = one.register_script(
        (importlib.resources.files("lockguide") / "scripts" / "release.lua").read_text("utf-8")
    )

    def floor() -> None:
        one.set("bench:floor", value, nx=True, px=TTL_MS)
        release(keys=["bench:floor"], args=[value])

    # The floor for five: the same two commands on every master through connections held
    # open, every request written before any reply is read. The least any redis-py client
    # can do for a Redlock cycle; what lockguide Redlock costs above it is its own work.
    script = release.script
    (sha,) = {m.script_load(script) for m in masters}  # loaded on each: one SHA
    held = [m.connection_pool.get_connection() for m in masters]

    def floor_all() -> None:
        for conn in held:
            conn.send_command("SET", "bench:floor5", value, "NX", "PX", TTL_MS)  # type: ignore[no-untyped-call]
        for conn in held:
            conn.read_response()
        for conn in held:
            conn.send_command("EVALSHA", sha, 1, "bench:floor5", value)  # type: ignore[no-untyped-call]
        for conn in held:
            conn.read_response()

    ours = Lock(one, "bench:lock", ttl_ms=TTL_MS)

    def lockguide_lock() -> None:
        ours.acquire(blocking=False)
        ours.release()

    theirs = one.lock("bench:redis-py", timeout=TTL_MS / 1000)

    def redis_py_lock() -> None:
        theirs.acquire(blocking=False)
        theirs.release()

    ours5 = Redlock(masters, "bench:redlock", ttl_ms=TTL_MS)

    def lockguide_redlock() -> None:
        ours5.acquire(blocking=False)
        ours5.release()

    pottery = PotteryRedlock(
        key="bench:pottery", masters=frozenset(masters), auto_release_time=TTL_MS / 1000
    )

    def pottery_redlock() -> None:
        pottery.acquire(blocking=False)
        pottery.release()

    dlm = RedlockPy(masters, retry_count=1)

    def redlock_py() -> None:
        held = dlm.lock("bench:redlock-py", TTL_MS)
        dlm.unlock(held)

    # redlock-ng and tooz connect by URL (they take no client): same servers, own connections.
    dlm_ng = load_redlock_ng().Redlock([url(m) for m in masters], retry_count=0)

    def redlock_ng() -> None:
        dlm_ng.release(dlm_ng.acquire("bench:redlock-ng", TTL_MS))

    coordinator = get_coordinator(url(one), b"bench", lock_timeout=str(TTL_MS // 1000))
    coordinator.start()
    tooz_lock = coordinator.get_lock(b"bench:tooz")

    def tooz() -> None:
        tooz_lock.acquire(blocking=False)
        tooz_lock.release()

    def lockguide_lock_per_use() -> None:  # the common way: `with Lock(r, key, ...)` per request
        with Lock(one, "bench:lock-new", ttl_ms=TTL_MS, timeout_ms=1_000):
            pass

    def lockguide_redlock_per_use() -> None:
        with Redlock(masters, "bench:redlock-new", ttl_ms=TTL_MS, timeout_ms=1_000):
            pass

    n = len(masters)
    return [
        Contender("baseline: SET NX PX + EVALSHA, one node", floor, []),
        Contender("lockguide Lock, one node", lockguide_lock, []),
        Contender("redis-py Lock, one node", redis_py_lock, []),
        Contender("tooz (Redis driver), one node", tooz, []),
        Contender(f"floor: both commands on {n} masters, all sent before any read", floor_all, []),
        Contender(f"lockguide Redlock, {n} masters", lockguide_redlock, []),
        Contender(f"pottery Redlock, {n} masters", pottery_redlock, []),
        Contender(f"redlock-py, {n} masters", redlock_py, []),
        Contender(f"redlock-ng Redlock, {n} masters", redlock_ng, []),
        Contender("lockguide Lock, one node, new object each time", lockguide_lock_per_use, []),
        Contender(
            f"lockguide Redlock, {n} masters, new object each time", lockguide_redlock_per_use, []
        ),
    ]


def measure(group: list[Contender], rounds: int, cycles: int, warmup: int) -> None:
    for contender in group:  # warm up: connections, script loads, caches
        for _ in range(warmup):
            contender.cycle()
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
                    cycle()
                    samples.append(clock() - start)
            gc.collect()
    finally:
        if gc_was_enabled:
            gc.enable()


def machine(masters: list[redis.Redis]) -> list[str]:
    cpu = platform.processor() or "unknown CPU"
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            for line in info:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    from lockguide_lab.audit.adapters.redlock_ng import version as redlock_ng_version

    names = ("redis", "pottery", "redlock-py", "tooz")
    versions = ", ".join(f"{name} {importlib.metadata.version(name)}" for name in names)
    versions += f", redlock-ng {redlock_ng_version()}"
    return [
        f"machine: {cpu}, {os.cpu_count()} CPUs, {platform.system()} {platform.release()}",
        f"python {platform.python_version()}, {versions}",
        f"servers: {len(masters)} x redis-server {server_version(masters[0])} on 127.0.0.1",
    ]


def table_rows(group: list[Contender]) -> list[str]:
    """The Markdown table: each contender's median cycle and its ratio to the first (the floor)."""
    medians = {c.name: statistics.median(c.samples) / 1000 for c in group}
    floor = medians[group[0].name]
    width = max(len(c.name) for c in group)
    lines = [
        f"| {'implementation':<{width}} | median cycle (us) | ratio to baseline |",
        f"| {'-' * width} | ----------------: | ----------------: |",
    ]
    for c in group:
        lines.append(
            f"| {c.name:<{width}} | {medians[c.name]:17.0f} | {medians[c.name] / floor:16.2f}x |"
        )
    return lines


def table(group: list[Contender]) -> list[str]:
    medians = {c.name: statistics.median(c.samples) / 1000 for c in group}
    lines = table_rows(group)

    def named(prefix: str) -> float:  # the first row so named (the reused object's)
        return next(m for name, m in medians.items() if name.startswith(prefix))

    ours, floor_all = named("lockguide Redlock, "), named("floor: ")
    pottery, redlock_py = named("pottery Redlock"), named("redlock-py")
    lines += [
        "",
        f"lockguide Redlock vs pottery: {pottery / ours:.1f}x faster; "
        f"vs redlock-py: {redlock_py / ours:.1f}x faster; "
        f"vs the floor for all masters: {ours / floor_all:.2f}x",
    ]
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=20, help="turns each contender takes")
    parser.add_argument("--cycles", type=int, default=100, help="cycles per turn")
    parser.add_argument("--warmup", type=int, default=50, help="untimed cycles first")
    parser.add_argument(
        "--mode", choices=("loopback", "delayed", "both"), default="both", help="what to measure"
    )
    parser.add_argument("--delay-ms", type=float, default=0.5, help="delayed mode: ms each way")
    args = parser.parse_args(argv)
    with five_masters() as masters:
        print("\n".join(machine(masters)))
        samples = args.rounds * args.cycles
        print(f"samples: {samples} acquire+release cycles per implementation, median shown")
        modes = ("loopback", "delayed") if args.mode == "both" else (args.mode,)
        for mode in modes:
            with contextlib.ExitStack() as stack:
                clients = masters
                title = "loopback"
                if mode == "delayed":
                    clients = stack.enter_context(behind_links(masters, args.delay_ms))
                    title = f"delayed link: +{args.delay_ms:g} ms each way to every server"
                group = contenders(clients)
                measure(group, args.rounds, args.cycles, args.warmup)
                print()
                print(f"mode: {title}")
                print()
                print("\n".join(table(group)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
