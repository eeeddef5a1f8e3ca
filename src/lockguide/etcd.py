"""``EtcdLock``: a lease on an etcd cluster, whose fencing token is the key's create revision.

The story this class is written against, in order:

1. Client A asks the cluster for a *lease* (a TTL the cluster keeps by
   consensus) and, in one transaction, puts ``lock:ledger`` attached to it
   **only if the key does not exist** (``create_revision == 0``). The revision
   at which the key was created is A's fencing token: etcd's revision counts
   every change to the store, so a later acquisition always gets a larger one.
2. A keeps the lease alive from a background thread. If a keep-alive finds the
   lease gone, or the cluster does not answer before the lease would end, the
   lock says so: :attr:`EtcdLock.lost`, :attr:`EtcdLock.lost_event`,
   :meth:`EtcdLock.check` and :meth:`EtcdLock.release` (the watchdog's contract).
3. A's process pauses past the lease. The cluster revokes it, deleting the key;
   B creates the key at a higher revision and writes with it. A wakes and
   writes with its old revision: only the resource, checking the token
   (:class:`~lockguide.FencedStore`, :class:`~lockguide.SqlFencedStore`), can
   refuse it. Consensus makes the *grant* safe (no two leases on one key, even
   when the leader dies); it cannot make a paused holder notice.
4. A releases by revoking the lease, which deletes the key in the same step.

It speaks etcd's v3 API through the JSON gateway every etcd 3.4+ member serves
(``/v3/kv/txn``, ``/v3/lease/grant``, ``/v3/lease/keepalive``,
``/v3/lease/revoke``) with urllib3 (``pip install 'lockguide[etcd]'``),
imported when the lock is made: ``import lockguide`` never needs it.
"""

from __future__ import annotations

import base64
import contextlib
import json
import random
import threading
import time
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import Any, Self

from lockguide._base import check_delay_range, check_key, check_ms
from lockguide.errors import (
    AlreadyAcquired,
    BadArgument,
    BadArgumentType,
    ClusterUnavailable,
    LockLost,
    NotAcquired,
    NotOwned,
    RenewalFailed,
    WrongOwner,
)
from lockguide.fencing import check_token

__all__ = ["EtcdLock"]


def _b64(text: str) -> str:
    return base64.b64encode(text.encode("utf-8")).decode("ascii")


class _EtcdError(Exception):
    """The cluster answered with an error (``code`` is the gRPC status code)."""

    def __init__(self, code: int, message: str) -> None:
        self.code = code
        super().__init__(message)


