"""``Redlock``: one lease held on a majority of N independent Redis masters.

Each try sends ``SET key <value> NX PX <ttl>`` to every master at once, each reply awaited
at most a per-node timeout; it wins with a majority and validity left, anything else is
deleted on **every** master before a random pause. Safe only under its timing assumptions.
"""

from __future__ import annotations

import contextlib
import functools
import os
import random
import time
import weakref
from collections import Counter
from collections.abc import Callable, Collection, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import redis
from redis import exceptions as rx
from redis.cluster import RedisCluster

from lockguide._core import (
    EXTEND,
    LEASE_DEFAULTS,
    RELEASE,
    BadArgument,
    BadArgumentType,
    ExtensionLimitReached,
    Holder,
    LeaseOptions,
    LeaseState,
    LockLost,
    LuaScript,
    MajorityLost,
    MasterError,
    NoQuorum,
    Sleep,
    Steps,
    answer,
    check_client,
    check_count,
    check_ms,
    check_ttl_ms,
    retryable,
    with_defaults,
)
from lockguide.lock import Driven, exchange, give_back, kept_for
from lockguide.validity import Verdict, judge, quorum

if TYPE_CHECKING:
    from typing_extensions import Unpack  # in typing itself from Python 3.12

__all__ = ["DEFAULT_NODE_TIMEOUT_MS", "Attempt", "FanOut", "Redlock"]

#: Per-master timeout by default: inside the 5-50 ms the Redis docs suggest for a 10 s lock.
DEFAULT_NODE_TIMEOUT_MS = 50.0


@dataclass(frozen=True)
class Attempt:
    """What one try produced: the ``verdict`` (arithmetic), masters that ``refused`` (held by
    another), ``failed`` (an error a retry may fix, or no answer) and the ``causes``.
    """

    verdict: Verdict
    refused: int
    failed: int
    causes: tuple[str, ...] = ()

    @property
    def granted(self) -> int:
        """Masters that stored this try's value."""
        return self.verdict.votes

    @property
    def acquired(self) -> bool:
        """A majority granted the key *and* validity was left."""
        return self.verdict.acquired


class RedlockOptions(LeaseOptions, total=False):
    """:class:`~lockguide._core.LeaseOptions`, and Redlock's own (defaults:
    :data:`REDLOCK_DEFAULTS`; what each means: :class:`Redlock`'s docstring)."""

    node_timeout_ms: float
    max_extensions: int | None
    rng: random.Random | None
    on_attempt: Callable[[Attempt], object] | None


#: The defaults of :class:`RedlockOptions`.
REDLOCK_DEFAULTS: dict[str, object] = {
    **LEASE_DEFAULTS,
    "node_timeout_ms": DEFAULT_NODE_TIMEOUT_MS,
    "max_extensions": None,
    "rng": None,
    "on_attempt": None,
}


@dataclass(frozen=True, slots=True)
class FanOut:
    """Send ``commands`` to every master (or those in ``only``) at once; one reply per master,
    each waited for at most ``timeout_s`` (``None``: the node timeout)."""

    commands: tuple[tuple[Any, ...], ...]
    only: tuple[int, ...] | None = None
    timeout_s: float | None = None


_PLACES: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()  # by pool


def _where(client: Any) -> str:
    """The server a client reaches (a Sentinel service by name), to refuse one twice."""
    pool = client.connection_pool
    if (place := _PLACES.get(pool)) is None:
        kwargs = pool.connection_kwargs
        host = str(kwargs.get("host", "localhost")).lower()
        host = "localhost" if host in ("127.0.0.1", "::1") else host
        place = f"{host}:{kwargs.get('port', 6379)}"
        if kwargs.get("path"):
            place = f"unix socket {kwargs['path']}"
        if kwargs.get("server") is not None:  # an in-process server (fakeredis)
            place = f"in-process server {id(kwargs['server'])}"
        if isinstance(service := getattr(pool, "service_name", None), str):
            place = f"sentinel service {service}"
        _PLACES[pool] = place
    return place


def _cluster_refused(master: str) -> BadArgument:
    """Why a Redis Cluster (or one of its nodes) cannot be a Redlock master."""
    return BadArgument(
        f"{master} is a Redis Cluster, and its masters are not independent: one cluster "
        "configuration, one failover domain. A key lives on exactly one master (the others "
        "answer MOVED), and when that master fails the cluster promotes its replica, which "
        "may lack the lock. Give Redlock separate Redis servers that fail independently; "
        "on a cluster, use Lock or FencedLock with the RedisCluster client"
    )


