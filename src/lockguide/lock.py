"""``Lock``: a lease on one Redis instance.

The story this class is written against, in order:

1. Client A runs ``SET lock:ledger <A's random value> NX PX 30000``. Redis
   creates the key because it did not exist, with a 30 s time to live.
2. Client B runs the same command with its own value. The key exists, so
   ``NX`` refuses, and B waits a *random* moment before trying again.
3. A finishes and releases by running a script that deletes the key **only
   if it still holds A's value**. A bare ``DEL`` would be wrong: if A had been
   paused past its TTL, the key might by now be B's, and A would delete it.
4. If A crashes instead, nobody releases; the key expires after 30 s and B gets
   in. That expiry is what makes the lock safe against crashes and unsafe
   against pauses: a holder that is merely slow loses the lock without knowing.

So the lock keeps its own deadline, on its clock (``time.monotonic`` unless you
pass another), measured from *before* the ``SET`` was sent, and reports it
through :meth:`Lock.validity_remaining_ms`. A grant whose reply came back after
that deadline is released at once and counts as a failure. Check it before
anything you could not undo, and protect the resource itself with a fencing
token when correctness depends on it.

Every request is sent once and waits at most ``request_timeout_ms``
(:func:`lockguide._base.bounded_client`); an acquire that fails half way, by
an error or by ``Ctrl-C``, deletes its own value before the error goes on, so
nothing is left locked for a TTL.
"""

from __future__ import annotations

import contextlib
import random
import time
from collections.abc import Callable
from typing import Any, cast

import redis
from redis import exceptions as rx
from redis.cluster import RedisCluster

from lockguide._base import (
    EXTEND,
    RELEASE,
    UNSET,
    Lease,
    bounded_client,
    check_client,
    check_ms,
    check_ttl_ms,
    new_lock_value,
)
from lockguide.errors import LockLost, NotAcquired

__all__ = ["DEFAULT_REQUEST_TIMEOUT_MS", "Lock"]

#: How long one request waits for Redis when no ``request_timeout_ms`` is given.
DEFAULT_REQUEST_TIMEOUT_MS = 1_000.0