class EtcdLock:
    """A mutual-exclusion lease on an etcd cluster; see the module for the story.

    Args:
        endpoints: the members' client URLs (``"http://127.0.0.1:2379"``); a
            request goes to the next one when a member does not answer.
        key: the etcd key that represents the lock, e.g. ``"lock:ledger"``.
        ttl_ms: the lease, a whole number of seconds written in milliseconds
            (etcd leases are whole seconds), e.g. ``10_000``.
        timeout_ms: how long :meth:`acquire` keeps trying by default; ``None``
            waits as long as it takes.
        retry_delay_ms: the ``(low, high)`` range each pause between attempts
            is drawn from.
        request_timeout_ms: how long one request may wait for one member.
        keepalive_ms: time between keep-alives; a third of the TTL by default.
        clock: the function the lease is timed with (default ``time.monotonic``).
    """

    def __init__(
        self,
        endpoints: Sequence[str] | str,
        key: str,
        ttl_ms: int,
        *,
        timeout_ms: float | None = None,
        retry_delay_ms: tuple[float, float] = (50.0, 150.0),
        request_timeout_ms: float = 1_000.0,
        keepalive_ms: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        try:
            import urllib3
        except ImportError as error:  # pragma: no cover - an optional extra
            raise ImportError("EtcdLock needs urllib3: pip install 'lockguide[etcd]'") from error
        if isinstance(endpoints, str):
            endpoints = [endpoints]
        if not endpoints or not all(
            isinstance(e, str) and e.startswith(("http://", "https://")) for e in endpoints
        ):
            raise BadArgument(
                "endpoints must be etcd client URLs like 'http://127.0.0.1:2379', "
                f"got {endpoints!r}"
            )
        self._endpoints = [e.rstrip("/") for e in endpoints]
        self._key = check_key(key)
        if isinstance(ttl_ms, bool) or not isinstance(ttl_ms, int):
            raise BadArgumentType(f"ttl_ms must be an int number of milliseconds, not {ttl_ms!r}")
        if ttl_ms < 1000 or ttl_ms % 1000:
            raise BadArgument(
                f"ttl_ms must be a whole number of seconds >= 1000 ms, got {ttl_ms}: "
                "etcd leases are granted in whole seconds"
            )
        self._ttl_ms = ttl_ms
        self._timeout_ms = None if timeout_ms is None else check_ms(timeout_ms, "timeout_ms")
        self._delay = check_delay_range(retry_delay_ms)
        request_s = check_ms(request_timeout_ms, "request_timeout_ms", positive=True) / 1000
        every = ttl_ms / 3 if keepalive_ms is None else check_ms(keepalive_ms, "keepalive_ms")
        if not 0 < every < ttl_ms:
            raise BadArgument(f"keepalive_ms must be > 0 and below ttl_ms, got {keepalive_ms!r}")
        self._every_s = every / 1000
        if not callable(clock):
            raise BadArgumentType(f"clock must be a function like time.monotonic, not {clock!r}")
        self._clock = clock
        self._http = urllib3.PoolManager(
            timeout=urllib3.Timeout(connect=request_s, read=request_s), retries=False
        )
        self._lease: int | None = None
        self._token: int | None = None
        self._deadline = 0.0
        self._owner: int | None = None
        self._lost = threading.Event()
        self._stop = threading.Event()
        self._error: LockLost | None = None
        self._thread: threading.Thread | None = None

    # -- state ---------------------------------------------------------------------------

    @property
    def key(self) -> str:
        """The etcd key that represents the lock."""
        return self._key

    @property
    def ttl_ms(self) -> int:
        """The lease in milliseconds."""
        return self._ttl_ms

    @property
    def held(self) -> bool:
        """Whether this object believes it holds the lock (acquired, not released)."""
        return self._lease is not None

    @property
    def lease_id(self) -> int | None:
        """The etcd lease this holder's key is attached to, while held."""
        return self._lease

    @property
    def token(self) -> int:
        """The fencing token: the revision at which this holder created the key.

        Raises:
            NotOwned: this object does not hold the lock.
        """
        if self._token is None or self._lease is None:
            raise NotOwned(self._key, "read the fencing token of")
        return self._token

    @property
    def lost(self) -> bool:
        """Whether a keep-alive found the lease gone, or could not renew it in time."""
        return self._lost.is_set()

    @property
    def lost_event(self) -> threading.Event:
        """Set when the lease is lost; wait on it to be woken by the failure."""
        return self._lost

    def validity_remaining_ms(self) -> float:
        """Milliseconds until the lease ends on this process's clock (0 when not held)."""
        if self._lease is None:
            return 0.0
        return max(0.0, (self._deadline - self._clock()) * 1000)

    def check(self) -> None:
        """Raise if the holder must not write now; call it before each write.

        Raises:
            NotOwned: not held.
            RenewalFailed: a keep-alive found the lease gone, or the lease ran
                out on this process's clock (a pause stops the keep-alive too).
        """
        if self._lease is None:
            raise NotOwned(self._key, "check")
        if self._error is not None:
            raise self._error
        if self.validity_remaining_ms() <= 0:
            raise RenewalFailed(self._key, "the lease ran out on this process's clock")

    # -- acquire and release -------------------------------------------------------------

    def acquire(self, *, blocking: bool = True, timeout_ms: float | None = None) -> bool:
        """Take the lock; ``True`` when taken, ``False`` when someone else held it throughout.

        Raises:
            AlreadyAcquired: this object holds it already.
            ClusterUnavailable: no member could grant a lease before the timeout
                (a majority of the cluster down or cut off).
        """
        if self._lease is not None:
            raise AlreadyAcquired(self._key)
        wait = self._timeout_ms if timeout_ms is None else check_ms(timeout_ms, "timeout_ms")
        started = self._clock()
        give_up = None if wait is None or not blocking else started + wait / 1000
        cause: Exception | None = None
        lease: int | None = None
        try:
            while True:
                before = self._clock()
                try:
                    if lease is None:
                        granted = self._call("/v3/lease/grant", {"TTL": self._ttl_ms // 1000})
                        lease, lease_start = int(granted["ID"]), before
                    token = self._create(lease)
                    cause = None
                except (OSError, _EtcdError) as error:
                    token, cause = None, error
                if token is not None and lease is not None:
                    self._won(lease, token, lease_start)
                    lease = None
                    return True
                now = self._clock()
                if not blocking or (give_up is not None and now >= give_up):
                    break
                pause = random.uniform(*self._delay) / 1000
                if give_up is not None:
                    pause = min(pause, max(0.0, give_up - now))
                time.sleep(pause)
        finally:
            if lease is not None:
                self._revoke_quietly(lease)
        if cause is not None:
            waited = (self._clock() - started) * 1000
            raise ClusterUnavailable(self._key, waited, repr(cause)) from cause
        return False

    def _create(self, lease: int) -> int | None:
        """Put the key on ``lease`` if absent; its create revision, or ``None`` if taken."""
        key = _b64(self._key)
        reply = self._call(
            "/v3/kv/txn",
            {
                "compare": [{"key": key, "target": "CREATE", "create_revision": "0"}],
                "success": [
                    {"request_put": {"key": key, "value": _b64(str(lease)), "lease": lease}}
                ],
                "failure": [{"request_range": {"key": key}}],
            },
        )
        if reply.get("succeeded"):
            return check_token(int(reply["header"]["revision"]))
        kvs = reply["responses"][0]["response_range"].get("kvs", [])
        if kvs and int(kvs[0].get("lease", 0)) == lease:  # our put, whose reply was lost
            return check_token(int(kvs[0]["create_revision"]))
        return None

    def _won(self, lease: int, token: int, started: float) -> None:
        self._lease, self._token = lease, token
        self._deadline = started + self._ttl_ms / 1000
        self._owner = threading.get_ident()
        self._error = None
        self._lost.clear()
        self._stop.clear()
        self._thread = threading.Thread(
            target=self._keep_alive, name=f"lockguide-etcd:{self._key}", daemon=True
        )
        self._thread.start()

    def release(self) -> None:
        """Stop the keep-alive and revoke the lease, deleting the key with it.

        Raises:
            NotOwned: not held (``WrongOwner`` from another thread).
            LockLost: the lease had already ended (``RenewalFailed`` if the
                keep-alive had seen it); nothing of anyone else's was touched.
            ClusterUnavailable: no member answered; the lock is still held by
                this object (retry), and the lease ends with its TTL otherwise.
        """
        lease = self._lease
        if lease is None:
            raise NotOwned(self._key, "release")
        if self._owner != threading.get_ident():
            raise WrongOwner(self._key, "release")
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        started = self._clock()
        try:
            self._call("/v3/lease/revoke", {"ID": lease})
        except _EtcdError as error:
            if error.code == 5:  # NOT_FOUND: the lease is gone already
                self._forget()
                raise self._error or LockLost(self._key, "release") from None
            waited = (self._clock() - started) * 1000
            raise ClusterUnavailable(self._key, waited, repr(error)) from error
        except OSError as error:  # still held: the caller may retry; else the TTL ends it
            waited = (self._clock() - started) * 1000
            raise ClusterUnavailable(self._key, waited, repr(error)) from error
        self._forget()
        if self._error is not None:
            raise self._error

    def _forget(self) -> None:
        self._lease = self._token = self._owner = None

    def _revoke_quietly(self, lease: int) -> None:
        with contextlib.suppress(OSError, _EtcdError):  # else it ends after its TTL
            self._call("/v3/lease/revoke", {"ID": lease})

    def __enter__(self) -> Self:
        if not self.acquire():
            raise NotAcquired(self._key, self._timeout_ms or 0.0)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Release; the body's own exception always wins (a failed release becomes a note)."""
        if exc is None:
            self.release()
            return
        try:
            self.release()
        except Exception as error:
            exc.add_note(f"lockguide: releasing {self._key!r} on the way out also failed: {error}")

    def __repr__(self) -> str:
        state = f"held, token {self._token}" if self.held else "not held"
        return f"<EtcdLock {self._key!r} ttl_ms={self._ttl_ms} {state}>"

    # -- keep-alive ----------------------------------------------------------------------

    def _keep_alive(self) -> None:
        wait = self._every_s
        while not self._stop.wait(wait):
            wait = self._every_s
            lease = self._lease
            if lease is None:
                return
            before = self._clock()
            try:
                reply = self._call("/v3/lease/keepalive", {"ID": lease})
                ttl = int(reply.get("result", {}).get("TTL", 0))
            except (OSError, _EtcdError) as error:
                left = self._deadline - self._clock()
                if left <= 0:
                    return self._fail(f"the cluster did not answer ({error!r}) before it ended")
                wait = min(self._every_s, left / 4)
                continue
            if ttl <= 0:
                return self._fail("a keep-alive found the lease gone")
            self._deadline = before + ttl

    def _fail(self, reason: str) -> None:
        if self._error is None:
            self._error = RenewalFailed(self._key, reason)
        self._lost.set()

    # -- requests ------------------------------------------------------------------------

    def _call(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """POST ``body`` to the first member that answers; its JSON reply.

        Raises:
            OSError: no member answered.
            _EtcdError: the cluster answered with an error.
        """
        import urllib3

        last: Exception | None = None
        for endpoint in self._endpoints:
            try:
                response = self._http.request(
                    "POST", endpoint + path, body=json.dumps(body).encode("utf-8")
                )
            except urllib3.exceptions.HTTPError as error:  # refused, timed out, reset
                last = error
                continue
            reply: dict[str, Any] = json.loads(response.data or b"{}")
            if response.status != 200 or "error" in reply:
                # The gateway's error: {"error": "...", "code": 5, "message": "..."}
                failure = _EtcdError(int(reply.get("code") or 0), str(reply.get("message", reply)))
                if failure.code == 14:  # UNAVAILABLE: no quorum behind this member; next
                    last = failure
                    continue
                raise failure
            return reply
        if isinstance(last, _EtcdError):
            raise last
        raise OSError(f"no etcd member answered {path}: {last!r}")
