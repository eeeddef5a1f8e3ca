"""One audit session: its servers, the adapters and holders a check makes, what they hold."""

from __future__ import annotations

import contextlib
import gc
import importlib
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, cast

from lockguide_lab.audit.adapter import DEFAULT, Adapter, AdapterFactory, Holder, Server, TtlSpec
from lockguide_lab.audit.servers import server_at
from lockguide_lab.testbed.link import Link

__all__ = ["AuditSession", "CheckError", "NotRunnable", "resolve_factory"]


class CheckError(RuntimeError):
    """A check could not reach the state it needs (reported as an error row)."""


class NotRunnable(RuntimeError):
    """A check that needs something this backend lacks (reported as "not run")."""


def resolve_factory(spec: str) -> AdapterFactory:
    """Import ``MODULE:FACTORY`` and return the factory."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"expected MODULE:FACTORY, got {spec!r}")
    target: Any = importlib.import_module(module_name)
    for part in attr.split("."):
        target = getattr(target, part)
    if not callable(target):
        raise TypeError(f"{spec} is not callable")
    factory: AdapterFactory = target
    return factory


#: How long :meth:`AuditSession.settle` waits for a release's last requests.
SETTLE_S = 1.0


@dataclass(frozen=True)
class LockKey:
    """One key the lock created on one server, with its value and TTL."""

    server: int
    name: bytes
    value: bytes | None
    pttl: int


class AuditSession:
    """One audit's servers and the adapters and holders a check creates on them."""

    def __init__(
        self,
        factory: AdapterFactory,
        servers: Sequence[Server],
        *,
        factory_spec: str | None = None,
        namespace: str = "",
    ) -> None:
        self.factory = factory
        self.servers = list(servers)
        self.factory_spec = factory_spec
        #: Added to the key names a check picks, so that sessions sharing the servers at the
        #: same moment (the wait rows of several locks, run at once) never meet on a key.
        self.namespace = namespace
        #: Whether :meth:`cleanup` empties the servers; a session sharing them with others
        #: at the same moment must not (the others' locks are held there).
        self.flushes = True
        self.admins = [server.connect() for server in self.servers]
        self._adapters: list[Adapter] = []
        self._holders: list[Holder] = []
        self._links: list[Link] = []

    # -- what the servers can do -------------------------------------------------------

    @property
    def real(self) -> bool:
        """Every server is a real process with an address (links, processes, CLIENT KILL)."""
        return all(server.address is not None for server in self.servers)

    def require_real(self, what: str) -> None:
        if not self.real:
            raise NotRunnable(f"not run on this backend: {what} needs real redis-server processes")

    # -- adapters and holders -------------------------------------------------------------

    def adapter(self, servers: Sequence[Server] | None = None) -> Adapter:
        adapter = self.factory(list(servers if servers is not None else self.servers))
        self._adapters.append(adapter)
        return adapter

    def holder(
        self, adapter: Adapter, key: str, ttl_ms: TtlSpec = DEFAULT, *, renew: bool = False
    ) -> Holder:
        holder = adapter.holder(key, ttl_ms, renew=renew)
        self._holders.append(holder)
        return holder

    def linked(self) -> tuple[list[Link], list[Server]]:
        """A :class:`~lockguide_lab.testbed.link.Link` in front of every server, and
        servers that point at the links."""
        self.require_real("a TCP link in front of each server")
        links = []
        servers = []
        for server in self.servers:
            assert server.address is not None
            link = Link(server.address)
            self._links.append(link)
            links.append(link)
            servers.append(server_at(f"{server.label}-via-link", *link.address))
        return links, servers

    def cleanup(self) -> None:
        """Release what is still held, close adapters and links, empty the servers."""
        for holder in reversed(self._holders):
            with contextlib.suppress(Exception):
                holder.release()
        self._holders.clear()
        for adapter in self._adapters:
            with contextlib.suppress(Exception):
                adapter.close()
        self._adapters.clear()
        for link in self._links:
            link.close()
        self._links.clear()
        # Connections a lock keeps for its clients' lifetime (lockguide's bounded pools
        # are keyed weakly by client) go with the clients, once a collection finds them:
        # without it a long session runs out of descriptors.
        gc.collect()
        if self.flushes:
            self.flush()

    def close(self) -> None:
        self.cleanup()
        for admin in self.admins:
            with contextlib.suppress(Exception):
                admin.close()

    def flush(self) -> None:
        for admin in self.admins:
            admin.flushall()

    # -- what the servers hold -------------------------------------------------------------

    def snapshot(self) -> list[set[bytes]]:
        """The key names on every server."""
        return [set(cast(list[bytes], admin.keys("*"))) for admin in self.admins]

    def new_keys(self, before: list[set[bytes]]) -> list[LockKey]:
        """Keys that exist now and did not before (the lock's own keys while held)."""
        found = []
        for i, admin in enumerate(self.admins):
            for name in sorted(set(cast(list[bytes], admin.keys("*"))) - before[i]):
                value = cast(
                    bytes | None, admin.get(name) if admin.type(name) == b"string" else None
                )
                found.append(LockKey(i, name, value, int(admin.pttl(name))))
        return found

    def acquire_observed(
        self, holder: Holder, wait_ms: float = 0
    ) -> tuple[bool, list[LockKey], list[set[bytes]]]:
        """Acquire and return (acquired, the keys that appeared, the snapshot before)."""
        before = self.snapshot()
        got = holder.acquire(wait_ms)
        return got, (self.new_keys(before) if got else []), before

    def still_there(self, keys: Sequence[LockKey]) -> bool:
        """Whether every key still holds the value it had."""
        return all(self.admins[k.server].get(k.name) == k.value for k in keys)

    def end_hold(self, keys: Sequence[LockKey]) -> str:
        """Make the server forget the current holder, as an expired lease does.

        Key-based locks: the lock's keys get ``PEXPIRE 1`` (the lease runs out
        now instead of later; the holder is not told, exactly as with a real
        expiry). A lock with no key (held by a pub/sub connection) has that
        connection killed with ``CLIENT KILL TYPE pubsub``, which needs a real
        server.
        """
        if keys:
            for k in keys:
                self.admins[k.server].pexpire(k.name, 1)
            deadline = time.monotonic() + 2.0
            while any(self.admins[k.server].exists(k.name) for k in keys):
                if time.monotonic() > deadline:
                    raise CheckError("the lock's keys did not expire after PEXPIRE 1")
                time.sleep(0.002)
            return "its keys were expired on the server (PEXPIRE 1)"
        self.require_real("ending a key-less (pub/sub) hold with CLIENT KILL")
        for admin in self.admins:
            admin.client_kill_filter(_type="pubsub")
        time.sleep(0.2)
        return "its pub/sub connection was killed (CLIENT KILL TYPE pubsub)"

    def occupy(self, names: Sequence[bytes], servers: Sequence[int], ttl_ms: int) -> None:
        """Write a foreign value under the lock's key names on some servers."""
        for i in servers:
            for name in names:
                self.admins[i].set(name, OCCUPANT, px=ttl_ms)

    def warm(self, adapter: Adapter, key: str) -> None:
        """One acquire and release on ``key`` before observing anything.

        Keys that outlive a hold (a fencing counter, a notification list) then
        exist already, so the keys that appear at the next acquire are the
        lock's own.
        """
        holder = self.holder(adapter, key, 10_000)
        if not holder.acquire(0):
            raise CheckError("could not acquire an uncontended lock")
        holder.release()

    def lock_key_names(self, adapter: Adapter, key: str) -> list[bytes]:
        """Learn the key names the lock uses by one uncontended acquire and release."""
        holder = self.holder(adapter, key, 10_000)
        got, keys, _ = self.acquire_observed(holder)
        if not got:
            raise CheckError("could not acquire an uncontended lock")
        holder.release()
        self.settle(keys)
        names = sorted({k.name for k in keys})
        if not names:
            raise NotRunnable("not applicable: the lock keeps no key on the servers")
        return names

    def settle(self, keys: Sequence[LockKey], within_s: float = SETTLE_S) -> None:
        """Wait until a release has reached every server it is going to reach.

        A Redlock may return from its release once a majority answered and leave the
        other masters' requests running (pottery does): on a loaded machine they pass the
        links a while later, and a check that starts observing then would take one for
        its own traffic (the retry row once learnt pottery's release script as its
        acquire). Settled: each of ``keys`` is, with its value, either on every server it
        was on or on none (a key that outlives a hold, a fencing counter, stays on all)."""
        spread: dict[tuple[bytes, bytes | None], set[int]] = {}
        for k in keys:
            spread.setdefault((k.name, k.value), set()).add(k.server)
        give_up = time.monotonic() + within_s
        while True:
            if all(
                len({i for i in on if self._holds(i, name, value)}) in (0, len(on))
                for (name, value), on in spread.items()
            ):
                return
            if time.monotonic() > give_up:
                return  # a lock that leaves keys behind: the checks say so themselves
            time.sleep(0.002)

    def _holds(self, server: int, name: bytes, value: bytes | None) -> bool:
        """Whether ``server`` has ``name`` (with ``value``, for a string key)."""
        if value is None:
            return bool(self.admins[server].exists(name))
        return bool(self.admins[server].get(name) == value)

    def acquire_matcher(
        self, links: Sequence[Link], adapter: Adapter, key: str, names: Sequence[bytes]
    ) -> Callable[[list[bytes]], bool]:
        """What the lock's acquire sends to take the key, learnt from one uncontended acquire
        through ``links``: a ``SET`` of one of ``names``, or (a lock that acquires with a
        script, as aioredlock does) that same script (same ``EVALSHA`` digest or ``EVAL``
        text) on one of ``names``. The release script, another digest, is never matched.

        The command learnt is the first on master 0 that carries the value this acquire
        wrote, not merely the first that names the key: an earlier holder's late release
        names it too (see :meth:`settle`)."""
        wanted = set(names)
        seen: list[list[bytes]] = []

        def observe(command: list[bytes], _: float) -> None:
            if any(arg in wanted for arg in command[1:]):
                seen.append(command)

        links[0].observers.append(observe)
        try:
            holder = self.holder(adapter, key, 10_000)
            got, keys, _ = self.acquire_observed(holder)
            if got:
                holder.release()
                self.settle(keys)
        finally:
            links[0].observers.remove(observe)
        written = {k.value for k in keys if k.name in wanted and k.value is not None}
        first = next((c for c in seen if written & set(c[1:])), seen[0] if seen else [b"SET"])
        verb = first[0].upper()
        if verb == b"SET" or len(first) < 2:
            return lambda c: len(c) > 1 and c[0].upper() == b"SET" and c[1] in wanted
        script = first[1]
        return lambda c: (
            len(c) > 2
            and c[0].upper() == verb
            and c[1] == script
            and any(a in wanted for a in c[2:])
        )


OCCUPANT = b"audit-occupant"


def describe_call(call: Callable[[], object]) -> tuple[str, object | None, BaseException | None]:
    """Run ``call`` and describe how it ended, for a report."""
    try:
        result = call()
    except Exception as error:
        return f"raised {type(error).__name__}", None, error
    if result is None:
        return "returned without a word", None, None
    return f"returned {result!r}", result, None


@contextlib.contextmanager
def thread_errors() -> Iterator[list[BaseException]]:
    """Collect exceptions that end background threads while the block runs."""
    import threading

    seen: list[BaseException] = []
    original = threading.excepthook

    def hook(args: threading.ExceptHookArgs) -> None:
        if args.exc_value is not None:
            seen.append(args.exc_value)

    threading.excepthook = hook
    try:
        yield seen
    finally:
        threading.excepthook = original
