"""A client of the lock in a scenario: it acquires, pauses, reads, writes, releases.

Every action records itself in its run's timeline. The lock it uses is one
of :mod:`~lockguide_lab.scenarios.locks`; its lease is judged on the servers
themselves (see :meth:`Actor.owns`), not by what the lock believes.
"""

from __future__ import annotations

import collections
from collections.abc import Sequence
from typing import TYPE_CHECKING

import redis
from redis.exceptions import RedisError

from lockguide.errors import BadArgumentType, LockError, MajorityLost, StaleToken
from lockguide.fencing import FencedLock
from lockguide.redlock import Attempt, Redlock
from lockguide.renewal import Watchdog
from lockguide.validity import quorum
from lockguide_lab.history.record import LEASE_KEY, RESOURCE_KEY
from lockguide_lab.scenarios.locks import (
    Hooks,
    LockLike,
    RecordedFencedLock,
    RecordedLock,
    RecordedRedlock,
)
from lockguide_lab.scenarios.resources import Resource, VersionedResource
from lockguide_lab.scenarios.timeline import Kind

if TYPE_CHECKING:
    from lockguide_lab.scenarios.run import Run

__all__ = ["Actor"]


class Actor:
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
        hooks = getattr(lock, "hooks", None)
        self.hooks = hooks if isinstance(hooks, Hooks) else Hooks(run.now)
        # A lock whose renewals are noted by its connections, inside its own release (a
        # Leader's resign), must not record from there: the run records them at its next
        # settle, on the thread that runs the script, at the moment each was answered.
        deferred = getattr(lock, "defers_renewals", False)
        self.hooks.on_extend = self._defer if deferred else self._extended
        self._deferred: collections.deque[tuple[float, bool, float]] = collections.deque()
        self.hooks.on_try = self._tried
        self.lease_end_ms: float | None = None
        self._value: str | None = None
        self._token: int | None = None
        self._writes = 0
        self._epoch = 0
        self.watchdog: Watchdog | None = None

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
        ttl = self.lock.ttl_ms
        op = self.run.history.invoke(self.name, "acquire", _window(started, ttl), key=LEASE_KEY)
        try:
            if timeout_ms is None:
                got = self.lock.acquire(blocking=False)
            else:
                got = self.lock.acquire(blocking=True, timeout_ms=timeout_ms)
        except BaseException:
            op.info(_window(started, ttl))
            raise
        if self.hooks.try_started is not None:
            started = self.hooks.try_started
        if got:
            self._epoch = self.run.next_epoch()
            op.ok(_window(started, ttl))
        else:
            op.fail(_window(started, ttl))
        if not got:
            if isinstance(self.lock, RecordedRedlock) and timeout_ms is None:
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
        fenced = isinstance(self.lock, FencedLock) or getattr(self.lock, "fenced", False)
        self._token = getattr(self.lock, "token", None) if fenced else None
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
        # The fenced-resource model judges every write by a token: the lock's fencing
        # token where it issues one, else the order in which the lock granted its lease.
        token = self.token if self.token is not None else self._epoch
        carried = {"token": token, "data": value}
        op = self.run.history.invoke(self.name, "write", carried, key=RESOURCE_KEY)
        try:
            accepted, detail = resource.write(self, value)
        except BaseException:
            op.info(carried)
            raise
        (op.ok if accepted else op.fail)(carried)
        self._writes = number
        kind = Kind.WRITE_ACCEPTED if accepted else Kind.WRITE_REFUSED
        self.run.record(self.name, kind, detail, value=value)
        return accepted

    def release(self) -> None:
        """Release through the lock (or its watchdog); records what the release did.

        Holds the run's mutex throughout, so that what the servers held before
        and after is this release's doing, not another client's thread's. A
        watchdog is stopped first, outside the mutex: a renewal in flight
        records itself under that mutex, and stopping waits for it to finish.
        """
        if self.watchdog is not None:
            self.watchdog.stop()
        with self.run.mutex:
            self._release()

    def _release(self) -> None:
        self.run.settle()
        self.lease_end_ms = None  # whatever happens next ends the lease; no "lost" for it
        key = self.lock.key
        before = [_get(client, key) for client in self.servers]
        mine = self._value.encode("utf-8") if self._value else None
        # The holder gives the lease up when it calls release: its window ends there
        # (a Redlock's next holder may start its winning try before this call returns).
        given_up = {"at": round(self.run.now(), 3)}
        op = self.run.history.invoke(self.name, "release", given_up, key=LEASE_KEY)
        try:
            if self.watchdog is not None:
                self.watchdog.release()
            else:
                self.lock.release()
        except (LockError, RedisError) as error:
            # Refused, or not confirmed by enough masters (the lock object keeps
            # its value to retry): either way this client's work under it is over.
            # What it deleted, if anything, is unknown to the history.
            op.info(given_up)
            self._value = None
            self.run.record(self.name, Kind.RELEASE_REFUSED, _why(error))
            return
        except BaseException:
            op.info(given_up)
            raise
        finally:
            self.watchdog = None
        op.ok(given_up)
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

    def renew(self, every_ms: float, max_total_ms: float | None = None) -> Watchdog:
        """Start a :class:`~lockguide.Watchdog` on the held lock (its renewals are recorded)."""
        if not isinstance(self.lock, RecordedLock | RecordedFencedLock):
            raise BadArgumentType("renewal needs a lock made by Run.lock or Run.fenced_lock")
        dog = Watchdog(self.lock, every_ms=every_ms, max_total_ms=max_total_ms)
        dog.start()
        self.watchdog = dog
        return dog

    def _tried(self, attempt: Attempt) -> None:
        why = "no majority: " + _votes(attempt)
        self.run.record(self.name, Kind.NOT_ACQUIRED, why, in_passing=True)

    def _defer(self, started: float, ok: bool) -> None:
        self._deferred.append((started, ok, self.run.now()))

    def flush(self) -> None:
        """Record the renewals noted since the last call (see ``defers_renewals``)."""
        while self._deferred:
            started, ok, answered = self._deferred.popleft()
            self._extended(started, ok, at=answered)

    def _extended(self, started: float, ok: bool, at: float | None = None) -> None:
        # Noted once the renewal has returned: its invoke is written then too, with
        # the window it asked for from the moment it was sent.
        window = _window(started, self.lock.ttl_ms)
        op = self.run.history.invoke(self.name, "renew", window, key=LEASE_KEY)
        (op.ok if ok else op.fail)(window)
        if ok:
            self.lease_end_ms = started + self.lock.ttl_ms
            detail = f"lease reset to {self.lock.ttl_ms} ms"
            self.run.record(self.name, Kind.RENEWED, detail, in_passing=True, at=at)
        else:
            detail = "the key was gone or someone else's"
            self.run.record(self.name, Kind.RENEWAL_FAILED, detail, in_passing=True, at=at)

    @property
    def wrote(self) -> bool:
        """Whether this client has tried to write at least once."""
        return self._writes > 0

    @property
    def value(self) -> str | None:
        """The lock value of the current acquisition, while this client believes it holds it."""
        return self._value


def _window(start_ms: float, ttl_ms: float) -> dict[str, list[float]]:
    """A lease's validity window as the history records it: from the try, for the TTL."""
    return {"window": [round(start_ms, 3), round(start_ms + ttl_ms, 3)]}


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


def _why(error: LockError | RedisError) -> str:
    if isinstance(error, RedisError):
        return (
            f"{type(error).__name__}: too few masters confirmed, and those it cannot reach "
            "did not answer; nothing of anyone else's was deleted"
        )
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
