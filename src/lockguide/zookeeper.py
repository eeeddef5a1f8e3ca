"""``ZooKeeperLock``: an ephemeral sequential node, whose fencing token is its creation zxid.

The story this class is written against, in order:

1. Client A creates ``/locks/ledger/lock-0000000007``, an *ephemeral
   sequential* node: ZooKeeper numbers it, and deletes it when A's session
   ends. A holds the lock when its node is the lowest under ``/locks/ledger``;
   otherwise it watches the node just below its own and waits for it to go.
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
4. A releases by deleting its node.

It needs kazoo (``pip install 'lockguide[zookeeper]'``), used through the
started ``KazooClient`` the caller passes: ``import lockguide`` never needs it.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import Any, Self

from lockguide._base import check_key, check_ms
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

__all__ = ["ZooKeeperLock"]

_PREFIX = "lock-"


def _waker(event: threading.Event) -> Callable[[Any], None]:
    """A kazoo watch that sets ``event`` (the node below ours changed)."""
    return lambda _: event.set()


class ZooKeeperLock:
    """A mutual-exclusion lock on a ZooKeeper ensemble; see the module for the story.

    Args:
        client: a started ``kazoo.client.KazooClient``. The lock's lease is its
            session: the session timeout is the TTL.
        path: the lock's node, e.g. ``"/locks/ledger"``; contenders' nodes go under it.
        timeout_ms: how long :meth:`acquire` waits by default; ``None`` waits
            as long as it takes.
        request_timeout_ms: how long one request may wait for the ensemble
            (kazoo queues requests while it reconnects).
        clock: the function waits are timed with (default ``time.monotonic``).
    """

    def __init__(
        self,
        client: Any,
        path: str,
        *,
        timeout_ms: float | None = None,
        request_timeout_ms: float = 5_000.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        try:
            from kazoo.client import KazooClient
            from kazoo.protocol.states import KazooState
        except ImportError as error:  # pragma: no cover - an optional extra
            raise ImportError(
                "ZooKeeperLock needs kazoo: pip install 'lockguide[zookeeper]'"
            ) from error
        if not isinstance(client, KazooClient):
            raise BadArgumentType(
                f"client must be a started kazoo KazooClient, not {type(client).__name__}"
            )
        path = check_key(path, "path")
        if not path.startswith("/") or path.endswith("/") or "//" in path:
            raise BadArgument(
                f"path must be an absolute ZooKeeper path like '/locks/ledger', got {path!r}"
            )
        self._client = client
        self._path = path
        self._timeout_ms = None if timeout_ms is None else check_ms(timeout_ms, "timeout_ms")
        self._request_s = check_ms(request_timeout_ms, "request_timeout_ms", positive=True) / 1000
        if not callable(clock):
            raise BadArgumentType(f"clock must be a function like time.monotonic, not {clock!r}")
        self._clock = clock
        self._states = KazooState
        self._node: str | None = None
        self._token: int | None = None
        self._owner: int | None = None
        self._lost = threading.Event()
        self._error: RenewalFailed | None = None
        self._suspended = False
        client.add_listener(self._on_state)

    # -- state ---------------------------------------------------------------------------

    @property
    def key(self) -> str:
        """The lock's path."""
        return self._path

    @property
    def held(self) -> bool:
        """Whether this object believes it holds the lock (acquired, not released)."""
        return self._node is not None

    @property
    def node(self) -> str | None:
        """This holder's sequential node, while held."""
        return self._node

    @property
    def token(self) -> int:
        """The fencing token: the zxid that created this holder's node.

        Raises:
            NotOwned: this object does not hold the lock.
        """
        if self._token is None or self._node is None:
            raise NotOwned(self._path, "read the fencing token of")
        return self._token

    @property
    def lost(self) -> bool:
        """Whether the session was found expired while held (the node is gone)."""
        return self._lost.is_set()

    @property
    def lost_event(self) -> threading.Event:
        """Set when the lock is lost; wait on it to be woken by the failure."""
        return self._lost

    def check(self) -> None:
        """Raise if the holder must not write now; call it before each write.

        Raises:
            NotOwned: not held.
            RenewalFailed: the session expired, or the connection is suspended
                (the session may expire before it comes back).
        """
        if self._node is None:
            raise NotOwned(self._path, "check")
        if self._error is not None:
            raise self._error
        if self._suspended:
            raise RenewalFailed(
                self._path, "the connection to ZooKeeper is suspended; the session may expire"
            )

    def _on_state(self, state: Any) -> None:
        """kazoo's session listener (its own thread): flag a loss while held."""
        if self._node is None:
            return
        if state == self._states.LOST:
            self._fail("the ZooKeeper session expired: the ensemble deleted the node")
        else:  # SUSPENDED: not safe to write until the session is confirmed (CONNECTED)
            self._suspended = state == self._states.SUSPENDED

    def _fail(self, reason: str) -> None:
        if self._error is None:
            self._error = RenewalFailed(self._path, reason)
        self._lost.set()

    # -- acquire and release -------------------------------------------------------------

    def acquire(self, *, blocking: bool = True, timeout_ms: float | None = None) -> bool:
        """Take the lock; ``True`` when taken, ``False`` when the wait ran out.

        Raises:
            AlreadyAcquired: this object holds it already.
            ClusterUnavailable: the ensemble did not answer before the timeout.
        """
        from kazoo.exceptions import KazooException

        if self._node is not None:
            raise AlreadyAcquired(self._path)
        wait = self._timeout_ms if timeout_ms is None else check_ms(timeout_ms, "timeout_ms")
        started = self._clock()
        give_up = None if wait is None or not blocking else started + wait / 1000
        node: str | None = None
        try:
            node, stat = self._get(
                self._client.create_async(
                    f"{self._path}/{_PREFIX}",
                    ephemeral=True,
                    sequence=True,
                    makepath=True,
                    include_data=True,
                ),
                give_up,
            )
            while True:
                listed = self._get(self._client.get_children_async(self._path), give_up)
                children = sorted(c for c in listed if c.startswith(_PREFIX))
                mine = node.rsplit("/", 1)[1]
                if mine not in children:
                    raise LockLost(self._path, "acquire")  # the session expired while waiting
                below = children[: children.index(mine)]
                if not below:
                    self._won(node, int(stat.czxid))
                    node = None
                    return True
                if not blocking:
                    return False
                gone = threading.Event()
                watch = self._client.exists_async(f"{self._path}/{below[-1]}", _waker(gone))
                if self._get(watch, give_up):
                    left = None if give_up is None else give_up - self._clock()
                    if left is not None and left <= 0:
                        return False
                    gone.wait(left)
        except (KazooException, self._client.handler.timeout_exception) as error:
            if node is not None and give_up is not None and self._clock() >= give_up:
                return False  # the ensemble answered; the wait ran out mid-request
            waited = (self._clock() - started) * 1000
            raise ClusterUnavailable(self._path, waited, repr(error)) from error
        finally:
            if node is not None:
                self._delete_quietly(node)

    def _get(self, result: Any, give_up: float | None) -> Any:
        """The value of kazoo's asynchronous ``result``, waiting at most one request timeout."""
        timeout = self._request_s
        if give_up is not None:
            timeout = max(0.001, min(timeout, give_up - self._clock()))
        return result.get(timeout=timeout)

    def _won(self, node: str, czxid: int) -> None:
        self._node, self._token = node, check_token(czxid)
        self._owner = threading.get_ident()
        self._error = None
        self._suspended = False
        self._lost.clear()

    def release(self) -> None:
        """Delete this holder's node.

        Raises:
            NotOwned: not held (``WrongOwner`` from another thread).
            LockLost: the node was gone already (the session expired);
                ``RenewalFailed`` if the loss had been seen. Nobody else's node
                was touched.
            ClusterUnavailable: the ensemble did not answer; the node may still
                be there (retry, or it goes when the session ends).
        """
        from kazoo.exceptions import KazooException, NoNodeError, SessionExpiredError

        node = self._node
        if node is None:
            raise NotOwned(self._path, "release")
        if self._owner != threading.get_ident():
            raise WrongOwner(self._path, "release")
        try:
            self._get(self._client.delete_async(node), None)
        except (NoNodeError, SessionExpiredError):  # gone with the session
            self._forget()
            raise self._error or LockLost(self._path, "release") from None
        except (KazooException, self._client.handler.timeout_exception) as error:
            raise ClusterUnavailable(self._path, self._request_s * 1000, repr(error)) from error
        self._forget()

    def _forget(self) -> None:
        self._node = self._token = self._owner = None

    def _delete_quietly(self, node: str) -> None:
        from kazoo.exceptions import KazooException

        with contextlib.suppress(KazooException, self._client.handler.timeout_exception):
            self._get(self._client.delete_async(node), None)  # else it goes with the session

    def __enter__(self) -> Self:
        if not self.acquire():
            raise NotAcquired(self._path, self._timeout_ms or 0.0)
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
            exc.add_note(f"lockguide: releasing {self._path!r} on the way out also failed: {error}")

    def __repr__(self) -> str:
        state = f"held, token {self._token}" if self.held else "not held"
        return f"<ZooKeeperLock {self._path!r} {state}>"
