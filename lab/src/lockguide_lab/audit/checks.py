"""The checklist, one function per row; each runs the lock and reports what happened."""

from __future__ import annotations

import contextlib
import json
import math
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from lockguide.validity import drift_ms, quorum
from lockguide_lab.audit.adapter import DEFAULT, NO_EXPIRY, Holder, TtlSpec, Unsupported
from lockguide_lab.audit.lab import (
    OCCUPANT,
    CheckError,
    Lab,
    LockKey,
    NotRunnable,
    describe_call,
    thread_errors,
)
from lockguide_lab.audit.proxy import ClockWarp, ReplyGate, now
from lockguide_lab.audit.report import CHECKS_BY_ID, Row, Status
from lockguide_lab.audit.values import MIN_BITS, judge_values

__all__ = ["CHECK_FUNCTIONS", "run_check"]

#: Seed used to test whether values come from Python's ``random`` module.
SEED = 20160208
#: Lease used by the pause check (libraries with whole-second TTLs round up).
PAUSE_TTL_MS = 300
#: One-way delay the proxies add in the parallel-acquisition check.
PROXY_DELAY_S = 0.03
#: How long the retry check lets a blocked acquire keep trying.
RETRY_WAIT_MS = 1000
#: Lease used by the drift check.
DRIFT_TTL_MS = 1000
#: Validity the drift check leaves in the attempt that must be accepted.
DRIFT_ROOM_MS = 100


def _row(check_id: str, status: Status, summary: str, **extra: Any) -> Row:
    check = CHECKS_BY_ID[check_id]
    return Row(
        id=check.id,
        title=check.title,
        must=check.must,
        status=status,
        summary=summary,
        details=list(extra.pop("details", [])),
        data=dict(extra),
    )


def _seconds(ms: float) -> str:
    """A lease for a summary: whole seconds rounded up, or ms below a second."""
    if ms >= 1000:
        return f"{math.ceil(ms / 1000)} s"
    return f"{math.ceil(ms / 100) * 100} ms"


def _acquire(lab: Lab, holder: Holder, wait_ms: float = 0) -> list[LockKey]:
    got, keys, _ = lab.acquire_observed(holder, wait_ms)
    if not got:
        raise CheckError("could not acquire an uncontended lock")
    return keys


# -- unique, unpredictable value -----------------------------------------------------------


def check_value(lab: Lab) -> Row:
    adapter = lab.adapter()
    key = "audit:value"

    def one_value() -> bytes | None:
        holder = lab.holder(adapter, key, 10_000)
        keys = _acquire(lab, holder)
        holder.release()
        first = [k.value for k in keys if k.value is not None]
        return first[0] if first else None

    one_value()  # warm-up: counters or scripts a first acquisition creates
    values = [one_value() for _ in range(6)]
    if any(v is None for v in values):
        return _row(
            "value",
            Status.NA,
            "no key holds a value while the lock is held (it is held by a connection): "
            "there is no value to guess",
        )
    observed = [v for v in values if v is not None]
    state = random.getstate()
    runs: list[list[bytes | None]] = []
    try:
        for _ in range(2):
            random.seed(SEED)
            runs.append([one_value() for _ in range(3)])
    finally:
        random.setstate(state)
    verdict = judge_values(observed)
    problems = []
    if runs[0] == runs[1]:
        problems.append(
            "values repeat after random.seed(): drawn from Python's random module "
            "(Mersenne Twister), not a CSPRNG"
        )
    if verdict.problem:
        problems.append(verdict.problem)
    details = [
        f"{len(observed)} values observed on the server, {verdict.length} characters, "
        f"{verdict.alphabet}, room for {verdict.bits:.0f} bits; e.g. {observed[0]!r}",
        f"re-seeding random.seed({SEED}) twice gave "
        + ("the same values" if runs[0] == runs[1] else "different values"),
    ]
    data = {"length": verdict.length, "bits": round(verdict.bits), "alphabet": verdict.alphabet}
    if problems:
        return _row("value", Status.FAIL, problems[0], details=details + problems[1:], **data)
    return _row(
        "value",
        Status.PASS,
        f"distinct {verdict.length}-character values with room for at least {MIN_BITS} random "
        "bits; not reproducible by seeding random",
        details=details,
        **data,
    )


