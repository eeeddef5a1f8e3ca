"""``ZooKeeperLock``: an ephemeral sequential node, whose fencing token is its creation zxid.

The story this class is written against, in order:

1. Client A creates ``/locks/ledger/<A's prefix>-lock-0000000007``, an
   *ephemeral sequential* node: ZooKeeper numbers it, and deletes it when A's
   session ends. A holds the lock when its node's number is the lowest under
   ``/locks/ledger``; otherwise it watches the node just below its own and
   waits for it to go. The prefix is random, drawn for each ``acquire``: when
   a create's reply is lost (a timeout, a dropped connection), the ensemble
   may have made the node anyway, and A finds it again by its prefix and
   carries on with it, or, when A gives up, deletes it once the ensemble
   answers. Without it, such a node would block everyone, A included, for as
   long as A's session lasts.
2. The node's ``czxid`` (the transaction id that created it, ordered across the
   whole ensemble) is A's fencing token. Nodes are granted in creation order,
   so each holder's token is larger than the one before.
3. A's session is kept alive by kazoo's heartbeats. If the session expires
   (A paused or cut off longer than the session timeout), the node is gone
   and the next waiter holds the lock. kazoo tells the lock when it finds
   out: :attr:`ZooKeeperLock.lost`, :meth:`ZooKeeperLock.check`,
   :meth:`ZooKeeperLock.release`. A paused process finds out only after it
   resumes, possibly after a write: the resource must check the token
   (:class:`~lockguide.FencedStore`, :class:`~lockguide.SqlFencedStore`).
4. A, granted, writes ``held:<its node>`` into the lock node's data (the
   *holder record*) before ``acquire`` returns; it releases with one
   transaction that deletes its node and writes ``released`` there.
5. With ``lock_delay_ms`` (Chubby's lock-delay, off by default), an acquirer
   that reaches the front and finds ``held:<a node that is gone>`` knows the
   last holder's session ended without a release (A crashed, or paused or was
   cut off past the session timeout). It writes ``delay`` there, and the
   write's ``mtime`` (the ensemble leader's clock) is when the delay started:
   at or after the loss. Any acquirer at the front grants itself only once
   the ensemble's clock (the ``mtime`` of a write to its own node) is the
   delay past that start, so giving up and coming back does not restart it. A
   clean release leaves ``released``: the next grant costs nothing.

   ZooKeeper has no timer a client can leave behind (sessions last at most
   20 ticks), so the delay is read off the leader's wall clock: a step of that
   clock, or a new leader whose clock differs, shifts it by that much. What it
   narrows and what it does not close are the etcd lock's
   (:mod:`lockguide.etcd`): a holder back within the delay finds nobody else
   granted yet; a pause longer than session timeout + delay is not covered.

It needs kazoo (``pip install './lockguide[zookeeper]'`` from a clone:
lockguide is not on a package index), used through the started ``KazooClient`` the caller passes:
``import lockguide`` never needs it. There is no ``ttl_ms``: the lease is the
kazoo session, whose timeout is set on the ``KazooClient``. Ownership, the total
``acquire`` deadline, ``with`` and the lease-loss signal are the ones every
lock here shares (:mod:`lockguide._consensus`).
"""

from __future__ import annotations

import contextlib
import random
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from lockguide._consensus import DEFAULT_TIMEOUT_MS, ConsensusLease, check_lock_delay
from lockguide._core import MAX_TTL_MS, UNSET, Owner, check_ms
from lockguide.errors import BadArgument, BadArgumentType, ClusterUnavailable, LockLost

__all__ = ["ZooKeeperLock"]

_NAME = "lock-"  # then ZooKeeper's ten-digit sequence number


def _sequence(child: str) -> int:
    """The sequence number ZooKeeper appended to a contender's node name."""
    return int(child[-10:]) if child[-10:].isdigit() else -1


def _waker(event: threading.Event) -> Callable[[Any], None]:
    """A kazoo watch that sets ``event`` (the node below ours changed)."""
    return lambda _: event.set()


