"""The rows every lock is held to: its value, its release, its TTL, exclusion, fencing."""

from __future__ import annotations

import os
import random
import re
import socket
import threading
import time

from lockguide_lab.audit.adapter import DEFAULT, NO_EXPIRY, TtlSpec, Unsupported
from lockguide_lab.audit.checks.common import SEED, acquire, audit_row, row, seconds
from lockguide_lab.audit.child import HolderProcess
from lockguide_lab.audit.gates import CrashGate, HoldGate
from lockguide_lab.audit.report import Control, Row, Status
from lockguide_lab.audit.session import AuditSession, CheckError, NotRunnable, describe_call
from lockguide_lab.audit.values import MIN_BITS, judge_values

# -- unique value (the Redis docs' rule), unpredictable value (the guide's) --------------------


def _values(session: AuditSession) -> tuple[list[bytes], list[list[bytes | None]]] | None:
    """Six values seen on the server, and two runs of three after the same ``random.seed``;
    ``None`` when the lock keeps no value in a key."""
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
        return None
    state = random.getstate()
    runs: list[list[bytes | None]] = []
    try:
        for _ in range(2):
            random.seed(SEED)
            runs.append([one_value() for _ in range(3)])
    finally:
        random.setstate(state)
    return [v for v in values if v is not None], runs


_NO_VALUE = (
    "no key holds a value while the lock is held (it is held by a connection): "
    "there is no value to repeat or guess"
)


# The Redis docs ask for a unique value; unpredictable is the guide's own, stricter
# rule (a value another client can produce lets it release a lock it does not hold).
@audit_row(
    "unique",
    "unique value (the Redis docs' rule)",
    must=True,
    order=10,
    items=("C-3",),
    does="acquires 6 times, reads the stored value",
    passes="no value repeats",
    controls=(Control("repeating_value", "single"),),
)
def check_unique(session: AuditSession) -> Row:
    """The Redis docs' rule: a value unique per acquisition (what the release compares)."""
    sampled = _values(session)
    if sampled is None:
        return row("unique", Status.NA, _NO_VALUE)
    observed, _ = sampled
    distinct = len(set(observed))
    details = [f"{len(observed)} values observed on the server, {distinct} distinct"]
    if distinct < len(observed):
        return row(
            "unique",
            Status.FAIL,
            "no: a value repeated across acquisitions, so one holder's release can match another's",
            details=details,
        )
    return row(
        "unique",
        Status.PASS,
        f"yes: {len(observed)} acquisitions, {distinct} values",
        details=details,
    )


@audit_row(
    "unpredictable",
    "unpredictable value (the guide's own rule)",
    must=False,
    order=20,
    items=("C-3",),
    does="the same values, then two runs after the same `random.seed()`",
    passes=(
        "not a `uuid1`, not only a number changing, room for 120 random bits, not reproduced "
        "by the seed"
    ),
    controls=(Control("predictable_value", "single"),),
)
def check_unpredictable(session: AuditSession) -> Row:
    """The guide's own, stricter rule: a value no other client can produce."""
    sampled = _values(session)
    if sampled is None:
        return row("unpredictable", Status.NA, _NO_VALUE)
    observed, runs = sampled
    distinct = list(dict.fromkeys(observed))
    if len(distinct) < 2:
        return row("unpredictable", Status.FAIL, "no: every acquisition stored the same value")
    judged = judge_values(distinct)
    problems = []
    # Seeded runs that repeat values seen before prove nothing about random (a lock whose
    # values repeat anyway fails the unique row instead).
    reseeded = runs[0] == runs[1] and not set(runs[0]) <= set(observed)
    if reseeded:
        problems.append(
            "values repeat after random.seed(): drawn from Python's random module "
            "(Mersenne Twister), not a CSPRNG"
        )
    if judged.problem and "repeated" not in judged.problem:
        problems.append(judged.problem)
    details = [
        f"{len(distinct)} distinct values, {judged.length} characters, "
        f"{judged.alphabet}, room for {judged.bits:.0f} bits; e.g. {observed[0]!r}",
        f"re-seeding random.seed({SEED}) twice gave "
        + ("the same new values" if reseeded else "no new value twice"),
    ]
    data = {"length": judged.length, "bits": round(judged.bits), "alphabet": judged.alphabet}
    if problems:
        return row(
            "unpredictable", Status.FAIL, problems[0], details=details + problems[1:], **data
        )
    return row(
        "unpredictable",
        Status.PASS,
        # (the length stays in the details: a value naming its holder varies in length)
        f"yes: room for at least {MIN_BITS} random bits in every value; not reproducible by "
        "seeding random",
        details=details,
        **data,
    )


