"""One leader for a named role: campaign, lead while the lease is renewed, resign.

A :class:`Leader` is a lock held for as long as its holder leads: taken by a campaign,
renewed every ``retry_period_ms`` with no bound, given up by :meth:`Leader.resign`. Each
term carries a fencing token for the writes the leader makes; a lost term stops the
leader's work (``on_lost`` and :attr:`Leader.lost_event`; in asyncio the body of
``async with`` is cancelled); anyone may read who leads (:meth:`Leader.holder`).

The timing follows client-go's leader election (``k8s.io/client-go/tools/leaderelection``):
``lease_ms > renew_deadline_ms > 1.2 * retry_period_ms``, by default 15 s, 10 s and 2 s.
A leader that has not renewed for ``renew_deadline_ms`` stops leading, while the server
keeps the role for the whole lease: the difference is the margin left for a pause or a
clock that runs slow before a contender can take over.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime
import functools
import random
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Self

import redis
from redis.cluster import RedisCluster

from lockguide._core import (
    UNSET,
    AlreadyAcquired,
    BadArgument,
    BadArgumentType,
    ClusterUnavailable,
    Holder,
    LockError,
    NotAcquired,
    NotOwned,
    RenewalFailed,
    check_key,
    check_ms,
    check_ttl_ms,
    note_failed_release,
)
from lockguide.fencing import FencedLock
from lockguide.renewal import OnLost, Watchdog

if TYPE_CHECKING:
    import redis.asyncio
    import redis.asyncio.cluster


__all__ = ["AsyncLeader", "Leader", "Term", "check_timing"]

#: client-go's defaults (``LeaseDuration``, ``RenewDeadline``, ``RetryPeriod``).
DEFAULT_LEASE_MS = 15_000
DEFAULT_RENEW_DEADLINE_MS = 10_000.0
DEFAULT_RETRY_PERIOD_MS = 2_000.0
#: client-go's ``JitterFactor``: the renew deadline must leave room for more than one retry.
JITTER_FACTOR = 1.2

Endpoints = Sequence[str] | str


@dataclass(frozen=True, slots=True)
class Term:
    """Who leads a role, read from the server by anyone.

    ``name`` (``host:pid:name``), ``since`` (the leader's wall clock when its term began:
    over Redis, when the try that won it began, at most ``retry_period_ms`` earlier),
    ``ttl_ms`` (the lease the server has left: over etcd in whole seconds) and ``token``
    (the term's fencing token: over Redis the token counter, over etcd the key's create
    revision).
    """

    name: str
    since: datetime.datetime | None
    ttl_ms: int
    token: int


def check_timing(
    lease_ms: object, renew_deadline_ms: object, retry_period_ms: object
) -> tuple[int, float, float]:
    """client-go's rule: ``lease_ms > renew_deadline_ms > 1.2 * retry_period_ms > 0``."""
    lease = check_ttl_ms(lease_ms, "lease_ms")
    renew = check_ms(renew_deadline_ms, "renew_deadline_ms", positive=True)
    retry = check_ms(retry_period_ms, "retry_period_ms", positive=True)
    if not lease > renew:
        raise BadArgument(
            f"lease_ms ({lease}) must be greater than renew_deadline_ms ({renew:g}): a leader "
            "stops leading after renew_deadline_ms without a renewal, and the difference is "
            "the margin before a contender may take over (client-go: 15 s and 10 s)"
        )
    if not renew > JITTER_FACTOR * retry:
        raise BadArgument(
            f"renew_deadline_ms ({renew:g}) must be greater than {JITTER_FACTOR} x "
            f"retry_period_ms ({retry:g}): a leader renews every retry_period_ms and needs "
            "more than one try before its deadline (client-go: 10 s and 2 s)"
        )
    return lease, renew, retry


def _label(name: object) -> str | None:
    if name is None:
        return None
    name = check_key(name, "name")
    if " " in name:
        raise BadArgument(f"name must not contain spaces (readers split on them), got {name!r}")
    return name


_NAMED: dict[type[Any], type[Any]] = {}


