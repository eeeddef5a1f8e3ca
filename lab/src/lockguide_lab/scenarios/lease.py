"""The holder outlives its lease: a pause, a bare ``DEL`` after it, work slower than the TTL.

All three run against one Redis server and a resource on another. The first
two script their time and run in virtual time on a :class:`~lockguide_lab.testbed.FakeTestbed` (a
35-second pause costs nothing); the third needs a renewal thread to run, so it
always runs in real time with short TTLs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import redis

from lockguide.errors import BadArgument
from lockguide_lab.scenarios import settings
from lockguide_lab.scenarios.actor import Actor
from lockguide_lab.scenarios.locks import BareDelLock
from lockguide_lab.scenarios.resources import (
    FencedResource,
    PlainResource,
    Resource,
    VersionedResource,
)
from lockguide_lab.scenarios.run import Run, Scenario, Way

__all__ = ["BareDelAfterExpiry", "PausedHolder", "WorkOutlastsTtl"]

KEY = "lock:ledger"
RESOURCE = "ledger:balance"


def _ms(value: object, name: str) -> float:
    return settings.duration_ms(value, name)


def _arrival(ttl_ms: float, pause_ms: float) -> float:
    """When the next client tries the lock during a pause that starts at 0.

    Half-way between the end of the lease and the end of the pause if the pause
    is longer (so every expiry the outcome depends on has the same margin on
    both sides); half-way through the pause otherwise, when the lease is still on.
    """
    if pause_ms > ttl_ms:
        return (ttl_ms + pause_ms) / 2
    return pause_ms / 2


def _step(ttl_ms: float, pause_ms: float) -> float:
    """A twentieth of the TTL, or less, so that B's two actions fit before A resumes."""
    window = _arrival(ttl_ms, pause_ms)
    return max(0.1, min(ttl_ms / 20, (pause_ms - window) / 4, window / 4))


def fenced_if_fixed(
    run: Run, way: Way, connect: Callable[[], redis.Redis], ttl_ms: int
) -> tuple[Actor, Actor, Resource]:
    """Clients A and B, each on a client from ``connect``, and the resource they write.

    Broken: a :class:`~lockguide.Lock` and a resource that accepts every
    write. Fixed: a :class:`~lockguide.FencedLock` and a resource that checks
    its token. Nothing else differs between the two ways.
    """
    client = run.testbed.resource_client()
    resource: Resource
    if way is Way.BROKEN:
        make, resource = run.lock, PlainResource(client, run.testbed.key(RESOURCE))
    else:
        make, resource = run.fenced_lock, FencedResource(client, run.testbed.key(RESOURCE))
    a, b = (
        run.actor(name, make(c, run.testbed.key(KEY), ttl_ms), [c])
        for name, c in ((name, connect()) for name in "AB")
    )
    return a, b, resource


def b_tries_while_a_works(
    run: Run,
    a: Actor,
    b: Actor,
    resource: Resource,
    *,
    then: Callable[[], None] | None = None,
    reads: VersionedResource | None = None,
) -> Resource:
    """The rest of every story in which the key vanished under A (the server's doing).

    At 20 ms B tries the lock and, if it gets it, writes; at 30 ms A, which
    noticed nothing, writes and releases. After ``then`` (more server events),
    B tries again if it was refused, writes, and releases. With ``reads``, each
    client reads the versioned resource right after acquiring.
    """

    def acquire_and_write(actor: Actor) -> bool:
        if not actor.acquire():
            return False
        if reads is not None:
            actor.read(reads)
        actor.write(resource)
        return True

    run.at(20)
    got = acquire_and_write(b)
    run.at(30)
    if a.value is not None:
        a.write(resource)
        a.release()
    if then is not None:
        then()
    if not got:
        acquire_and_write(b)
    if b.value is not None:
        b.release()
    return resource


def _finish(run: Run, resource: Resource, *waiting: Actor) -> None:
    """Clients that were refused try again once the others are done; all release."""
    for actor in waiting:
        if actor.value is None and not actor.wrote and actor.acquire():
            actor.write(resource)
        if actor.value is not None:
            actor.release()


@dataclass(frozen=True)
class _PauseScenario(Scenario):
    """A holder takes a lease of ``ttl_ms`` and then stops for ``pause_ms``."""

    ttl_ms: int = 200
    pause_ms: float = 300

    def __post_init__(self) -> None:
        settings.ttl_ms(self.ttl_ms)
        _ms(self.pause_ms, "pause_ms")

    @property
    def step_ms(self) -> float:
        """Per client action on a virtual clock: small against the TTL and the pause."""
        return _step(self.ttl_ms, self.pause_ms)


@dataclass(frozen=True)
class PausedHolder(_PauseScenario):
    """A holder stops (a garbage-collection pause) for longer than its lease, then writes.

    Client A acquires and pauses before its write. The lease runs out during the
    pause, B acquires and writes, and A wakes up believing it still holds the
    lock and writes too.

    * broken: a :class:`~lockguide.Lock` and a resource that accepts every
      write. A's write lands on top of B's: B's update is lost.
    * fixed: a :class:`~lockguide.FencedLock` and a
      :class:`~lockguide.FencedStore`. The lock overlaps exactly as before; the
      resource refuses A's token because it has accepted B's larger one.

    Args:
        ttl_ms: the lease every client asks for.
        pause_ms: how long A stops right after acquiring.
    """

    title = "A paused holder outlives its lease"
    broken = "Lock; the resource accepts every write"
    fixed = "FencedLock; the resource checks the fencing token"

    def script(self, run: Run, way: Way) -> Resource:
        a, b, resource = fenced_if_fixed(run, way, run.testbed.server().client, self.ttl_ms)
        a.acquire()
        a.pause("a stop-the-world garbage collection, before its write")
        run.at(_arrival(self.ttl_ms, self.pause_ms))
        if b.acquire():
            b.write(resource)
        run.at(self.pause_ms)
        a.resume()
        a.write(resource)
        a.release()
        _finish(run, resource, b)
        return resource