# -- release is compare-and-delete -----------------------------------------------------------


def check_release(lab: Lab) -> Row:
    adapter = lab.adapter()
    key = "audit:release"
    lab.warm(adapter, key)
    a = lab.holder(adapter, key, 10_000)
    a_keys = _acquire(lab, a)
    how = lab.end_hold(a_keys)
    b = lab.holder(adapter, key, 10_000)
    got, b_keys, _ = lab.acquire_observed(b, 3000)
    if not got:
        raise CheckError("B could not acquire after A's lease ran out")
    extend_said, _, extend_error = describe_call(lambda: a.extend(60_000))
    release_said, _, _ = describe_call(a.release)
    b_intact = lab.still_there(b_keys)
    stretched = any(
        lab.admins[k.server].pttl(k.name) > 0 and lab.admins[k.server].pttl(k.name) > 10_000
        for k in b_keys
    )
    c = lab.holder(adapter, key, 10_000)
    c_got = c.acquire(0)
    details = [
        f"A acquired, then {how}; B acquired",
        f"A's stale extend(60 s): {extend_said}"
        + (" (not supported)" if isinstance(extend_error, Unsupported) else ""),
        f"A's stale release: {release_said}",
        f"B's key intact: {b_intact}; C acquired: {c_got}",
    ]
    if c_got or not b_intact:
        return _row(
            "release",
            Status.FAIL,
            "no: A's stale release removed B's lock, and C acquired while B held it",
            details=details,
        )
    if stretched:
        return _row(
            "release",
            Status.FAIL,
            "release left B alone, but A's stale extend reset the TTL of B's key",
            details=details,
        )
    return _row(
        "release",
        Status.PASS,
        f"yes: A's stale release left B's lock alone (C refused); A's release {release_said}",
        details=details,
    )


# -- a TTL by default ------------------------------------------------------------------------


def check_ttl(lab: Lab) -> Row:
    adapter = lab.adapter()
    key = "audit:ttl"
    lab.warm(adapter, key)
    spec: TtlSpec = 10_000 if adapter.ttl_required else DEFAULT
    holder = lab.holder(adapter, key, spec)
    keys = _acquire(lab, holder)
    lock_keys = [k for k in keys if k.value is not None]
    if not lock_keys:
        other = lab.holder(adapter, key, spec)
        if not other.acquire(0):
            return _row(
                "ttl",
                Status.NA,
                "no key to expire: the lock is held by a connection, and ends when the "
                "connection closes",
            )
        return _row("ttl", Status.FAIL, "acquire reported success but left no key at all")
    ttls = sorted({k.pttl for k in lock_keys})
    details = [f"PTTL after the acquire: {ttls} ms on {len(lock_keys)} key(s)"]
    if any(t < 0 for t in ttls):
        return _row(
            "ttl",
            Status.FAIL,
            "no: PTTL -1 after a default acquire; a holder that crashes keeps the lock forever",
            details=details,
        )
    if adapter.ttl_required:
        return _row(
            "ttl",
            Status.PASS,
            f"yes: the TTL is a required argument (PTTL {_seconds(max(ttls))} for a 10 s lease)",
            details=details,
        )
    return _row(
        "ttl",
        Status.PASS,
        f"yes: PTTL {_seconds(max(ttls))} after a default acquire",
        details=details,
        default_ttl_ms=max(ttls),
    )


# -- basic exclusion in every TTL mode -----------------------------------------------------------


