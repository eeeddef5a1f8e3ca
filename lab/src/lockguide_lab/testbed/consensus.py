"""Real consensus clusters: a three-member etcd cluster, a three-server ZooKeeper ensemble.

Like :class:`~lockguide_lab.testbed.RedisServer`, each member is a mirakuru
executor on free loopback ports, in a data directory of its own, so that the
lab can kill, freeze and restart one and see what the cluster does:

* :class:`EtcdCluster`: Debian's ``etcd`` (3.4), each member an
  ``HTTPExecutor`` that waits for ``/health`` (which answers 200 only once the
  cluster has a leader). Heartbeat 50 ms and election timeout 500 ms, so that
  the shortest lease is one second and an election takes well under one.
* :class:`ZooKeeperEnsemble`: Debian's ``zookeeper`` (3.8), each server a JVM
  (64 MB heap) run by a ``TCPExecutor`` whose start check asks the server's
  ``srvr`` command for its mode (leader or follower, not merely listening).
  ``tickTime`` 100 ms: sessions from 0.2 s to 4 s. ``forceSync=no`` unless
  ``force_sync=True`` (ZooKeeper's own default, which the benchmark uses):
  the tests' runs do not depend on the log reaching the disk.

The members start at once, in parallel (none can answer before a majority is
up), and :meth:`ConsensusCluster.kill` / :meth:`ConsensusCluster.restart`
fail and bring back one member; :meth:`ConsensusCluster.leader` says which
member leads now.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import IO, Any, Self

from lockguide_lab.testbed.process import LOOPBACK, ServerUnavailable

__all__ = [
    "ZOOKEEPER_JAR",
    "ConsensusCluster",
    "EtcdCluster",
    "HttpLink",
    "ZooKeeperEnsemble",
    "etcd_executable",
    "zookeeper_classpath",
]

#: Where Debian's ``zookeeper`` package puts the server (its manifest names the rest).
ZOOKEEPER_JAR = Path("/usr/share/java/zookeeper.jar")


def etcd_executable() -> str:
    """Path of ``etcd``; raises :class:`ServerUnavailable` when it is not on PATH."""
    exe = shutil.which("etcd")
    if exe is None:
        raise ServerUnavailable(
            "etcd is not on PATH (install it with: apt-get install etcd-server)"
        )
    return exe


def zookeeper_classpath() -> str:
    """The ZooKeeper server's class path; raises :class:`ServerUnavailable` when absent."""
    if not ZOOKEEPER_JAR.exists() or shutil.which("java") is None:
        raise ServerUnavailable(
            f"ZooKeeper ({ZOOKEEPER_JAR}) or java is missing "
            "(install them with: apt-get install zookeeper)"
        )
    return f"{ZOOKEEPER_JAR}"


def _free_ports(count: int) -> list[int]:
    """``count`` distinct free loopback ports."""
    try:
        import port_for
    except ImportError as error:  # pragma: no cover - a dependency of the lab
        raise ServerUnavailable("starting a cluster needs port-for") from error
    ports: list[int] = []
    while len(ports) < count:
        port = port_for.get_port(None)
        if port is not None and port not in ports:
            ports.append(port)
    return ports


class _Member:
    """One member: its executor, its log file, its ports."""

    def __init__(self, name: str, executor: Any, log: Path, client_port: int) -> None:
        self.name = name
        self.executor = executor
        self.log = log
        self.client_port = client_port
        self._log_file: IO[bytes] | None = None

    @property
    def running(self) -> bool:
        return bool(self.executor.running())

    @property
    def pid(self) -> int:
        process = self.executor.process
        if process is None:
            raise ServerUnavailable(f"{self.name} is not running")
        return int(process.pid)

    def start(self) -> None:
        self.executor.start()

    def kill(self) -> None:
        self.executor.kill(sig=signal.SIGKILL)

    def stop(self) -> None:
        with contextlib.suppress(Exception):
            if self.running:
                os.kill(self.pid, signal.SIGCONT)
        with contextlib.suppress(Exception):
            self.executor.stop()


