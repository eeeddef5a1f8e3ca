"""The Redlock rows about time: drift accounted, and elapsed time on a monotonic clock.

Both hold the replies to the lock's ``SET`` at every master's
:class:`~lockguide_lab.testbed.link.Link` until all have answered, then let
them through and move the clocks forward in one step (:class:`ReplyGate`),
while any thread that reads a moved clock waits for that step to finish. The
library then finds every reply waiting and its clock moved on, as after a
pause of its own process: no reply was late, so a per-master timeout has
nothing to object to, and only its account of the elapsed time can refuse
the lock.

The clock moved is one :class:`~lockguide_lab.testbed.clock.VirtualClock`,
flowing with real time: lockguide's locks read it through their ``clock=``
argument (the audit's adapters pass the process's clock, looked up at each
call), and every other library through
:class:`~lockguide_lab.testbed.clock.ProcessClocks`, which makes the ``time``
module's clocks read it.
"""

from __future__ import annotations

import contextlib
import socket
import threading

from lockguide.validity import drift_ms
from lockguide_lab.audit.checks.common import DRIFT_ROOM_MS, DRIFT_TTL_MS, redlock_only, row
from lockguide_lab.audit.report import Row, Status
from lockguide_lab.audit.session import AuditSession, CheckError
from lockguide_lab.testbed.clock import ProcessClocks, VirtualClock, real_now

__all__ = ["ReplyGate", "check_drift", "check_monotonic"]


class ReplyGate:
    """Hold the replies to the lock's ``SET`` on every link, then release them at once.

    The links report each watched request (:meth:`request_seen`) and hand
    over its reply (:meth:`hold`). When every master has answered, the thread
    with the last reply sends all of them to the client and jumps the clock,
    inside :meth:`VirtualClock.held`: the library wakes to find every reply
    waiting and its clocks advanced so that the attempt appears to have lasted
    ``elapsed_s`` since its first ``SET`` left, whatever the holding cost.

    A library that sends its ``SET`` s one after another (waiting for each
    reply) never has them all out at once: when the replies held are all it
    is waiting for and no request came for ``quiet_s``, they are released.
    """

    def __init__(
        self, clock: VirtualClock, masters: int, elapsed_s: float, quiet_s: float = 0.01
    ) -> None:
        self.clock = clock
        self.masters = masters
        self.elapsed_s = elapsed_s
        self.quiet_s = quiet_s
        self.jumped = False
        self._cond = threading.Condition()
        self._first: float | None = None
        self._seen = 0
        self._held: list[tuple[socket.socket, bytes]] = []
        self._released = False

    def request_seen(self, seen: float) -> None:
        """A watched request passed a link at ``seen`` (on :func:`real_now`)."""
        with self._cond:
            if self._first is None:
                self._first = seen
            self._seen += 1
            self._cond.notify_all()

    def hold(self, client: socket.socket, reply: bytes) -> None:
        """Hold ``reply`` for ``client`` until the release (sent at once if that is over)."""
        with self._cond:
            if self._released:
                self._send(client, reply)
                return
            self._held.append((client, reply))
            while len(self._held) < self.masters:
                seen = self._seen
                woken = self._cond.wait(self.quiet_s)
                if self._released:
                    return  # another thread sent ours
                if not woken and seen == self._seen and len(self._held) >= seen:
                    break  # quiet, and nothing else outstanding: a sequential client
            self._release()

    def _release(self) -> None:
        with self.clock.held():
            for client, reply in self._held:
                self._send(client, reply)
            first = self._first if self._first is not None else real_now()
            self.clock.jump((self.elapsed_s - (real_now() - first)) * 1000.0)
        self.jumped = True
        self._held.clear()
        self._released = True
        self._cond.notify_all()

    @staticmethod
    def _send(client: socket.socket, reply: bytes) -> None:
        with contextlib.suppress(OSError):
            client.sendall(reply)