# -- who holds it: a value that names its holder (the guide's own rule) -------------------------


def names_this_process(value: str) -> str | None:
    """What in ``value`` names this process (its host name or its pid, as a word of its
    own), or ``None``: a reader of the key learns who holds it, not only that someone does."""
    words = set(re.split(r"[\s:|/@,;=]+", value))
    host = socket.gethostname()
    if host in words or host.split(".")[0] in words:
        return "the host name"
    if str(os.getpid()) in words:
        return "the process id"
    return None


@audit_row(
    "holder",
    "the value names its holder (the guide's own rule)",
    must=False,
    order=25,
    items=("C-3",),
    does="acquires, reads the stored value",
    passes="the host name or the pid is a word of the value (beside its random part)",
    controls=(Control("anonymous_value", "single"),),
)
def check_holder(session: AuditSession) -> Row:
    """Who holds the key, readable in the key: what an operator needs when a lock is stuck."""
    adapter = session.adapter()
    holder = session.holder(adapter, "audit:holder", 10_000)
    keys = acquire(session, holder)
    holder.release()
    values = [k.value for k in keys if k.value is not None]
    if not values:
        return row("holder", Status.NA, _NO_VALUE)
    text = values[0].decode(errors="replace")
    named = names_this_process(text)
    details = [f"stored value: {text!r}"]
    if named is None:
        return row(
            "holder",
            Status.FAIL,
            "no: the value does not say which host or process holds the lock",
            details=details,
        )
    return row("holder", Status.PASS, f"yes: the value carries {named}", details=details)


# -- release is compare-and-delete -----------------------------------------------------------


@audit_row(
    "release",
    "release is compare-and-delete",
    must=True,
    order=30,
    items=("C-3",),
    does=(
        "A's lease is ended on the server (`PEXPIRE 1`); B acquires; A extends and releases; "
        "C tries. Then the reply to A's release `GET` is held while B acquires"
    ),
    passes="C refused and B's key intact, both times",
    controls=(Control("two_command_release", "single"),),
)
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
    raced, race_details = _release_race(session, key)
    details += race_details
    if raced is True:
        return row(
            "release",
            Status.FAIL,
            "no: the release compares and deletes in two commands; when the lease ran out "
            "between them and B acquired, A's release deleted B's key",
            details=details,
        )
    race = (
        "; a lease that ran out between the release's GET and its next command changed nothing"
        if raced is False
        else ""
    )
    return row(
        "release",
        Status.PASS,
        f"yes: A's stale release left B's lock alone (C refused); A's release {release_said}"
        + race,
        details=details,
    )


def _release_race(session: AuditSession, key: str) -> tuple[bool | None, list[str]]:
    """Hold the reply to a release's ``GET`` of the lock key while the lease runs out and B
    acquires, then let it through. Returns (B's key deleted, details); ``None`` when the
    release sent no ``GET`` (one atomic command) or this backend has no links."""
    if not session.real:
        return None, ["race between the release's commands: not run (needs a TCP link)"]
    links, servers = session.linked()
    through = session.adapter(servers)
    direct = session.adapter()
    session.warm(direct, key + ":race")
    try:
        names = session.lock_key_names(direct, key + ":race")
    except NotRunnable:
        return None, ["race between the release's commands: the lock keeps no key to GET"]
    a = session.holder(through, key + ":race", 10_000)
    a_keys = [k for k in acquire(session, a) if k.value is not None]
    if not a_keys:
        return None, ["race between the release's commands: the lock keeps no value to GET"]
    gate = HoldGate()

    def is_get(command: list[bytes]) -> bool:
        return len(command) > 1 and command[0].upper() == b"GET" and command[1] in names

    for link in links:
        link.watch = is_get
        link.gate = gate
    outcome: list[str] = []
    releasing = threading.Thread(target=lambda: outcome.append(describe_call(a.release)[0]))
    releasing.start()
    give_up = time.monotonic() + 2.0
    while not gate.held.is_set() and releasing.is_alive() and time.monotonic() < give_up:
        gate.held.wait(0.01)
    if not gate.held.is_set():
        releasing.join(5)
        for link in links:
            link.gate = None
        return None, ["race between the release's commands: the release sent no GET of the key"]
    session.end_hold(a_keys)
    b = session.holder(direct, key + ":race", 10_000)
    got, b_keys, _ = session.acquire_observed(b, 3000)
    gate.open()
    releasing.join(5)
    for link in links:
        link.gate = None
    if not got:
        raise CheckError("B could not acquire after A's lease ran out (race)")
    deleted = not session.still_there(b_keys)
    return deleted, [
        "race: the reply to A's release GET was held; meanwhile A's lease ran out and B "
        f"acquired; then the reply went through: A's release {outcome[0] if outcome else '?'}; "
        f"B's key deleted: {deleted}"
    ]


