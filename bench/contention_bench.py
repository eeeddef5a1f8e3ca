"""Many waiters on one key: lockguide against the Python peers, side by side in one run.

Run from the repository root::

    .venv/bin/python -m bench.contention_bench

It starts one ``redis-server`` of its own on a free loopback port (the lab's
testbed server, snapshots off). For each number of workers W (``--workers``,
2, 8 and 32 by default) and each library, W workers share one key: each takes
the lock (a blocking acquire), holds it for 5 ms of work, releases it and at
once tries again, for ``--seconds`` (5 by default) after a short warm-up. The
workers are threads, each with a lock object of its own, all on ONE
``redis.Redis`` client per library run, as a service shares one; lockguide's
``aio.Lock`` runs them as asyncio tasks on one ``redis.asyncio`` client, and its
hold is ``await asyncio.sleep(0.005)`` (a ``time.sleep`` would stop the loop).
Every library keeps its defaults except a blocking acquire and a 10 s TTL; the
table's notes say what each one is given. The libraries take turns in an order
that rotates from one W to the next, so a noisy moment is shared.

Per library and W it prints:

* grants/s inside the measured window, and its share of the ideal, 1 / hold =
  200/s for 5 ms holds (the plain ideal: the lock's own round trips are not
  subtracted; each library's uncontended cycle, one worker alone, is printed
  above the tables so the reader can);
* wait p50 and p99: from calling ``acquire`` to being granted (a wait still open
  when the window closes counts as long as it had lasted: a lower bound);
* the fewest..most grants of any worker in the window;
* server commands per worker per second: ``INFO commandstats`` at the start and
  the end of the window, every command but that ``INFO`` (those a script runs
  count too, as the server counts them), over W x seconds; ``--json`` keeps
  the count of each command.

Then the targets from issue 27 and whether each lockguide lock meets them.
Ratios between libraries in one run are what count: the machine's load is
printed with the numbers. Nothing here is part of the test suite;
``tests/lab/test_contention_bench.py`` only checks that the command runs.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.metadata
import json
import math
import os
import platform
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import redis
import redis.asyncio

from lockguide_lab.testbed import servers

HOLD_S = 0.005
TTL_S = 10
IDEAL = 1 / HOLD_S  # grants per second if the key were never idle
clock = time.perf_counter

SyncPair = tuple[Callable[[], bool], Callable[[], object]]
AsyncPair = tuple[Callable[[], Awaitable[bool]], Callable[[], Awaitable[object]]]


# --- the libraries -------------------------------------------------------------------------


@dataclass(frozen=True)
class Library:
    """One contender: how to make a worker's (acquire, release) on a shared client."""

    name: str  # as given to --libraries
    label: str  # as printed
    settings: str  # everything not left at the library's default
    kind: Literal["threads", "asyncio"]
    make: Callable[[Any, str], Any]  # (client, key) -> SyncPair | AsyncPair


def _lockguide(client: redis.Redis, key: str) -> SyncPair:
    from lockguide import Lock

    lock = Lock(client, key, ttl_ms=TTL_S * 1000)
    return lock.acquire, lock.release


def _lockguide_aio(client: redis.asyncio.Redis, key: str) -> AsyncPair:
    from lockguide import aio

    lock = aio.Lock(client, key, ttl_ms=TTL_S * 1000)
    return lock.acquire, lock.release


def _redis_py(client: redis.Redis, key: str) -> SyncPair:
    lock = client.lock(key, timeout=TTL_S)
    return lock.acquire, lock.release


def _python_redis_lock(client: redis.Redis, key: str) -> SyncPair:
    import redis_lock

    lock = redis_lock.Lock(client, key, expire=TTL_S)
    return lock.acquire, lock.release


def _pottery(client: redis.Redis, key: str) -> SyncPair:
    from pottery import Redlock

    lock = Redlock(key=key, masters={client}, auto_release_time=TTL_S)
    return lock.acquire, lock.release


def _sherlock(client: redis.Redis, key: str) -> SyncPair:
    import sherlock

    lock = sherlock.RedisLock(key, client=client, expire=TTL_S)

    def acquire() -> bool:
        try:
            return bool(lock.acquire())
        except sherlock.LockTimeoutException:  # its default timeout (10 s) ran out
            return False

    return acquire, lock.release


def _address(client: redis.Redis) -> tuple[str, int]:
    kwargs = client.connection_pool.connection_kwargs
    return str(kwargs["host"]), int(kwargs["port"])


