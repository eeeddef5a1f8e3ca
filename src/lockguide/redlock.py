"""``Redlock``: one lease held on a majority of N independent Redis masters.

The story this class is written against, in order:

1. Client A reads its monotonic clock, then sends ``SET lock:ledger <value> NX
   PX 10000`` to all five masters at once: the command is written on every
   socket before any reply is read, and each master gets a per-node timeout
   (default 50 ms) that is tiny next to the 10 s TTL, so a dead or frozen
   master costs 50 ms, not a socket timeout.
2. Three masters say yes, one says no (another client got there first), one
   does not answer. A majority (``5 // 2 + 1 = 3``) granted the key, and the
   attempt took 4 ms, so A may act for ``10000 - 4 - (1 % of 10000 + 2)
   = 9894`` ms. That *validity*, not the TTL, is A's lease.
3. Client B, trying at the same moment, got the other two masters. No
   majority: B releases its value on **every** master at once (a master that
   timed out may still have stored it), waits a *random* delay so it does not
   collide with the next contender in step, and tries again.
4. A releases with compare-and-delete on every master. If fewer than a
   majority still held A's value, the lease had already slipped away (it
   expired, or a master restarted empty) and A is told so.

The guarantee holds only while the holder finishes within its validity, which
is measured on this process's clock from before the first request. A pause
longer than that (GC, swapping, a stopped VM) lets a second holder in, exactly
as with one Redis; only a fencing check at the resource can refuse the late
writer.
"""

from __future__ import annotations

import random
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import redis

from lockguide import _multiplex, _validate
from lockguide._lease import _UNSET, LeaseBase
from lockguide._multiplex import Node, node_for
from lockguide._scripts import EXTEND, RELEASE, LuaScript
from lockguide.errors import (
    BadArgument,
    BadArgumentType,
    ExtensionLimitReached,
    LockLost,
    MajorityLost,
    NoQuorum,
    NotOwned,
)
from lockguide.tokens import new_lock_value
from lockguide.validity import Verdict, judge, quorum, validity_ms

__all__ = ["DEFAULT_NODE_TIMEOUT_MS", "Attempt", "Redlock"]

#: Per-master timeout used when none is given: inside the 5-50 ms range the Redis
#: documentation suggests for a 10 s lock.
DEFAULT_NODE_TIMEOUT_MS = 50.0

_LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})

# Every duration this module measures comes from here (tests replace it).
_now = time.monotonic


@dataclass(frozen=True)
class Attempt:
    """What one try at the masters produced.

    ``verdict`` is the arithmetic (votes, elapsed time, drift, validity);
    ``refused`` masters answered that another owner holds the key; ``failed``
    masters answered with an error or not within the per-node timeout.
    """

    verdict: Verdict
    refused: int
    failed: int

    @property
    def granted(self) -> int:
        """Masters that stored this attempt's value."""
        return self.verdict.votes

    @property
    def acquired(self) -> bool:
        """A majority granted the key *and* validity was left."""
        return self.verdict.acquired


def _bulk(data: bytes) -> bytes:
    return b"$%d\r\n%s\r\n" % (len(data), data)


def _address(client: redis.Redis) -> tuple[object, ...]:
    """Where a client's server lives, to refuse the same master given twice.

    The database number is ignored on purpose: two databases of one server are
    one process, one machine, one failure.
    """
    kwargs = client.connection_pool.connection_kwargs
    server = kwargs.get("server")  # an in-process server (fakeredis) names itself
    if server is not None:
        return ("in-process", id(server))
    path = kwargs.get("path")
    if path:
        return ("unix", str(path))
    host = str(kwargs.get("host", "localhost")).lower()
    if host in _LOOPBACK_NAMES:
        host = "localhost"
    return ("tcp", host, int(kwargs.get("port", 6379)))


