"""Lua scripts shipped as ``.lua`` files, sent once, then called by SHA1."""

from __future__ import annotations

import hashlib
from importlib import resources
from typing import Any

import redis
from redis.exceptions import NoScriptError


class LuaScript:
    """A script from ``lockguide/scripts/``, run with ``EVALSHA``.

    The SHA1 is computed locally, so the first call costs one ``EVALSHA``. When
    the server answers ``NOSCRIPT`` (first use on that server, after a restart or
    after ``SCRIPT FLUSH``) the source is loaded with ``SCRIPT LOAD`` and the call
    is repeated once. Redis runs a script atomically, which is what makes
    compare-and-delete a single indivisible step.
    """

    def __init__(self, filename: str) -> None:
        self.filename = filename
        self.source = resources.files("lockguide.scripts").joinpath(filename).read_text("utf-8")
        self.sha = hashlib.sha1(self.source.encode("utf-8"), usedforsecurity=False).hexdigest()

    def __call__(
        self, client: redis.Redis, keys: tuple[str, ...], args: tuple[str | int, ...]
    ) -> Any:
        """Run the script on ``client`` and return its reply."""
        try:
            return client.evalsha(self.sha, len(keys), *keys, *args)
        except NoScriptError:
            client.script_load(self.source)
            return client.evalsha(self.sha, len(keys), *keys, *args)


RELEASE = LuaScript("release.lua")
EXTEND = LuaScript("extend.lua")
