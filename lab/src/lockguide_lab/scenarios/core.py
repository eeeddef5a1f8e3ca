"""The parts every scenario is written with: a run, its clients, the resource.

A scenario is a short script. It asks its :class:`Run` for clients
(:meth:`Run.holder`) and a resource (:meth:`Run.resource`), moves the clock
(:meth:`Run.at`), and makes the clients act. Every action records itself, and
the run checks the servers before each new event, so a lease that expired or
vanished in the meantime appears in the timeline at the moment it ended:

* a lease whose TTL has run out and whose key no longer holds the client's
  value is recorded as *expired* at the end of its TTL;
* a lease whose key is gone (or someone else's) *before* its TTL ran out is
  recorded as *lost* at the moment it was found missing: a failover, a
  restart, another client's ``DEL``.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from enum import StrEnum
from typing import Any, ClassVar, Protocol, runtime_checkable

import redis
from redis.exceptions import RedisError

from lockguide.errors import (
    BadArgument,
    BadArgumentType,
    LockError,
    LockLost,
    MajorityLost,
    StaleToken,
)
from lockguide.fencing import FencedLock, FencedStore
from lockguide.lock import Lock
from lockguide.redlock import Attempt, Redlock
from lockguide.renewal import Watchdog
from lockguide.validity import quorum
from lockguide.versioned import VersionedValue
from lockguide_lab.scenarios.bench import Bench
from lockguide_lab.scenarios.timeline import Event, Kind, Timeline

__all__ = [
    "BareDelLock",
    "Holder",
    "LockLike",
    "PlainResource",
    "Resource",
    "Run",
    "Scenario",
    "VersionedResource",
    "Way",
]


class Way(StrEnum):
    """How a scenario's code is written."""

    BROKEN = "broken"
    """As most code does it."""
    FIXED = "fixed"
    """With the guide's fix."""


@runtime_checkable
class LockLike(Protocol):
    """What a :class:`Holder` needs from a lock: ``Lock``, ``FencedLock``, a Redlock."""

    @property
    def key(self) -> str: ...  # pragma: no cover - protocol

    @property
    def value(self) -> str | None: ...  # pragma: no cover - protocol

    @property
    def ttl_ms(self) -> int: ...  # pragma: no cover - protocol

    def acquire(
        self, *, blocking: bool = True, timeout_ms: float | None = ...
    ) -> bool: ...  # pragma: no cover - protocol

    def release(self) -> object: ...  # pragma: no cover - protocol


class BareDelLock(Lock):
    """The lock as most hand-written code releases it: a bare ``DEL``. Broken on purpose.

    Acquiring is :class:`~lockguide.Lock`'s ``SET NX PX`` with a random value;
    :meth:`release` deletes the key without looking at whose it is. A holder
    whose lease has expired therefore deletes the *next* holder's lock.
    """

    def release(self) -> None:
        """``DEL key``, whoever holds it now."""
        self._take_value("release")
        self._client.delete(self._key)


class _Hooks:
    """Set by a :class:`Holder` on its lock: the run's clock, the pause gate, the recorders."""

    def __init__(
        self,
        now: Callable[[], float],
        on_extend: Callable[[float, bool], None],
        on_try: Callable[[Attempt], None],
    ):
        self.now = now
        self.on_extend = on_extend
        self.on_try = on_try
        self.running = threading.Event()
        self.running.set()
        self.try_started: float | None = None


def _recorded_extend(hooks: _Hooks | None, extend: Callable[[], None]) -> None:
    """Wait while the client is paused (its process is stopped), extend, record the outcome."""
    if hooks is None:
        extend()
        return
    hooks.running.wait()
    started = hooks.now()
    try:
        extend()
    except LockLost:
        hooks.on_extend(started, False)
        raise
    hooks.on_extend(started, True)


class _RecordedLock(Lock):
    """``Lock`` whose extensions are recorded and wait while its client is paused."""

    hooks: _Hooks | None = None

    def extend(self, ttl_ms: int | None = None) -> None:
        _recorded_extend(self.hooks, lambda: Lock.extend(self, ttl_ms))