@dataclass(frozen=True)
class BareDelAfterExpiry(_PauseScenario):
    """A stale holder releases with a bare ``DEL`` and deletes the next holder's lock.

    A acquires and pauses past its lease; B acquires. A wakes up, finishes
    (its work only read, so it writes nothing) and releases. C then tries the
    lock while B is still working, and B writes when it finishes.

    * broken: ``SET NX PX`` released with a bare ``DEL`` (:class:`BareDelLock`).
      A's ``DEL`` removes B's key, C acquires: three holders from one pause, and
      B's late write lands on top of C's.
    * fixed: :class:`~lockguide.Lock`, released by compare-and-delete. A's
      release finds B's value and deletes nothing (``LockLost``); C is refused
      until B is done.

    Writes are unfenced both ways: the fix here is the release, nothing else.

    Args:
        ttl_ms: the lease every client asks for.
        pause_ms: how long A stops right after acquiring.
    """

    title = "A bare DEL after the lease expired"
    broken = "SET NX PX, released with a bare DEL"
    fixed = "Lock, released by compare-and-delete"

    def script(self, run: Run, way: Way) -> Resource:
        server = run.testbed.server()
        resource = PlainResource(run.testbed.resource_client(), run.testbed.key(RESOURCE))
        actors = []
        for name in "ABC":
            client = server.client()
            lock = (
                BareDelLock(client, run.testbed.key(KEY), self.ttl_ms)
                if way is Way.BROKEN
                else run.lock(client, run.testbed.key(KEY), self.ttl_ms)
            )
            actors.append(run.actor(name, lock, [client]))
        a, b, c = actors
        a.acquire()
        a.pause("a stop-the-world garbage collection")
        run.at(_arrival(self.ttl_ms, self.pause_ms))
        b.acquire()
        run.at(self.pause_ms)
        a.resume()
        a.release()  # in its finally block: A's work only read, it writes nothing
        if c.acquire():
            c.write(resource)
        if b.value is not None:
            b.write(resource)
            b.release()
        _finish(run, resource, c)
        return resource


@dataclass(frozen=True)
class WorkOutlastsTtl(Scenario):
    """The work takes longer than the TTL: the slow run overlaps the next client.

    A acquires and works for ``work_ms``, longer than its ``ttl_ms`` lease; B
    tries the lock while A is still working; A writes when its work is done.

    * broken: a :class:`~lockguide.Lock` with a TTL shorter than the work. The
      lease runs out mid-work, B gets in and writes, and A's write lands on top.
    * fixed: a :class:`~lockguide.FencedLock` renewed by a
      :class:`~lockguide.Watchdog` every ``renew_every_ms``, writing to a fenced
      resource. B is refused while A works, then gets its turn.

    With ``stall_ms`` > 0, A's whole process stops for that long after its work
    and before its write, watchdog included: renewal cannot help then, the lease
    runs out, B gets in, and in the fixed run only the fencing token refuses A's
    write. That is why the guide says *renew, and still fence*.

    This scenario always runs in real time, on any testbed: the watchdog is a
    thread, and a thread only runs while real time passes.

    Args:
        ttl_ms: the lease.
        work_ms: how long A works before it writes.
        renew_every_ms: the watchdog's interval (fixed run).
        stall_ms: a stop of A's whole process between its work and its write.
    """

    title = "The work outlasts the TTL"
    broken = "Lock with a TTL shorter than the slowest run"
    fixed = "FencedLock renewed by a Watchdog; the resource checks the token"
    real_time = True

    ttl_ms: int = 200
    work_ms: float = 400
    renew_every_ms: float = 60
    stall_ms: float = 0

    def __post_init__(self) -> None:
        settings.ttl_ms(self.ttl_ms)
        _ms(self.work_ms, "work_ms")
        _ms(self.stall_ms, "stall_ms")
        if not 0 < _ms(self.renew_every_ms, "renew_every_ms") < self.ttl_ms:
            raise BadArgument(
                f"renew_every_ms must be > 0 and below ttl_ms ({self.ttl_ms}), "
                f"got {self.renew_every_ms!r}"
            )

    def script(self, run: Run, way: Way) -> Resource:
        a, b, resource = fenced_if_fixed(run, way, run.testbed.server().client, self.ttl_ms)
        a.acquire()
        if way is Way.FIXED:
            a.renew(self.renew_every_ms)
        if self.stall_ms:
            # B arrives during the stall, once a lease last renewed when it began is over.
            run.at(self.work_ms)
            a.pause("its whole process stops after its work, before its write")
            run.at(self.work_ms + _arrival(self.ttl_ms, self.stall_ms))
        else:
            run.at(_arrival(self.ttl_ms, self.work_ms))
        if b.acquire():
            b.write(resource)
        if self.stall_ms:
            run.at(self.work_ms + self.stall_ms)
            a.resume()
        else:
            run.at(self.work_ms)
        gap = self.ttl_ms / 10  # so that the last steps can be told apart on the figure
        a.write(resource)
        run.after(gap)
        a.release()
        run.after(gap)
        if b.value is None and b.acquire():
            run.after(gap)
            b.write(resource)
        if b.value is not None:
            run.after(gap)
            b.release()
        return resource