def _named(base: type[Any]) -> type[Any]:
    """``base`` (a ``FencedLock``, an ``EtcdLock``) whose value names ``_name``, not the thread."""
    if base in _NAMED:
        return _NAMED[base]

    class Named(base):  # type: ignore[misc]
        _name: str | None = None

        def _holder_label(self) -> str:
            return self._name or str(super()._holder_label())

    Named.__name__ = Named.__qualname__ = f"_Role{base.__name__}"
    return _NAMED.setdefault(base, Named)


def _is_endpoints(where: object) -> bool:
    if isinstance(where, str):
        return True
    return isinstance(where, Sequence) and bool(where) and all(isinstance(e, str) for e in where)


class _Campaign:
    """What both leaders share: the checks, the role's lock, the etcd term's watch."""

    _lock: Any
    _etcd: bool
    _error: RenewalFailed | None = None
    _watch: threading.Thread | None = None
    _watching: threading.Event | None = None
    _reported = False
    _in_term = False  # elected, and not resigned yet (the term may have been lost)

    def _init_campaign(
        self,
        where: object,
        role: object,
        name: object,
        lease_ms: object,
        renew_deadline_ms: object,
        retry_period_ms: object,
        timeout_ms: object,
        lock_delay_ms: object,
        request_timeout_ms: object,
        on_lost: object,
        redis_lock: type[Any],
    ) -> None:
        self._lease_ms, self._renew_ms, self._retry_ms = check_timing(
            lease_ms, renew_deadline_ms, retry_period_ms
        )
        self._role = check_key(role, "role")
        self._name = _label(name)
        if on_lost is not None and not callable(on_lost):
            raise BadArgumentType(f"on_lost must be a callable or None, not {on_lost!r}")
        self._on_lost: OnLost | None = on_lost
        options: dict[str, Any] = {
            "ttl_ms": self._lease_ms,
            "timeout_ms": timeout_ms,
            "retry_delay_ms": (self._retry_ms / 2, self._retry_ms),
            "request_timeout_ms": request_timeout_ms,
            "owner": "process",
        }
        self._etcd = _is_endpoints(where)
        if self._etcd:
            from lockguide.etcd import EtcdLock

            etcd_options = {"keepalive_ms": self._retry_ms, "lock_delay_ms": lock_delay_ms}
            self._lock = _named(EtcdLock)(where, self._role, **options, **etcd_options)
            self._lock._name = self._name
            return
        if lock_delay_ms != 0:
            raise BadArgument(
                "lock_delay_ms needs a consensus store: pass etcd endpoints "
                "(a Redis key has no record of how its last holder left)"
            )
        # The local deadline is the renew deadline: no renewal answered for that long and the
        # watchdog declares the term lost, lease_ms - renew_deadline_ms before Redis frees it.
        floor = self._lease_ms - self._renew_ms
        lock = _named(redis_lock)(
            where, self._role, drift_factor=0.0, drift_floor_ms=floor, **options
        )
        lock._name = self._name
        self._lock = lock

    # -- what anyone reads ---------------------------------------------------------------

    @property
    def role(self) -> str:
        """The key that names the role (on Redis; on etcd, the etcd key)."""
        return self._role

    @property
    def lease_ms(self) -> int:
        """The lease the server keeps the role for after the last renewal."""
        return self._lease_ms

    @property
    def renew_deadline_ms(self) -> float:
        """How long a leader may go without a renewal before it stops leading."""
        return self._renew_ms

    @property
    def retry_period_ms(self) -> float:
        """Time between renewals, and the most a contender waits between tries."""
        return self._retry_ms

    @property
    def token(self) -> int:
        """The fencing token of this leader's term (``NotOwned`` if it does not lead)."""
        token: int = self._lock.token
        return token

    @property
    def error(self) -> RenewalFailed | None:
        """Why the last term was lost, once it was."""
        return self._error

    def _left_ms(self) -> float:
        """How long this leader may still act on its own clock (0: not leading)."""
        left: float = self._lock.validity_remaining_ms()
        if self._etcd:  # etcd's local deadline is the lease's: the renew deadline is earlier
            left -= self._lease_ms - self._renew_ms
        return max(0.0, left)

    def _give_up_at(self, blocking: bool, timeout_ms: object) -> float | None:
        """When a campaign gives up, on the monotonic clock (``None``: never)."""
        if self._lock.held:
            raise AlreadyAcquired(self._role)
        if not blocking:
            if timeout_ms is not UNSET:
                raise BadArgument("campaign(blocking=False) makes one try: give no timeout_ms")
            return time.monotonic()
        wait = self._lock._timeout_ms if timeout_ms is UNSET else timeout_ms
        wait = None if wait is None else check_ms(wait, "timeout_ms")
        return None if wait is None else time.monotonic() + wait / 1000

    def _slice_ms(self, give_up: float | None) -> float | None:
        """The next slice of a campaign over Redis (``None``: the campaign is over).

        A campaign is a series of acquires of at most ``retry_period_ms`` each, so the value
        that wins (whose wall-clock stamp readers see as ``since``) is at most that old.
        """
        if give_up is None:
            return self._retry_ms
        left_ms = (give_up - time.monotonic()) * 1000
        return None if left_ms <= 0 else min(self._retry_ms, left_ms)

    # -- the etcd term: a thread that watches for the loss and the renew deadline ------------

    def _watch_etcd(self, deliver: Callable[[RenewalFailed], object]) -> None:
        stop = self._watching = threading.Event()
        lock = self._lock

        def watch() -> None:
            while not stop.is_set():
                if lock.lost:
                    error = lock.error
                    break
                left_s = self._left_ms() / 1000
                if left_s <= 0 and lock.held:
                    error = RenewalFailed(
                        self._role,
                        f"no keep-alive was answered within renew_deadline_ms "
                        f"({self._renew_ms:g} ms); it stopped, and the lease ends on the cluster",
                    )
                    lock._stop_keep_alive()
                    break
                lock.lost_event.wait(min(max(left_s, 0.001), 0.05))
            else:
                return
            if not stop.is_set():
                self._error = error
                deliver(error)

        self._watch = threading.Thread(
            target=watch, name=f"lockguide-leader:{self._role}", daemon=True
        )
        self._watch.start()

    def _stop_watch(self) -> None:
        if self._watching is not None:
            self._watching.set()
        if self._watch is not None and self._watch is not threading.current_thread():
            self._watch.join()
        self._watch = None

    def _resign_etcd(self) -> None:
        """Stop watching and give the role up; a lost term is raised (``RenewalFailed``)."""
        if not self._in_term:
            raise NotOwned(self._role, "resign")
        self._in_term = False
        self._stop_watch()
        lock, error = self._lock, self._error
        if lock.held:
            try:
                lock.release()
            except LockError as failed:
                if error is None:
                    raise
                if failed is not error:
                    note_failed_release(error, self._role, failed)
            finally:
                if lock.held:  # no answer: stop renewing, the lease ends on the cluster
                    lock._stop_keep_alive()
                    lock._forget(lock.value)
        if error is not None:
            raise error

    def _check_etcd(self) -> None:
        if not self._in_term:
            raise NotOwned(self._role, "check")
        if self._error is None and self._left_ms() <= 0 and self._lock.held:
            self._reported = True
            raise RenewalFailed(
                self._role, f"not renewed within renew_deadline_ms ({self._renew_ms:g} ms)"
            )
        try:
            if self._error is not None:
                raise self._error
            self._lock.check()
        except RenewalFailed:
            self._reported = True
            raise

    def _call_on_lost(self, error: RenewalFailed) -> None:
        if self._on_lost is None:
            return
        try:
            self._on_lost(error)
        except Exception as raised:  # the loss is reported all the same
            error.add_note(f"lockguide: on_lost raised {raised!r}")

    # -- who leads -----------------------------------------------------------------------

    def _etcd_term(self) -> Term | None:
        from lockguide.etcd import _EtcdError

        started = time.monotonic()
        try:
            return self._read_etcd_term()
        except (OSError, _EtcdError) as error:  # no member answered, or refused
            waited = (time.monotonic() - started) * 1000
            raise ClusterUnavailable(self._role, waited, repr(error)) from error

    def _read_etcd_term(self) -> Term | None:
        lock = self._lock
        reply = lock._call("/v3/kv/range", {"key": base64.b64encode(self._role.encode()).decode()})
        kvs = reply.get("kvs") or []
        if not kvs:
            return None
        value = base64.b64decode(kvs[0].get("value", "")).decode("utf-8", "replace")
        lease = int(kvs[0].get("lease", 0))
        ttl_s = (
            int(lock._call("/v3/lease/timetolive", {"ID": lease}).get("TTL", -1)) if lease else -1
        )
        if ttl_s < 0:  # the lease ended between the two reads
            return None
        return _term(Holder.read(value, ttl_s * 1000), kvs[0]["create_revision"])

    def __repr__(self) -> str:
        kind = "etcd" if self._etcd else "Redis"
        state = (
            f"leading, token {self._lock.token}"
            if self._lock.held and not self._error
            else "not leading"
        )
        return f"<{type(self).__name__} {self._role!r} on {kind}, {state}>"