class ZooKeeperLock(ConsensusLease):
    """A mutual-exclusion lock on a ZooKeeper ensemble; see the module for the story.

    Args:
        client: a started ``kazoo.client.KazooClient``. The lock's lease is its
            session: the session timeout is the TTL.
        path: the lock's node, e.g. ``"/locks/ledger"``; contenders' nodes go under it.
        timeout_ms: how long :meth:`acquire` waits by default, every request
            included (:data:`~lockguide.DEFAULT_TIMEOUT_MS`, 10 s); ``None``
            waits as long as it takes.
        retry_delay_ms: the ``(low, high)`` range each pause after a failed
            request is drawn from.
        request_timeout_ms: how long one request may wait for the ensemble
            (kazoo queues requests while it reconnects).
        lock_delay_ms: Chubby's lock-delay: after a holder's session ended
            without a release, no acquirer with a delay is granted the lock until
            this long after the loss (on the ensemble leader's clock; at most
            60,000, Chubby's bound). ``0``, the default, is off: this lock neither
            starts a delay nor waits for one. Give every contender the same value.
        clock: the function waits are timed with (default ``time.monotonic``).
        owner: ``"thread"`` (the default): only the thread that acquired may
            ``release`` or ``check`` (``WrongOwner`` otherwise; :meth:`hand_over`
            moves it); ``"process"``: any thread of the acquiring process may.
            A forked child never may, and sees the lock as not held.

    There is no ``ttl_ms``: the session's timeout, set on the ``KazooClient``,
    is the lease, and :meth:`check` (not a deadline) says whether it still holds.
    """

    def __init__(
        self,
        client: Any,
        path: str,
        *,
        timeout_ms: float | None = DEFAULT_TIMEOUT_MS,
        retry_delay_ms: tuple[float, float] = (50.0, 150.0),
        request_timeout_ms: float = 5_000.0,
        lock_delay_ms: float = 0,
        clock: Callable[[], float] = time.monotonic,
        owner: Owner = "thread",
    ) -> None:
        self._delay_ms = check_lock_delay(lock_delay_ms)
        try:
            from kazoo.client import KazooClient
            from kazoo.protocol.states import KazooState
        except ImportError as error:  # pragma: no cover - an optional extra
            raise ImportError(
                "ZooKeeperLock needs kazoo: pip install './lockguide[zookeeper]' from a clone "
                "of the lockguide repository (it is not on a package index), or pip install kazoo"
            ) from error
        if not isinstance(client, KazooClient):
            raise BadArgumentType(
                f"client must be a started kazoo KazooClient, not {type(client).__name__}"
            )
        # The core's TTL is a formality here: the session, not a deadline, is the lease.
        self._init_consensus(path, MAX_TTL_MS, timeout_ms, retry_delay_ms, clock, owner)
        if not path.startswith("/") or path.endswith("/") or "//" in path:
            raise BadArgument(
                f"path must be an absolute ZooKeeper path like '/locks/ledger', got {path!r}"
            )
        self._client = client
        self._request_s = check_ms(request_timeout_ms, "request_timeout_ms", positive=True) / 1000
        self._states = KazooState
        self._suspended = False
        client.add_listener(self._on_state)

    # -- state ---------------------------------------------------------------------------

    @property
    def ttl_ms(self) -> int:
        """Not a ZooKeeper lock's: its lease is the kazoo session (``KazooClient(timeout=)``)."""
        raise AttributeError(
            "a ZooKeeperLock has no ttl_ms: its lease is the kazoo session, whose timeout "
            "is set on the KazooClient"
        )

    @property
    def node(self) -> str | None:
        """This holder's sequential node, while held."""
        return self.value

    def validity_remaining_ms(self) -> float:
        """``inf`` while held on a live, connected session; ``0.0`` otherwise.

        ZooKeeper keeps no deadline a client can read: the session lasts while
        heartbeats arrive. Use :meth:`check` before each write.
        """
        if not self.held or self._error is not None or self._suspended:
            return 0.0
        return float("inf")

    def _doubt(self) -> str | None:
        if self._suspended:
            return "the connection to ZooKeeper is suspended; the session may expire"
        return None

    def _on_state(self, state: Any) -> None:
        """kazoo's session listener (its own thread): flag a loss while held."""
        if self._value is None:
            return
        if state == self._states.LOST:
            self._fail("the ZooKeeper session expired: the ensemble deleted the node")
        else:  # SUSPENDED: not safe to write until the session is confirmed (CONNECTED)
            self._suspended = state == self._states.SUSPENDED

    # -- acquire and release -------------------------------------------------------------

    def acquire(self, *, blocking: bool = True, timeout_ms: Any = UNSET) -> bool:
        """Take the lock; ``True`` when taken, ``False`` when the wait ran out.

        A request the ensemble does not answer in time (a timeout, a lost
        connection, an expired session) is retried within the wait; a create
        whose reply was lost is found again by this call's prefix. When the
        wait runs out with the ensemble not answering, :attr:`last_error` keeps
        the last error (``with`` raises :class:`~lockguide.ClusterUnavailable`).

        Raises:
            AlreadyAcquired: this object holds it already.
            ClusterUnavailable: the kazoo client was stopped or closed.
        """
        from kazoo.exceptions import ConnectionClosedError, NoNodeError

        started = self._clock()
        give_up = self._give_up_at(blocking, timeout_ms)
        if not blocking:  # one try still gives each request its own timeout
            give_up = None
        prefix = f"{uuid.uuid4().hex}-{_NAME}"
        mine: tuple[str, int] | None = None  # our node's name and czxid, once known
        unsure = False  # a create was sent whose reply never came
        try:
            while True:
                try:
                    if mine is None and unsure:
                        mine = self._find(prefix, give_up)
                        if mine is not None:
                            unsure = False  # found: it is ours to hold, not to clean up
                    if mine is None:
                        unsure = True
                        mine = self._create(prefix, give_up)
                        unsure = False
                    below = self._below(mine[0], give_up)
                    self._last_error = None
                    if below is None:  # our node is gone: the session ended; start again
                        mine = None
                        continue
                    if not below:
                        if not self._record_grant(mine[0], give_up, blocking):
                            return False  # the lock-delay outlasts this call's wait
                        self._won_token(f"{self._key}/{mine[0]}", mine[1], started)
                        mine = None
                        return True
                    if not blocking:
                        return False
                    gone = threading.Event()
                    watch = self._client.exists_async(f"{self._key}/{below}", _waker(gone))
                    if self._get(watch, give_up):
                        left = None if give_up is None else give_up - self._clock()
                        if left is not None and left <= 0:
                            return False
                        gone.wait(left)
                    continue
                except ConnectionClosedError as error:
                    waited = (self._clock() - started) * 1000
                    raise ClusterUnavailable(self._key, waited, repr(error)) from error
                except NoNodeError:  # our node went (the session ended) while at the front
                    mine = None
                    continue
                except self._transient() as error:
                    self._last_error = error
                pause = self._pause_s(random.uniform, give_up) if blocking else 0.0
                if pause <= 0:
                    return False
                time.sleep(pause)
        finally:
            if mine is not None:
                self._delete_later(mine[0])
            elif unsure:
                self._clean_up_later(prefix)

    def _record_grant(self, name: str, give_up: float | None, blocking: bool) -> bool:
        """At the front: serve any lock-delay, then write ``held:<name>``; ``False`` if out of time.

        Returns ``False`` as soon as the delay is known to end after ``give_up``
        (at once when not ``blocking``): the node is then deleted by the caller
        and the delay's start stays in the record for the next acquirer.
        """
        if self._delay_ms:
            data, stat = self._get(self._client.get_async(self._key), give_up)
            record = bytes(data or b"").decode("utf-8", "replace")
            if record.startswith("held:") and record != f"held:{name}":
                # That holder's node is gone (ours is the lowest) and it wrote no release.
                stat = self._get(self._client.set_async(self._key, b"delay"), give_up)
                record = "delay"
            while record == "delay":
                # The ensemble's time now: the mtime of a write to our own node.
                now = self._get(self._client.set_async(f"{self._key}/{name}", b""), give_up)
                wait_s = (int(stat.mtime) + self._delay_ms - int(now.mtime)) / 1000
                if wait_s <= 0:
                    break
                left = None if give_up is None else give_up - self._clock()
                if not blocking or (left is not None and left < wait_s):
                    return False
                time.sleep(wait_s)
        self._get(self._client.set_async(self._key, f"held:{name}".encode()), give_up)
        return True

    def _transient(self) -> tuple[type[Exception], ...]:
        """The errors a retry may fix: a timeout, a lost connection, an expired session."""
        from kazoo.exceptions import (
            ConnectionLoss,
            OperationTimeoutError,
            SessionExpiredError,
        )

        return (
            ConnectionLoss,
            OperationTimeoutError,
            SessionExpiredError,
            self._client.handler.timeout_exception,
        )

    def _create(self, prefix: str, give_up: float | None) -> tuple[str, int]:
        """Create our ephemeral sequential node; its name and czxid."""
        created, stat = self._get(
            self._client.create_async(
                f"{self._key}/{prefix}",
                ephemeral=True,
                sequence=True,
                makepath=True,
                include_data=True,
            ),
            give_up,
        )
        return str(created).rsplit("/", 1)[1], int(stat.czxid)

    def _find(self, prefix: str, give_up: float | None) -> tuple[str, int] | None:
        """Our node, made by a create whose reply was lost (extra ones are deleted)."""
        from kazoo.exceptions import NoNodeError

        # The server we talk to may not have applied that create yet: sync first.
        self._get(self._client.sync_async(self._key), give_up)
        try:
            children = self._get(self._client.get_children_async(self._key), give_up)
        except NoNodeError:
            return None
        ours = sorted((c for c in children if c.startswith(prefix)), key=_sequence)
        for extra in ours[1:]:
            self._delete_later(extra)
        for name in ours[:1]:
            stat = self._get(self._client.exists_async(f"{self._key}/{name}"), give_up)
            if stat is not None:
                return name, int(stat.czxid)
        return None

    def _below(self, name: str, give_up: float | None) -> str | None:
        """The contender just below ``name`` ('' if none: we hold it); None if ``name`` is gone."""
        children = self._get(self._client.get_children_async(self._key), give_up)
        if name not in children:
            return None
        ours = _sequence(name)
        lower = [c for c in children if 0 <= _sequence(c) < ours]
        return max(lower, key=_sequence) if lower else ""

    def _get(self, result: Any, give_up: float | None) -> Any:
        """The value of kazoo's asynchronous ``result``, waiting at most one request timeout."""
        return result.get(timeout=max(0.001, self._budget_s(self._request_s, give_up, False)))

    def _delete_later(self, name: str) -> None:
        """Ask for ``name`` to be deleted, without waiting (else it goes with the session)."""
        with contextlib.suppress(Exception):
            self._client.delete_async(f"{self._key}/{name}")

    def _clean_up_later(self, prefix: str) -> None:
        """Delete every node of ``prefix`` once the ensemble answers a listing."""

        def delete_ours(listed: Any) -> None:
            with contextlib.suppress(Exception):
                for child in listed.get(timeout=0):
                    if child.startswith(prefix):
                        self._delete_later(child)

        with contextlib.suppress(Exception):
            self._client.get_children_async(self._key).rawlink(delete_ours)

    def release(self) -> None:
        """Delete this holder's node and write ``released`` in the record, in one transaction.

        Raises:
            NotOwned: not held (``WrongOwner`` from another thread).
            LockLost: the node was gone already (the session expired);
                ``RenewalFailed`` if the loss had been seen. Nobody else's node
                was touched.
            ClusterUnavailable: the ensemble did not answer; the node may still
                be there (retry, or it goes when the session ends).
        """
        from kazoo.exceptions import KazooException, NoNodeError, SessionExpiredError

        node = self._check_owner("release")
        both = self._client.transaction()
        both.delete(node)
        both.set_data(self._key, b"released")
        try:
            results = self._get(both.commit_async(), None)
        except SessionExpiredError:  # gone with the session
            self._forget(node)
            raise self._error or LockLost(self._key, "release") from None
        except (KazooException, self._client.handler.timeout_exception) as error:
            raise ClusterUnavailable(self._key, self._request_s * 1000, repr(error)) from error
        if isinstance(results[0], NoNodeError):  # gone with the session; nothing was written
            self._forget(node)
            raise self._error or LockLost(self._key, "release") from None
        if isinstance(results[0], Exception):
            raise ClusterUnavailable(self._key, 0.0, repr(results[0])) from results[0]
        self._forget(node)
