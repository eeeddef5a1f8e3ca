"""A holder of the lock under audit in its own process (see :mod:`._holder`).

A ``SIGSTOP`` then pauses all of it, threads included, as a long garbage
collection or a stalled VM would, and a ``SIGKILL`` crashes it between two
commands.
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import signal
import subprocess
import sys
from collections.abc import Sequence

from lockguide_lab.audit.adapter import Server, TtlSpec
from lockguide_lab.audit.session import AuditSession, CheckError, NotRunnable

__all__ = ["HolderProcess"]


class HolderProcess:
    """Start a holder process that acquires ``key`` on ``servers`` at once.

    Its first line (read with :meth:`ask` ``("")`` or :meth:`first_line`) says how
    the acquire ended: ``acquired True``, ``acquired False`` or ``acquired raised X``.
    """

    def __init__(
        self,
        session: AuditSession,
        key: str,
        ttl_ms: TtlSpec,
        servers: Sequence[Server] | None = None,
        *,
        renew: bool = False,
    ) -> None:
        if session.factory_spec is None:
            raise NotRunnable(
                "not run: the adapter factory has no importable MODULE:FACTORY name, so no "
                "second process can load it"
            )
        spec = {
            "factory": session.factory_spec,
            "servers": [
                [s.label, *(s.address or ("", 0))]
                for s in (servers if servers is not None else session.servers)
            ],
            "key": key,
            "ttl_ms": ttl_ms,
            "renew": renew,
        }
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([p for p in sys.path if p])
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "lockguide_lab.audit._holder", json.dumps(spec)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def first_line(self, timeout_s: float) -> str | None:
        """The acquire's outcome, or ``None`` if the process said nothing within ``timeout_s``
        (or died first)."""
        assert self.proc.stdout is not None
        # A selector, not select.select(): a long audit session may hold descriptors past 1024.
        with selectors.DefaultSelector() as selector:
            selector.register(self.proc.stdout, selectors.EVENT_READ)
            if not selector.select(timeout_s):
                return None
        return self.proc.stdout.readline().strip() or None

    def ask(self, line: str) -> str:
        assert self.proc.stdin is not None
        assert self.proc.stdout is not None
        if line:
            self.proc.stdin.write(line + "\n")
            self.proc.stdin.flush()
        answer = self.proc.stdout.readline().strip()
        if not answer:
            raise CheckError(f"the holder process ended early (exit {self.proc.poll()})")
        return answer

    def close(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(Exception):
                os.kill(self.proc.pid, signal.SIGCONT)
            with contextlib.suppress(Exception):
                self.ask("exit")
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                with contextlib.suppress(Exception):
                    stream.close()