def _term(holder: Holder | None, token: Any) -> Term | None:
    if holder is None:
        return None
    return Term(holder.name, holder.since, holder.ttl_ms, int(token or 0))


class Leader(_Campaign):
    """One leader at a time for a named role, over one Redis or an etcd cluster.

    Over Redis (a ``redis.Redis``, a Sentinel ``master_for`` client, a ``RedisCluster``) the
    role is a :class:`~lockguide.FencedLock` renewed by a :class:`~lockguide.Watchdog`: an
    **efficiency leader**. A failover that loses the key's latest write (Redis replicates
    asynchronously) can elect a second leader while the first still acts, until its next
    renewal finds the key someone else's (within ``retry_period_ms``); the token counter may
    go back too. Rare overlap is accepted: duplicated work, not corrupted data.

    Over etcd (``where``: the members' URLs) the role is a :class:`~lockguide.etcd.EtcdLock`:
    a **correctness leader**. The cluster grants the key to one lease at a time, across its
    own leader's death, and the token (the key's create revision) only goes up: a resource
    that checks it refuses a deposed leader's late write. ``lock_delay_ms`` adds Chubby's
    lock-delay after a leader that crashed (not one that resigned).

    A leader stops leading when a renewal finds the role someone else's, or when no renewal
    has been answered for ``renew_deadline_ms`` on its own clock; the server frees the role
    ``lease_ms`` after the last renewal. A pause longer than the difference lets a new leader
    in while the old one still believes: only the token, checked by the resource, stops it.

    The work stops where it looks: ``on_lost`` is called once (from a background thread),
    :attr:`lost_event` is set, :meth:`check` raises ``RenewalFailed``, and so does leaving
    ``with`` (unless ``check()`` already did) or :meth:`resign`.

    Args:
        where: a Redis client, or etcd endpoints (``"http://127.0.0.1:2379"`` or a list).
        role: the key that names the role, e.g. ``"lock:leader:scheduler"``.
        name: how this contender appears to readers (default: its thread's name).
        lease_ms: how long the server keeps the role after the last renewal (15 s; over
            etcd a whole number of seconds).
        renew_deadline_ms: how long the leader goes on without a renewal answered (10 s).
        retry_period_ms: time between renewals; a contender tries again within it (2 s).
        timeout_ms: how long :meth:`campaign` waits by default (``None``: until elected).
        lock_delay_ms: etcd only: the lock-delay after a leader's lease ended unreleased.
        request_timeout_ms: how long one request may wait for the server.
        on_lost: called once with the ``RenewalFailed`` error when a term is lost.

    Raises:
        BadArgument: at construction, before anything is sent: the timing rule
            (``lease_ms > renew_deadline_ms > 1.2 * retry_period_ms``) and the lock's checks.

    Example::

        leader = Leader(r, "lock:leader:scheduler", on_lost=lambda error: stop_firing())
        with leader:  # campaigns until elected
            while True:
                fire_due_jobs(token=leader.token)
                leader.check()  # raises RenewalFailed once the term is lost
                time.sleep(1)
    """

    _dog: Watchdog | None = None

    def __init__(
        self,
        where: redis.Redis | RedisCluster | Endpoints,
        role: str,
        *,
        name: str | None = None,
        lease_ms: int = DEFAULT_LEASE_MS,
        renew_deadline_ms: float = DEFAULT_RENEW_DEADLINE_MS,
        retry_period_ms: float = DEFAULT_RETRY_PERIOD_MS,
        timeout_ms: float | None = None,
        lock_delay_ms: int = 0,
        request_timeout_ms: float = 1_000.0,
        on_lost: OnLost | None = None,
    ) -> None:
        self._lost = threading.Event()
        self._init_campaign(
            where,
            role,
            name,
            lease_ms,
            renew_deadline_ms,
            retry_period_ms,
            timeout_ms,
            lock_delay_ms,
            request_timeout_ms,
            on_lost,
            FencedLock,
        )

    @property
    def leading(self) -> bool:
        """Whether this contender leads now, on its own clock (no loss seen, deadline ahead)."""
        return self._lock.held and self._error is None and self._left_ms() > 0

    @property
    def lost_event(self) -> threading.Event:
        """Set when the term is lost (cleared when a new one starts); a worker waits on it."""
        return self._lost

    def campaign(self, *, blocking: bool = True, timeout_ms: float | None = UNSET) -> bool:
        """Try to become the leader; ``True`` once elected, ``False`` if the wait ran out.

        ``blocking=False`` makes one try; ``timeout_ms`` (default: the constructor's, ``None``
        waits until elected). A lost term not yet resigned is given up first.

        Raises:
            AlreadyAcquired: this contender leads already.
        """
        self._drop_lost_term()
        if self._etcd:
            if not self._lock.acquire(blocking=blocking, timeout_ms=timeout_ms):
                return False
        elif not blocking:
            if not self._lock.acquire(blocking=False, timeout_ms=timeout_ms):
                return False
        else:
            give_up = self._give_up_at(blocking, timeout_ms)
            while not self._lock.acquire(timeout_ms=self._slice_ms(give_up)):
                if self._slice_ms(give_up) is None:
                    return False
        self._lost.clear()
        self._error, self._reported = None, False
        if self._etcd:
            self._in_term = True
            self._watch_etcd(self._lose)
        else:
            self._dog = Watchdog(
                self._lock, every_ms=self._retry_ms, max_total_ms=None, on_lost=self._lose
            )
            self._dog.start()
        return True

    def resign(self) -> None:
        """Stop renewing and give the role up, so a waiting contender is elected at once.

        Either way this contender no longer leads: if the server does not answer, its error
        is raised and the role is freed when the lease ends.

        Raises:
            NotOwned: this contender does not lead.
            RenewalFailed: the term had been lost (the role was given up if still held).
        """
        if self._etcd:
            self._resign_etcd()
            return
        if self._dog is None:
            raise NotOwned(self._role, "resign")
        dog, self._dog = self._dog, None
        dog.release()

    def check(self) -> None:
        """Raise if this leader must not act now; call it before each step of its work.

        Raises:
            NotOwned: it does not lead.
            RenewalFailed: the term was lost, or not renewed within the renew deadline.
        """
        if self._etcd:
            self._check_etcd()
        elif self._dog is None:
            raise NotOwned(self._role, "check")
        else:
            self._dog.check()

    def holder(self) -> Term | None:
        """Who leads now, since when, for how long, with which token (``None``: nobody)."""
        if self._etcd:
            return self._etcd_term()
        client: Any = self._lock._client
        with client.pipeline(transaction=not isinstance(client, RedisCluster)) as pipe:
            pipe.get(self._role).pttl(self._role).get(self._lock.counter_key)
            value, ttl_ms, token = pipe.execute()
        return _term(Holder.read(value, ttl_ms), token)

    def __enter__(self) -> Self:
        if not self.campaign():
            raise NotAcquired(self._role, self._lock._timeout_ms or 0.0) from self._lock.last_error
        return self

    def __exit__(self, *exc_info: Any) -> None:
        """Resign; the body's exception wins, and a loss already reported by ``check()`` is
        not raised again."""
        exc = exc_info[1]
        if self._dog is not None:
            dog, self._dog = self._dog, None
            dog.__exit__(*exc_info)
            return
        if not self._in_term:
            return
        try:
            self._resign_etcd()
        except Exception as error:
            if exc is not None:
                note_failed_release(exc, self._role, error)
            elif not (self._reported and isinstance(error, LockError)):
                raise

    def _lose(self, error: RenewalFailed) -> None:
        self._error = error
        self._lost.set()
        self._call_on_lost(error)

    def _drop_lost_term(self) -> None:
        if self._error is None:
            return
        with contextlib.suppress(LockError):
            if self._in_term:
                self._resign_etcd()
            elif self._dog is not None:
                dog, self._dog = self._dog, None
                dog.release()


