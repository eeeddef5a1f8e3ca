"""``EtcdLock``: a lease on an etcd cluster, whose fencing token is the key's create revision.

The story this class is written against, in order:

1. Client A asks the cluster for a *lease* (a TTL the cluster keeps by
   consensus) and, in one transaction, puts ``lock:ledger`` attached to it
   **only if the key does not exist** (``create_revision == 0``). The revision
   at which the key was created is A's fencing token: etcd's revision counts
   every change to the store, so a later acquisition always gets a larger one.
   A waiter's lease runs out while it waits (nobody keeps it alive), so an
   attempt made after a third of its TTL asks for a fresh one; a transaction
   whose reply was lost is recognised on the next attempt by the key being on
   one of this waiter's leases, and the token and deadline come from that one.
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
``/v3/lease/revoke``) with urllib3 (``pip install './lockguide[etcd]'`` from
a clone: lockguide is not on a package index), imported when the lock is made: ``import lockguide``
never needs it. Ownership, the total ``acquire`` deadline, ``with`` and the
lease-loss signal are the ones every lock here shares (:mod:`lockguide._consensus`).
"""

from __future__ import annotations

import base64
import contextlib
import json
import random
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from lockguide._consensus import DEFAULT_TIMEOUT_MS, ConsensusLease
from lockguide._core import UNSET, Owner, check_ms
from lockguide.errors import BadArgument, ClusterUnavailable, LockError, LockLost

__all__ = ["EtcdError", "EtcdLock"]

#: gRPC status codes no retry can fix: INVALID_ARGUMENT, PERMISSION_DENIED,
#: UNIMPLEMENTED, UNAUTHENTICATED. Any other error is retried within the wait.
_FATAL = frozenset({3, 7, 12, 16})
_NOT_FOUND = 5  # "requested lease not found": the lease ended (or was revoked)


def _b64(text: str) -> str:
    return base64.b64encode(text.encode("utf-8")).decode("ascii")


class _EtcdError(Exception):
    """The cluster answered with an error (``code`` is the gRPC status code)."""

    def __init__(self, code: int, message: str) -> None:
        self.code = code
        super().__init__(message)


class EtcdError(LockError):
    """The cluster refused a request in a way no retry can fix (credentials, permissions)."""

    def __init__(self, key: str, code: int, message: str) -> None:
        self.key, self.code = key, code
        super().__init__(f"etcd refused a request for lock {key!r} (gRPC code {code}): {message}")