class ConsensusCluster:
    """Three members of one consensus system on loopback; see the module.

    Subclasses make the members; this class starts, kills, restarts and stops them.
    """

    kind = ""

    def __init__(self, base: Path, size: int = 3) -> None:
        if size < 1:
            raise ValueError("a cluster needs at least one member")
        self.base = base
        self.size = size
        self.members: list[_Member] = []

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> None:
        """Start every member at once and wait until each answers as part of a quorum."""
        self._start_members(list(range(self.size)))

    def _start_members(self, indexes: list[int]) -> None:
        with ThreadPoolExecutor(max_workers=len(indexes)) as pool:
            for future in [pool.submit(self.members[i].start) for i in indexes]:
                future.result()

    def kill(self, index: int) -> None:
        """``SIGKILL`` member ``index``: no shutdown, its peers see it vanish."""
        self.members[index].kill()

    def restart(self, *indexes: int) -> None:
        """Start the killed members ``indexes`` again on their ports and data; wait for them."""
        self._start_members(list(indexes))

    def ensure_running(self) -> None:
        """Restart whatever member a run left dead."""
        dead = [i for i, m in enumerate(self.members) if not m.running]
        if dead:
            self._start_members(dead)

    def stop(self) -> None:
        """Stop every member for good."""
        for member in self.members:
            member.stop()

    def __enter__(self) -> Self:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- what it is doing -----------------------------------------------------------------

    def leader(self) -> int:
        """The index of the member that leads now."""
        raise NotImplementedError

    @property
    def running(self) -> list[int]:
        """The indexes of the members alive now."""
        return [i for i, m in enumerate(self.members) if m.running]


class EtcdCluster(ConsensusCluster):
    """Three ``etcd`` members (``etcd-0`` .. ``etcd-2``); :attr:`endpoints` for clients."""

    kind = "etcd"

    def __init__(self, base: Path, size: int = 3, *, executable: str | None = None) -> None:
        super().__init__(base, size)
        from mirakuru import HTTPExecutor

        exe = executable or etcd_executable()
        ports = _free_ports(2 * size)
        client_ports, peer_ports = ports[:size], ports[size:]
        names = [f"etcd-{i}" for i in range(size)]
        initial = ",".join(
            f"{n}=http://{LOOPBACK}:{p}" for n, p in zip(names, peer_ports, strict=True)
        )
        token = f"lockguide-{os.getpid()}-{client_ports[0]}"
        for i, name in enumerate(names):
            datadir = base / name
            datadir.mkdir(parents=True, exist_ok=True)
            client = f"http://{LOOPBACK}:{client_ports[i]}"
            peer = f"http://{LOOPBACK}:{peer_ports[i]}"
            command = [
                exe,
                f"--name={name}",
                f"--data-dir={datadir / 'data'}",
                f"--listen-client-urls={client}",
                f"--advertise-client-urls={client}",
                f"--listen-peer-urls={peer}",
                f"--initial-advertise-peer-urls={peer}",
                f"--initial-cluster={initial}",
                f"--initial-cluster-token={token}",
                "--initial-cluster-state=new",
                "--heartbeat-interval=50",
                "--election-timeout=500",
                "--snapshot-count=100000",
                "--log-level=warn",
                "--logger=zap",
            ]
            log = datadir / "etcd.log"
            executor = HTTPExecutor(
                command,
                url=f"{client}/health",
                method="GET",
                status=200,
                timeout=60,
                stdout=log.open("ab"),
                stderr=subprocess.STDOUT,
                envvars={"ETCD_UNSUPPORTED_ARCH": "", "PATH": os.environ.get("PATH", "")},
            )
            self.members.append(_Member(name, executor, log, client_ports[i]))

    @property
    def endpoints(self) -> list[str]:
        """Every member's client URL, ``http://127.0.0.1:PORT``."""
        return [f"http://{LOOPBACK}:{m.client_port}" for m in self.members]

    def endpoint(self, index: int) -> str:
        """Member ``index``'s client URL."""
        return self.endpoints[index]

    def _post(self, index: int, path: str, body: dict[str, Any]) -> dict[str, Any]:
        request = urllib.request.Request(
            self.endpoint(index) + path,
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=2.0) as response:
            result: dict[str, Any] = json.loads(response.read())
            return result

    def leader(self, timeout_s: float = 10.0) -> int:
        """The live member that leads (waiting out an election, up to ``timeout_s``)."""
        deadline = time.monotonic() + timeout_s
        while True:
            ids: dict[str, int] = {}
            leads: set[str] = set()
            for i in self.running:
                with contextlib.suppress(OSError, KeyError, ValueError):
                    status = self._post(i, "/v3/maintenance/status", {})
                    ids[status["header"]["member_id"]] = i
                    leads.add(status.get("leader", ""))
            if len(leads) == 1 and (lead := leads.pop()) in ids:
                return ids[lead]
            if time.monotonic() > deadline:
                raise ServerUnavailable("no live etcd member is the leader all agree on")
            time.sleep(0.05)

    def key_exists(self, key: str) -> bool:
        """Whether ``key`` exists now (a linearizable read through any live member)."""
        encoded = base64.b64encode(key.encode()).decode()
        for i in self.running:
            with contextlib.suppress(OSError):
                return bool(self._post(i, "/v3/kv/range", {"key": encoded}).get("kvs"))
        raise ServerUnavailable("no etcd member answered")

    def wipe(self, prefix: str = "") -> None:
        """Delete every key under ``prefix`` (all keys by default)."""
        start = base64.b64encode(prefix.encode() or b"\0").decode()
        end = base64.b64encode(b"\0").decode()
        if prefix:
            last = prefix.encode()
            end = base64.b64encode(last[:-1] + bytes([last[-1] + 1])).decode()
        self._post(self.running[0], "/v3/kv/deleterange", {"key": start, "range_end": end})


