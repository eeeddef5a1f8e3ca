"""The rows every lock is held to: its value, its release, its TTL, exclusion, fencing."""

from __future__ import annotations

import random

from lockguide_lab.audit.adapter import DEFAULT, NO_EXPIRY, TtlSpec, Unsupported
from lockguide_lab.audit.checks.common import SEED, acquire, row, seconds
from lockguide_lab.audit.report import Row, Status
from lockguide_lab.audit.session import AuditSession, CheckError, NotRunnable, describe_call
from lockguide_lab.audit.values import MIN_BITS, judge_values

__all__ = ["check_exclusion", "check_fencing", "check_release", "check_ttl", "check_value"]


# -- unique, unpredictable value -----------------------------------------------------------


def check_value(session: AuditSession) -> Row:
    adapter = session.adapter()
    key = "audit:value"

    def one_value() -> bytes | None:
        holder = session.holder(adapter, key, 10_000)
        keys = acquire(session, holder)
        holder.release()
        first = [k.value for k in keys if k.value is not None]
        return first[0] if first else None

    one_value()  # warm-up: counters or scripts a first acquisition creates
    values = [one_value() for _ in range(6)]
    if any(v is None for v in values):
        return row(
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
    judged = judge_values(observed)
    problems = []
    if runs[0] == runs[1]:
        problems.append(
            "values repeat after random.seed(): drawn from Python's random module "
            "(Mersenne Twister), not a CSPRNG"
        )
    if judged.problem:
        problems.append(judged.problem)
    details = [
        f"{len(observed)} values observed on the server, {judged.length} characters, "
        f"{judged.alphabet}, room for {judged.bits:.0f} bits; e.g. {observed[0]!r}",
        f"re-seeding random.seed({SEED}) twice gave "
        + ("the same values" if runs[0] == runs[1] else "different values"),
    ]
    data = {"length": judged.length, "bits": round(judged.bits), "alphabet": judged.alphabet}
    if problems:
        return row("value", Status.FAIL, problems[0], details=details + problems[1:], **data)
    return row(
        "value",
        Status.PASS,
        f"distinct {judged.length}-character values with room for at least {MIN_BITS} random "
        "bits; not reproducible by seeding random",
        details=details,
        **data,
    )


# -- release is compare-and-delete -----------------------------------------------------------


def check_release(session: AuditSession) -> Row:
    adapter = session.adapter()
    key = "audit:release"
    session.warm(adapter, key)
    a = session.holder(adapter, key, 10_000)
    a_keys = acquire(session, a)
    how = session.end_hold(a_keys)
    b = session.holder(adapter, key, 10_000)
    got, b_keys, _ = session.acquire_observed(b, 3000)
    if not got:
        raise CheckError("B could not acquire after A's lease ran out")
    extend_said, _, extend_error = describe_call(lambda: a.extend(60_000))
    release_said, _, _ = describe_call(a.release)
    b_intact = session.still_there(b_keys)
    stretched = any(
        session.admins[k.server].pttl(k.name) > 0 and session.admins[k.server].pttl(k.name) > 10_000
        for k in b_keys
    )
    c = session.holder(adapter, key, 10_000)
    c_got = c.acquire(0)
    details = [
        f"A acquired, then {how}; B acquired",
        f"A's stale extend(60 s): {extend_said}"
        + (" (not supported)" if isinstance(extend_error, Unsupported) else ""),
        f"A's stale release: {release_said}",
        f"B's key intact: {b_intact}; C acquired: {c_got}",
    ]
    if c_got or not b_intact:
        return row(
            "release",
            Status.FAIL,
            "no: A's stale release removed B's lock, and C acquired while B held it",
            details=details,
        )
    if stretched:
        return row(
            "release",
            Status.FAIL,
            "release left B alone, but A's stale extend reset the TTL of B's key",
            details=details,
        )
    return row(
        "release",
        Status.PASS,
        f"yes: A's stale release left B's lock alone (C refused); A's release {release_said}",
        details=details,
    )


# -- a TTL by default ------------------------------------------------------------------------


def check_ttl(session: AuditSession) -> Row:
    adapter = session.adapter()
    key = "audit:ttl"
    session.warm(adapter, key)
    spec: TtlSpec = 10_000 if adapter.ttl_required else DEFAULT
    holder = session.holder(adapter, key, spec)
    keys = acquire(session, holder)
    lock_keys = [k for k in keys if k.value is not None]
    if not lock_keys:
        other = session.holder(adapter, key, spec)
        if not other.acquire(0):
            return row(
                "ttl",
                Status.NA,
                "no key to expire: the lock is held by a connection, and ends when the "
                "connection closes",
            )
        return row("ttl", Status.FAIL, "acquire reported success but left no key at all")
    ttls = sorted({k.pttl for k in lock_keys})
    details = [f"PTTL after the acquire: {ttls} ms on {len(lock_keys)} key(s)"]
    if any(t < 0 for t in ttls):
        return row(
            "ttl",
            Status.FAIL,
            "no: PTTL -1 after a default acquire; a holder that crashes keeps the lock forever",
            details=details,
        )
    if adapter.ttl_required:
        return row(
            "ttl",
            Status.PASS,
            f"yes: the TTL is a required argument (PTTL {seconds(max(ttls))} for a 10 s lease)",
            details=details,
        )
    return row(
        "ttl",
        Status.PASS,
        f"yes: PTTL {seconds(max(ttls))} after a default acquire",
        details=details,
        default_ttl_ms=max(ttls),
    )


# -- basic exclusion in every TTL mode -----------------------------------------------------------


def check_exclusion(session: AuditSession) -> Row:
    adapter = session.adapter()
    modes: list[tuple[str, TtlSpec]] = [
        ("default", 10_000 if adapter.ttl_required else DEFAULT),
        ("no-expiry", NO_EXPIRY),
    ]
    details = []
    broken = []
    for label, spec in modes:
        key = f"audit:exclusion:{label}"
        session.warm(adapter, key)
        try:
            a = session.holder(adapter, key, spec)
        except Unsupported:
            details.append(f"{label}: the library has no such option")
            continue
        got, keys, _ = session.acquire_observed(a)
        if not got:
            raise CheckError(f"could not acquire an uncontended lock ({label})")
        b = session.holder(adapter, key, spec)
        b_got = b.acquire(0)
        details.append(
            f"{label}: A acquired ({len(keys)} new key(s) on the server); B acquired: {b_got}"
        )
        if b_got:
            broken.append((label, keys))
    if broken:
        label, keys = broken[0]
        why = " (A's key was already gone)" if not keys else ""
        return row(
            "exclusion",
            Status.FAIL,
            f"no: with the {label} option B acquired while A held the lock{why}",
            details=details,
        )
    tried = [d.split(":")[0] for d in details if "no such option" not in d]
    return row(
        "exclusion",
        Status.PASS,
        f"yes: B refused while A held ({', '.join(tried)})",
        details=details,
    )


# -- fencing tokens ------------------------------------------------------------------------------


def check_fencing(session: AuditSession) -> Row:
    adapter = session.adapter()
    key = "audit:fencing"
    session.warm(adapter, key)
    a = session.holder(adapter, key, 10_000)
    a_keys = acquire(session, a)
    ta = a.token()
    if ta is None:
        return row("fencing", Status.FAIL, "no: the lock hands the holder no fencing token")
    try:
        how = session.end_hold(a_keys)
    except NotRunnable:
        a.release()
        how = "A released (this backend cannot end a key-less hold)"
    b = session.holder(adapter, key, 10_000)
    if not b.acquire(3000):
        raise CheckError("B could not acquire after A's hold ended")
    tb = b.token()
    b.release()
    c = session.holder(adapter, key, 10_000)
    acquire(session, c)
    tc = c.token()
    details = [f"A's hold ended ({how}); tokens A={ta}, B={tb}, C={tc}"]
    if tb is not None and tc is not None and ta < tb < tc:
        return row(
            "fencing",
            Status.PASS,
            "yes: every acquisition got a larger token, also after a lease ran out",
            details=details,
        )
    return row("fencing", Status.FAIL, "tokens were offered but did not increase", details=details)
