"""Renewal failure visible: sabotage a renewed lease and see whether the holder is told."""

from __future__ import annotations

import time

from lockguide_lab.audit.adapter import Unsupported
from lockguide_lab.audit.checks.common import acquire, audit_row, row
from lockguide_lab.audit.report import Control, Row, Status
from lockguide_lab.audit.session import OCCUPANT, AuditSession, describe_call, thread_errors

# -- renewal failure visible ------------------------------------------------------------------


@audit_row(
    "renewal",
    "renewal failure visible to the holder",
    must=True,
    order=80,
    items=("C-4", "C-6"),
    does="a renewed key's value is replaced",
    passes="`lost()` turns `True` while the holder works (told only at release: *late*, a failure)",
    controls=(Control("silent_renewal", "renewing"),),
)
def check_renewal(session: AuditSession) -> Row:
    adapter = session.adapter()
    key = "audit:renewal"
    session.warm(adapter, key)
    try:
        holder = session.holder(adapter, key, 1000, renew=True)
    except Unsupported:
        return row(
            "renewal",
            Status.NA,
            "no automatic renewal: the holder extends the lease itself, and sees the result",
        )
    with thread_errors() as errors:
        keys = acquire(session, holder)
        lock_keys = [k for k in keys if k.value is not None]
        details = []
        lease_s = max((k.pttl for k in lock_keys), default=1000) / 1000.0
        if lock_keys:
            time.sleep(lease_s + 0.3)
            renewed = session.still_there(lock_keys)
            details.append(
                f"after {lease_s + 0.3:.1f} s (past the lease) the key was still ours: {renewed}"
            )
            if not renewed:
                return row(
                    "renewal",
                    Status.FAIL,
                    "automatic renewal did not keep the lease alive",
                    details=details,
                )
            for k in lock_keys:
                session.admins[k.server].set(k.name, OCCUPANT, keepttl=True)
            how = "the key's value was replaced by another owner's"
        else:
            session.end_hold(keys)
            how = "its connection was killed"
        # Wait as long again for the library to speak up; a library that does
        # is done early, a silent one gets the whole wait.
        give_up = time.monotonic() + lease_s + 0.3
        told = holder.lost()
        while told is not True and time.monotonic() < give_up:
            time.sleep(0.02)
            told = holder.lost()
        overwritten = [session.admins[k.server].get(k.name) for k in lock_keys]
    overwritten = [v for v in overwritten if v is not None]
    thread_failures = sorted({type(e).__name__ for e in errors})
    details.append(f"sabotage: {how}; the library then said lost={told}")
    if thread_failures:
        details.append(f"background thread(s) died with: {', '.join(thread_failures)}")
    if any(v != OCCUPANT for v in overwritten):
        details.append("the renewal overwrote the other owner's key")
    if told is True:
        return row(
            "renewal",
            Status.PASS,
            f"yes: after {how}, the library told the holder its hold was lost",
            details=details,
        )
    died = (
        f" (its renewal thread died with {', '.join(thread_failures)})" if thread_failures else ""
    )
    # Silent while the holder worked; does it say so at least when the holder releases?
    released, _, release_error = describe_call(holder.release)
    details.append(f"the holder's release afterwards: {released}")
    if release_error is not None:
        return row(
            "renewal",
            Status.FAIL,
            f"late: renewal failed{died}; the holder was told nothing while it held the lock, "
            f"only afterwards, when its release {released}",
            details=details,
        )
    if told is None:
        return row(
            "renewal",
            Status.FAIL,
            f"no: renewal failed{died} and the library gave the holder no signal",
            details=details,
        )
    return row(
        "renewal",
        Status.FAIL,
        f"no: renewal failed{died} and the library still said the hold was fine",
        details=details,
    )