class _RecordedFencedLock(FencedLock):
    """``FencedLock`` whose extensions are recorded and wait while its client is paused."""

    hooks: _Hooks | None = None

    def extend(self, ttl_ms: int | None = None) -> None:
        _recorded_extend(self.hooks, lambda: FencedLock.extend(self, ttl_ms))


class _RecordedRedlock(Redlock):
    """``Redlock`` whose every try is recorded: a refused try as *not acquired*, with its votes."""

    hooks: _Hooks | None = None

    def _try_set(self, value: str, started: float) -> bool:
        hooks = self.hooks
        if hooks is None:
            return super()._try_set(value, started)
        hooks.try_started = hooks.now()
        won = super()._try_set(value, started)
        attempt = self.last_attempt
        if not won and attempt is not None:
            hooks.on_try(attempt)
        return won


class Resource:
    """The protected resource: a value that clients write. Subclasses decide what is refused."""

    name = "resource"

    def write(self, holder: Holder, value: str) -> tuple[bool, str]:
        """Try to store ``value`` for ``holder``; return (accepted, detail for the timeline)."""
        raise NotImplementedError

    def read(self) -> str | None:
        """The value stored now (``None`` before any write)."""
        raise NotImplementedError


class PlainResource(Resource):
    """A value in a Redis hash that accepts every write: the resource most code has."""

    name = "unfenced resource"

    def __init__(self, client: redis.Redis, key: str) -> None:
        self._client = client
        self._key = key

    def write(self, holder: Holder, value: str) -> tuple[bool, str]:
        self._client.hset(self._key, "value", value)
        return True, "nothing is checked"

    def read(self) -> str | None:
        raw = self._client.hget(self._key, "value")
        return raw.decode("utf-8") if isinstance(raw, bytes) else None


class FencedResource(Resource):
    """A :class:`~lockguide.FencedStore`: a write needs a token above every accepted one."""

    name = "fenced resource"

    def __init__(self, client: redis.Redis, key: str) -> None:
        self.store = FencedStore(client, key)

    def write(self, holder: Holder, value: str) -> tuple[bool, str]:
        token = holder.token
        if token is None:
            raise BadArgument(f"{holder.name} has no fencing token: use a FencedLock")
        result = self.store.try_write(token, value)
        if result.accepted:
            return True, f"token {token}"
        return False, f"token {token}, but the resource has accepted token {result.highest}"

    def read(self) -> str | None:
        return self.store.read().value


class VersionedResource(Resource):
    """A :class:`~lockguide.VersionedValue`: a write must name the version its writer read.

    Each client reads the value and its version when it starts its work
    (:meth:`Holder.read`); its write is a compare-and-set on that version, so a
    write made after someone else's has moved the version is refused, whatever
    the lock believed. The check is the resource's, not the lock's.
    """

    name = "versioned resource"

    def __init__(self, client: redis.Redis, key: str) -> None:
        self.value = VersionedValue(client, key)
        self._read: dict[str, int] = {}

    def begin(self, holder: Holder) -> int:
        """Read the version ``holder`` will write against; return it."""
        version = self.value.read().version
        self._read[holder.name] = version
        return version

    def write(self, holder: Holder, value: str) -> tuple[bool, str]:
        expected = self._read.get(holder.name)
        if expected is None:
            raise BadArgument(f"{holder.name} has not read the resource: call its read() first")
        result = self.value.compare_and_set(expected, value)
        if result.accepted:
            self._read[holder.name] = result.version
            return True, f"compare-and-set on version {expected}: now version {result.version}"
        return False, (
            f"compare-and-set on version {expected}, but the resource is at version "
            f"{result.version}: someone wrote since {holder.name} read it"
        )

    def read(self) -> str | None:
        return self.value.read().value


