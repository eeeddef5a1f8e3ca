"""The soak: thousands of random schedules, each recorded as a history and checked.

Three clients share one lock and one resource. A schedule is a list of steps,
drawn from a seed, each one of (as in ``tests/core/test_properties.py``, whose
state machine this replays without hypothesis, so that every schedule has a
seed that reproduces it):

* ``acquire``: a client that does not believe it holds the lock tries it once;
* ``pause``: the holder stalls past its lease: the harness's clock moves on by
  more than the TTL and the server expires the key (on fakeredis, by the same
  virtual clock; on ``redis-server``, by shortening every TTL as a forward
  clock jump would); the client is not told;
* ``renew``: a believing holder extends its lease;
* ``write``: a believing holder writes to the resource;
* ``release``: a believing holder releases.

Each run's history goes to the lease-service and fenced-resource models. With
``--lock fenced`` (:class:`~lockguide.FencedLock` and a
:class:`~lockguide.FencedStore`) no schedule may fail either model; with
``--lock plain`` (a :class:`~lockguide.Lock` and a resource that accepts every
write) the same schedules must produce violations, or the soak proves nothing.
Run from the repository root::

    python -m lockguide_lab.history.soak --schedules 10000 --backend fakeredis
    python -m lockguide_lab.history.soak --schedules 10000 --backend redis-server
"""

from __future__ import annotations

import argparse
import contextlib
import random
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import redis

from lockguide.errors import LockLost, NotOwned
from lockguide.fencing import FencedLock, FencedStore
from lockguide.lock import Lock
from lockguide_lab.history.judge import judge
from lockguide_lab.history.record import LEASE_KEY, RESOURCE_KEY, Recorder
from lockguide_lab.testbed.clock import VirtualClock
from lockguide_lab.testbed.fakeserver import FakeServer

__all__ = ["Result", "Soak", "schedule"]

Action = Literal["acquire", "pause", "renew", "write", "release"]
#: Drawn evenly; acquire, pause and write twice as often (the steps that make overlap).
ACTIONS: tuple[Action, ...] = (
    "acquire", "acquire", "pause", "pause", "renew", "write", "write", "release",
)  # fmt: skip
NAMES = ("A", "B", "C")
TTL_MS = 10_000
STEPS = 20


def schedule(seed: int, steps: int = STEPS) -> list[tuple[Action, int]]:
    """The schedule a seed stands for: ``steps`` (action, client pick) pairs."""
    rng = random.Random(seed)
    return [(rng.choice(ACTIONS), rng.randrange(len(NAMES))) for _ in range(steps)]


@dataclass
class Result:
    """What one soak found."""

    backend: str
    lock: str
    ran: int = 0
    lease_violations: list[int] = field(default_factory=list)
    fenced_violations: list[int] = field(default_factory=list)
    largest: int = 0
    seconds: float = 0.0

    @property
    def violated(self) -> list[int]:
        """The seeds of the schedules that failed either model."""
        return sorted(set(self.lease_violations) | set(self.fenced_violations))

    def report(self) -> str:
        seeds = self.violated
        shown = ", ".join(map(str, seeds))
        return (
            f"{self.backend}, {self.lock} lock: {self.ran} schedules ran in {self.seconds:.1f} s, "
            f"{len(seeds)} violated (lease service {len(self.lease_violations)}, "
            f"fenced resource {len(self.fenced_violations)}; largest history "
            f"{self.largest} operations)" + (f"; seeds: {shown}" if seeds else "")
        )