# -- a TTL by default ------------------------------------------------------------------------


@audit_row(
    "ttl",
    "a TTL is set by default",
    must=True,
    order=40,
    items=("C-4",),
    does=(
        "reads `PTTL` after a default acquire; then kills a holder process after each command "
        "of its acquire"
    ),
    passes="every lock key has a TTL, also after a crash between commands",
    controls=(Control("two_command_ttl", "single"),),
)
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
    crashed, crash_details = _crash_between_commands(session, key, spec)
    details += crash_details
    if crashed is not None:
        return row(
            "ttl",
            Status.FAIL,
            f"no: the TTL is set in a second command; a holder that crashed after {crashed} "
            "left a key with no TTL, held forever",
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


#: The words of a command the crash check shows (a command and how it sets an expiry).
_EXPIRY_WORDS = {b"NX", b"XX", b"PX", b"EX", b"PXAT", b"EXAT", b"KEEPTTL"}
#: How many of the acquire's commands on the lock key the crash check crashes after, at most.
CRASH_STEPS = 4


def _crash_between_commands(
    session: AuditSession, key: str, spec: TtlSpec
) -> tuple[str | None, list[str]]:
    """Crash a holder process after each command of its acquire that names the lock key, in
    turn, before it reads the reply. Returns (the command after which a key was left with
    no TTL, or ``None``; details)."""
    if not session.real or session.factory_spec is None:
        return None, ["crash between the acquire's commands: not run (needs a second process)"]
    # After a warm-up, the keys that appear are the lock's own: a fencing counter that
    # outlives every hold (and rightly has no TTL) exists already and is left out.
    adapter = session.adapter()
    session.warm(adapter, key + ":crash")
    try:
        names = session.lock_key_names(adapter, key + ":crash")
    except NotRunnable:
        return None, ["crash between the acquire's commands: the lock keeps no key"]
    details = []
    for step in range(1, CRASH_STEPS + 1):
        links, servers = session.linked()
        gate = CrashGate(step)
        seen: list[list[bytes]] = []

        def names_key(command: list[bytes]) -> bool:
            return any(arg in names for arg in command[1:])

        def observe(command: list[bytes], _: float, seen: list[list[bytes]] = seen) -> None:
            if names_key(command):
                seen.append(command)

        for link in links:
            link.watch = names_key
            link.gate = gate
            link.observers.append(observe)
        child = HolderProcess(session, key + ":crash", spec, servers)
        gate.pid = child.pid
        try:
            outcome = None
            give_up = time.monotonic() + 30.0
            while not gate.crashed.is_set() and outcome is None:
                if time.monotonic() > give_up:
                    raise CheckError(
                        f"the holder process neither acquired nor crashed in 30 s (step {step})"
                    )
                outcome = child.first_line(0.02)
                if outcome is None and child.proc.poll() is not None:
                    break
        finally:
            child.close()
            for link in links:
                link.gate = None
        if not gate.crashed.is_set():
            details.append(f"crash check: the acquire finished before a crash at command {step}")
            return None, details
        last = seen[step - 1] if len(seen) >= step else [b"?"]
        shown = " ".join(
            a.decode("latin-1").upper()
            for i, a in enumerate(last)
            if i == 0 or a.upper() in _EXPIRY_WORDS
        )
        forever = [
            (i, name)
            for i, admin in enumerate(session.admins)
            for name in names
            if admin.exists(name) and admin.pttl(name) == -1
        ]
        details.append(
            f"crash after command {step} on the key ({shown.strip()}): "
            + ("a key left with no TTL" if forever else "no key without a TTL")
        )
        session.flush()
        if forever:
            return shown.strip(), details
    return None, details


# -- basic exclusion in every TTL mode -----------------------------------------------------------


@audit_row(
    "exclusion",
    "a second holder is refused (every TTL mode)",
    must=True,
    order=50,
    does="A holds, B tries, in every TTL mode",
    passes="B refused",
)
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


@audit_row(
    "fencing",
    "fencing tokens offered",
    must=False,
    order=70,
    items=("C-8", "C-9"),
    does="three holders in turn, one after an expired lease",
    passes="tokens strictly increase",
)
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
