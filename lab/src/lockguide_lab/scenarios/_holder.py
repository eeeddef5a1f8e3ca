"""Client A of the consensus runs, in a process of its own so that it can be frozen.

``python -m lockguide_lab.scenarios._holder CONFIG`` takes the lock, checks it,
prints its token (one JSON line), then obeys one command per line on stdin:
``write VALUE`` (with its token, to the run's SQLite resource), ``release``,
``quit``. Between the check and the write the parent freezes it with
``SIGSTOP``: exactly where a paused holder stops.
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import Any

from lockguide.errors import LockError
from lockguide_lab.scenarios.consensus import SqlResource, make_lock


def _say(message: dict[str, Any]) -> None:
    print(json.dumps(message), flush=True)


def main() -> None:
    config = json.loads(sys.argv[1])
    logging.getLogger("kazoo").setLevel(logging.CRITICAL)  # its reconnects are the story
    clients: list[Any] = []
    lock = make_lock(config["system"], config["address"], config["key"], config["ttl_ms"], clients)
    if not lock.acquire(timeout_ms=10_000):
        _say({"acquired": False})
        return
    lock.check()  # the holder checks its lock before writing, as it should...
    resource = SqlResource(Path(config["db"]), fenced=config["fenced"])
    _say({"acquired": True, "token": lock.token})
    for line in sys.stdin:  # ...and is frozen here, between the check and the write
        command, _, argument = line.rstrip("\n").partition(" ")
        if command == "write":
            accepted, detail = resource.write(lock.token, argument)
            _say({"accepted": accepted, "detail": detail})
        elif command == "release":
            try:
                lock.release()
                _say({"ok": True})
            except LockError as error:
                reason = getattr(error, "reason", "the lease had ended")
                _say({"ok": False, "detail": f"{type(error).__name__}: {reason}"})
        else:
            break
    resource.close()
    for client in clients:
        client.stop()
        client.close()
    _say({"bye": True})


if __name__ == "__main__":
    main()