def check_exclusion(lab: Lab) -> Row:
    adapter = lab.adapter()
    modes: list[tuple[str, TtlSpec]] = [
        ("default", 10_000 if adapter.ttl_required else DEFAULT),
        ("no-expiry", NO_EXPIRY),
    ]
    details = []
    broken = []
    for label, spec in modes:
        key = f"audit:exclusion:{label}"
        lab.warm(adapter, key)
        try:
            a = lab.holder(adapter, key, spec)
        except Unsupported:
            details.append(f"{label}: the library has no such option")
            continue
        got, keys, _ = lab.acquire_observed(a)
        if not got:
            raise CheckError(f"could not acquire an uncontended lock ({label})")
        b = lab.holder(adapter, key, spec)
        b_got = b.acquire(0)
        details.append(
            f"{label}: A acquired ({len(keys)} new key(s) on the server); B acquired: {b_got}"
        )
        if b_got:
            broken.append((label, keys))
    if broken:
        label, keys = broken[0]
        why = " (A's key was already gone)" if not keys else ""
        return _row(
            "exclusion",
            Status.FAIL,
            f"no: with the {label} option B acquired while A held the lock{why}",
            details=details,
        )
    tried = [d.split(":")[0] for d in details if "no such option" not in d]
    return _row(
        "exclusion",
        Status.PASS,
        f"yes: B refused while A held ({', '.join(tried)})",
        details=details,
    )


# -- a pause past the TTL ---------------------------------------------------------------------