def _check_masters(masters: object) -> tuple[redis.Redis, ...]:
    if isinstance(masters, redis.Redis) or not isinstance(masters, Sequence):
        raise BadArgumentType(
            "masters must be a list of redis.Redis clients, one per independent master, "
            f"not {type(masters).__name__}"
        )
    clients = tuple(_validate.check_client(m, f"masters[{i}]") for i, m in enumerate(masters))
    if not clients:
        raise BadArgument(
            "masters must not be empty: Redlock needs independent Redis masters "
            "(five, on separate machines, is the usual choice)"
        )
    seen: dict[tuple[object, ...], int] = {}
    for i, client in enumerate(clients):
        where = _address(client)
        if where in seen:
            raise BadArgument(
                f"masters[{seen[where]}] and masters[{i}] are the same Redis server; "
                "each vote must come from an independent master, or one failure "
                "counts twice"
            )
        seen[where] = i
    return clients


class Redlock(LeaseBase):
    """A mutual-exclusion lease on a majority of N independent Redis masters.

    Args:
        masters: one ``redis.Redis`` client per independent master (different
            servers; the same server twice is refused).
        key: the Redis key that represents the lock on every master.
        ttl_ms: the lease requested on each master, a positive ``int`` of ms.
        node_timeout_ms: how long to wait for each master's reply, counted
            from when its request was sent; must leave validity in the TTL
            (``ttl - timeout - drift > 0``). A master that does not answer in
            time counts as "no".
        timeout_ms: how long :meth:`acquire` keeps trying by default; ``None``
            waits as long as it takes. No new try starts after it.
        retry_delay_ms: the ``(low, high)`` range each pause between tries is
            drawn from at random. A fixed delay (``low == high``) is refused:
            contenders that retry in step split the vote again and again.
        max_extensions: how many times :meth:`extend` may renew one acquisition.
        rng: the random source for retry pauses (default: a new ``random.Random``,
            seeded by the operating system).

    Example::

        masters = [redis.Redis(host=h) for h in ("r1", "r2", "r3", "r4", "r5")]
        with Redlock(masters, "lock:ledger", ttl_ms=10_000, timeout_ms=2_000) as lock:
            do_work()
            if lock.validity_remaining_ms() < 500:
                raise RuntimeError("too little lease left to commit safely")
            commit()
    """

    def __init__(
        self,
        masters: Sequence[redis.Redis],
        key: str,
        ttl_ms: int,
        *,
        node_timeout_ms: float = DEFAULT_NODE_TIMEOUT_MS,
        timeout_ms: float | None = None,
        retry_delay_ms: tuple[float, float] = (50.0, 150.0),
        max_extensions: int = 3,
        rng: random.Random | None = None,
    ) -> None:
        clients = _check_masters(masters)
        self._key = _validate.check_key(key)
        self._ttl_ms = _validate.check_ttl_ms(ttl_ms)
        node_timeout = _validate.check_duration_ms(node_timeout_ms, "node_timeout_ms")
        assert node_timeout is not None
        if node_timeout <= 0 or validity_ms(self._ttl_ms, node_timeout) <= 0:
            raise BadArgument(
                f"node_timeout_ms must be > 0 and leave validity in the TTL, got "
                f"{node_timeout_ms!r} for ttl_ms={self._ttl_ms}: an attempt that waits that "
                "long for one master has no lease left. Keep it far below the TTL "
                "(5-50 ms for a 10 s lock)"
            )
        self._timeout_ms = _validate.check_duration_ms(timeout_ms, "timeout_ms", allow_none=True)
        low, high = _validate.check_delay_range(retry_delay_ms)
        if low == high:
            raise BadArgument(
                f"retry_delay_ms must be a range, got the fixed delay {retry_delay_ms!r}: "
                "contenders that wait the same time retry in step and split the vote "
                "again; give a (low, high) range to draw each pause from at random"
            )
        if isinstance(max_extensions, bool) or not isinstance(max_extensions, int):
            raise BadArgumentType(f"max_extensions must be an int, not {max_extensions!r}")
        if max_extensions < 0:
            raise BadArgument(f"max_extensions must be >= 0, got {max_extensions}")
        if rng is not None and not isinstance(rng, random.Random):
            raise BadArgumentType(f"rng must be a random.Random, not {type(rng).__name__}")

        self._masters = clients
        self._quorum = quorum(len(clients))
        self._node_timeout_ms = node_timeout
        self._node_timeout_s = node_timeout / 1000.0
        self._retry_delay_ms = (low, high)
        self._max_extensions = max_extensions
        self._uniform = (rng or random.Random()).uniform
        self._nodes: tuple[Node, ...] = tuple(node_for(c, self._node_timeout_s) for c in clients)
        encoders: list[Any] = [c.get_encoder() for c in clients]
        keys = [_bulk(encoder.encode(self._key)) for encoder in encoders]
        ttl = _bulk(str(self._ttl_ms).encode())
        # Commands are assembled from pre-encoded bytes: only the value changes.
        self._set_heads = [b"*6\r\n$3\r\nSET\r\n" + k for k in keys]
        self._set_tail = b"$2\r\nNX\r\n$2\r\nPX\r\n" + ttl
        # EVALSHA <sha> 1 <key>, for each script and master; value and args follow.
        self._script_heads: dict[LuaScript, list[bytes]] = {
            script: [
                b"$7\r\nEVALSHA\r\n" + _bulk(script.sha.encode()) + b"$1\r\n1\r\n" + k for k in keys
            ]
            for script in (RELEASE, EXTEND)
        }
        self._value: str | None = None
        self._deadline = 0.0
        self._extensions = 0
        # The last try's counts: (elapsed ms, granted, refused, failed). The
        # Attempt is built from them only when asked for (last_attempt).
        self._last: tuple[float, int, int, int] | None = None
        self._usable_s = validity_ms(self._ttl_ms, 0.0) / 1000.0

    # -- read-only facts (key, ttl_ms, value and held are LeaseBase's) ---------------

    @property
    def masters(self) -> tuple[redis.Redis, ...]:
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
    def extensions_left(self) -> int:
        """How many more times :meth:`extend` may renew the current acquisition."""
        return self._max_extensions - self._extensions

    @property
    def last_attempt(self) -> Attempt | None:
        """The outcome of the most recent try by :meth:`acquire` (``None`` before any)."""
        if self._last is None:
            return None
        elapsed_ms, granted, refused, failed = self._last
        verdict = judge(self._ttl_ms, elapsed_ms, granted, len(self._masters))
        return Attempt(verdict=verdict, refused=refused, failed=failed)

    def validity_remaining_ms(self) -> float:
        """Milliseconds the holder may still rely on the lock; ``0.0`` when not held.

        The TTL, minus the time since just before the first request of the
        winning attempt (or of the last extension), minus the drift allowance
        (1 % of the TTL + 2 ms).
        """
        if self._value is None:
            return 0.0
        return max(0.0, (self._deadline - _now()) * 1000.0)

    # -- acquire / release / extend -------------------------------------------------

    def acquire(self, *, blocking: bool = True, timeout_ms: float | None = _UNSET) -> bool:
        """Try to take the lock on a majority of masters; ``True`` if this call got it.

        Each try sends ``SET key value NX PX ttl`` to every master at once with
        a fresh random value. It wins with a majority and validity left; any
        other outcome is released on every master before the next try, which
        follows a random pause. No try starts after ``timeout_ms``.

        Args:
            blocking: ``False`` makes exactly one try.
            timeout_ms: how long to keep trying when blocking; defaults to the
                value given to the constructor (``None`` means no limit).

        :attr:`last_attempt` tells what the final try saw.
        """
        wait_ms = self._wait_ms(timeout_ms)
        give_up_at = None if wait_ms is None else _now() + wait_ms / 1000.0
        while True:
            value = new_lock_value()
            started = _now()
            if self._try_set(value, started):
                self._value = value
                self._deadline = started + self._usable_s
                self._extensions = 0
                return True
            # Release on every master, not only those that said yes: a reply can
            # be lost (or late) after the master stored the key.
            self._run_script(RELEASE, value)
            if not blocking:
                return False
            pause = self._pause_s(self._uniform, _now(), give_up_at)
            if pause is None:
                return False
            time.sleep(pause)

    def release(self) -> int:
        """Release the lock with compare-and-delete on every master.

        Returns the number of masters on which this holder's key was deleted.

        Raises:
            NotOwned: this object does not hold the lock.
            MajorityLost: fewer than a majority still held this holder's value
                (expired, restarted empty, or not answering); keys that belong
                to someone else were left untouched.
        """
        value = self._take_value("release")
        released = self._count_ones(self._run_script(RELEASE, value))
        if released < self._quorum:
            raise self._majority_lost("release", released)
        return released

    def extend(self, ttl_ms: int | None = None) -> int:
        """Renew the lease to ``ttl_ms`` (default: the original TTL) on every master.

        It counts only if a majority extends before the current validity runs
        out; the new validity is measured from just before this request. On
        failure the lock is released everywhere and is no longer held.

        Returns the number of masters that extended.

        Raises:
            NotOwned: this object does not hold the lock.
            ExtensionLimitReached: already extended ``max_extensions`` times;
                nothing was sent and the lock is still held.
            LockLost: the lease ran out before (or while) extending.
            MajorityLost: fewer than a majority of masters still held the value.
        """
        new_ttl = self._ttl_ms if ttl_ms is None else _validate.check_ttl_ms(ttl_ms)
        if self._value is None:
            raise NotOwned(self._key, "extend")
        if self._extensions >= self._max_extensions:
            raise ExtensionLimitReached(self._key, self._max_extensions)
        started = _now()
        if started >= self._deadline:
            self._run_script(RELEASE, self._take_value("extend"))
            raise LockLost(self._key, "extend")
        extended = self._count_ones(self._run_script(EXTEND, self._value, new_ttl))
        finished = _now()
        if extended >= self._quorum and finished < self._deadline:
            self._deadline = started + validity_ms(new_ttl, 0.0) / 1000.0
            self._extensions += 1
            return extended
        self._run_script(RELEASE, self._take_value("extend"))
        if extended >= self._quorum:
            raise LockLost(self._key, "extend")
        raise self._majority_lost("extend", extended)

    def __enter__(self) -> Redlock:
        started = _now()
        if not self.acquire():
            last = self.last_attempt
            assert last is not None
            raise NoQuorum(
                self._key,
                (_now() - started) * 1000.0,
                granted=last.granted,
                refused=last.refused,
                failed=last.failed,
                needed=self._quorum,
            )
        return self

    def __repr__(self) -> str:
        state = "held" if self.held else "not held"
        return f"<Redlock {self._key!r} masters={len(self._masters)} ttl_ms={self._ttl_ms} {state}>"

    # -- internals ---------------------------------------------------------------

    def _try_set(self, value: str, started: float) -> bool:
        """One try: SET NX PX on every master; True if it won (majority, validity left)."""
        tail = b"$%d\r\n%s\r\n" % (len(value), value.encode()) + self._set_tail
        replies = _multiplex.send_all_read_all(
            self._nodes, [head + tail for head in self._set_heads], self._node_timeout_s
        )
        elapsed_ms = (_now() - started) * 1000.0
        granted = refused = failed = 0
        for reply in replies:
            if reply is None:
                refused += 1
            elif isinstance(reply, Exception):
                failed += 1
            else:
                granted += 1
        self._last = (elapsed_ms, granted, refused, failed)
        return granted >= self._quorum and validity_ms(self._ttl_ms, elapsed_ms) > 0

    def _run_script(self, script: LuaScript, value: str, *extra: int) -> list[Any]:
        """Run ``script`` (compare-and-delete / -pexpire) on every master at once."""
        count = b"*%d\r\n" % (5 + len(extra))  # EVALSHA sha numkeys key value *extra
        tail = _bulk(value.encode()) + b"".join(_bulk(str(a).encode()) for a in extra)
        commands = [count + head + tail for head in self._script_heads[script]]
        return _multiplex.run_script(self._nodes, script.source, commands, self._node_timeout_s)

    @staticmethod
    def _count_ones(replies: list[Any]) -> int:
        return sum(1 for reply in replies if reply == 1)

    def _majority_lost(self, action: str, confirmed: int) -> MajorityLost:
        """The error for an ``action`` that fewer than a majority of masters confirmed."""
        return MajorityLost(
            self._key, action, confirmed=confirmed, needed=self._quorum, masters=len(self._masters)
        )
