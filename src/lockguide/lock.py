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

So the lock keeps its own deadline, measured on this process's monotonic clock
from *before* the ``SET`` was sent, and reports it through
:meth:`Lock.validity_remaining_ms`. A grant whose reply came back after that
deadline is released at once and counts as a failure.

Every request is sent once, on a connection the lock makes from the client's
settings, and waits at most ``request_timeout_ms`` for its reply. It is never
retried blindly: a ``SET NX`` repeated after a lost reply would find the
holder's own key and report the lock as taken by someone else, and a server
that does not answer would cost the client's whole retry schedule instead of
one timeout. Check it before doing anything you could not
undo, and protect the resource itself with a fencing token when correctness
depends on it.
"""

from __future__ import annotations

import contextlib
import random
import time
from collections.abc import Callable
from typing import Any, Self

import redis
from redis.exceptions import RedisError

from lockguide import _multiplex, _validate
from lockguide._lease import _UNSET, LeaseBase
from lockguide._scripts import EXTEND, RELEASE, LuaScript
from lockguide.errors import BadArgument, LockLost, NotAcquired, NotOwned
from lockguide.tokens import new_lock_value
from lockguide.validity import DEFAULT_DRIFT_FACTOR, DEFAULT_DRIFT_FLOOR_MS, drift_ms

__all__ = ["DEFAULT_REQUEST_TIMEOUT_MS", "Lock"]

#: How long one request waits for Redis when no ``request_timeout_ms`` is given.
DEFAULT_REQUEST_TIMEOUT_MS = 1_000.0


class Lock(LeaseBase):
    """A mutual-exclusion lease on one Redis instance.

    Args:
        client: a ``redis.Redis``; the lock uses its address, credentials and
            encoding, on connections of its own.
        key: the Redis key that represents the lock, e.g. ``"lock:ledger"``.
        ttl_ms: the lease, a positive ``int`` of milliseconds. After this long
            Redis deletes the key whether or not the holder is finished.
        timeout_ms: how long :meth:`acquire` keeps trying by default;
            ``None`` waits as long as it takes.
        retry_delay_ms: the ``(low, high)`` range from which each pause between
            attempts is drawn at random, so competing clients do not retry in step.
        request_timeout_ms: how long one request may wait for Redis (connecting
            included). A server that does not answer costs this much per call,
            and the call raises ``redis.exceptions.TimeoutError``.

    Example::

        with Lock(r, "lock:report", ttl_ms=30_000, timeout_ms=5_000) as lock:
            build_report()
            if lock.validity_remaining_ms() < 1_000:
                raise RuntimeError("too little lease left to publish safely")
            publish_report()
    """

    def __init__(
        self,
        client: redis.Redis,
        key: str,
        ttl_ms: int,
        *,
        timeout_ms: float | None = None,
        retry_delay_ms: tuple[float, float] = (50.0, 150.0),
        request_timeout_ms: float = DEFAULT_REQUEST_TIMEOUT_MS,
    ) -> None:
        self._client = _validate.check_client(client)
        self._key = _validate.check_key(key)
        self._ttl_ms = _validate.check_ttl_ms(ttl_ms)
        self._timeout_ms = _validate.check_duration_ms(timeout_ms, "timeout_ms", allow_none=True)
        self._retry_delay_ms = _validate.check_delay_range(retry_delay_ms)
        request_timeout = _validate.check_duration_ms(request_timeout_ms, "request_timeout_ms")
        if not request_timeout:
            raise BadArgument("request_timeout_ms must be > 0: every request needs time to answer")
        self._request_timeout_s = request_timeout / 1000.0
        self._node = _multiplex.node_for(self._client, self._request_timeout_s)
        self._encode: Callable[[Any], bytes] = self._client.get_encoder().encode
        self._value: str | None = None
        self._deadline = 0.0

    # -- read-only facts (key, ttl_ms, value and held are LeaseBase's) ---------------

    def validity_remaining_ms(self) -> float:
        """Milliseconds the holder may still rely on the lock; ``0.0`` when not held.

        Computed as the TTL minus the time since just before the ``SET`` was sent,
        minus the clock-drift allowance (1 % of the TTL + 2 ms).
        """
        if self._value is None:
            return 0.0
        return max(0.0, (self._deadline - time.monotonic()) * 1000.0)

    # -- acquire / release / extend -------------------------------------------------

    def acquire(self, *, blocking: bool = True, timeout_ms: float | None = _UNSET) -> bool:
        """Try to take the lock; return ``True`` if this call got it.

        Args:
            blocking: ``False`` makes exactly one attempt.
            timeout_ms: how long to keep trying when blocking; defaults to the
                value given to the constructor (``None`` means no limit).

        Returns ``False`` when the lock is held by someone else and the wait
        ran out. Use ``with lock:`` to turn that into :class:`NotAcquired`.
        """
        wait_ms = self._wait_ms(timeout_ms)
        value = new_lock_value()
        give_up_at = None if wait_ms is None else time.monotonic() + wait_ms / 1000.0
        while True:
            started = time.monotonic()
            if self._try_set(value):
                deadline = started + self._usable_ms(self._ttl_ms) / 1000.0
                if time.monotonic() < deadline:
                    self._value = value
                    self._deadline = deadline
                    return True
                # Granted, but the reply took the whole lease: no use to anyone.
                self._forget_token()
                with contextlib.suppress(RedisError, OSError):
                    self._script(RELEASE, (self._key,), (value,))
            if not blocking:
                return False
            pause = self._pause_s(random.uniform, time.monotonic(), give_up_at)
            if pause is None:
                return False
            time.sleep(pause)

    def release(self) -> None:
        """Release the lock with compare-and-delete.

        Raises:
            NotOwned: this object does not hold the lock.
            LockLost: the lease had expired; the key is gone or someone else's,
                and it was left untouched.
        """
        value = self._take_value("release")
        if self._script(RELEASE, (self._key,), (value,)) != 1:
            raise LockLost(self._key, "release")

    def extend(self, ttl_ms: int | None = None) -> None:
        """Give the held lock a fresh lease of ``ttl_ms`` (default: the original TTL).

        The new lease counts from just before this request. Extending only works
        while the lease is still ours: it cannot revive an expired lock.

        Raises:
            NotOwned: this object does not hold the lock.
            LockLost: the lease had already expired; the lock is no longer held.
        """
        new_ttl = self._ttl_ms if ttl_ms is None else _validate.check_ttl_ms(ttl_ms)
        if self._value is None:
            raise NotOwned(self._key, "extend")
        started = time.monotonic()
        if self._script(EXTEND, (self._key,), (self._value, new_ttl)) != 1:
            self._value = None
            raise LockLost(self._key, "extend")
        self._deadline = started + self._usable_ms(new_ttl) / 1000.0

    def __enter__(self) -> Self:
        if not self.acquire():
            waited = self._timeout_ms if self._timeout_ms is not None else 0.0
            raise NotAcquired(self._key, waited)
        return self

    def __repr__(self) -> str:
        state = "held" if self.held else "not held"
        return f"<Lock {self._key!r} ttl_ms={self._ttl_ms} {state}>"

    # -- internals ---------------------------------------------------------------

    def _try_set(self, value: str) -> bool:
        """One ``SET key value NX PX ttl``; True if Redis stored it."""
        command = _multiplex.pack(
            b"SET",
            self._encode(self._key),
            self._encode(value),
            b"NX",
            b"PX",
            self._encode(self._ttl_ms),
        )
        try:
            return self._request(command) is not None
        except (RedisError, OSError):
            # The reply may have been lost after Redis stored the key: clean up
            # our own value (if it is there) so it does not block others for a TTL.
            with contextlib.suppress(RedisError, OSError):
                self._script(RELEASE, (self._key,), (value,))
            raise

    def _forget_token(self) -> None:
        """Hook for subclasses that draw something with the grant (a fencing token)."""

    def _request(self, command: bytes) -> Any:
        """Send one packed command on this lock's connection; return the reply or raise."""
        reply = _multiplex.send_all_read_all((self._node,), (command,), self._request_timeout_s)[0]
        if isinstance(reply, BaseException):
            raise reply
        return reply

    def _script(self, script: LuaScript, keys: tuple[str, ...], args: tuple[str | int, ...]) -> Any:
        """Run a Lua script by ``EVALSHA`` (loading it on ``NOSCRIPT``); reply or raise."""
        command = _multiplex.pack(
            b"EVALSHA",
            script.sha.encode(),
            self._encode(len(keys)),
            *(self._encode(part) for part in (*keys, *args)),
        )
        reply = _multiplex.run_script(
            (self._node,), script.source, (command,), self._request_timeout_s
        )[0]
        if isinstance(reply, BaseException):
            raise reply
        return reply

    @staticmethod
    def _usable_ms(ttl_ms: int) -> float:
        return ttl_ms - drift_ms(ttl_ms, DEFAULT_DRIFT_FACTOR, DEFAULT_DRIFT_FLOOR_MS)