class Holder:
    """One client of the lock in a scenario: it acquires, pauses, writes, releases.

    Every action is recorded in the run's timeline. ``servers`` are the clients
    of the servers that hold the lock's key: one for a single-instance lock,
    the masters for a Redlock, where the lease is held while a majority of them
    still holds the value.
    """

    def __init__(self, run: Run, name: str, lock: LockLike, servers: Sequence[redis.Redis]):
        self.run = run
        self.name = name
        self.lock = lock
        self.servers = list(servers)
        self.hooks = _Hooks(run.now, self._extended, self._tried)
        self.lease_end_ms: float | None = None
        self._value: str | None = None
        self._token: int | None = None
        self._writes = 0
        self.watchdog: Watchdog | None = None
        if isinstance(lock, _RecordedLock | _RecordedFencedLock | _RecordedRedlock):
            lock.hooks = self.hooks

    @property
    def token(self) -> int | None:
        """The fencing token of the current acquisition, if the lock issues one.

        Kept from the moment of acquiring, as a client keeps it for its writes:
        a watchdog that finds the lease lost makes the lock forget it, but the
        client's code has already read it.
        """
        return self._token if self._value is not None else None

    def owns(self) -> bool:
        """Whether the servers still keep this client's lease from anyone else.

        True while the servers that hold this client's value, together with
        those that are down (a server that is down grants nothing to anybody),
        are a majority: one server for a single-instance lock, three of five
        for a Redlock.
        """
        if self._value is None:
            return False
        wanted = self._value.encode("utf-8")
        blocking = 0
        for client in self.servers:
            try:
                blocking += client.get(self.lock.key) == wanted
            except RedisError:
                blocking += 1
        return blocking >= quorum(len(self.servers))

    def acquire(self, *, timeout_ms: float | None = None) -> bool:
        """Take the lock; records *acquired*, or *not acquired* with the reason.

        Without ``timeout_ms``, one attempt. With it, the lock's own blocking
        acquire, retrying as the lock does until ``timeout_ms`` (a Redlock made
        by :meth:`Run.redlock` records every refused try as it happens).
        """
        self.run.begin()
        started = self.run.now()
        self.hooks.try_started = None
        if timeout_ms is None:
            got = self.lock.acquire(blocking=False)
        else:
            got = self.lock.acquire(blocking=True, timeout_ms=timeout_ms)
        if self.hooks.try_started is not None:
            started = self.hooks.try_started
        if not got:
            if isinstance(self.lock, _RecordedRedlock) and timeout_ms is None:
                return False  # its one try is recorded already, with its votes
            if timeout_ms is not None:
                self.run.record(self.name, Kind.GAVE_UP, f"no lock after {timeout_ms:.0f} ms")
                return False
            if isinstance(self.lock, Redlock):
                why = "no majority: " + _votes(self.lock.last_attempt)
            else:
                why = "the key is held by someone else"
            self.run.record(self.name, Kind.NOT_ACQUIRED, why)
            return False
        self._value = self.lock.value
        self._token = self.lock.token if isinstance(self.lock, FencedLock) else None
        self.lease_end_ms = started + self.lock.ttl_ms
        detail = f"lease {self.lock.ttl_ms} ms"
        if isinstance(self.lock, Redlock):
            detail += " on " + _votes(self.lock.last_attempt)
        if self.token is not None:
            detail += f", fencing token {self.token}"
        self.run.record(self.name, Kind.ACQUIRED, detail)
        return True

    def read(self, resource: VersionedResource) -> int:
        """Read the resource's value and version before working on it; records *read*."""
        self.run.settle()
        version = resource.begin(self)
        self.run.record(self.name, Kind.READ, f"version {version}")
        return version

    def write(self, resource: Resource) -> bool:
        """Write ``"<name>'s write"`` (numbered after the first) to the resource."""
        number = self._writes + 1
        value = f"{self.name}'s write" + (f" #{number}" if number > 1 else "")
        self.run.settle()
        accepted, detail = resource.write(self, value)
        self._writes = number
        kind = Kind.WRITE_ACCEPTED if accepted else Kind.WRITE_REFUSED
        self.run.record(self.name, kind, detail, value=value)
        return accepted

    def release(self) -> None:
        """Release through the lock (or its watchdog); records what the release did.

        Holds the run's mutex throughout, so that what the servers held before
        and after is this release's doing, not another client's thread's.
        """
        with self.run.mutex:
            self._release()

    def _release(self) -> None:
        self.run.settle()
        self.lease_end_ms = None  # whatever happens next ends the lease; no "lost" for it
        key = self.lock.key
        before = [_get(client, key) for client in self.servers]
        mine = self._value.encode("utf-8") if self._value else None
        try:
            if self.watchdog is not None:
                self.watchdog.release()
            else:
                self.lock.release()
        except LockError as error:
            self._value = None
            self.run.record(self.name, Kind.RELEASE_REFUSED, _why(error))
            return
        finally:
            self.watchdog = None
        # Only other holders' values count: with clients acting at once, a value
        # may come and go between the two reads through its own client's doing.
        others = {v for v in before if v is not None and v != mine and self.run.holds(v)}
        after = [_get(client, key) for client in self.servers]
        deleted = [b for b, a in zip(before, after, strict=True) if b in others and a != b]
        owners = ", ".join(sorted({self.run.owner_of(v) for v in deleted}))
        self._value = None
        if deleted:
            self.run.record(self.name, Kind.RELEASED_OTHERS, f"its DEL removed {owners}'s key")
        elif mine is not None and mine in before:
            self.run.record(self.name, Kind.RELEASED, "its own key was deleted")
        else:
            self.run.record(self.name, Kind.RELEASED, "the key was already gone: nothing deleted")

    def pause(self, why: str = "a stop-the-world pause") -> None:
        """From now until :meth:`resume`, nothing in this client's process runs."""
        self.hooks.running.clear()
        self.run.record(self.name, Kind.PAUSED, why)

    def resume(self) -> None:
        """The process runs again, from where it stopped."""
        self.run.record(self.name, Kind.RESUMED, "carries on where it stopped")
        self.hooks.running.set()

    def renew(self, every_ms: float, max_renewals: int = 100) -> Watchdog:
        """Start a :class:`~lockguide.Watchdog` on the held lock (its renewals are recorded)."""
        if not isinstance(self.lock, _RecordedLock | _RecordedFencedLock):
            raise BadArgumentType("renewal needs a lock made by Run.lock or Run.fenced_lock")
        dog = Watchdog(self.lock, every_ms=every_ms, max_renewals=max_renewals)
        dog.start()
        self.watchdog = dog
        return dog

    def _tried(self, attempt: Attempt) -> None:
        why = "no majority: " + _votes(attempt)
        self.run.record(self.name, Kind.NOT_ACQUIRED, why, in_passing=True)

    def _extended(self, started: float, ok: bool) -> None:
        if ok:
            self.lease_end_ms = started + self.lock.ttl_ms
            detail = f"lease reset to {self.lock.ttl_ms} ms"
            self.run.record(self.name, Kind.RENEWED, detail, in_passing=True)
        else:
            detail = "the key was gone or someone else's"
            self.run.record(self.name, Kind.RENEWAL_FAILED, detail, in_passing=True)

    @property
    def wrote(self) -> bool:
        """Whether this client has tried to write at least once."""
        return self._writes > 0

    @property
    def value(self) -> str | None:
        """The lock value of the current acquisition, while this client believes it holds it."""
        return self._value