class _Child:
    """A holder in its own process, so a SIGSTOP pauses all of it, threads included."""

    def __init__(self, lab: Lab, key: str, ttl_ms: int) -> None:
        assert lab.factory_spec is not None
        spec = {
            "factory": lab.factory_spec,
            "servers": [[s.label, *(s.address or ("", 0))] for s in lab.servers],
            "key": key,
            "ttl_ms": ttl_ms,
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
        with contextlib.suppress(Exception):
            os.kill(self.proc.pid, signal.SIGCONT)
        with contextlib.suppress(Exception):
            self.ask("exit")
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def check_pause(lab: Lab) -> Row:
    adapter = lab.adapter()
    key = "audit:pause"
    lab.warm(adapter, key)
    in_process = not lab.real or lab.factory_spec is None
    before = lab.snapshot()
    child: _Child | None = None
    a: Holder | None = None
    try:
        if in_process:
            a = lab.holder(adapter, key, PAUSE_TTL_MS)
            if not a.acquire(0):
                raise CheckError("could not acquire an uncontended lock")
        else:
            child = _Child(lab, key, PAUSE_TTL_MS)
            if child.ask("") != "acquired True":
                raise CheckError("the holder process could not acquire an uncontended lock")
        keys = [k for k in lab.new_keys(before) if k.value is not None]
        ttls = [k.pttl for k in keys]
        never = any(t < 0 for t in ttls)
        lease_s = (max(ttls) / 1000.0) if ttls and not never else PAUSE_TTL_MS / 1000.0
        if child is not None:
            os.kill(child.proc.pid, signal.SIGSTOP)
        time.sleep(lease_s + 0.15)
        b = lab.holder(adapter, key, PAUSE_TTL_MS)
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
        return _row(
            "pause",
            Status.WARN,
            "yes: while A's process was stopped, B found it silent, took the lock over and "
            "acquired; only a fencing token checked by the resource stops A's late writes "
            f"(the library then {told_text})",
            details=details,
            in_process=in_process,
        )
    if overlap:
        return _row(
            "pause",
            Status.WARN,
            f"yes: after a pause past its lease, B acquired while A still believed it held "
            f"the lock; only a fencing token checked by the resource stops A's late writes "
            f"(the library then {told_text})",
            details=details,
            in_process=in_process,
        )
    if never:
        return _row(
            "pause",
            Status.FAIL,
            "the lock never expires: a paused holder keeps it, and a crashed one keeps it forever",
            details=details,
            in_process=in_process,
        )
    return _row(
        "pause",
        Status.PASS,
        "no overlap: B was refused after the pause",
        details=details,
        in_process=in_process,
    )


# -- fencing tokens ------------------------------------------------------------------------------


def check_fencing(lab: Lab) -> Row:
    adapter = lab.adapter()
    key = "audit:fencing"
    lab.warm(adapter, key)
    a = lab.holder(adapter, key, 10_000)
    a_keys = _acquire(lab, a)
    ta = a.token()
    if ta is None:
        return _row("fencing", Status.FAIL, "no: the lock hands the holder no fencing token")
    try:
        how = lab.end_hold(a_keys)
    except NotRunnable:
        a.release()
        how = "A released (this backend cannot end a key-less hold)"
    b = lab.holder(adapter, key, 10_000)
    if not b.acquire(3000):
        raise CheckError("B could not acquire after A's hold ended")
    tb = b.token()
    b.release()
    c = lab.holder(adapter, key, 10_000)
    _acquire(lab, c)
    tc = c.token()
    details = [f"A's hold ended ({how}); tokens A={ta}, B={tb}, C={tc}"]
    if tb is not None and tc is not None and ta < tb < tc:
        return _row(
            "fencing",
            Status.PASS,
            "yes: every acquisition got a larger token, also after a lease ran out",
            details=details,
        )
    return _row("fencing", Status.FAIL, "tokens were offered but did not increase", details=details)


# -- renewal failure visible ------------------------------------------------------------------


def check_renewal(lab: Lab) -> Row:
    adapter = lab.adapter()
    key = "audit:renewal"
    lab.warm(adapter, key)
    try:
        holder = lab.holder(adapter, key, 1000, renew=True)
    except Unsupported:
        return _row(
            "renewal",
            Status.NA,
            "no automatic renewal: the holder extends the lease itself, and sees the result",
        )
    with thread_errors() as errors:
        keys = _acquire(lab, holder)
        lock_keys = [k for k in keys if k.value is not None]
        details = []
        lease_s = max((k.pttl for k in lock_keys), default=1000) / 1000.0
        if lock_keys:
            time.sleep(lease_s + 0.3)
            renewed = lab.still_there(lock_keys)
            details.append(
                f"after {lease_s + 0.3:.1f} s (past the lease) the key was still ours: {renewed}"
            )
            if not renewed:
                return _row(
                    "renewal",
                    Status.FAIL,
                    "automatic renewal did not keep the lease alive",
                    details=details,
                )
            for k in lock_keys:
                lab.admins[k.server].set(k.name, OCCUPANT, keepttl=True)
            how = "the key's value was replaced by another owner's"
        else:
            lab.end_hold(keys)
            how = "its connection was killed"
        # Wait as long again for the library to speak up; a library that does
        # is done early, a silent one gets the whole wait.
        give_up = time.monotonic() + lease_s + 0.3
        told = holder.lost()
        while told is not True and time.monotonic() < give_up:
            time.sleep(0.02)
            told = holder.lost()
        overwritten = [lab.admins[k.server].get(k.name) for k in lock_keys]
    overwritten = [v for v in overwritten if v is not None]
    thread_failures = sorted({type(e).__name__ for e in errors})
    details.append(f"sabotage: {how}; the library then said lost={told}")
    if thread_failures:
        details.append(f"background thread(s) died with: {', '.join(thread_failures)}")
    if any(v != OCCUPANT for v in overwritten):
        details.append("the renewal overwrote the other owner's key")
    if told is True:
        return _row(
            "renewal",
            Status.PASS,
            f"yes: after {how}, the library told the holder its hold was lost",
            details=details,
        )
    died = (
        f" (its renewal thread died with {', '.join(thread_failures)})" if thread_failures else ""
    )
    if told is None:
        return _row(
            "renewal",
            Status.FAIL,
            f"no: renewal failed{died} and the library gave the holder no signal",
            details=details,
        )
    return _row(
        "renewal",
        Status.FAIL,
        f"no: renewal failed{died} and the library still said the hold was fine",
        details=details,
    )


# -- Redlock-style rows ------------------------------------------------------------------------


def _redlock(lab: Lab, check_id: str) -> None:
    adapter = lab.adapter()
    if not adapter.multi_master:
        raise _NotApplicable("single instance: applies to Redlock-style locks only")


class _NotApplicable(Exception):
    pass


def check_parallel(lab: Lab) -> Row:
    _redlock(lab, "parallel")
    proxies, servers = lab.proxied()
    adapter = lab.adapter(servers)
    key = "audit:parallel"
    warm = lab.holder(adapter, key, 10_000)
    if not warm.acquire(0):
        raise CheckError("could not acquire an uncontended lock")
    warm.release()
    for proxy in proxies:
        proxy.delay_s = PROXY_DELAY_S
    holder = lab.holder(adapter, key, 10_000)
    started = now()
    got = holder.acquire(0)
    elapsed = now() - started
    for proxy in proxies:
        proxy.delay_s = 0.0
    if not got:
        raise CheckError("could not acquire through the delaying proxies")
    trips = elapsed / PROXY_DELAY_S
    n = len(servers)
    details = [
        f"each of {n} proxies delayed every request by {PROXY_DELAY_S * 1000:.0f} ms; "
        f"the acquire took {elapsed * 1000:.1f} ms = {trips:.2f} delays"
    ]
    if trips < 2.5:
        return _row(
            "parallel",
            Status.PASS,
            f"yes: acquiring on {n} masters took about one delayed round trip",
            details=details,
            delays=round(trips, 2),
        )
    if trips >= 0.8 * n:
        summary = "no: sequential, about one delayed round trip per master"
    else:
        summary = "no: slower than one round trip, though not one per master"
    return _row("parallel", Status.FAIL, summary, details=details, delays=round(trips, 2))


def check_partial(lab: Lab) -> Row:
    _redlock(lab, "partial")
    adapter = lab.adapter()
    key = "audit:partial"
    names = lab.lock_key_names(adapter, key)
    n = len(lab.servers)
    majority = list(range(quorum(n)))
    free = [i for i in range(n) if i not in majority]
    lab.occupy(names, majority, 10_000)
    holder = lab.holder(adapter, key, 10_000)
    got = holder.acquire(0)
    left = [i for i in free if any(lab.admins[i].exists(name) for name in names)]
    intact = all(lab.admins[i].get(name) == OCCUPANT for i in majority for name in names)
    details = [
        f"{len(majority)} of {n} masters held by another owner; acquire returned {got}; "
        f"its key left on masters {left}; the other owner's keys intact: {intact}"
    ]
    if got:
        return _row(
            "partial",
            Status.FAIL,
            "acquired although a majority was held by someone else",
            details=details,
        )
    if left:
        return _row(
            "partial",
            Status.FAIL,
            f"no: after the failed attempt its key stayed on {len(left)} of the {len(free)} "
            "free masters until the TTL",
            details=details,
        )
    if not intact:
        return _row(
            "partial",
            Status.FAIL,
            "the failed attempt deleted the other owner's keys",
            details=details,
        )
    return _row(
        "partial",
        Status.PASS,
        f"yes: after a failed attempt (majority held elsewhere) nothing was left on the "
        f"{len(free)} free masters",
        details=details,
    )


def check_retry(lab: Lab) -> Row:
    _redlock(lab, "retry")
    proxies, servers = lab.proxied()
    adapter = lab.adapter(servers)
    key = "audit:retry"
    names = lab.lock_key_names(adapter, key)
    lab.occupy(names, range(len(lab.servers)), 10_000)
    seen_commands: list[tuple[bool, float]] = []

    def observe(command: list[bytes], seen: float) -> None:
        is_set = len(command) > 1 and command[0].upper() == b"SET" and command[1] in names
        seen_commands.append((is_set, seen))

    proxies[0].observers.append(observe)
    holder = lab.holder(adapter, key, 10_000)
    got = holder.acquire(RETRY_WAIT_MS)
    proxies[0].observers.clear()
    if got:
        raise CheckError("acquired although every master was held by someone else")
    # The pause before each retry: from the attempt's previous command on this
    # master (its SET, or the release of a failed attempt) to the next SET.
    attempts = [t for is_set, t in seen_commands if is_set]
    gaps = [
        t - seen_commands[i - 1][1]
        for i, (is_set, t) in enumerate(seen_commands)
        if is_set and i > 0 and any(s for s, _ in seen_commands[:i])
    ]
    details = [
        f"{len(attempts)} SET attempts seen by master 0 in a {RETRY_WAIT_MS} ms wait; "
        f"pauses before each retry (ms): {[round(g * 1000) for g in gaps]}"
    ]
    if len(attempts) < 2:
        return _row(
            "retry",
            Status.FAIL,
            f"no retry: one attempt in the {RETRY_WAIT_MS / 1000:.1f} s it was allowed",
            details=details,
        )
    if len(gaps) < 2:
        return _row("retry", Status.NOT_RUN, "only two attempts: too few to judge", details=details)
    spread = max(gaps) - min(gaps)
    mean = sum(gaps) / len(gaps)
    if spread >= max(0.015, 0.25 * mean):
        return _row(
            "retry",
            Status.PASS,
            "yes: the delays between attempts varied",
            details=details,
            attempts=len(attempts),
        )
    return _row(
        "retry",
        Status.FAIL,
        f"no: a fixed pause of about {round(mean * 20) * 50} ms before every retry",
        details=details,
        attempts=len(attempts),
    )


def _warped_acquire(lab: Lab, wall_only: bool, jump_ms: float, key: str) -> tuple[bool, bool]:
    """One acquire through proxies that makes it appear to take ``jump_ms``.

    The proxies hold the replies to the lock's ``SET`` until every master has
    answered, then release them all and advance the clocks in one step (see
    :class:`~lockguide_lab.audit.proxy.ReplyGate`): to the library, the attempt
    lasted ``jump_ms`` from its first ``SET``, as if its process had paused
    just before reading the replies. Returns (acquired, the clocks jumped).
    """
    proxies, servers = lab.proxied()
    adapter = lab.adapter(servers)
    names = lab.lock_key_names(adapter, key)
    warp = ClockWarp(wall_only=wall_only)
    gate = ReplyGate(warp, len(proxies), jump_ms / 1000.0)

    def is_set(command: list[bytes]) -> bool:
        return len(command) > 1 and command[0].upper() == b"SET" and command[1] in names

    for proxy in proxies:
        proxy.watch = is_set
        proxy.gate = gate
    holder = lab.holder(adapter, key, DRIFT_TTL_MS)
    with warp.installed():
        got = holder.acquire(0)
    for proxy in proxies:
        proxy.gate = None
    if got:
        with contextlib.suppress(Exception):
            holder.release()
    lab.flush()
    return got, warp.jumped


def check_drift(lab: Lab) -> Row:
    _redlock(lab, "drift")
    lab.require_real("holding the replies and advancing the clocks (a proxy)")
    ttl = DRIFT_TTL_MS
    allowance = drift_ms(ttl)
    control, jumped = _warped_acquire(lab, False, ttl + 50, "audit:drift:control")
    if not jumped:
        raise CheckError("no SET of the lock passed the proxies")
    room = ttl - allowance - DRIFT_ROOM_MS
    spare, _ = _warped_acquire(lab, False, room, "audit:drift:room")
    inside = ttl - allowance / 2 - 2
    window, _ = _warped_acquire(lab, False, inside, "audit:drift:window")
    details = [
        f"lease {ttl} ms, drift allowance 1% + 2 ms = {allowance:.0f} ms",
        f"clocks advanced {ttl + 50} ms during the attempt: acquired={control}",
        f"clocks advanced {room:.0f} ms (leaving {DRIFT_ROOM_MS} ms of validity): acquired={spare}",
        f"clocks advanced {inside:.0f} ms (leaving less than the allowance): acquired={window}",
    ]
    if control:
        return _row(
            "drift",
            Status.FAIL,
            "no: accepted a lock whose acquisition outlasted its TTL (it does not check the "
            "elapsed time against any clock the audit can advance)",
            details=details,
        )
    if window:
        return _row(
            "drift",
            Status.FAIL,
            f"no: accepted with TTL - {allowance / 2 + 2:.0f} ms elapsed, inside the "
            f"{allowance:.0f} ms drift allowance",
            details=details,
        )
    if not spare:
        return _row(
            "drift",
            Status.NOT_RUN,
            f"inconclusive: it also refused an attempt that left {DRIFT_ROOM_MS} ms of "
            "validity, so the refusals may not come from the drift arithmetic",
            details=details,
        )
    return _row(
        "drift",
        Status.PASS,
        f"yes: refused with TTL - {allowance / 2 + 2:.0f} ms elapsed, inside the "
        f"{allowance:.0f} ms drift allowance (1% of the TTL + 2 ms), and accepted with "
        f"{DRIFT_ROOM_MS} ms to spare",
        details=details,
    )


def check_monotonic(lab: Lab) -> Row:
    _redlock(lab, "monotonic")
    lab.require_real("holding the replies and advancing the clocks (a proxy)")
    ttl = DRIFT_TTL_MS
    control, jumped = _warped_acquire(lab, False, ttl + 50, "audit:clock:control")
    if not jumped:
        raise CheckError("no SET of the lock passed the proxies")
    if control:
        return _row(
            "monotonic",
            Status.NOT_RUN,
            "inconclusive: the lock ignored an acquisition longer than its TTL",
        )
    wall, _ = _warped_acquire(lab, True, ttl + 50, "audit:clock:wall")
    details = [
        f"all clocks advanced {ttl + 50} ms mid-attempt: refused",
        f"only the wall clock (time.time) advanced {ttl + 50} ms: acquired={wall}",
    ]
    if wall:
        return _row(
            "monotonic",
            Status.PASS,
            "yes: a wall-clock jump during the attempt changed nothing",
            details=details,
        )
    return _row(
        "monotonic",
        Status.FAIL,
        "no: it times the attempt with the wall clock; a jump of time.time() made it refuse "
        "a lock it had won",
        details=details,
    )


CHECK_FUNCTIONS: dict[str, Callable[[Lab], Row]] = {
    "value": check_value,
    "release": check_release,
    "ttl": check_ttl,
    "exclusion": check_exclusion,
    "pause": check_pause,
    "fencing": check_fencing,
    "renewal": check_renewal,
    "parallel": check_parallel,
    "partial": check_partial,
    "retry": check_retry,
    "drift": check_drift,
    "monotonic": check_monotonic,
}


def run_check(lab: Lab, check_id: str) -> Row:
    """Run one check, turning its exceptions into honest rows; always clean up."""
    started = time.monotonic()
    try:
        row = CHECK_FUNCTIONS[check_id](lab)
        row.data["seconds"] = round(time.monotonic() - started, 2)
        return row
    except _NotApplicable as why:
        return _row(check_id, Status.NA, str(why))
    except NotRunnable as why:
        status = Status.NA if str(why).startswith("not applicable") else Status.NOT_RUN
        return _row(check_id, status, str(why))
    except CheckError as error:
        return _row(check_id, Status.ERROR, f"the check could not run: {error}")
    except Exception as error:
        return _row(check_id, Status.ERROR, f"the check raised {type(error).__name__}: {error}")
    finally:
        lab.cleanup()
