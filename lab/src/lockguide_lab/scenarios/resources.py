"""The protected resource a scenario's clients write: what each kind refuses, if anything."""

from __future__ import annotations

from typing import TYPE_CHECKING

import redis

from lockguide.errors import BadArgument
from lockguide.fencing import FencedStore, SqlFencedStore
from lockguide.versioned import VersionedValue

if TYPE_CHECKING:
    from lockguide_lab.scenarios.actor import Actor

__all__ = ["FencedResource", "PlainResource", "Resource", "VersionedResource", "fenced_write"]


def fenced_write(store: FencedStore | SqlFencedStore, token: int, value: str) -> tuple[bool, str]:
    """``store.try_write(token, value)``: (accepted, detail for the timeline)."""
    result = store.try_write(token, value)
    if result.accepted:
        return True, f"token {token}"
    return False, f"token {token}, but the resource has accepted token {result.highest}"


class Resource:
    """The protected resource: a value that clients write. Subclasses decide what is refused."""

    name = "resource"

    def write(self, actor: Actor, value: str) -> tuple[bool, str]:
        """Try to store ``value`` for ``actor``; return (accepted, detail for the timeline)."""
        raise NotImplementedError

    def read(self) -> str | None:
        """The value stored now (``None`` before any write)."""
        raise NotImplementedError


class PlainResource(Resource):
    """A value in a Redis hash that accepts every write: the resource most code has."""

    name = "unfenced resource"

    def __init__(self, client: redis.Redis, key: str) -> None:
        self._client = client
        self._key = key

    def write(self, actor: Actor, value: str) -> tuple[bool, str]:
        self._client.hset(self._key, "value", value)
        return True, "nothing is checked"

    def read(self) -> str | None:
        raw = self._client.hget(self._key, "value")
        return raw.decode("utf-8") if isinstance(raw, bytes) else None


class FencedResource(Resource):
    """A :class:`~lockguide.FencedStore`: a write needs a token above every accepted one."""

    name = "fenced resource"

    def __init__(self, client: redis.Redis, key: str) -> None:
        self.store = FencedStore(client, key)

    def write(self, actor: Actor, value: str) -> tuple[bool, str]:
        token = actor.token
        if token is None:
            raise BadArgument(f"{actor.name} has no fencing token: use a FencedLock")
        return fenced_write(self.store, token, value)

    def read(self) -> str | None:
        return self.store.read().value


class VersionedResource(Resource):
    """A :class:`~lockguide.VersionedValue`: a write must name the version its writer read.

    Each client reads the value and its version when it starts its work
    (:meth:`Actor.read`); its write is a compare-and-set on that version, so a
    write made after someone else's has moved the version is refused, whatever
    the lock believed. The check is the resource's, not the lock's.
    """

    name = "versioned resource"

    def __init__(self, client: redis.Redis, key: str) -> None:
        self.value = VersionedValue(client, key)
        self._read: dict[str, int] = {}

    def begin(self, actor: Actor) -> int:
        """Read the version ``actor`` will write against; return it."""
        version = self.value.read().version
        self._read[actor.name] = version
        return version

    def write(self, actor: Actor, value: str) -> tuple[bool, str]:
        expected = self._read.get(actor.name)
        if expected is None:
            raise BadArgument(f"{actor.name} has not read the resource: call its read() first")
        result = self.value.compare_and_set(expected, value)
        if result.accepted:
            self._read[actor.name] = result.version
            return True, f"compare-and-set on version {expected}: now version {result.version}"
        return False, (
            f"compare-and-set on version {expected}, but the resource is at version "
            f"{result.version}: someone wrote since {actor.name} read it"
        )

    def read(self) -> str | None:
        return self.value.read().value