def _redlock_ng(client: redis.Redis, key: str) -> SyncPair:
    from lockguide_lab.audit.adapters.redlock_ng import load

    host, port = _address(client)  # it takes URLs, not a client: a manager per worker
    dlm = load().Redlock([f"redis://{host}:{port}/0"])
    held: list[Any] = []

    def acquire() -> bool:
        lock = dlm.acquire(key, TTL_S * 1000, blocking=True)
        if lock is not None:
            held.append(lock)
        return lock is not None

    return acquire, lambda: dlm.release(held.pop())


def _tooz(client: redis.Redis, key: str) -> SyncPair:
    import uuid

    from tooz import coordination

    host, port = _address(client)  # it takes a URL, not a client: a coordinator per worker
    coordinator = coordination.get_coordinator(
        f"redis://{host}:{port}", uuid.uuid4().hex.encode(), lock_timeout=str(TTL_S)
    )
    coordinator.start()
    lock = coordinator.get_lock(key.encode())
    return lock.acquire, lock.release


LIBRARIES = (
    Library(
        "lockguide",
        "lockguide `Lock`",
        "Lock(client, key, ttl_ms=10_000); defaults: timeout_ms 10 s, retry 50-150 ms",
        "threads",
        _lockguide,
    ),
    Library(
        "lockguide-aio",
        "lockguide `aio.Lock`",
        "aio.Lock(aclient, key, ttl_ms=10_000), asyncio tasks, hold = await asyncio.sleep; "
        "defaults: timeout_ms 10 s, retry 50-150 ms",
        "asyncio",
        _lockguide_aio,
    ),
    Library(
        "redis-py",
        "redis-py `Lock`",
        "client.lock(key, timeout=10); defaults: sleep 0.1 s, blocking_timeout None",
        "threads",
        _redis_py,
    ),
    Library(
        "python-redis-lock",
        "python-redis-lock",
        "redis_lock.Lock(client, key, expire=10); defaults: BLPOP on the release signal",
        "threads",
        _python_redis_lock,
    ),
    Library(
        "pottery",
        "pottery `Redlock` (1 master)",
        "Redlock(key=key, masters={client}, auto_release_time=10); "
        "defaults: timeout -1 (for ever), retry uniform 0-200 ms",
        "threads",
        _pottery,
    ),
    Library(
        "sherlock",
        "sherlock `RedisLock`",
        "sherlock.RedisLock(key, client=client, expire=10); defaults: timeout 10 s "
        "(LockTimeoutException, retried as a longer wait), retry_interval 0.1 s",
        "threads",
        _sherlock,
    ),
    Library(
        "redlock-ng",
        "redlock-ng `Redlock` (1 master)",
        "Redlock([url]).acquire(key, 10_000, blocking=True), a manager (and connection) per "
        "worker; defaults: retry uniform 0.1-0.3 s, socket_timeout 0.1 s",
        "threads",
        _redlock_ng,
    ),
    Library(
        "tooz",
        "tooz (Redis driver)",
        "get_coordinator(url, member, lock_timeout=10).get_lock(key), a coordinator (and "
        "connection) per worker, no heartbeat thread; defaults: redis-py `Lock` under it, "
        "sleep 0.1 s",
        "threads",
        _tooz,
    ),
)
BY_NAME = {library.name: library for library in LIBRARIES}


# --- one run -------------------------------------------------------------------------------


@dataclass
class Worker:
    """What one worker saw: each wait as (started, granted or None if it never was)."""

    waits: list[tuple[float, float | None]] = field(default_factory=list)
    timeouts: int = 0  # acquires that returned False (the worker kept waiting)
    errors: list[str] = field(default_factory=list)

    def failed(self, error: BaseException) -> bool:
        """Note an error; True once there are too many to go on."""
        self.errors.append(f"{type(error).__name__}: {error}")
        return len(self.errors) >= 20


@dataclass(frozen=True)
class Plan:
    warmup: float  # seconds run before the window opens (connections, script loads)
    seconds: float  # the measured window
    drain: float  # at most this long for the waiters to finish after it


@dataclass(frozen=True)
class Server:
    host: str
    port: int
    admin: redis.Redis  # the benchmark's own connection: FLUSHALL, INFO


@dataclass
class Window:
    start: float = 0.0
    end: float = 0.0
    commands: dict[str, int] = field(default_factory=dict)


