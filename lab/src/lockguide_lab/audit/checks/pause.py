"""A pause past the TTL: the holder's whole process stopped with ``SIGSTOP``, then resumed."""

from __future__ import annotations

import os
import signal
import time

from lockguide_lab.audit.adapter import Holder
from lockguide_lab.audit.checks.common import PAUSE_TTL_MS, audit_row, row
from lockguide_lab.audit.child import HolderProcess
from lockguide_lab.audit.report import Row, Status
from lockguide_lab.audit.session import AuditSession, CheckError, describe_call

# -- a pause past the TTL ---------------------------------------------------------------------


@audit_row(
    "pause",
    "a pause past the TTL leads to overlap",
    must=False,
    order=60,
    items=("C-8",),
    does="a holder process stopped with `SIGSTOP` past its lease; B tries",
    passes="never: a warning for every timeout lock; a lock that never expires fails",
)
def check_pause(session: AuditSession) -> Row:
    adapter = session.adapter()
    key = "audit:pause"
    session.warm(adapter, key)
    in_process = not session.real or session.factory_spec is None
    before = session.snapshot()
    child: HolderProcess | None = None
    a: Holder | None = None
    try:
        if in_process:
            a = session.holder(adapter, key, PAUSE_TTL_MS)
            if not a.acquire(0):
                raise CheckError("could not acquire an uncontended lock")
        else:
            child = HolderProcess(session, key, PAUSE_TTL_MS)
            if child.ask("") != "acquired True":
                raise CheckError("the holder process could not acquire an uncontended lock")
        keys = [k for k in session.new_keys(before) if k.value is not None]
        ttls = [k.pttl for k in keys]
        never = any(t < 0 for t in ttls)
        lease_s = (max(ttls) / 1000.0) if ttls and not never else PAUSE_TTL_MS / 1000.0
        if child is not None:
            os.kill(child.proc.pid, signal.SIGSTOP)
        time.sleep(lease_s + 0.15)
        b = session.holder(adapter, key, PAUSE_TTL_MS)
        overlap = b.acquire(0 if keys else 3000)
        told = "n/a"
        stale = "n/a"
        if child is not None:
            os.kill(child.proc.pid, signal.SIGCONT)
            time.sleep(0.1)
            told = child.ask("lost")
            stale = child.ask("release")
        elif a is not None:
            told = repr(a.lost())
            stale, _, _ = describe_call(a.release)
    finally:
        if child is not None:
            child.close()
    how = (
        "in-process pause (a sleep; background threads kept running)"
        if in_process
        else "the holder's process was stopped with SIGSTOP"
    )
    told_text = {"True": "told A its hold was gone", "False": "told A nothing was wrong"}.get(
        told, "gave A no signal"
    )
    details = [
        how,
        f"PTTL after A's acquire: {ttls}; paused {lease_s + 0.15:.2f} s; B acquired: {overlap}",
        f"after resuming, the library {told_text}; A's release {stale}",
    ]
    if overlap and not keys:
        return row(
            "pause",
            Status.WARN,
            "yes: while A's process was stopped, B found it silent, took the lock over and "
            "acquired; only a fencing token checked by the resource stops A's late writes "
            f"(the library then {told_text})",
            details=details,
            in_process=in_process,
        )
    if overlap:
        return row(
            "pause",
            Status.WARN,
            f"yes: after a pause past its lease, B acquired while A still believed it held "
            f"the lock; only a fencing token checked by the resource stops A's late writes "
            f"(the library then {told_text})",
            details=details,
            in_process=in_process,
        )
    if never:
        return row(
            "pause",
            Status.FAIL,
            "the lock never expires: a paused holder keeps it, and a crashed one keeps it forever",
            details=details,
            in_process=in_process,
        )
    return row(
        "pause",
        Status.PASS,
        "no overlap: B was refused after the pause",
        details=details,
        in_process=in_process,
    )