class AsyncLeader(_Campaign):
    """:class:`Leader` in asyncio (also ``lockguide.aio.Leader``): the same arguments,
    ``where`` a ``redis.asyncio.Redis`` (or ``RedisCluster``) or etcd endpoints.

    Inside ``async with leader:`` the body is cancelled when the term is lost, as
    ``lockguide.aio.Watchdog`` cancels its body, and leaving raises ``RenewalFailed``; a
    cancellation from outside still leaves as a cancellation. ``on_lost`` is called in the
    event loop, before the body is cancelled; :attr:`lost_event` is an ``asyncio.Event``.

    Over etcd the lock's requests, which are synchronous, run in the default executor's
    threads: a campaign makes one try at a time (each a few requests), so a cancelled campaign
    waits for no thread, and a try that won after its caller was cancelled is released.
    """

    _dog: Any = None  # lockguide.aio.Watchdog over Redis
    _body: asyncio.Task[Any] | None = None
    _body_cancelling = 0
    _cancelled_body = False

    def __init__(
        self,
        where: redis.asyncio.Redis | redis.asyncio.cluster.RedisCluster | Endpoints,
        role: str,
        *,
        name: str | None = None,
        lease_ms: int = DEFAULT_LEASE_MS,
        renew_deadline_ms: float = DEFAULT_RENEW_DEADLINE_MS,
        retry_period_ms: float = DEFAULT_RETRY_PERIOD_MS,
        timeout_ms: float | None = None,
        lock_delay_ms: int = 0,
        request_timeout_ms: float = 1_000.0,
        on_lost: OnLost | None = None,
    ) -> None:
        from lockguide import aio

        self._aio = aio
        self._lost = asyncio.Event()
        self._init_campaign(
            where,
            role,
            name,
            lease_ms,
            renew_deadline_ms,
            retry_period_ms,
            timeout_ms,
            lock_delay_ms,
            request_timeout_ms,
            on_lost,
            aio.FencedLock,
        )

    @property
    def leading(self) -> bool:
        """Whether this contender leads now, on its own clock (no loss seen, deadline ahead)."""
        return self._lock.held and self._error is None and self._left_ms() > 0

    @property
    def lost_event(self) -> asyncio.Event:
        """Set when the term is lost (cleared when a new one starts)."""
        return self._lost

    async def campaign(self, *, blocking: bool = True, timeout_ms: float | None = UNSET) -> bool:
        """Try to become the leader (:meth:`Leader.campaign`)."""
        return await self._campaign(blocking, timeout_ms, start=True)

    async def _campaign(self, blocking: bool, timeout_ms: object, start: bool) -> bool:
        await self._drop_lost_term()
        give_up = self._give_up_at(blocking, timeout_ms)
        if self._etcd:
            got = await self._campaign_etcd(give_up)
        elif not blocking:
            got = await self._lock.acquire(blocking=False)
        else:
            while not (got := await self._lock.acquire(timeout_ms=self._slice_ms(give_up))):
                if self._slice_ms(give_up) is None:
                    break
        if not got:
            return False
        self._lost.clear()
        self._error, self._reported, self._cancelled_body = None, False, False
        if self._etcd:
            self._in_term = True
            loop = asyncio.get_running_loop()
            self._watch_etcd(lambda error: loop.call_soon_threadsafe(self._lose, error))
        else:
            self._dog = self._aio.Watchdog(
                self._lock, every_ms=self._retry_ms, max_total_ms=None, on_lost=self._lose
            )
            if start:  # (async with: the watchdog's own __aenter__ starts it)
                self._dog.start()
        return True

    async def _campaign_etcd(self, give_up: float | None) -> bool:
        loop = asyncio.get_running_loop()
        while True:
            attempt = loop.run_in_executor(
                None, functools.partial(self._lock.acquire, blocking=False)
            )
            try:
                if await asyncio.shield(attempt):
                    return True
            except asyncio.CancelledError:
                attempt.add_done_callback(self._release_if_won)
                raise
            pause = random.uniform(self._retry_ms / 2, self._retry_ms) / 1000
            if give_up is not None:
                pause = min(pause, give_up - time.monotonic())
            if pause <= 0:
                return False
            await asyncio.sleep(pause)

    def _release_if_won(self, attempt: asyncio.Future[bool]) -> None:
        if not attempt.cancelled() and attempt.exception() is None and attempt.result():
            asyncio.get_running_loop().run_in_executor(None, self._quiet_release)

    def _quiet_release(self) -> None:
        with contextlib.suppress(LockError):
            self._lock.release()

    async def resign(self) -> None:
        """Stop renewing and give the role up (:meth:`Leader.resign`)."""
        if self._etcd:
            await asyncio.to_thread(self._resign_etcd)
            return
        if self._dog is None:
            raise NotOwned(self._role, "resign")
        dog, self._dog = self._dog, None
        await dog.release()

    def check(self) -> None:
        """Raise ``RenewalFailed`` if this leader must not act now (:meth:`Leader.check`)."""
        if self._etcd:
            self._check_etcd()
        elif self._dog is None:
            raise NotOwned(self._role, "check")
        else:
            self._dog.check()

    async def holder(self) -> Term | None:
        """Who leads now, since when, for how long, with which token (``None``: nobody)."""
        if self._etcd:
            return await asyncio.to_thread(self._etcd_term)
        client: Any = self._lock._client
        async with client.pipeline(transaction=not self._lock._cluster) as pipe:
            pipe.get(self._role).pttl(self._role).get(self._lock.counter_key)
            value, ttl_ms, token = await pipe.execute()
        return _term(Holder.read(value, ttl_ms), token)

    async def __aenter__(self) -> Self:
        if not await self._campaign(True, UNSET, start=False):
            raise NotAcquired(self._role, self._lock._timeout_ms or 0.0) from self._lock.last_error
        if self._dog is not None:
            await self._dog.__aenter__()  # starts renewing; a loss cancels this task's body
            return self
        body = asyncio.current_task()
        if body is not None:  # no await from here to the body
            self._body, self._body_cancelling = body, body.cancelling()
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        """Resign; the body's exception wins, except the cancellation a loss caused, which
        leaves as ``RenewalFailed``."""
        if self._dog is not None:
            dog, self._dog = self._dog, None
            await dog.__aexit__(*exc_info)
            return
        if not self._in_term:
            return
        body, self._body = self._body, None
        exc, ours_alone = exc_info[1], False
        if body is not None and self._cancelled_body:
            ours_alone = body.uncancel() <= self._body_cancelling
            ours_alone &= isinstance(exc, asyncio.CancelledError)
        try:
            await asyncio.to_thread(self._resign_etcd)
        except Exception as error:
            if ours_alone:
                raise
            if exc is not None:
                note_failed_release(exc, self._role, error)
            elif not (self._reported and isinstance(error, LockError)):
                raise

    def _lose(self, error: RenewalFailed) -> None:
        self._error = error
        self._lost.set()
        self._call_on_lost(error)
        if self._body is not None and not self._cancelled_body:
            self._cancelled_body = self._body.cancel()

    async def _drop_lost_term(self) -> None:
        if self._error is None:
            return
        with contextlib.suppress(LockError):
            if self._in_term:
                await asyncio.to_thread(self._resign_etcd)
            elif self._dog is not None:
                dog, self._dog = self._dog, None
                await dog.release()