class Lock(Lease):
    """A mutual-exclusion lease on one Redis instance.

    Args:
        client: a ``redis.Redis`` (a Sentinel ``master_for`` client too) or a
            ``redis.cluster.RedisCluster``; the lock uses its address,
            credentials and encoding, on connections of its own. On a cluster
            every request goes to the master that owns the key's hash slot.
        key: the Redis key that represents the lock, e.g. ``"lock:ledger"``.
        ttl_ms: the lease, a whole number of milliseconds (at most a week).
            After this long Redis deletes the key whether or not the holder is done.
        timeout_ms: how long :meth:`acquire` keeps trying by default;
            ``None`` waits as long as it takes.
        retry_delay_ms: the ``(low, high)`` range from which each pause between
            attempts is drawn at random, so competing clients do not retry in step.
        request_timeout_ms: how long one request may wait for Redis (connecting
            included). A server that does not answer costs this much per call,
            and the call raises ``redis.exceptions.TimeoutError``.
        drift_factor: the fraction of the TTL set aside for clocks running at
            different rates (default 1 %, as the Redlock reference
            implementations do); part of the drift allowance.
        drift_floor_ms: the fixed part of the drift allowance (default 2 ms).
        clock: the function the lease is timed with, returning seconds
            (default ``time.monotonic``).

    A lock object belongs to the thread that acquired it: another thread's
    ``release`` or ``extend`` raises :class:`~lockguide.WrongOwner`.

    Example::

        with Lock(r, "lock:report", ttl_ms=30_000, timeout_ms=5_000) as lock:
            build_report()
            if lock.validity_remaining_ms() < 1_000:
                raise RuntimeError("too little lease left to publish safely")
            publish_report()
    """

    def __init__(
        self,
        client: redis.Redis | RedisCluster,
        key: str,
        ttl_ms: int,
        *,
        timeout_ms: float | None = None,
        retry_delay_ms: tuple[float, float] = (50.0, 150.0),
        request_timeout_ms: float = DEFAULT_REQUEST_TIMEOUT_MS,
        drift_factor: float = 0.01,
        drift_floor_ms: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._client = client if isinstance(client, RedisCluster) else check_client(client)
        self._init_lease(
            key, ttl_ms, timeout_ms, retry_delay_ms, drift_factor, drift_floor_ms, clock
        )
        timeout = check_ms(request_timeout_ms, "request_timeout_ms", positive=True)
        self._timeout_s = timeout / 1000.0
        self._server: redis.Redis | None = None
        if not isinstance(self._client, RedisCluster):
            self._server = bounded_client(self._client, self._timeout_s)

    def acquire(self, *, blocking: bool = True, timeout_ms: float | None = UNSET) -> bool:
        """Try to take the lock; return ``True`` if this call got it.

        Args:
            blocking: ``False`` makes exactly one attempt (then ``timeout_ms``
                must not be given).
            timeout_ms: how long to keep trying when blocking; defaults to the
                value given to the constructor (``None`` means no limit).

        Returns ``False`` when the lock is held by someone else and the wait
        ran out. Use ``with lock:`` to turn that into :class:`NotAcquired`.
        """
        wait_ms = self._wait_ms(blocking, timeout_ms)
        give_up_at = None if wait_ms is None else self._clock() + wait_ms / 1000.0
        while True:
            value = new_lock_value()
            started = self._clock()
            try:
                granted = self._grant(value)
                if granted and self._clock() < started + self._usable_ms / 1000.0:
                    self._won(value, started)
                    return True
            except BaseException:
                # The reply may be lost after Redis stored the key, or Ctrl-C came
                # mid-request: remove our value (if it is there) before going on.
                self._discard(value)
                raise
            if granted:  # granted, but the reply took the whole lease: no use to anyone
                self._discard(value)
            pause = self._pause_s(random.uniform, give_up_at) if blocking else 0.0
            if pause <= 0:
                return False
            time.sleep(pause)

    def release(self) -> None:
        """Release the lock with compare-and-delete.

        If Redis does not answer, the lock stays held in this object and the
        error is raised: call ``release()`` again.

        Raises:
            NotOwned: this object does not hold the lock.
            WrongOwner: another thread acquired it.
            LockLost: the lease had expired; the key is gone or someone else's,
                and it was left untouched.
        """
        value = self._check_owner("release")
        deleted = self._request(lambda r: RELEASE(r, (self._key,), (value,)))
        self._value = None
        if deleted != 1:
            raise LockLost(self._key, "release")

    def extend(self, ttl_ms: int | None = None) -> None:
        """Give the held lock a fresh lease of ``ttl_ms`` (default: the original TTL).

        The new lease counts from just before this request. Extending only works
        while the key still holds this holder's value: it cannot revive a lost lock.

        Raises:
            NotOwned: this object does not hold the lock.
            WrongOwner: another thread acquired it.
            LockLost: the key was gone or someone else's; the lock is no longer held.
        """
        new_ttl = self._ttl_ms if ttl_ms is None else check_ttl_ms(ttl_ms)
        usable_ms = self._usable_for(new_ttl)
        value = self._check_owner("extend")
        started = self._clock()
        if self._request(lambda r: EXTEND(r, (self._key,), (value, new_ttl))) != 1:
            self._value = None
            raise LockLost(self._key, "extend")
        self._deadline = started + usable_ms / 1000.0

    def locked(self) -> bool:
        """Whether anybody (this object or another client) holds the lock now."""
        return bool(self._request(lambda r: r.exists(self._key)))

    def owned(self) -> bool:
        """Whether the key holds this object's value now (asks Redis, not the local clock)."""
        if self._value is None:
            return False
        current = self._request(lambda r: r.get(self._key))
        if isinstance(current, bytes):
            current = current.decode("utf-8", "replace")
        return bool(current == self._value)

    def __repr__(self) -> str:
        state = "held" if self.held else "not held"
        return f"<{type(self).__name__} {self._key!r} ttl_ms={self._ttl_ms} {state}>"

    # -- internals ---------------------------------------------------------------

    @property
    def _redis(self) -> redis.Redis:
        """Where this lock's requests go, each sent once and bounded (``bounded_client``).

        On a Redis Cluster: the master that owns the key's hash slot, as the
        cluster client's slot map says now (so a moved slot is followed once
        the client has seen the move), reached through that node's client.
        """
        if self._server is not None:
            return self._server
        cluster = cast(RedisCluster, self._client)
        node = cluster.get_node_from_key(self._key)  # type: ignore[no-untyped-call]
        return bounded_client(node.redis_connection, self._timeout_s)

    def _request(self, send: Callable[[redis.Redis], Any]) -> Any:
        """``send`` one request on :attr:`_redis`; its reply.

        On a Redis Cluster, a node that is gone or no longer serves the key's
        slot (``ConnectionError``, ``MOVED``) makes the cluster client re-learn
        the slots, by one read through it, before the error goes on: the next
        request then reaches the slot's new master. (Not on a timeout: the
        client's own read could wait on a frozen node without a bound.)
        """
        try:
            return send(self._redis)
        except (rx.ConnectionError, rx.AskError):
            if isinstance(self._client, RedisCluster):
                with contextlib.suppress(Exception):
                    self._client.exists(self._key)
            raise

    def _grant(self, value: str) -> bool:
        """One ``SET key value NX PX ttl``: True if Redis stored it."""
        return bool(self._request(lambda r: r.set(self._key, value, nx=True, px=self._ttl_ms)))

    def _discard(self, value: str) -> None:
        """Best effort: delete ``value`` if it is the key's (the caller is raising anyway)."""
        with contextlib.suppress(Exception):
            self._request(lambda r: RELEASE(r, (self._key,), (value,)))

    def _acquire_for_with(self) -> None:
        if not self.acquire():
            waited = self._timeout_ms if self._timeout_ms is not None else 0.0
            raise NotAcquired(self._key, waited)
