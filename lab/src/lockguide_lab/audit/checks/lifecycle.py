"""The rows about a hold's life around the lock's edges: the default wait, a cancelled
release, renewal after release, and a fork while renewing."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

from lockguide_lab.audit.adapter import DEFAULT, TtlSpec, Unsupported
from lockguide_lab.audit.checks.common import acquire, audit_row, row, seconds
from lockguide_lab.audit.child import HolderProcess
from lockguide_lab.audit.report import Control, Row, Status
from lockguide_lab.audit.session import AuditSession, CheckError, NotRunnable, describe_call
from lockguide_lab.testbed.clock import real_now

#: How long the wait row lets a default acquire wait for a lock someone else holds: well past
#: the longest finite default of the audited libraries (sherlock's and lockguide's 10 s), so
#: that a loaded machine running every library's wait at once cannot push a 10 s default over.
WAIT_LIMIT_S = 20.0
#: The lease of the renewal-after-release and fork rows (renewed every 0.33-0.6 s).
RENEWED_TTL_MS = 1000
#: How long the renewal-after-release row watches A's links after its release.
AFTER_RELEASE_S = 1.5


def _when(took_s: float) -> str:
    # Rounded down to a multiple of 5 s: a deadline is overshot (by a poll interval, by a
    # loaded machine running every library's wait at once: CI saw 12.6 s for a 10 s default),
    # never undershot, and the page must not change with the machine's load. A few tries that
    # give up in well under a second take longer on a loaded machine: one band for all of them.
    return "within a few seconds" if took_s < 5.0 else f"after about {int(took_s // 5) * 5} s"


# -- a default acquire that waits for ever -----------------------------------------------------


@audit_row(
    "wait",
    "a default acquire gives up (no wait for ever)",
    must=False,
    order=90,
    items=("C-5",),
    does="A holds for 60 s; B calls the acquire with no arguments",
    passes="B gives up within 20 s",
    controls=(Control("waits_forever", "single"),),
)
def check_wait(session: AuditSession) -> Row:
    adapter = session.adapter()
    key = "audit:wait" + session.namespace
    session.warm(adapter, key)
    a = session.holder(adapter, key, 60_000)
    acquire(session, a)
    spec: TtlSpec = 10_000 if adapter.ttl_required else DEFAULT
    b = session.holder(adapter, key, spec)
    call: Callable[[], object] | None = getattr(b, "acquire_default", None)
    if call is None:
        raise NotRunnable(
            "not run: the adapter has no acquire_default() (the library's acquire with no "
            "arguments)"
        )
    outcome: list[tuple[str, object | None, float]] = []
    started = time.monotonic()

    def wait() -> None:
        nonlocal started
        started = time.monotonic()  # the call's own time, not the thread's start
        said, result, _ = describe_call(call)
        outcome.append((said, result, time.monotonic() - started))
        if result is True:  # released by the thread that acquired (thread-owned locks)
            b.release()

    waiter = threading.Thread(target=wait, daemon=True)
    waiter.start()
    waiter.join(WAIT_LIMIT_S)
    if outcome:
        said, result, took = outcome[0]
        if result is True:
            raise CheckError("B's default acquire got the lock while A held it")
        return row(
            "wait",
            Status.PASS,
            f"yes: while A held the lock, a default acquire gave up {_when(took)} ({said})",
            details=[
                f"A held the lock (60 s lease); B's default acquire {said} after {took:.2f} s"
            ],
        )
    a.release()
    waiter.join(5.0)
    if outcome and outcome[0][1] is True:
        with_a_gone = "it got the lock only when A released it"
    elif outcome:
        with_a_gone = f"when A released, it {outcome[0][0]}"
    else:
        with_a_gone = "it was still waiting 5 s after A released"
    return row(
        "wait",
        Status.FAIL,
        f"no: while A held the lock, a default acquire was still waiting after "
        f"{WAIT_LIMIT_S:.0f} s, with no deadline of its own; {with_a_gone}",
        details=[f"A held the lock (60 s lease); {with_a_gone}"],
    )


# -- a cancelled release -----------------------------------------------------------------------


@audit_row(
    "cancel",
    "a cancelled release still releases",
    must=False,
    order=100,
    items=("C-3",),
    does="an asyncio lock's release task is cancelled at its first `await`",
    passes="the key is gone anyway",
    controls=(Control("unshielded_release", "async_single"),),
)
def check_cancel(session: AuditSession) -> Row:
    adapter = session.adapter()
    loop: asyncio.AbstractEventLoop | None = getattr(adapter, "loop", None)
    if not getattr(adapter, "asyncio", False) or loop is None:
        return row(
            "cancel",
            Status.NA,
            "a synchronous lock: no task can be cancelled in the middle of its release",
        )
    key = "audit:cancel"
    session.warm(adapter, key)
    a = session.holder(adapter, key, 10_000)
    release: Callable[[], Awaitable[object]] | None = getattr(a, "release_async", None)
    if release is None:
        raise NotRunnable("not run: the adapter has no release_async() to cancel")
    keys = [k for k in acquire(session, a) if k.value is not None]
    if not keys:
        raise NotRunnable("not applicable: the lock keeps no key to leave behind")

    async def cancelled() -> str:
        async def releasing() -> object:
            return await release()

        task = asyncio.ensure_future(releasing())
        await asyncio.sleep(0)  # the release runs up to its first await
        if not task.cancel():
            await task
            return "had finished before the cancellation came"
        try:
            await task
        except asyncio.CancelledError:
            return "raised CancelledError"
        except Exception as error:
            return f"raised {type(error).__name__}"
        return "returned: it swallowed the cancellation"

    said = asyncio.run_coroutine_threadsafe(cancelled(), loop).result(10.0)
    time.sleep(0.2)  # anything it left to run in the background has run
    left = session.still_there(keys)
    pttl = max(int(session.admins[k.server].pttl(k.name)) for k in keys) if left else None
    details = [
        f"A's release was cancelled at its first await; the release {said}; "
        f"A's key still there 0.2 s later: {left} (PTTL {pttl})"
    ]
    if left:
        held = "for ever (no TTL)" if pttl is not None and pttl < 0 else "until its lease ran out"
        return row(
            "cancel",
            Status.FAIL,
            f"no: cancelled at its first await, the release never reached Redis and left the "
            f"lock held {held}; the release {said}",
            details=details,
        )
    return row(
        "cancel",
        Status.PASS,
        f"yes: cancelled at its first await, the release still removed the key; it {said}",
        details=details,
    )


# -- a watchdog that keeps renewing after release ------------------------------------------------


@audit_row(
    "renewal-stops",
    "renewal stops at release",
    must=False,
    order=110,
    items=("C-4",),
    does="A (renewed) releases, B acquires; A's links are watched for 1.5 s",
    passes="nothing more from A names the key",
    controls=(Control("renews_after_release", "renewing"),),
)
def check_renewal_stops(session: AuditSession) -> Row:
    adapter = session.adapter()
    key = "audit:stops"
    try:
        session.holder(adapter, key + ":probe", RENEWED_TTL_MS, renew=True)
    except Unsupported:
        return row("renewal-stops", Status.NA, "no automatic renewal: nothing to stop")
    session.warm(adapter, key)
    names = session.lock_key_names(adapter, key)  # n/a for a lock with no key
    links, servers = session.linked()
    through = session.adapter(servers)
    seen: list[float] = []

    def observe(command: list[bytes], _: float) -> None:
        if any(arg in names for arg in command[1:]):
            seen.append(real_now())

    a = session.holder(through, key, RENEWED_TTL_MS, renew=True)
    for link in links:
        link.observers.append(observe)
    try:
        keys = [k for k in acquire(session, a) if k.value is not None]
        acquired_at = real_now()
        time.sleep(RENEWED_TTL_MS / 1000 + 0.3)
        if not session.still_there(keys):
            raise NotRunnable(
                "not run: the renewal did not keep the lease alive (the renewal row says so)"
            )
        said, _, _ = describe_call(a.release)
        released_at = real_now()
        b = session.holder(adapter, key, 3000)
        b_keys = [k for k in acquire(session, b) if k.value is not None]
        time.sleep(AFTER_RELEASE_S)
    finally:
        for link in links:
            link.observers.remove(observe)
    while_held = sum(1 for t in seen if acquired_at < t < released_at)
    after = [t - released_at for t in seen if t > released_at]
    b_intact = session.still_there(b_keys)
    details = [
        f"A (renewed, {RENEWED_TTL_MS} ms lease) sent {while_held} command(s) on the key while "
        f"held; its release {said}; then B acquired",
        f"commands on the key from A in the {AFTER_RELEASE_S} s after its release returned: "
        f"{len(after)} (at {[round(t, 2) for t in after]} s); B's key intact: {b_intact}",
    ]
    if after:
        hurt = "" if b_intact else ", and B's key was changed"
        return row(
            "renewal-stops",
            Status.FAIL,
            f"no: after its release returned, A's renewal sent {len(after)} more command(s) on "
            f"the key within {AFTER_RELEASE_S} s, while B held the lock{hurt}",
            details=details,
        )
    return row(
        "renewal-stops",
        Status.PASS,
        f"yes: once A's release returned, nothing more from A reached the key in "
        f"{AFTER_RELEASE_S} s (B held it meanwhile)",
        details=details,
    )


# -- a watchdog after fork -----------------------------------------------------------------------


@audit_row(
    "fork",
    "a forked child cannot release the parent's lock",
    must=False,
    order=120,
    items=("C-3",),
    does="a renewing holder process forks; the child releases",
    passes="the parent's key survives, and its renewal goes on",
    controls=(Control("fork_unaware", "renewing"),),
)
def check_fork(session: AuditSession) -> Row:
    adapter = session.adapter()
    if getattr(adapter, "asyncio", False):
        raise NotRunnable(
            "not run: an asyncio lock's event loop does not survive a fork (a forked child "
            "has no loop to run the lock on)"
        )
    try:
        session.holder(adapter, "audit:fork:probe", RENEWED_TTL_MS, renew=True)
    except Unsupported:
        return row("fork", Status.NA, "no automatic renewal: no watchdog to fork")
    session.require_real("a holder process that forks")
    key = "audit:fork"
    session.warm(adapter, key)
    before = session.snapshot()
    child = HolderProcess(session, key, RENEWED_TTL_MS, renew=True)
    try:
        if child.ask("") != "acquired True":
            raise CheckError("the holder process could not acquire an uncontended lock")
        keys = [k for k in session.new_keys(before) if k.value is not None]
        if not keys:
            raise NotRunnable("not applicable: the lock keeps no key")
        forked = child.ask("fork-release")
        kept = session.still_there(keys)
        time.sleep(RENEWED_TTL_MS / 1000 + 0.3)
        renewed = session.still_there(keys)
        lost = child.ask("lost")
        released = child.ask("release")
    finally:
        child.close()
    details: list[Any] = [
        f"the holder process acquired ({seconds(RENEWED_TTL_MS)} lease, renewed) and forked; "
        f"the child's release {forked}; the parent's key intact after it: {kept}",
        f"{RENEWED_TTL_MS / 1000 + 0.3:.1f} s later the parent's key still there: {renewed}; "
        f"the parent said lost={lost}; its release {released}",
    ]
    if not kept:
        return row(
            "fork",
            Status.FAIL,
            f"no: the forked child's release {forked} and deleted the lock its parent still "
            "held (the child inherited the parent's value)",
            details=details,
        )
    if not renewed:
        return row(
            "fork",
            Status.FAIL,
            "no: after the fork the parent's renewal stopped, and its lease ran out while it "
            "held the lock",
            details=details,
        )
    return row(
        "fork",
        Status.PASS,
        f"yes: the forked child's release {forked} and left the parent's lock alone; the "
        "parent's renewal carried it past its lease",
        details=details,
    )