def _acquire_in_a_jump(
    session: AuditSession, wall_only: bool, jump_ms: float, key: str
) -> tuple[bool, bool]:
    """One acquire through links that makes it appear to take ``jump_ms``.

    The links hold the replies to the lock's ``SET`` until every master has
    answered, then release them all and advance the clocks in one step (see
    :class:`ReplyGate`): to the library, the attempt
    lasted ``jump_ms`` from its first ``SET``, as if its process had paused
    just before reading the replies. Returns (acquired, the clocks jumped).
    """
    links, servers = session.linked()
    adapter = session.adapter(servers)
    names = session.lock_key_names(adapter, key)
    clock = VirtualClock(flowing=True)
    gate = ReplyGate(clock, len(links), jump_ms / 1000.0)

    def is_set(command: list[bytes]) -> bool:
        return len(command) > 1 and command[0].upper() == b"SET" and command[1] in names

    for link in links:
        link.watch = is_set
        link.gate = gate
    holder = session.holder(adapter, key, DRIFT_TTL_MS)
    with ProcessClocks(clock, wall_only=wall_only).installed():
        got = holder.acquire(0)
    for link in links:
        link.gate = None
    if got:
        with contextlib.suppress(Exception):
            holder.release()
    session.flush()
    return got, gate.jumped


def check_drift(session: AuditSession) -> Row:
    redlock_only(session, "drift")
    session.require_real("holding the replies and advancing the clocks (a link)")
    ttl = DRIFT_TTL_MS
    allowance = drift_ms(ttl)
    control, jumped = _acquire_in_a_jump(session, False, ttl + 50, "audit:drift:control")
    if not jumped:
        raise CheckError("no SET of the lock passed the links")
    room = ttl - allowance - DRIFT_ROOM_MS
    spare, _ = _acquire_in_a_jump(session, False, room, "audit:drift:room")
    inside = ttl - allowance / 2 - 2
    window, _ = _acquire_in_a_jump(session, False, inside, "audit:drift:window")
    details = [
        f"lease {ttl} ms, drift allowance 1% + 2 ms = {allowance:.0f} ms",
        f"clocks advanced {ttl + 50} ms during the attempt: acquired={control}",
        f"clocks advanced {room:.0f} ms (leaving {DRIFT_ROOM_MS} ms of validity): acquired={spare}",
        f"clocks advanced {inside:.0f} ms (leaving less than the allowance): acquired={window}",
    ]
    if control:
        return row(
            "drift",
            Status.FAIL,
            "no: accepted a lock whose acquisition outlasted its TTL (it does not check the "
            "elapsed time against any clock the audit can advance)",
            details=details,
        )
    if window:
        return row(
            "drift",
            Status.FAIL,
            f"no: accepted with TTL - {allowance / 2 + 2:.0f} ms elapsed, inside the "
            f"{allowance:.0f} ms drift allowance",
            details=details,
        )
    if not spare:
        return row(
            "drift",
            Status.NOT_RUN,
            f"inconclusive: it also refused an attempt that left {DRIFT_ROOM_MS} ms of "
            "validity, so the refusals may not come from the drift arithmetic",
            details=details,
        )
    return row(
        "drift",
        Status.PASS,
        f"yes: refused with TTL - {allowance / 2 + 2:.0f} ms elapsed, inside the "
        f"{allowance:.0f} ms drift allowance (1% of the TTL + 2 ms), and accepted with "
        f"{DRIFT_ROOM_MS} ms to spare",
        details=details,
    )


def check_monotonic(session: AuditSession) -> Row:
    redlock_only(session, "monotonic")
    session.require_real("holding the replies and advancing the clocks (a link)")
    ttl = DRIFT_TTL_MS
    control, jumped = _acquire_in_a_jump(session, False, ttl + 50, "audit:clock:control")
    if not jumped:
        raise CheckError("no SET of the lock passed the links")
    if control:
        return row(
            "monotonic",
            Status.NOT_RUN,
            "inconclusive: the lock ignored an acquisition longer than its TTL",
        )
    wall, _ = _acquire_in_a_jump(session, True, ttl + 50, "audit:clock:wall")
    details = [
        f"all clocks advanced {ttl + 50} ms mid-attempt: refused",
        f"only the wall clock (time.time) advanced {ttl + 50} ms: acquired={wall}",
    ]
    if wall:
        return row(
            "monotonic",
            Status.PASS,
            "yes: a wall-clock jump during the attempt changed nothing",
            details=details,
        )
    return row(
        "monotonic",
        Status.FAIL,
        "no: it times the attempt with the wall clock; a jump of time.time() made it refuse "
        "a lock it had won",
        details=details,
    )