def _get(client: redis.Redis, key: str) -> bytes | None:
    try:
        raw = client.get(key)
    except RedisError:
        return None
    return raw if isinstance(raw, bytes) else None


def _votes(attempt: Attempt | None) -> str:
    """``"3 of 5 masters"``, with who refused and who did not answer."""
    if attempt is None:
        return "no try made"
    total = attempt.granted + attempt.refused + attempt.failed
    text = f"{attempt.granted} of {total} masters"
    others = []
    if attempt.refused:
        others.append(f"{attempt.refused} held by others")
    if attempt.failed:
        others.append(f"{attempt.failed} unreachable")
    return text + (f" ({', '.join(others)})" if others else "")


def _why(error: LockError) -> str:
    if isinstance(error, StaleToken):
        return "stale token"
    if isinstance(error, MajorityLost):
        return (
            f"MajorityLost: only {error.confirmed} of {error.masters} masters still held "
            "its value; nothing of anyone else's was deleted"
        )
    name = type(error).__name__
    return {
        "LockLost": "LockLost: the key is gone or someone else's; nothing was deleted",
        "RenewalFailed": "RenewalFailed: the watchdog had found the lease lost",
    }.get(name, name)


#: Events recorded before the leases they ended (the ``DEL``, the crash came first).
_CAUSES = frozenset({Kind.RELEASED_OTHERS, Kind.SERVER})