class EtcdLock(ConsensusLease):
    """A mutual-exclusion lease on an etcd cluster; see the module for the story.

    Args:
        endpoints: the members' client URLs (``"http://127.0.0.1:2379"``); a
            request goes to the next one when a member does not answer.
        key: the etcd key that represents the lock, e.g. ``"lock:ledger"``.
        ttl_ms: the lease, a whole number of seconds written in milliseconds
            (etcd leases are whole seconds), e.g. ``ttl_ms=10_000``.
        timeout_ms: how long :meth:`acquire` keeps trying by default, every
            request included (:data:`~lockguide.DEFAULT_TIMEOUT_MS`, 10 s);
            ``None`` waits as long as it takes.
        retry_delay_ms: the ``(low, high)`` range each pause between attempts
            is drawn from.
        request_timeout_ms: how long one request may wait for one member, and
            less when the acquire's deadline is nearer.
        keepalive_ms: time between keep-alives; a third of the TTL by default.
        clock: the function the lease is timed with (default ``time.monotonic``).
        owner: ``"thread"`` (the default): only the thread that acquired may
            ``release`` or ``check`` (``WrongOwner`` otherwise; :meth:`hand_over`
            moves it); ``"process"``: any thread of the acquiring process may.
            A forked child never may, and sees the lock as not held.
    """

    def __init__(
        self,
        endpoints: Sequence[str] | str,
        key: str,
        *,
        ttl_ms: int,
        timeout_ms: float | None = DEFAULT_TIMEOUT_MS,
        retry_delay_ms: tuple[float, float] = (50.0, 150.0),
        request_timeout_ms: float = 1_000.0,
        keepalive_ms: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        owner: Owner = "thread",
    ) -> None:
        try:
            import urllib3
        except ImportError as error:  # pragma: no cover - an optional extra
            raise ImportError(
                "EtcdLock needs urllib3: pip install './lockguide[etcd]' from a clone of "
                "the lockguide repository (it is not on a package index), or pip install urllib3"
            ) from error
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
        self._init_consensus(key, ttl_ms, timeout_ms, retry_delay_ms, clock, owner)
        if self._ttl_ms < 1000 or self._ttl_ms % 1000:
            raise BadArgument(
                f"ttl_ms must be a whole number of seconds >= 1000 ms, got {ttl_ms}: "
                "etcd leases are granted in whole seconds"
            )
        self._request_s = check_ms(request_timeout_ms, "request_timeout_ms", positive=True) / 1000
        every = self._ttl_ms / 3 if keepalive_ms is None else check_ms(keepalive_ms, "keepalive_ms")
        if not 0 < every < self._ttl_ms:
            raise BadArgument(f"keepalive_ms must be > 0 and below ttl_ms, got {keepalive_ms!r}")
        self._every_s = every / 1000
        self._http = urllib3.PoolManager(retries=False)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- state ---------------------------------------------------------------------------

    @property
    def lease_id(self) -> int | None:
        """The etcd lease this holder's key is attached to, while held."""
        value = self.value
        return None if value is None else int(value)

    # -- acquire and release -------------------------------------------------------------

    def acquire(self, *, blocking: bool = True, timeout_ms: Any = UNSET) -> bool:
        """Take the lock; ``True`` when taken, ``False`` when the wait ran out.

        A member that does not answer, or a lease that ended while waiting, is
        retried within the wait. When the wait runs out with the cluster not
        answering, :attr:`last_error` keeps the last error (``with`` raises
        :class:`~lockguide.ClusterUnavailable` from it).

        Raises:
            AlreadyAcquired: this object holds it already.
            EtcdError: the cluster refused in a way no retry can fix.
        """
        give_up = self._give_up_at(blocking, timeout_ms)
        asked: dict[int, float] = {}  # every lease granted to this call: when it was asked for
        won: int | None = None
        first = True
        try:
            while True:
                budget = self._budget_s(self._request_s, give_up, first)
                if budget <= 0:
                    return False
                first = False
                try:
                    grant = self._attempt(asked, self._clock() + budget)
                    self._last_error = None
                except (OSError, _EtcdError) as error:
                    if isinstance(error, _EtcdError) and error.code in _FATAL:
                        raise EtcdError(self._key, error.code, str(error)) from error
                    grant, self._last_error = None, error
                if grant is not None:
                    lease, token = grant
                    started = asked[lease]
                    if self._clock() < started + self._usable_ms / 1000:
                        self._won_token(str(lease), token, started)
                        won = lease
                        self._start_keep_alive()
                        return True
                pause = self._pause_s(random.uniform, give_up) if blocking else 0.0
                if pause <= 0:
                    return False
                time.sleep(pause)
        finally:
            for lease in asked:
                if lease != won:
                    self._revoke_quietly(lease)  # revoking also deletes a key it carries

    def _attempt(self, asked: dict[int, float], due: float) -> tuple[int, int] | None:
        """One try: ``(lease, token)`` if one of ``asked`` now carries the key, else ``None``.

        Its requests wait for no answer past ``due``, on the lock's clock. Reuses
        the newest lease while less than a third of its TTL has passed (the
        first keep-alive then comes well before it ends); otherwise asks for a
        fresh one.
        """
        now = self._clock()
        fresh = [lease for lease, at in asked.items() if now - at < self._ttl_ms / 3000]
        if fresh:
            lease = fresh[-1]
        else:
            granted = self._call("/v3/lease/grant", {"TTL": self._ttl_ms // 1000}, due)
            lease = int(granted["ID"])
            asked[lease] = now
        try:
            return self._create(lease, asked, due)
        except _EtcdError as error:
            if error.code == _NOT_FOUND:  # this lease ended: the next try asks for another
                asked[lease] = float("-inf")
            raise

    def _create(self, lease: int, asked: dict[int, float], due: float) -> tuple[int, int] | None:
        """Put the key on ``lease`` if absent; ``(lease, token)`` if it is on one of ours."""
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
            due,
        )
        if reply.get("succeeded"):
            return lease, int(reply["header"]["revision"])
        kvs = reply["responses"][0]["response_range"].get("kvs", [])
        on = int(kvs[0].get("lease", 0)) if kvs else 0
        if on in asked:  # our own put, whose reply was lost
            return on, int(kvs[0]["create_revision"])
        return None

    def release(self) -> None:
        """Stop the keep-alive and revoke the lease, deleting the key with it.

        Raises:
            NotOwned: not held (``WrongOwner`` from another thread).
            LockLost: the lease had already ended (``RenewalFailed`` if the
                keep-alive had seen it); nothing of anyone else's was touched.
            ClusterUnavailable: no member answered; the lock is still held by
                this object and kept alive (retry), or it ends with its TTL.
        """
        lease = int(self._check_owner("release"))
        self._stop_keep_alive()
        started = self._clock()
        try:
            self._call("/v3/lease/revoke", {"ID": lease})
        except (OSError, _EtcdError) as error:
            if isinstance(error, _EtcdError) and error.code == _NOT_FOUND:  # gone already
                self._forget(str(lease))
                raise self._error or LockLost(self._key, "release") from None
            self._start_keep_alive()  # still held: the caller may retry
            waited = (self._clock() - started) * 1000
            raise ClusterUnavailable(self._key, waited, repr(error)) from error
        self._forget(str(lease))
        if self._error is not None:
            raise self._error

    def _revoke_quietly(self, lease: int) -> None:
        with contextlib.suppress(OSError, _EtcdError):  # else it ends after its TTL
            self._call("/v3/lease/revoke", {"ID": lease})

    # -- keep-alive ----------------------------------------------------------------------

    def _start_keep_alive(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(
            target=self._keep_alive, name=f"lockguide-etcd:{self._key}", daemon=True
        )
        self._thread.start()

    def _stop_keep_alive(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()
        self._thread = None

    def _keep_alive(self) -> None:
        # The first renewal counts from the grant that won, which may be older than now.
        since = self._deadline - self._ttl_ms / 1000
        wait = max(0.0, since + self._every_s - self._clock())
        while not self._stop.wait(wait):
            wait = self._every_s
            lease = self.lease_id
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

    # -- requests ------------------------------------------------------------------------

    def _call(self, path: str, body: dict[str, Any], due: float | None = None) -> dict[str, Any]:
        """POST ``body`` to the first member that answers (by ``due`` if given); its JSON reply.

        Raises:
            OSError: no member answered.
            _EtcdError: the cluster answered with an error.
        """
        import urllib3

        last: Exception | None = None
        for endpoint in self._endpoints:
            wait = self._request_s if due is None else min(self._request_s, due - self._clock())
            if wait <= 0:
                break
            try:
                response = self._http.request(
                    "POST",
                    endpoint + path,
                    body=json.dumps(body).encode("utf-8"),
                    timeout=urllib3.Timeout(connect=wait, read=wait),
                )
            except urllib3.exceptions.HTTPError as error:  # refused, timed out, reset
                last = error
                continue
            try:
                reply: dict[str, Any] = json.loads(response.data or b"{}")
            except ValueError as error:  # not the gateway answering: try the next member
                last = error
                continue
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
        if last is None:
            raise OSError(f"no time left in the acquire's deadline to ask for {path}")
        raise OSError(f"no etcd member answered {path}: {last!r}")