@dataclass
class Result:
    library: str
    label: str
    workers: int
    seconds: float
    grants: list[int]  # per worker, inside the window
    grants_per_s: float
    of_ideal: float  # grants_per_s / IDEAL
    wait_p50_ms: float
    wait_p99_ms: float
    waits: int
    open_waits: int  # still waiting when the window closed (counted as a lower bound)
    commands: int
    commands_per_worker_s: float
    commands_per_grant: float  # in --json only: a cost that does not fall with throughput
    command_counts: dict[str, int]
    timeouts: int
    errors: list[str]
    stragglers: int  # workers that had not finished after the run (left as daemon threads)


def commandstats(admin: redis.Redis) -> dict[str, int]:
    stats = admin.info("commandstats")
    return {name.removeprefix("cmdstat_"): int(value["calls"]) for name, value in stats.items()}


def window_commands(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    delta = {name: calls - before.get(name, 0) for name, calls in after.items()}
    delta.pop("info", None)  # the snapshots themselves
    return {name: calls for name, calls in sorted(delta.items()) if calls}


def percentile(values: Sequence[float], share: float) -> float:
    """Nearest rank: the smallest value with at least ``share`` of the values at or below it."""
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[max(math.ceil(share * len(ordered)) - 1, 0)]


def summarize(library: Library, seen: list[Worker], window: Window, stragglers: int) -> Result:
    t0, t1 = window.start, window.end
    seconds = t1 - t0
    grants = [sum(1 for _, at in w.waits if at is not None and t0 <= at < t1) for w in seen]
    waits: list[float] = []
    open_waits = 0
    for worker in seen:
        for began, at in worker.waits:
            if at is not None and t0 <= at < t1:
                waits.append(at - began)
            elif began < t1 and (at is None or at >= t1):
                waits.append(t1 - began)
                open_waits += 1
    commands = sum(window.commands.values())
    per_s = sum(grants) / seconds
    return Result(
        library=library.name,
        label=library.label,
        workers=len(seen),
        seconds=seconds,
        grants=grants,
        grants_per_s=per_s,
        of_ideal=per_s / IDEAL,
        wait_p50_ms=percentile(waits, 0.50) * 1000,
        wait_p99_ms=percentile(waits, 0.99) * 1000,
        waits=len(waits),
        open_waits=open_waits,
        commands=commands,
        commands_per_worker_s=commands / (len(seen) * seconds),
        commands_per_grant=commands / sum(grants) if sum(grants) else math.nan,
        command_counts=window.commands,
        timeouts=sum(w.timeouts for w in seen),
        errors=[e for w in seen for e in w.errors][:5],
        stragglers=stragglers,
    )


def thread_worker(
    pair: SyncPair, me: Worker, gate: threading.Barrier, stop: threading.Event
) -> None:
    acquire, release = pair
    gate.wait()
    while not stop.is_set():
        began = clock()
        try:
            while not acquire():  # a library's own timeout ran out: still waiting
                me.timeouts += 1
                if stop.is_set():
                    me.waits.append((began, None))
                    return
        except Exception as error:
            me.waits.append((began, None))
            if me.failed(error):
                return
            continue
        me.waits.append((began, clock()))
        time.sleep(HOLD_S)
        try:
            release()
        except Exception as error:
            if me.failed(error):
                return


def run_threads(library: Library, server: Server, workers: int, key: str, plan: Plan) -> Result:
    client = redis.Redis(host=server.host, port=server.port)
    seen = [Worker() for _ in range(workers)]
    gate = threading.Barrier(workers + 1)
    stop = threading.Event()
    threads = [
        threading.Thread(
            target=thread_worker,
            args=(library.make(client, key), me, gate, stop),
            name=f"{library.name}-{i}",
            daemon=True,  # a worker that never gets the lock must not keep the process alive
        )
        for i, me in enumerate(seen)
    ]
    for thread in threads:
        thread.start()
    window = Window()
    gate.wait()
    time.sleep(plan.warmup)
    before = commandstats(server.admin)
    window.start = clock()
    time.sleep(plan.seconds)
    window.end = clock()
    after = commandstats(server.admin)
    stop.set()
    window.commands = window_commands(before, after)
    give_up = clock() + plan.drain
    for thread in threads:
        thread.join(max(give_up - clock(), 0))
    stragglers = sum(thread.is_alive() for thread in threads)
    if not stragglers:
        client.close()
    return summarize(library, seen, window, stragglers)


async def task_worker(pair: AsyncPair, me: Worker, stop: asyncio.Event) -> None:
    acquire, release = pair
    while not stop.is_set():
        began = clock()
        try:
            while not await acquire():
                me.timeouts += 1
                if stop.is_set():
                    me.waits.append((began, None))
                    return
        except Exception as error:
            me.waits.append((began, None))
            if me.failed(error):
                return
            continue
        me.waits.append((began, clock()))
        await asyncio.sleep(HOLD_S)
        try:
            await release()
        except Exception as error:
            if me.failed(error):
                return


async def run_tasks(library: Library, server: Server, workers: int, key: str, plan: Plan) -> Result:
    client = redis.asyncio.Redis(host=server.host, port=server.port)
    seen = [Worker() for _ in range(workers)]
    stop = asyncio.Event()
    tasks = [asyncio.create_task(task_worker(library.make(client, key), me, stop)) for me in seen]
    window = Window()
    await asyncio.sleep(plan.warmup)
    before = await asyncio.to_thread(commandstats, server.admin)  # the loop keeps running meanwhile
    window.start = clock()
    await asyncio.sleep(plan.seconds)
    window.end = clock()
    after = await asyncio.to_thread(commandstats, server.admin)
    stop.set()
    window.commands = window_commands(before, after)
    _, pending = await asyncio.wait(tasks, timeout=plan.drain)
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    await client.aclose()
    return summarize(library, seen, window, len(pending))


def run_one(library: Library, server: Server, workers: int, plan: Plan) -> Result:
    """One library with ``workers`` workers on a key of its own, the server emptied first."""
    server.admin.flushall()
    key = f"bench:contention:{library.name}:{workers}"
    if library.kind == "asyncio":
        return asyncio.run(run_tasks(library, server, workers, key, plan))
    return run_threads(library, server, workers, key, plan)


def hold_alone(seconds: float, server: Server) -> tuple[float, float, float]:
    """Holds per second with no lock at all, ``time.sleep`` and ``asyncio.sleep``: the ceiling
    this machine sets on any row (sleeps overshoot, the event loop adds its own turn). The
    third: ``asyncio.sleep`` while another task makes two round trips to the server, as the
    releaser of a contended lock does when it asks again and then waits. The loop wakes for
    their replies and sets its next timeout in whole milliseconds, rounded up (epoll), so the
    hold overshoots more: the ceiling of an asyncio row with waiters.
    """

    def count(sleep: Callable[[], object]) -> float:
        began, n = clock(), 0
        while clock() - began < seconds:
            sleep()
            n += 1
        return n / (clock() - began)

    async def count_async(trips: int) -> float:
        client = redis.asyncio.Redis(host=server.host, port=server.port)

        async def neighbour() -> None:
            for _ in range(trips):
                await client.ping()

        began, n = clock(), 0
        while clock() - began < seconds:
            beside = asyncio.ensure_future(neighbour())
            await asyncio.sleep(HOLD_S)
            await beside
            n += 1
        await client.aclose()
        return n / (clock() - began)

    threads = count(lambda: time.sleep(HOLD_S))
    return threads, asyncio.run(count_async(0)), asyncio.run(count_async(2))


# --- the report ----------------------------------------------------------------------------


def ms(value: float) -> str:
    return f"{value:,.0f} ms" if value >= 10 else f"{value:.1f} ms"


def table(results: list[Result], workers: int, seconds: float) -> list[str]:
    title = f"{workers} workers, 5 ms holds, {seconds:g} s"
    head = (title, "grants/s (of ideal)", "wait p50", "wait p99", "fewest..most grants",
            "commands/s per worker")  # fmt: skip
    rows = [
        (
            r.label,
            f"{r.grants_per_s:.0f} ({r.of_ideal:.0%})",
            ms(r.wait_p50_ms),
            ms(r.wait_p99_ms),
            f"{min(r.grants)}..{max(r.grants)}",
            f"{r.commands_per_worker_s:.0f}",
        )
        for r in results
    ]
    widths = [max(len(row[i]) for row in (head, *rows)) for i in range(len(head))]

    def line(cells: Sequence[str]) -> str:
        first = f"{cells[0]:<{widths[0]}}"
        rest = [f"{cell:>{width}}" for cell, width in zip(cells[1:], widths[1:], strict=True)]
        return "| " + " | ".join([first, *rest]) + " |"

    rule = ["-" * widths[0], *("-" * (w - 1) + ":" for w in widths[1:])]
    lines = [line(head), "| " + " | ".join(rule) + " |", *(line(row) for row in rows)]
    for r in results:
        notes = []
        if r.timeouts:
            notes.append(f"{r.timeouts} acquires timed out and were retried (one longer wait)")
        if r.stragglers:
            notes.append(f"{r.stragglers} workers still waiting after the drain")
        if r.errors:
            notes.append(f"errors, e.g. {r.errors[0]}")
        if notes:
            lines.append(f"  {r.label}: " + "; ".join(notes))
    return lines


OURS = ("lockguide", "lockguide-aio")


@dataclass
class Verdict:
    target: str
    workers: int
    library: str
    value: str
    met: bool | None  # None: not measurable in this run (python-redis-lock or every peer left out)


def fairness(r: Result) -> float:
    """The fewest grants of any worker over the most (1: perfectly even)."""
    return min(r.grants) / max(r.grants) if max(r.grants) else 0.0


#: At W = 8, each measure, how it reads, and whether more is better.
MEASURES: tuple[tuple[str, Callable[[Result], float], Callable[[float], str], bool], ...] = (
    ("grants/s", lambda r: r.grants_per_s, lambda v: f"{v:.0f}", True),
    ("wait p99", lambda r: r.wait_p99_ms, ms, False),
    ("fewest/most", fairness, lambda v: f"{v:.2f}", True),
    ("commands/s per worker", lambda r: r.commands_per_worker_s, lambda v: f"{v:.0f}", False),
)


def verdicts(by_w: dict[int, list[Result]]) -> list[Verdict]:
    out: list[Verdict] = []
    for w, results in by_w.items():
        prl = next((r for r in results if r.library == "python-redis-lock"), None)
        peers = [r for r in results if r.library not in OURS]
        for r in (r for r in results if r.library in OURS):
            bound = 2 * (w - 1) * HOLD_S * 1000
            versus = "" if prl is None else f" vs {prl.commands_per_worker_s:.0f}"
            cheaper = None if prl is None else r.commands_per_worker_s < prl.commands_per_worker_s
            out += [
                Verdict("grants/s >= 90 % of ideal", w, r.label, f"{r.of_ideal:.0%}",
                        r.of_ideal >= 0.9),
                Verdict(f"wait p99 <= 2 x (W-1) x hold = {bound:.0f} ms", w, r.label,
                        ms(r.wait_p99_ms), r.wait_p99_ms <= bound),
                Verdict("fewest >= 2/3 of most grants", w, r.label,
                        f"{min(r.grants)}..{max(r.grants)} = {fairness(r):.2f}",
                        fairness(r) >= 2 / 3),
                Verdict("commands/s per worker < python-redis-lock's", w, r.label,
                        f"{r.commands_per_worker_s:.0f}{versus}", cheaper),
            ]  # fmt: skip
            if w != 8:
                continue
            for what, measure, shown, more_is_better in MEASURES:
                ours = measure(r)
                sign = -1 if more_is_better else 1
                best = min(peers, key=lambda p: sign * measure(p), default=None)
                if best is None:
                    out.append(
                        Verdict(f"{what} ahead of every peer", w, r.label, shown(ours), None)
                    )
                    continue
                value = f"{shown(ours)} vs best peer {shown(measure(best))} ({best.label})"
                met = sign * ours < sign * measure(best)
                out.append(Verdict(f"{what} ahead of every peer", w, r.label, value, met))
    return out


def verdict_lines(found: list[Verdict]) -> list[str]:
    lines = ["targets for lockguide (issue 27):", ""]
    for v in found:
        mark = {True: "met", False: "MISSED", None: "n/a"}[v.met]
        lines.append(f"  W={v.workers:<3} {v.library:<21} {v.target}: {v.value}  {mark}")
    return lines


def header() -> list[str]:
    cpu = platform.processor() or "unknown CPU"
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            cpu = next(
                (line.split(":", 1)[1].strip() for line in info if line.startswith("model name")),
                cpu,
            )
    except OSError:
        pass
    from lockguide_lab.audit.adapters.redlock_ng import version as redlock_ng_version

    names = ("redis", "pottery", "python-redis-lock", "sherlock", "tooz", "lockguide")
    versions = ", ".join(f"{name} {importlib.metadata.version(name)}" for name in names)
    versions += f", redlock-ng {redlock_ng_version()}"
    return [
        f"machine: {cpu}, {os.cpu_count()} CPUs, {platform.system()} {platform.release()}",
        f"python {platform.python_version()}, {versions}",
    ]


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f} ({os.cpu_count()} CPUs)"


