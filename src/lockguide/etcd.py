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
4. A releases: one transaction deletes the key and the *holder record*
   (``lock:ledger`` + ``"\\0holder"``, a key on no lease, written with every grant),
   then A revokes the lease.
5. With ``lock_delay_ms`` (Chubby's lock-delay, off by default), a key that
   vanished *without* that release leaves its holder record behind: the lease
   ended (A crashed, paused or was cut off past its TTL, or an operator revoked
   it). The next acquirer that sees the record in place of the key does not
   take the lock: it replaces the record with a *guard* key
   (``lock:ledger`` + ``"\\0delay"``) on a lease of its own whose TTL is the delay,
   and every acquirer with a delay waits, as for a held lock, until the
   cluster has ended that lease. The delay is timed by the cluster and starts
   after the loss (the guard's lease is granted after the key was seen gone),
   so no grant is returned before the delay has passed since the loss, however
   often acquirers give up and come back (a leader change only lengthens it:
   the new leader renews every lease). A clean release leaves no record: the
   next grant costs nothing. An acquire that gives up after a grant whose
   reply was lost revokes its lease and leaves a record too: one delay more,
   on the safe side.

   What it narrows: A, paused or partitioned past its lease, comes back and
   makes its late writes (to a resource that cannot check a token) within the
   delay, when nobody else has been granted the lock yet. What it does not
   close: a pause longer than TTL + delay, after which A's writes land on B's
   (only a fencing token stops those); and it costs availability: after every
   crash the lock is free to nobody for the delay.

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

from lockguide._consensus import DEFAULT_TIMEOUT_MS, ConsensusLease, check_lock_delay
from lockguide._core import UNSET, Owner, check_ms, holder_name
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
        lock_delay_ms: Chubby's lock-delay: after a holder's lease ended without a
            release, no acquirer with a delay is granted the lock until this long
            after the loss (timed by the cluster, on a lease, so a whole number of
            seconds like ``ttl_ms``; at most 60,000, Chubby's bound). ``0``, the
            default, is off: this lock neither starts a delay nor waits for one.
            Give every contender for a key the same value.
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
        lock_delay_ms: int = 0,
        clock: Callable[[], float] = time.monotonic,
        owner: Owner = "thread",
    ) -> None:
        delay = check_lock_delay(lock_delay_ms)
        if delay % 1000:
            raise BadArgument(
                f"lock_delay_ms must be a whole number of seconds, got {lock_delay_ms}: "
                "the cluster times the delay on a lease, and etcd leases are whole seconds"
            )
        self._delay_s = int(delay) // 1000
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
        self._holder_key = _b64(self._key + "\0holder")  # on no lease: outlives a lost one
        self._guard_key = _b64(self._key + "\0delay")  # on the delay's own lease
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
                    if self._clock() < self._usable_until(started):
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
        """Put the key on ``lease`` if absent; ``(lease, token)`` if it is on one of ours.

        The same transaction writes the holder record. With a lock-delay, the key
        is taken only when no guard is running and no record says the last
        holder's lease ended without a release; finding such a record starts
        the delay (:meth:`_start_delay`).
        """
        key = _b64(self._key)
        named = f"{lease} {holder_name(self._holder_label())}"  # whose, since when: Holder.read
        free = [
            {"key": key, "target": "CREATE", "create_revision": "0"},
            {"key": self._guard_key, "target": "CREATE", "create_revision": "0"},
        ]
        if self._delay_s:
            free.append({"key": self._holder_key, "target": "CREATE", "create_revision": "0"})
        else:
            free = free[:1]  # no delay: neither waits for a guard nor heeds the record
        reply = self._call(
            "/v3/kv/txn",
            {
                "compare": free,
                "success": [
                    {"request_put": {"key": key, "value": _b64(named), "lease": lease}},
                    {"request_put": {"key": self._holder_key, "value": _b64(str(lease))}},
                ],
                "failure": [
                    {"request_range": {"key": k}} for k in (key, self._guard_key, self._holder_key)
                ],
            },
            due,
        )
        if reply.get("succeeded"):
            return lease, int(reply["header"]["revision"])
        kvs, guard, holder = (r["response_range"].get("kvs", []) for r in reply["responses"])
        if kvs:
            on = int(kvs[0].get("lease", 0))
            if on in asked:  # our own put, whose reply was lost
                return on, int(kvs[0]["create_revision"])
        elif holder and not guard:
            self._start_delay(int(holder[0]["mod_revision"]), due)
        return None

    def _start_delay(self, seen: int, due: float) -> None:
        """The last holder's lease ended without a release: put the guard on a lease of the delay.

        One transaction swaps the record ``seen`` (its mod revision) for the
        guard, so of several acquirers that see it, one starts the delay; the
        others' swaps fail and their spare leases are revoked. The guard's lease
        is granted after the key was seen gone, so it ends at least the delay
        after the loss, on the cluster's clock.
        """
        granted = self._call("/v3/lease/grant", {"TTL": self._delay_s}, due)
        guard = int(granted["ID"])
        # An error here leaves the lease alone: if the swap was made, revoking it would
        # end the delay early; if not, the unused lease ends by itself.
        reply = self._call(
            "/v3/kv/txn",
            {
                "compare": [
                    {"key": self._holder_key, "target": "MOD", "mod_revision": str(seen)},
                    {"key": _b64(self._key), "target": "CREATE", "create_revision": "0"},
                ],
                "success": [
                    {"request_put": {"key": self._guard_key, "value": "", "lease": guard}},
                    {"request_delete_range": {"key": self._holder_key}},
                ],
                "failure": [],
            },
            due,
        )
        if not reply.get("succeeded"):
            self._revoke_quietly(guard)

    def release(self) -> None:
        """Stop the keep-alive, delete the key and the holder record, and revoke the lease.

        The deletion is one transaction that succeeds only while the key is
        still this grant's (its create revision is the token), so a holder whose
        lease ended touches nothing and leaves the record that starts a lock-delay.

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
        key = _b64(self._key)
        try:
            reply = self._call(
                "/v3/kv/txn",
                {
                    "compare": [
                        {"key": key, "target": "CREATE", "create_revision": str(self._token)}
                    ],
                    "success": [
                        {"request_delete_range": {"key": key}},
                        {"request_delete_range": {"key": self._holder_key}},
                    ],
                    "failure": [],
                },
            )
        except (OSError, _EtcdError) as error:
            self._start_keep_alive()  # still held: the caller may retry
            waited = (self._clock() - started) * 1000
            raise ClusterUnavailable(self._key, waited, repr(error)) from error
        self._revoke_quietly(lease)  # nothing is left on it; else it ends with its TTL
        self._forget(str(lease))
        if not reply.get("succeeded"):  # the key was gone (or someone else's): the lease ended
            raise self._error or LockLost(self._key, "release") from None
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