class Run:
    """One run of one scenario on one bench: the clock, the clients, the events."""

    def __init__(self, bench: Bench, scenario: Scenario, way: Way) -> None:
        self.bench = bench
        self.scenario = scenario
        self.way = way
        self.clock = bench.clock
        self._t0: float | None = None
        self._events: list[Event] = []
        self._holders: list[Holder] = []
        self.mutex = threading.RLock()
        self.approach = ""

    # -- time ---------------------------------------------------------------------------------

    def begin(self) -> None:
        """Start the run's time here: setting up servers and clients is not part of the story.

        Called by the first event or :meth:`at` if the script does not call it.
        """
        if self._t0 is None:
            self._t0 = self.clock.now_ms()

    def now(self) -> float:
        """Milliseconds since the run began (0 before it has)."""
        if self._t0 is None:
            return 0.0
        return self.clock.now_ms() - self._t0

    def at(self, t_ms: float) -> None:
        """Move the clock to ``t_ms`` after the start (no-op if already later)."""
        self.begin()
        assert self._t0 is not None
        self.clock.advance_to(self._t0 + t_ms)
        self.settle()

    def after(self, ms: float) -> None:
        """Let ``ms`` pass."""
        self.at(self.now() + ms)

    # -- parts ---------------------------------------------------------------------------------

    def holder(self, name: str, lock: LockLike, servers: Sequence[redis.Redis]) -> Holder:
        """A client called ``name`` that uses ``lock``, whose key lives on ``servers``."""
        holder = Holder(self, name, lock, servers)
        self._holders.append(holder)
        return holder

    def lock(self, client: redis.Redis, key: str, ttl_ms: int) -> Lock:
        """A :class:`~lockguide.Lock` whose renewals (if any) are recorded."""
        return _RecordedLock(client, key, ttl_ms)

    def fenced_lock(self, client: redis.Redis, key: str, ttl_ms: int) -> FencedLock:
        """A :class:`~lockguide.FencedLock` whose renewals (if any) are recorded."""
        return _RecordedFencedLock(client, key, ttl_ms)

    def redlock(
        self, masters: Sequence[redis.Redis], key: str, ttl_ms: int, **options: Any
    ) -> Redlock:
        """A :class:`~lockguide.Redlock` whose refused tries are recorded (``options`` as its)."""
        return _RecordedRedlock(masters, key, ttl_ms, **options)

    def server_event(self, detail: str) -> None:
        """Record something the servers did (``actor`` is ``"redis"``), then what it cost."""
        self.record("redis", Kind.SERVER, detail)

    def holds(self, value: bytes) -> bool:
        """Whether ``value`` is the lock value of a client that believes it holds the lock."""
        return any(h.value is not None and h.value.encode("utf-8") == value for h in self._holders)

    def owner_of(self, value: bytes) -> str:
        """The name of the client whose lock value this is."""
        for holder in self._holders:
            if holder.value is not None and holder.value.encode("utf-8") == value:
                return holder.name
        return "another client"

    # -- events --------------------------------------------------------------------------------

    def record(
        self,
        actor: str,
        kind: Kind,
        detail: str = "",
        *,
        value: str | None = None,
        in_passing: bool = False,
    ) -> None:
        """Add an event now; settle the leases before (what ended meanwhile) and after
        (what this event ended: a ``DEL`` of someone else's key).

        ``in_passing`` events (a renewal, one refused try inside a lock's retry
        loop) are noted from the lock's own thread and change no lease: they
        are appended without settling, so that noting them does not slow the
        client down.
        """
        self.begin()
        with self.mutex:
            if not in_passing and kind not in _CAUSES:
                self.settle()
            self._events.append(Event(round(self.now(), 1), actor, kind, detail, value))
            if not in_passing:
                self.settle()
                self.clock.tick(self.scenario.step_ms)

    def settle(self) -> None:
        """Record the leases that have ended since the last event."""
        with self.mutex:
            now = self.now()
            for holder in self._holders:
                if holder.lease_end_ms is None or holder.owns():
                    continue
                end = holder.lease_end_ms
                holder.lease_end_ms = None
                if end <= now:
                    self._events.append(
                        Event(round(end, 1), holder.name, Kind.EXPIRED, "its TTL ran out")
                    )
                else:
                    self._events.append(
                        Event(
                            round(now, 1),
                            holder.name,
                            Kind.LOST,
                            f"its key vanished {end - now:.0f} ms before its TTL would have ended",
                        )
                    )

    def finish(self, resource: Resource) -> Timeline:
        """Settle, read the resource, and return the timeline."""
        self.settle()
        final = resource.read()
        params = {f.name: float(getattr(self.scenario, f.name)) for f in fields(self.scenario)}
        return Timeline(
            scenario=self.scenario.title,
            way=str(self.way),
            approach=self.approach,
            bench=self.bench.label,
            events=tuple(sorted(self._events, key=lambda e: e.t_ms)),
            final_value=final,
            parameters=params,
        )