def tally(
    replies: list[Any], elapsed_ms: float, ttl_ms: int, drift: tuple[float, float]
) -> tuple[Attempt, dict[int, BaseException], int | None]:
    """Judge one try's replies: the attempt, the errors by master, the first one no retry fixes."""
    errors = {i: r for i, r in enumerate(replies) if isinstance(r, BaseException)}
    granted = sum(1 for r in replies if r is not None and not isinstance(r, BaseException))
    causes = tuple(f"masters[{i}]: {type(e).__name__}: {e}" for i, e in errors.items())
    verdict = judge(ttl_ms, elapsed_ms, granted, len(replies), *drift)
    attempt = Attempt(verdict, len(replies) - granted - len(errors), len(errors), causes)
    return attempt, errors, next((i for i, e in errors.items() if not retryable(e)), None)


class RedlockSteps(LeaseState):
    """Redlock's decisions over N masters (sync :class:`Redlock` and ``lockguide.aio.Redlock``)."""

    _redis: Any  # the client flavour: the module redis or redis.asyncio
    _cluster_type: type[Any]
    _pools: list[Any]
    _pool: Callable[[Any, float], Any]  # the driver's: the locks' pool to a client's server
    _max_extensions: int | None
    _last: Attempt | None
    _timed_with = True  # NoQuorum says how long `with` waited

    def _init_redlock(
        self, masters: Any, key: object, ttl_ms: object, options: Mapping[str, object]
    ) -> None:
        """Check the masters and :class:`RedlockOptions` (before anything is sent)."""
        if isinstance(masters, str | bytes) or not isinstance(masters, Collection):
            if isinstance(masters, self._cluster_type):
                raise _cluster_refused("masters")
            raise BadArgumentType(
                f"masters must be a list of {self._redis.__name__}.Redis clients, one per "
                f"independent master, not {type(masters).__name__}"
            )
        for i, master in enumerate(masters):  # (a Redis is no cluster: asked first, it is fast)
            if not isinstance(master, self._redis.Redis) and isinstance(master, self._cluster_type):
                raise _cluster_refused(f"masters[{i}]")
        clients = [check_client(self._redis, m, f"masters[{i}]") for i, m in enumerate(masters)]
        if not clients:
            raise BadArgument(
                "masters must not be empty: Redlock needs independent Redis masters "
                "(five, on separate machines, is the usual choice)"
            )
        where = [_where(c) for c in clients]
        for i, place in enumerate(where):
            if place in where[:i]:
                raise BadArgument(
                    f"masters[{where.index(place)}] and masters[{i}] are the same Redis server; "
                    "each vote must come from an independent master, or one failure counts twice"
                )
        given = with_defaults(type(self).__name__, options, REDLOCK_DEFAULTS)
        node_timeout_ms, max_extensions, rng, on_attempt = (
            given.pop(name) for name in ("node_timeout_ms", "max_extensions", "rng", "on_attempt")
        )
        self._init_lease(key, ttl_ms, given)
        node_timeout = check_ms(node_timeout_ms, "node_timeout_ms", positive=True)
        if node_timeout >= self._usable_ms:
            raise BadArgument(
                f"node_timeout_ms must leave validity in the TTL, got {node_timeout_ms!r} for "
                f"ttl_ms={self._ttl_ms}: keep it far below the TTL (5-50 ms for a 10 s lock)"
            )
        if self._retry_delay_ms[0] == self._retry_delay_ms[1]:
            raise BadArgument(
                f"retry_delay_ms must be a range, got the fixed delay {given['retry_delay_ms']!r}: "
                "contenders that wait the same time retry in step and split the vote again"
            )
        if max_extensions is not None:
            max_extensions = check_count(max_extensions, "max_extensions", hint=" or None")
        if rng is not None and not isinstance(rng, random.Random):
            raise BadArgumentType(f"rng must be a random.Random, not {type(rng).__name__}")
        if on_attempt is not None and not callable(on_attempt):
            raise BadArgumentType(f"on_attempt must be a function, not {on_attempt!r}")
        self._masters, self._where, self._quorum = tuple(clients), where, quorum(len(clients))
        self._node_timeout_ms, self._timeout_s = node_timeout, node_timeout / 1000.0
        self._pools = [self._pool(c, self._timeout_s) for c in clients]
        self._max_extensions, self._on_attempt = max_extensions, on_attempt
        self._uniform = rng.uniform if rng is not None else random.uniform
        self._extensions = self._released = 0
        self._last = None

    @property
    def masters(self) -> tuple[Any, ...]:
        """The clients, one per master, in the order given."""
        return self._masters

    @property
    def quorum(self) -> int:
        """Masters that must grant the key: ``len(masters) // 2 + 1``."""
        return self._quorum

    @property
    def node_timeout_ms(self) -> float:
        """How long each master's reply is waited for."""
        return self._node_timeout_ms

    @property
    def extensions_left(self) -> int | None:
        """How many more times :meth:`extend` may renew this acquisition (``None``: no bound)."""
        bound = self._max_extensions
        return None if bound is None else bound - self._extensions

    @property
    def last_attempt(self) -> Attempt | None:
        """The outcome of the most recent try (``None`` before any)."""
        return self._last

    def __repr__(self) -> str:
        return self._describe("Redlock", f"masters={len(self._masters)} ")

    def _acquire_steps(self, blocking: bool, timeout_ms: object) -> Steps[bool]:
        give_up_at = self._give_up_at(blocking, timeout_ms)
        first = True
        while not (yield from self._try_steps(self._new_value(), give_up_at, first, blocking)):
            first = False
            pause = self._pause_s(self._uniform, give_up_at) if blocking else 0.0
            if pause <= 0:
                return False
            yield Sleep(pause)
        return True

    def _try_steps(
        self, value: str, give_up_at: float | None, first: bool, blocking: bool
    ) -> Steps[bool]:
        """One try at every master, each waited for at most the time left; True if it won.
        A lost try leaves nothing behind."""
        budget = self._budget_s(self._timeout_s, give_up_at, first)
        if budget <= 0:
            return False
        try:
            started = self._clock()
            set_nx = ("SET", self._key, value, "NX", "PX", self._ttl_ms)
            replies = yield FanOut((set_nx,), timeout_s=budget)
            elapsed_ms = (self._clock() - started) * 1000.0
            attempt, errors, fatal = tally(replies, elapsed_ms, self._ttl_ms, self._drift)
            self._last = attempt
            self._last_error = next(iter(errors.values()), self._last_error)
            if attempt.acquired and fatal is None:
                self._won(value, started)
                self._extensions = self._released = 0
            if self._on_attempt is not None:
                self._on_attempt(attempt)
        except BaseException:  # Ctrl-C, a failing callback: nothing may stay locked
            self._forget(value)
            yield from self._release_quietly(value)
            raise
        if self._value == value:
            return True
        # Release on every master (a reply can be lost). Near a blocking acquire's deadline,
        # only on those that answered: they are alive, a round trip; one that did not answer
        # may be frozen, would cost a node timeout past the deadline, and its key, if any,
        # ends by its TTL.
        near = give_up_at is not None and give_up_at - self._clock() < self._timeout_s
        answered = tuple(i for i in range(len(replies)) if i not in errors)
        yield from self._release_quietly(value, None, answered if near and blocking else None)
        if fatal is not None:
            error = errors[fatal]
            if isinstance(error, rx.MovedError | rx.AskError):  # a node of a cluster
                raise _cluster_refused(f"masters[{fatal}] ({self._where[fatal]})") from error
            raise MasterError(self._key, fatal, self._where[fatal], error) from error  # type: ignore[arg-type]
        return False

    def _release_quietly(
        self, value: str, timeout_s: float | None = None, only: tuple[int, ...] | None = None
    ) -> Steps[None]:
        """Delete ``value`` on every master (or ``only`` those), not only those that said yes
        (a reply can be lost)."""
        if only == ():
            return
        with contextlib.suppress(Exception):  # best effort: the TTL ends it otherwise
            yield from self._run(RELEASE, value, only=only, timeout_s=timeout_s)

    def _run(
        self,
        script: LuaScript,
        value: str,
        *args: object,
        only: tuple[int, ...] | None = None,
        timeout_s: float | None = None,
    ) -> Steps[list[Any]]:
        """Run ``script`` on every master (or ``only`` those) at once, loading it where missing."""
        command = script.command((self._key,), (value, *args))
        replies = list((yield FanOut((command,), only, timeout_s)))
        missing = tuple(i for i, reply in enumerate(replies) if isinstance(reply, rx.NoScriptError))
        if missing:
            loaded = yield FanOut((("SCRIPT", "LOAD", script.source), command), missing, timeout_s)
            for i in missing:
                replies[i] = loaded[i]
        return replies

    def _release_steps(self) -> Steps[int]:
        """Compare-and-delete on every master. A master whose reply was lost is asked once
        more on a new connection; one found without the key (absent, not another's) while
        the lease was still valid here was cleared by the first request, as in ``Lock``."""
        value = self._check_owner("release")
        replies = yield from self._run(RELEASE, value)
        lost = tuple(i for i, r in enumerate(replies) if isinstance(r, rx.ConnectionError))
        if lost:
            again = yield from self._run(RELEASE, value, only=lost)
            replies = [again[i] if i in lost else reply for i, reply in enumerate(replies)]
            gone = tuple(i for i in lost if again[i] == 0)
            if gone and self._clock() < self._deadline:  # absent, not another's: it was ours
                exists = yield FanOut((("EXISTS", self._key),), gone)
                for i in gone:
                    replies[i] = 1 if exists[i] == 0 else 0
        self._released += replies.count(1)
        errors = [reply for reply in replies if isinstance(reply, Exception)]
        if errors and self._released < self._quorum <= self._released + len(errors):
            raise errors[0]
        self._forget(value)
        if self._released < self._quorum:
            raise self._majority_lost("release", self._released)
        return self._released

    def _extend_steps(self, ttl_ms: int | None) -> Steps[int]:
        new_ttl = self._ttl_ms if ttl_ms is None else check_ttl_ms(ttl_ms)
        usable_ms = self._usable_for(new_ttl)
        value = self._check_owner("extend")
        if self._max_extensions is not None and self._extensions >= self._max_extensions:
            raise ExtensionLimitReached(self._key, self._max_extensions)
        started = self._clock()
        extended = 0
        if self._in_lease(started):
            extended = (yield from self._run(EXTEND, value, new_ttl)).count(1)
        if extended >= self._quorum and self._in_lease(self._clock()):
            if self._value == value:  # not released and re-acquired meanwhile
                self._deadline = started + usable_ms / 1000.0
                self._extensions += 1
            return extended
        self._forget(value)
        yield from self._release_quietly(value)
        if extended < self._quorum and self._in_lease(started):
            raise self._majority_lost("extend", extended)
        raise LockLost(self._key, "extend")

    def _locked_steps(self) -> Steps[bool]:
        return (yield FanOut((("EXISTS", self._key),))).count(1) >= self._quorum  # type: ignore[no-any-return]

    def _holder_steps(self) -> Steps[Holder | None]:
        """The holder whose value a majority of masters have, with the least lease left."""
        values = yield FanOut((("GET", self._key),))
        counted = Counter(v for v in values if isinstance(v, str | bytes))
        value, votes = counted.most_common(1)[0] if counted else (None, 0)
        if votes < self._quorum:
            return None
        ttls = yield FanOut((("PTTL", self._key),))
        left = [t for v, t in zip(values, ttls, strict=True) if v == value and isinstance(t, int)]
        return Holder.read(value, min(left, default=-2))

    def _owned_steps(self) -> Steps[bool]:
        mine = self.value
        if mine is None:
            return False
        replies = yield FanOut((("GET", self._key),))
        return sum(1 for r in replies if r in (mine, mine.encode())) >= self._quorum

    def _not_acquired(self, started: float) -> NoQuorum:
        last = self._last
        assert last is not None
        return NoQuorum(
            self._key,
            (self._clock() - started) * 1000.0,
            granted=last.granted,
            refused=last.refused,
            failed=last.failed,
            needed=self._quorum,
            causes=last.causes,
        )

    def _majority_lost(self, action: str, confirmed: int) -> MajorityLost:
        n = len(self._where)
        return MajorityLost(self._key, action, confirmed=confirmed, needed=self._quorum, masters=n)


