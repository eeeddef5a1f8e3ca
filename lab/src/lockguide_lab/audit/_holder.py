"""A lock holder in its own process, driven over stdin/stdout by the pause check.

The pause check stops this whole process with ``SIGSTOP`` (its threads too, as
a long garbage-collection pause or a stalled VM would), lets the lease run out,
resumes it with ``SIGCONT`` and asks what the library tells it.
The drift and TTL checks use it too, with its connections through links that
hold, or never deliver, the replies to its acquire.
Protocol: prints ``acquired True|False`` (or ``acquired raised ErrorType``);
then answers ``lost`` with the holder's ``lost()`` and ``release`` with how
the release ended; ``exit`` quits.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time

from lockguide_lab.audit.adapter import DEFAULT, Holder
from lockguide_lab.audit.servers import server_at
from lockguide_lab.audit.session import describe_call, resolve_factory

#: How long a forked child may take to release before it is killed (``SIGALRM``).
CHILD_LIMIT_S = 5


def fork_release(holder: Holder) -> str:
    """Fork; the child releases (as a ``with`` block that both processes leave would) and
    reports how that ended; the parent waits for it and goes on holding."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never return into the parent's code
        try:
            os.close(read_end)
            signal.alarm(CHILD_LIMIT_S)
            said, _, _ = describe_call(holder.release)
            os.write(write_end, said.encode())
        finally:
            os._exit(0)
    os.close(write_end)
    os.waitpid(pid, 0)
    with os.fdopen(read_end, "rb") as answer:
        said = answer.read().decode()
    return said or f"hung (killed after {CHILD_LIMIT_S} s)"


def main(argv: list[str]) -> int:
    spec = json.loads(argv[0])
    factory = resolve_factory(spec["factory"])
    servers = [server_at(label, host, port) for label, host, port in spec["servers"]]
    adapter = factory(servers)
    ttl = spec["ttl_ms"]
    holder = adapter.holder(
        spec["key"], ttl if ttl == DEFAULT else int(ttl), renew=bool(spec.get("renew"))
    )
    said, _, _ = describe_call(lambda: holder.acquire(0))
    print("acquired " + said.removeprefix("returned "), flush=True)
    for line in sys.stdin:
        command = line.strip()
        if command == "lost":
            # A library that reports loss from a background thread may need a
            # moment after the process resumes; give it up to a second.
            deadline = time.monotonic() + 1.0
            lost = holder.lost()
            while lost is False and time.monotonic() < deadline:
                time.sleep(0.02)
                lost = holder.lost()
            print(repr(lost), flush=True)
        elif command == "release":
            said, _, _ = describe_call(holder.release)
            print(said, flush=True)
        elif command == "fork-release":
            print(fork_release(holder), flush=True)
        elif command == "exit":
            break
    adapter.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