@contextmanager
def one_server() -> Iterator[Server]:
    with servers(1) as (started,):
        admin = redis.Redis(host=started.host, port=started.port)
        try:
            yield Server(started.host, started.port, admin)
        finally:
            admin.close()


def workers_list(text: str) -> list[int]:
    counts = [int(part) for part in text.split(",") if part.strip()]
    if not counts or min(counts) < 1:
        raise argparse.ArgumentTypeError("a comma-separated list of worker counts, each >= 1")
    return counts


def libraries_list(text: str) -> list[Library]:
    names = [part.strip() for part in text.split(",") if part.strip()]
    unknown = [name for name in names if name not in BY_NAME]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"unknown {unknown}; choose from {', '.join(BY_NAME)}")
    return [BY_NAME[name] for name in names]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="measured window per run")
    parser.add_argument(
        "--workers", type=workers_list, default=[2, 8, 32], help="W values, e.g. 2,8,32"
    )
    parser.add_argument(
        "--libraries",
        type=libraries_list,
        default=list(LIBRARIES),
        help=f"a subset of: {','.join(BY_NAME)}",
    )
    parser.add_argument("--warmup", type=float, default=0.5, help="unmeasured seconds first")
    parser.add_argument(
        "--alone-seconds", type=float, default=1.0,
        help="each library's uncontended cycle, one worker (0: skip)",
    )  # fmt: skip
    parser.add_argument("--drain", type=float, default=30.0, help="max seconds to let waiters end")
    parser.add_argument("--json", type=Path, help="also save the results here")
    args = parser.parse_args(argv)
    libraries: list[Library] = args.libraries

    print("\n".join(header()))
    print(f"at start: {load()}")
    print("every library: a blocking acquire, a 10 s TTL, its other defaults:")
    for library in libraries:
        print(f"  {library.label}: {library.settings}")
    print(
        f"ideal = 1 / hold = {IDEAL:.0f} grants/s (the lock's own round trips not subtracted); "
        "wait = acquire called -> granted (one still open at the end: as long as it had lasted)"
    )
    print(
        "commands: INFO commandstats over the window (a script's own calls count), "
        "per worker per second"
    )
    alone: dict[str, float] = {}
    threads = tasks = beside = math.nan
    by_w: dict[int, list[Result]] = {}
    plan = Plan(args.warmup, args.seconds, args.drain)
    with one_server() as server:
        print(f"server: redis-server {server.admin.info('server')['redis_version']} on 127.0.0.1")
        if args.alone_seconds > 0:
            solo = Plan(args.warmup, args.alone_seconds, args.drain)
            for library in libraries:
                alone[library.name] = run_one(library, server, 1, solo).grants_per_s
            threads, tasks, beside = hold_alone(args.alone_seconds, server)
            print()
            print(
                f"the hold alone, no lock: time.sleep {threads:.0f}/s, asyncio.sleep {tasks:.0f}/s "
                "(the most any row can reach on this machine); asyncio.sleep while another task "
                f"makes two round trips {beside:.0f}/s (the most an asyncio row with waiters can)"
            )
            print("uncontended, one worker alone (hold 5 ms + the lock's acquire and release):")
            for library in libraries:
                rate = alone[library.name]
                cycle = 1000 / rate if rate else math.inf
                print(f"  {library.label}: {rate:.0f} grants/s, cycle {cycle:.2f} ms")
        for turn, workers in enumerate(args.workers):
            start = turn % len(libraries)
            order = libraries[start:] + libraries[:start]
            results = {library.name: run_one(library, server, workers, plan) for library in order}
            by_w[workers] = [results[library.name] for library in libraries]  # table order
            print()
            print(f"run order: {', '.join(library.name for library in order)}")
            print()
            print("\n".join(table(by_w[workers], workers, args.seconds)))
    found = verdicts(by_w)
    print()
    print("\n".join(verdict_lines(found)))
    print()
    print(f"at end: {load()}")
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "machine": header(),
                    "load_at_end": load(),
                    "hold_s": HOLD_S,
                    "ttl_s": TTL_S,
                    "ideal_grants_per_s": IDEAL,
                    "settings": {library.name: library.settings for library in libraries},
                    "alone_grants_per_s": alone,
                    "hold_alone_per_s": {
                        "time.sleep": threads,
                        "asyncio.sleep": tasks,
                        "asyncio.sleep, two round trips beside": beside,
                    },
                    "runs": [asdict(r) for results in by_w.values() for r in results],
                    "targets": [asdict(v) for v in found],
                },
                indent=2,
            ),
            encoding="utf-8",
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