class Redlock(RedlockSteps, Driven):
    """A mutual-exclusion lease on a majority of N independent Redis masters.

    Args:
        masters: one ``redis.Redis`` per independent master (a list, tuple or set);
            the same server twice, or a Redis Cluster, is refused.
        key: the key that represents the lock on every master.
        ttl_ms: the lease requested on each master, a whole number of ms.

    Keyword Args:
        node_timeout_ms (float): how long each master may take, connecting included (50 ms);
            far below the TTL. A master that does not answer in time counts as "no".
        timeout_ms (float | None): how long :meth:`acquire` keeps trying by default (10 s;
            ``None``: no limit).
        retry_delay_ms (tuple[float, float]): the ``(low, high)`` range each pause between
            tries is drawn from (50 to 150 ms); a fixed delay is refused (contenders in step
            split the vote again).
        max_extensions (int | None): how many times :meth:`extend` may renew one
            acquisition (``None``, the default: any; the watchdog bounds renewal).
        rng (random.Random | None): the random source for the pauses (default: the
            ``random`` module's, reseeded in a forked child).
        drift_factor (float): the fraction of the TTL set aside for clock-rate error (1 %).
        drift_floor_ms (float): the fixed part of the drift allowance (2 ms).
        clock (Callable[[], float]): the function every duration is measured with, in seconds.
        on_attempt (Callable[[Attempt], object] | None): called with each try's
            :class:`Attempt` once it is judged.
        owner (str): ``"thread"`` or ``"process"``, as for :class:`~lockguide.Lock`.

    The options are declared once, in ``RedlockOptions``; another name is refused.

    An error reply a retry may fix (``OOM``, ``BUSY``, ``LOADING``...) is a failed vote;
    one no retry can fix raises :class:`~lockguide.MasterError`.

    Example::

        masters = [redis.Redis(host=h) for h in ("r1", "r2", "r3", "r4", "r5")]
        with Redlock(masters, "lock:ledger", ttl_ms=10_000, timeout_ms=2_000) as lock:
            do_work()
    """

    _redis, _cluster_type = redis, RedisCluster

    def __init__(
        self,
        masters: Collection[redis.Redis],
        key: str,
        *,
        ttl_ms: int,
        **options: Unpack[RedlockOptions],
    ) -> None:
        self._init_redlock(masters, key, ttl_ms, options)
        self._kept = [kept_for(pool) for pool in self._pools]

    def release(self) -> int:
        """Compare-and-delete on every master; how many deleted this holder's key.

        If masters that did not answer could still make a majority, their error is raised
        and the lock stays held here: call again.

        Raises:
            NotOwned: not held by this object (``WrongOwner``: held for another thread).
            MajorityLost: fewer than a majority still held this holder's value.
        """
        return self._drive(self._release_steps())

    def extend(self, ttl_ms: int | None = None) -> int:
        """Renew the lease to ``ttl_ms`` (default: the TTL) on every master; how many did.

        It counts only if a majority extends before the validity runs out; on failure the
        lock is released everywhere.

        Raises:
            NotOwned: as for :meth:`release`.
            ExtensionLimitReached: extended ``max_extensions`` times already (still held).
            LockLost: the lease ran out before (or while) extending.
            MajorityLost: fewer than a majority of masters still held the value.
        """
        return self._drive(self._extend_steps(ttl_ms))

    def _perform(self, effect: FanOut) -> list[Any]:
        """Each master's reply, or its error; cold masters are connected to all at once
        (two frozen ones cost one node timeout)."""
        timeout_s = self._timeout_s if effect.timeout_s is None else effect.timeout_s
        targets = range(len(self._pools)) if effect.only is None else effect.only
        cold = [i for i in targets if not self._kept[i].warm and not self._kept[i].idle]
        ready = None
        if len(cold) > 1:  # each connect is bounded by the pool's socket timeouts, and by
            # the time left when the deadline cut it: a late connection is kept, not lost
            cut = timeout_s < self._timeout_s
            due = time.monotonic() + timeout_s
            connecting = {i: _connector().submit(_connect, self._pools[i]) for i in cold}
            ready = {i: self._connected(i, f, due if cut else None) for i, f in connecting.items()}
        replies = exchange(self._pools, self._kept, effect.commands, timeout_s, targets, ready)
        return [answer(r) if isinstance(r, list) else r for r in replies]

    def _connected(self, i: int, connecting: Future[Any], due: float | None) -> Any:
        """Master ``i``'s new connection, or why there is none (by ``due``, if given)."""
        try:
            return connecting.result(None if due is None else max(due - time.monotonic(), 0.0))
        except FutureTimeout:
            pool, kept = self._pools[i], self._kept[i]

            def keep(done: Future[Any]) -> None:
                if not isinstance(conn := done.result(), BaseException):
                    give_back(pool, kept, conn)

            connecting.add_done_callback(keep)
            return rx.TimeoutError("no connection in the time left")


@functools.cache
def _connector() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(8, thread_name_prefix="lockguide-connect")


os.register_at_fork(after_in_child=_connector.cache_clear)  # a child has none of its threads


def _connect(pool: redis.ConnectionPool) -> Any:
    try:
        return pool.get_connection()
    except (rx.RedisError, OSError) as error:
        return error