@dataclass(frozen=True)
class Scenario:
    """A failure mode as a runnable script, broken or fixed. Subclasses are dataclasses.

    Class attributes:
        title: the failure mode in a few words.
        broken: what the broken run uses ("Lock, unfenced writes").
        fixed: what the fixed run uses.
        real_time: the script needs real time to pass (a thread must run),
            even on a virtual clock.
        liveness: the broken way fails to make progress (nobody acquires)
            rather than letting two writers in.

    On a virtual clock each client action takes :attr:`step_ms`; on a real
    clock it takes what it takes.
    """

    title: ClassVar[str] = ""
    broken: ClassVar[str] = ""
    fixed: ClassVar[str] = ""
    real_time: ClassVar[bool] = False
    liveness: ClassVar[bool] = False

    @property
    def step_ms(self) -> float:
        """How long one client action takes on a virtual clock (the figure's spacing)."""
        return 1.0

    def run(self, bench: Bench, way: Way | str = Way.BROKEN) -> Timeline:
        """Run the scenario once on ``bench`` and return its timeline."""
        if not isinstance(bench, Bench):
            raise BadArgumentType(f"bench must be a Bench, not {type(bench).__name__}")
        try:
            chosen = Way(way)
        except ValueError:
            raise BadArgument(f"way must be 'broken' or 'fixed', got {way!r}") from None
        with bench.running():
            run = Run(bench, self, chosen)
            run.approach = self.broken if chosen is Way.BROKEN else self.fixed
            with contextlib.ExitStack() as stack:
                if self.real_time:
                    stack.enter_context(bench.clock.real_time())
                resource = self.script(run, chosen)
            return run.finish(resource)

    def both(self, bench: Bench) -> tuple[Timeline, Timeline]:
        """The broken run, then the fixed run."""
        return self.run(bench, Way.BROKEN), self.run(bench, Way.FIXED)

    def script(self, run: Run, way: Way) -> Resource:
        """Act the scenario out; return the resource whose final state is judged."""
        raise NotImplementedError
