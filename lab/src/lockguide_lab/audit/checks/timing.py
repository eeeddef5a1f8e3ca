"""The Redlock rows about time: drift accounted, and elapsed time on a monotonic clock.

**Drift accounted** is judged by a real pause (Kleppmann's second example): the
lock runs in a holder process behind links; the replies to its ``SET`` are held
until the process is stopped (``SIGSTOP``), released into its socket buffers,
and the process is continued after more than the lease has passed
(:class:`~lockguide_lab.audit.gates.PauseGate`). Every clock the lock could
read has moved, wherever it keeps it; no clock is warped.

**Elapsed time on a monotonic clock** needs a wall clock that jumps while the
monotonic clock does not, which only a clock warp gives: the replies to the
lock's ``SET`` are held at every master's link until all have answered, then
let through while one :class:`~lockguide_lab.testbed.clock.VirtualClock` jumps
(:class:`ReplyGate`), read by lockguide's locks through their ``clock=``
argument and by every other library through
:class:`~lockguide_lab.testbed.clock.ProcessClocks`. A lock whose clock the warp
cannot reach is reported "not run", never failed: the row judges the lock, not
the audit's reach.
"""

from __future__ import annotations

import contextlib

from lockguide.validity import drift_ms
from lockguide_lab.audit.checks.common import (
    DRIFT_PAST_MS,
    DRIFT_TTL_MS,
    PAST_TTL_MS,
    audit_row,
    redlock_only,
    row,
)
from lockguide_lab.audit.child import HolderProcess
from lockguide_lab.audit.gates import AllRepliesGate, PauseGate
from lockguide_lab.audit.report import Control, Row, Status
from lockguide_lab.audit.session import AuditSession, CheckError
from lockguide_lab.testbed.clock import ProcessClocks, VirtualClock, real_now

__all__ = ["ReplyGate"]


class ReplyGate(AllRepliesGate):
    """Hold the replies to the lock's ``SET`` on every link, then release them at once.

    The links report each watched request (:meth:`request_seen`) and hand
    over its reply (:meth:`hold`). When every master has answered, the thread
    with the last reply sends all of them to the client and jumps the clock,
    inside :meth:`VirtualClock.held`: the library wakes to find every reply
    waiting and its clocks advanced so that the attempt appears to have lasted
    ``elapsed_s`` since its first ``SET`` left, whatever the holding cost.

    A library that sends its ``SET`` s one after another (waiting for each
    reply) never has them all out at once: when the replies held are all it
    is waiting for and no request came for ``quiet_s``, they are released
    (:class:`~lockguide_lab.audit.gates.AllRepliesGate`).
    """

    def __init__(
        self, clock: VirtualClock, masters: int, elapsed_s: float, quiet_s: float = 0.01
    ) -> None:
        super().__init__(masters, quiet_s)
        self.clock = clock
        self.elapsed_s = elapsed_s
        self.jumped = False

    def _let_go(self) -> None:
        with self.clock.held():
            self._send_held()
            first = self._first_seen()
            self.clock.jump((self.elapsed_s - (real_now() - first)) * 1000.0)
        self.jumped = True


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
    is_set = session.acquire_matcher(links, adapter, key, names)
    clock = VirtualClock(flowing=True)
    gate = ReplyGate(clock, len(links), jump_ms / 1000.0)

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


#: ``True`` breaks the drift check on purpose: the grant is delivered *before* the holder
#: is stopped, so it reads it in time and the pause lands after its decision. The audit's
#: tests set it to show that every lock then "accepts", correct or not.
REPLIES_BEFORE_STOP = False


def _acquire_after_a_pause(
    session: AuditSession, key: str, ttl_ms: int, pause_s: float | None
) -> tuple[str, PauseGate | None]:
    """A holder process acquires through links; with ``pause_s``, the replies to its ``SET``
    are held, the process stopped, the replies delivered, and the process continued
    ``pause_s`` after its first ``SET`` (see :class:`~lockguide_lab.audit.gates.PauseGate`).
    Returns (how the acquire ended, the gate)."""
    links, servers = session.linked()
    names = session.lock_key_names(session.adapter(), key)
    gate = None
    if pause_s is not None:
        gate = PauseGate(len(links), pause_s, replies_first=REPLIES_BEFORE_STOP)
        is_set = session.acquire_matcher(links, session.adapter(servers), key, names)

        for link in links:
            link.watch = is_set
            link.gate = gate
    child = HolderProcess(session, key, ttl_ms, servers)
    if gate is not None:
        gate.pid = child.pid
    try:
        said = child.first_line(30.0) or "acquired nothing (the holder process said nothing)"
    finally:
        child.close()
        for link in links:
            link.gate = None
        session.flush()
    return said.removeprefix("acquired "), gate