class _ZooKeeperExecutor:
    """A mirakuru ``TCPExecutor`` whose start check is ``srvr`` naming a mode."""

    @staticmethod
    def make(command: list[str], port: int, log: Path, envvars: dict[str, str]) -> Any:
        from mirakuru import TCPExecutor

        class Executor(TCPExecutor):
            def after_start_check(self) -> bool:
                return four_letter(port, "srvr").find("Mode: ") >= 0

        return Executor(
            command,
            host=LOOPBACK,
            port=port,
            timeout=60,
            stdout=log.open("ab"),
            stderr=subprocess.STDOUT,
            envvars=envvars,
        )


def four_letter(port: int, word: str, timeout: float = 1.0) -> str:
    """A ZooKeeper four-letter command's answer ('' when the server does not answer)."""
    try:
        with socket.create_connection((LOOPBACK, port), timeout=timeout) as sock:
            sock.sendall(word.encode())
            chunks = []
            while chunk := sock.recv(4096):
                chunks.append(chunk)
            return b"".join(chunks).decode("utf-8", "replace")
    except OSError:
        return ""


class ZooKeeperEnsemble(ConsensusCluster):
    """Three ZooKeeper servers (``zk-0`` .. ``zk-2``); :attr:`hosts` for kazoo."""

    kind = "zookeeper"
    #: ZooKeeper's tick: sessions may last from 2 to 20 ticks.
    TICK_MS = 100

    def __init__(self, base: Path, size: int = 3, *, force_sync: bool = False) -> None:
        super().__init__(base, size)
        self.force_sync = force_sync
        classpath = zookeeper_classpath()
        ports = _free_ports(3 * size)
        client_ports = ports[:size]
        servers = [
            f"server.{i + 1}={LOOPBACK}:{ports[size + i]}:{ports[2 * size + i]}"
            for i in range(size)
        ]
        for i in range(size):
            datadir = base / f"zk-{i}"
            (datadir / "data").mkdir(parents=True, exist_ok=True)
            (datadir / "data" / "myid").write_text(f"{i + 1}\n")
            config = datadir / "zoo.cfg"
            config.write_text(
                "\n".join(
                    [
                        f"tickTime={self.TICK_MS}",
                        "initLimit=50",
                        "syncLimit=10",
                        f"dataDir={datadir / 'data'}",
                        f"clientPort={client_ports[i]}",
                        f"clientPortAddress={LOOPBACK}",
                        "4lw.commands.whitelist=srvr,ruok,mntr",
                        "admin.enableServer=false",
                        # ZooKeeper's default is yes (fsync the log before acknowledging);
                        # the tests turn it off for speed, the benchmark states which.
                        f"forceSync={'yes' if force_sync else 'no'}",
                        "preAllocSize=1024",
                        *servers,
                        "",
                    ]
                )
            )
            command = [
                "java",
                "-Xms32m",
                "-Xmx64m",
                "-XX:+UseSerialGC",
                "-XX:TieredStopAtLevel=1",
                "-Xshare:auto",
                "-Dzookeeper.log.dir=" + str(datadir),
                "-Dzookeeper.root.logger=WARN,CONSOLE",
                "-cp",
                classpath,
                "org.apache.zookeeper.server.quorum.QuorumPeerMain",
                str(config),
            ]
            log = datadir / "zookeeper.log"
            executor = _ZooKeeperExecutor.make(
                command, client_ports[i], log, {"PATH": os.environ.get("PATH", "")}
            )
            self.members.append(_Member(f"zk-{i}", executor, log, client_ports[i]))

    @property
    def hosts(self) -> str:
        """The connection string kazoo takes: ``127.0.0.1:P0,127.0.0.1:P1,...``."""
        return ",".join(f"{LOOPBACK}:{m.client_port}" for m in self.members)

    def host(self, index: int) -> str:
        """Member ``index``'s address alone."""
        return f"{LOOPBACK}:{self.members[index].client_port}"

    def leader(self) -> int:
        for i in self.running:
            if "Mode: leader" in four_letter(self.members[i].client_port, "srvr"):
                return i
        raise ServerUnavailable("no ZooKeeper server reports being the leader")

    def wait_serving(self, timeout_s: float = 30.0) -> None:
        """Wait until every live server leads or follows again (after a restart, an election)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            modes = [four_letter(self.members[i].client_port, "srvr") for i in self.running]
            if all("Mode: leader" in m or "Mode: follower" in m for m in modes):
                return
            time.sleep(0.05)
        raise ServerUnavailable("the ZooKeeper ensemble did not form a quorum in time")


class HttpLink:
    """One etcd member behind a loopback HTTP forwarder that can lose chosen replies.

    :class:`~lockguide_lab.testbed.Link` forwards bytes and reads Redis's
    protocol; etcd's gateway speaks HTTP, and losing *one* reply (the
    transaction's, not the lease grant's before it) needs to know where one
    request ends. This forwarder does: every request is sent on to the member
    and its reply read; for a path that :meth:`lose` names, the reply is then
    dropped and the client's connection closed, so the cluster performed the
    request and the client never hears of it.

    Attributes:
        url: the address clients use instead of the member's.
        lost: the paths whose reply was dropped, in order, with the time
            (``time.monotonic``) the member answered.
    """

    def __init__(self, target: str) -> None:
        import http.client
        import http.server
        import threading
        import urllib.parse

        self.target = target
        self._losing: dict[str, int] = {}
        self._mutex = threading.Lock()
        self.lost: list[tuple[str, float]] = []
        link = self
        parsed = urllib.parse.urlsplit(target)
        host, port = parsed.hostname or LOOPBACK, parsed.port or 80

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                upstream = http.client.HTTPConnection(host, port, timeout=10)
                try:
                    upstream.request(
                        "POST", self.path, body=body, headers={"Content-Type": "application/json"}
                    )
                    reply = upstream.getresponse()
                    data = reply.read()
                finally:
                    upstream.close()
                if link._take(self.path):
                    self.close_connection = True  # the reply is dropped: the client sees a reset
                    return
                self.send_response(reply.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                return

        self._server = http.server.ThreadingHTTPServer((LOOPBACK, 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://{LOOPBACK}:{self._server.server_address[1]}"
        threading.Thread(
            target=self._server.serve_forever, name="lockguide-http-link", daemon=True
        ).start()

    def lose(self, path: str, times: int = 1) -> None:
        """Drop the replies to the next ``times`` requests for ``path`` (``/v3/kv/txn``)."""
        with self._mutex:
            self._losing[path] = self._losing.get(path, 0) + times

    def _take(self, path: str) -> bool:
        with self._mutex:
            left = self._losing.get(path, 0)
            if left <= 0:
                return False
            self._losing[path] = left - 1
            self.lost.append((path, time.monotonic()))
            return True

    def close(self) -> None:
        """Stop forwarding."""
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@contextlib.contextmanager
def clusters(base: Path) -> Iterator[tuple[EtcdCluster, ZooKeeperEnsemble]]:
    """Both clusters, started together; stopped on exit."""
    etcd = EtcdCluster(base / "etcd")
    zookeeper = ZooKeeperEnsemble(base / "zookeeper")
    with etcd, zookeeper:
        yield etcd, zookeeper
