"""What the audit needs from a lock: a small adapter around its public API.

The audit never reads a library's source or README. It starts the servers,
hands them to a *factory* you write, and drives the lock through the
:class:`Adapter` / :class:`Holder` pair the factory returns, while it watches
the servers themselves (keys, values, TTLs, the commands on the wire).

A factory is any callable ``factory(servers) -> Adapter``. It creates the
library's own Redis client(s) with :meth:`Server.connect` (a single-instance
lock uses ``servers[0]``; a Redlock-style lock uses every server) and returns
an object with the attributes and methods of :class:`Adapter`. On the command
line it is named ``MODULE:FACTORY``, the way ``lockguide-audit``
finds it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

import redis

__all__ = [
    "DEFAULT",
    "NO_EXPIRY",
    "Adapter",
    "AdapterFactory",
    "Holder",
    "Server",
    "TtlSpec",
    "Unsupported",
]

#: ``ttl_ms`` value asking for the library's default lease (whatever a user
#: gets who passes no TTL at all).
DEFAULT: Literal["default"] = "default"
#: ``ttl_ms`` value asking for the library's explicit "never expires" option,
#: if it has one (raise :class:`Unsupported` otherwise).
NO_EXPIRY: Literal["no-expiry"] = "no-expiry"

TtlSpec = int | Literal["default", "no-expiry"]
"""A lease in milliseconds, :data:`DEFAULT` or :data:`NO_EXPIRY`."""


class Unsupported(Exception):
    """Raised by an adapter for an option or operation the library does not have."""


@dataclass(frozen=True)
class Server:
    """One Redis server the audit started (or was given) for the lock under test.

    Attributes:
        label: a short name for reports, e.g. ``"master-2"``.
        connect: makes a new client for this server; keyword arguments are
            passed on (``decode_responses=True`` and the like).
        address: ``(host, port)`` of a real server on loopback, or ``None``
            for an in-process fakeredis server. Checks that need a TCP link
            or a second process only run when every server has an address.
    """

    label: str
    connect: Callable[..., redis.Redis]
    address: tuple[str, int] | None = None
    extra: dict[str, Any] = field(default_factory=dict, compare=False)


@runtime_checkable
class Holder(Protocol):
    """One would-be holder of the lock: one lock object of the library.

    The audit creates several holders for the same key to play clients A,
    B and C of the guide's stories.

    Optional members (the rows that need them are "not run" without):

    * ``acquire_default() -> bool``: the library's acquire called with no
      arguments at all, whatever it waits (the wait row);
    * ``release_async()``: for an asyncio lock, the release coroutine itself,
      not yet awaited (the cancel row cancels it on the adapter's ``loop``).
    """

    def acquire(self, wait_ms: float = 0) -> bool:
        """Try to take the lock; ``wait_ms=0`` is one attempt, more lets the
        library retry in its own way for about that long. Return whether it
        was acquired (translate the library's "not acquired" exception)."""
        ...

    def release(self) -> bool | None:
        """Release the way the library's users do. Return what the library
        says (``True``/``False``), or ``None`` if it says nothing. Let its
        exceptions propagate: the audit records their type."""
        ...

    def extend(self, ttl_ms: int) -> bool | None:
        """Extend the lease; raise :class:`Unsupported` if the library cannot."""
        ...

    def token(self) -> int | None:
        """The fencing token of the current hold, or ``None`` if the library
        issues none."""
        ...

    def lost(self) -> bool | None:
        """What the library itself tells this holder, without a new request
        to Redis, about its hold: ``True`` it says the hold is gone, ``False``
        it says nothing is wrong, ``None`` it offers no such signal."""
        ...


@runtime_checkable
class Adapter(Protocol):
    """The lock library under audit, bound to the servers it was given.

    Attributes:
        name: what the report calls it, e.g. ``"redis-py Lock"``.
        version: the library's version, for the report.
        multi_master: ``True`` for a Redlock-style lock that uses every
            server; ``False`` for a single-instance lock (``servers[0]``).
        ttl_required: ``True`` when the library has no default lease because
            the TTL is a required argument; the audit then passes its own.

    An asyncio lock's adapter also sets ``asyncio = True`` and ``loop``, the
    running event loop (in a thread of its own) its holders use.
    """

    name: str
    version: str
    multi_master: bool
    ttl_required: bool

    def holder(self, key: str, ttl_ms: TtlSpec = DEFAULT, *, renew: bool = False) -> Holder:
        """A new lock object for ``key``. ``renew=True`` asks for the library's
        automatic renewal (raise :class:`Unsupported` if it has none)."""
        ...

    def close(self) -> None:
        """Close the clients the adapter created."""
        ...


AdapterFactory = Callable[[Sequence[Server]], Adapter]
"""``factory(servers) -> Adapter``: how the audit builds an adapter."""