@audit_row(
    "drift",
    "drift accounted",
    must=True,
    order=160,
    items=("C-18",),
    redlock_only=True,
    does=(
        "a holder process is stopped between the grant reaching its sockets and reading it, "
        "past its lease, then just inside the drift allowance"
    ),
    passes="both grants refused",
    controls=(
        Control("no_validity_check", "class_clock_redlock"),
        Control("no_drift_allowance", "class_clock_redlock"),
    ),
)
def check_drift(session: AuditSession) -> Row:
    """Kleppmann's second example: the grant arrives, the holder is paused before it reads it.

    The holder runs in its own process. The replies to its ``SET`` are held until it is
    stopped with ``SIGSTOP``, then released into its socket buffers; it is continued once
    more than the lease has passed since its first ``SET``. Whatever clock the lock reads,
    and wherever it keeps it, that clock has moved on: a lock that accepts this grant
    counts a lock already expired everywhere as held.
    """
    redlock_only(session, "drift")
    session.require_real("a holder process behind links")
    ttl = DRIFT_TTL_MS
    allowance = drift_ms(ttl)
    plain, _ = _acquire_after_a_pause(session, "audit:drift:plain", PAST_TTL_MS, None)
    if plain != "True":
        raise CheckError(f"the holder process could not acquire an uncontended lock ({plain})")
    past_s = (PAST_TTL_MS + DRIFT_PAST_MS) / 1000
    past, gate = _acquire_after_a_pause(session, "audit:drift:past", PAST_TTL_MS, past_s)
    assert gate is not None
    if gate.error or gate.paused_s is None:
        raise CheckError(f"the pause did not happen: {gate.error or 'no SET passed the links'}")
    # Just inside the allowance: the lock's own count of the elapsed time can only be longer
    # (it starts before its first SET reaches a link), so a lock that allows for drift
    # always refuses, and one that does not accepts unless this machine adds ~39 ms.
    inside_ms = ttl - allowance + 3
    inside, _ = _acquire_after_a_pause(session, "audit:drift:inside", ttl, inside_ms / 1000)
    details = [
        f"lease {PAST_TTL_MS} ms; a holder process with no pause acquired: {plain}",
        f"stopped with the grant in its socket buffers, continued {gate.paused_s * 1000:.0f} ms "
        f"after its first SET: acquired {past}",
        f"the same with a {ttl} ms lease, continued {inside_ms:.0f} ms after (inside the "
        f"{allowance:.0f} ms drift "
        f"allowance, 1% of the TTL + 2 ms): acquired {inside}",
    ]
    if past == "True":
        return row(
            "drift",
            Status.FAIL,
            "no: paused between the grant and reading it, past the whole lease, it accepted "
            "a lock that had already expired on every master",
            details=details,
        )
    if inside == "True":
        return row(
            "drift",
            Status.FAIL,
            f"no: accepted after a pause that left less than the {allowance:.0f} ms drift "
            "allowance (1% of the TTL + 2 ms) of its lease",
            details=details,
        )
    refused = f"{past} (refused)" if past.startswith("raised") else "refused"
    return row(
        "drift",
        Status.PASS,
        f"yes: paused between the grant and reading it, past the lease, it {refused} "
        f"the lock; inside the {allowance:.0f} ms drift allowance it refused too",
        details=details,
    )


@audit_row(
    "monotonic",
    "elapsed time on a monotonic clock",
    must=False,
    order=170,
    items=("C-18",),
    redlock_only=True,
    does="one virtual clock jumps mid-attempt: every clock, then the wall clock only",
    passes="the wall-clock jump changes nothing",
    controls=(Control("wall_clock_redlock", "class_clock_redlock"),),
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
            "not run: the audit could not move the clock this lock reads (it accepted when "
            "every clock the audit can reach jumped past the lease), so it cannot tell which "
            "one it is; the drift row judges its elapsed time with a real pause",
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