class Soak:
    """Runs schedules against one server (a client of it), on a virtual clock of its own."""

    def __init__(
        self,
        backend: str,
        client: redis.Redis,
        clock: VirtualClock,
        *,
        fenced: bool,
        steps: int = STEPS,
    ) -> None:
        self.backend = backend
        self.client = client
        self.clock = clock
        self.fenced = fenced
        self.steps = steps
        self._runs = 0

    def _expire_lock(self, key: str) -> None:
        """The harness's pause: time moves past the TTL, and the server expires the key."""
        self.clock.jump(TTL_MS + 1)
        if self.backend == "fakeredis":
            return  # the server reads the same virtual clock
        pttl = int(self.client.pttl(key))
        if 0 <= pttl <= TTL_MS + 1:
            self.client.delete(key)

    def run(self, seed: int) -> str:
        """Play one schedule; return its history."""
        self._runs += 1
        prefix = f"soak:{seed}:{self._runs}"
        lock_key, data_key = f"{prefix}:lock", f"{prefix}:data"
        t0 = self.clock.now_ms()

        def now() -> float:  # the run's own time: a replayed seed records the same history
            return round(self.clock.now_ms() - t0, 3)

        history = Recorder(clock=now)
        kind = FencedLock if self.fenced else Lock
        locks = [kind(self.client, lock_key, ttl_ms=TTL_MS, clock=self.clock.monotonic)
                 for _ in NAMES]  # fmt: skip
        store = FencedStore(self.client, data_key)
        epoch_of = [0, 0, 0]
        epochs = 0
        writes = 0
        for action, pick in schedule(seed, self.steps):
            self.clock.tick(1.0)
            believers = [c for c in range(len(NAMES)) if locks[c].held]
            if action == "acquire":
                free = [c for c in range(len(NAMES)) if not locks[c].held]
                if not free:
                    continue
                c = free[pick % len(free)]
                start = now()
                window = {"window": [start, start + TTL_MS]}
                op = history.invoke(NAMES[c], "acquire", window, key=LEASE_KEY)
                if locks[c].acquire(blocking=False):
                    epochs += 1
                    epoch_of[c] = epochs
                    op.ok(window)
                else:
                    op.fail(window)
                continue
            if not believers:
                continue
            c = believers[pick % len(believers)]
            lock = locks[c]
            if action == "pause":
                self._expire_lock(lock_key)
            elif action == "renew":
                start = now()
                window = {"window": [start, start + TTL_MS]}
                op = history.invoke(NAMES[c], "renew", window, key=LEASE_KEY)
                try:
                    lock.extend()
                    op.ok(window)
                except LockLost:
                    op.fail(window)
            elif action == "write":
                writes += 1
                value = f"{NAMES[c]} write {writes}"
                token = lock.token if isinstance(lock, FencedLock) else epoch_of[c]
                carried = {"token": token, "data": value}
                op = history.invoke(NAMES[c], "write", carried, key=RESOURCE_KEY)
                if isinstance(lock, FencedLock):
                    accepted = store.try_write(token, value).accepted
                else:
                    self.client.hset(data_key, "value", value)
                    accepted = True
                (op.ok if accepted else op.fail)(carried)
            else:
                given_up = {"at": now()}
                op = history.invoke(NAMES[c], "release", given_up, key=LEASE_KEY)
                try:
                    lock.release()
                    op.ok(given_up)
                except (LockLost, NotOwned):
                    op.fail(given_up)  # compare-and-delete refused: nothing deleted
        op = history.invoke("observer", "read", None, key=RESOURCE_KEY)
        if self.fenced:
            op.ok(store.read().value)
        else:
            raw = self.client.hget(data_key, "value")
            op.ok(raw.decode() if isinstance(raw, bytes) else None)
        self.client.delete(lock_key, data_key, f"{lock_key}:fence", f"{data_key}:fence")
        return history.text()

    def soak(self, seeds: range, *, keep: Path | None = None) -> Result:
        """Run every seed's schedule, judge it, and count what failed."""
        result = Result(self.backend, "fenced" if self.fenced else "plain")
        started = time.perf_counter()
        for seed in seeds:
            text = self.run(seed)
            judgement = judge(text)
            result.ran += 1
            result.largest = max(result.largest, len(judgement.operations))
            if not judgement.lease.ok:
                result.lease_violations.append(seed)
            if not judgement.fenced.ok:
                result.fenced_violations.append(seed)
            if keep is not None and not judgement.ok:
                keep.mkdir(parents=True, exist_ok=True)
                (keep / f"{result.backend}-{result.lock}-{seed}.jsonl").write_text(text)
        result.seconds = time.perf_counter() - started
        return result


@contextlib.contextmanager
def backend(name: str, base: Path | None = None) -> Iterator[tuple[redis.Redis, VirtualClock]]:
    """A client of a fresh server and the clock the soak runs on."""
    clock = VirtualClock()
    if name == "fakeredis":
        server = FakeServer(clock, "soak")
        yield server.client(), clock
        return
    import tempfile

    from lockguide_lab.testbed.process import RedisServer

    with tempfile.TemporaryDirectory(prefix="soak-") as tmp:
        process = RedisServer(Path(base or tmp))  # started at once
        try:
            yield process.client(), clock
        finally:
            process.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--schedules", type=int, default=10_000)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=STEPS, help="steps per schedule")
    parser.add_argument(
        "--backend", action="append", choices=["fakeredis", "redis-server"], default=None
    )
    parser.add_argument("--lock", action="append", choices=["fenced", "plain"], default=None)
    parser.add_argument("--keep", type=Path, help="save each violating history in this folder")
    args = parser.parse_args(argv)
    if args.schedules < 1 or args.steps < 1:
        parser.error("--schedules and --steps must be at least 1")
    seeds = range(args.first_seed, args.first_seed + args.schedules)
    failed = False
    for name in args.backend or ["fakeredis"]:
        with backend(name) as (client, clock):
            for lock in args.lock or ["fenced", "plain"]:
                soak = Soak(name, client, clock, fenced=lock == "fenced", steps=args.steps)
                result = soak.soak(seeds, keep=args.keep)
                print(result.report(), flush=True)
                # The fenced lock must never fail; the plain one must (or the soak is blind).
                failed |= bool(result.violated) if lock == "fenced" else not result.violated
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
