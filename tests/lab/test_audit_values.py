"""The audit's instruments on their own: value heuristics, the link's RESP parser, the clocks."""

from __future__ import annotations

import base64
import os
import random
import secrets
import string
import sys
import threading
import time
import timeit
import types
import uuid

import pytest

from lockguide_lab.audit.values import MIN_BITS, judge_values
from lockguide_lab.testbed.clock import ProcessClocks, VirtualClock
from lockguide_lab.testbed.link import RespRequests


def sample(make: object, n: int = 6) -> list[bytes]:
    assert callable(make)
    return [str(make()).encode() for _ in range(n)]


def test_twenty_random_bytes_in_hex_pass() -> None:
    judged = judge_values(sample(lambda: secrets.token_hex(20)))
    assert judged.ok
    assert judged.bits >= 160


def test_uuid4_passes_with_its_fixed_digits_discounted() -> None:
    judged = judge_values(sample(uuid.uuid4))
    assert judged.ok
    assert MIN_BITS <= judged.bits < 128  # the version digit carries nothing


def test_uuid1_fails_as_time_and_mac() -> None:
    judged = judge_values(sample(lambda: uuid.uuid1().hex))
    assert not judged.ok
    assert judged.problem is not None
    assert "uuid1" in judged.problem


def test_host_pid_counter_fails_as_a_number() -> None:
    counter = iter(range(1, 100))
    judged = judge_values(sample(lambda: f"web-3:{os.getpid()}:{next(counter)}"))
    assert not judged.ok
    assert judged.problem is not None
    assert "number" in judged.problem


def test_timestamp_values_fail_as_a_number() -> None:
    judged = judge_values(sample(time.time_ns))
    assert not judged.ok


def test_a_repeated_value_fails() -> None:
    judged = judge_values([b"same-token", b"other-token", b"same-token"])
    assert judged.problem == "a value repeated across acquisitions"


def test_short_random_values_fail_for_lack_of_room() -> None:
    judged = judge_values(sample(lambda: secrets.token_hex(8)))  # 64 bits
    assert not judged.ok
    assert judged.bits == pytest.approx(64)


def test_base64_of_18_random_bytes_passes() -> None:
    judged = judge_values(sample(lambda: base64.b64encode(os.urandom(18)).decode()))
    assert judged.ok


def test_shape_alone_cannot_tell_a_mersenne_twister_value() -> None:
    # 22 alphanumeric characters look random enough; only re-seeding exposes
    # them (the audit's value check does that; see test_audit.py for redlock-py).
    rng = random.Random(1)
    alphabet = string.ascii_letters + string.digits
    judged = judge_values(sample(lambda: "".join(rng.choice(alphabet) for _ in range(22))))
    assert judged.ok


def test_resp_parser_reassembles_commands_split_across_reads() -> None:
    wire = (
        b"*5\r\n$3\r\nSET\r\n$4\r\nlock\r\n$2\r\nv1\r\n$2\r\nNX\r\n$2\r\nPX\r\n*1\r\n$4\r\nPING\r\n"
    )
    parser = RespRequests()
    got = []
    for i in range(0, len(wire), 7):
        got += parser.feed(wire[i : i + 7])
    assert got == [[b"SET", b"lock", b"v1", b"NX", b"PX"], [b"PING"]]


def test_process_clocks_move_every_clock_only_while_installed() -> None:
    clock = VirtualClock(flowing=True)
    with ProcessClocks(clock).installed():
        before_wall, before_mono = time.time(), time.monotonic()
        clock.jump(5_000)
        assert time.time() - before_wall == pytest.approx(5.0, abs=0.5)
        assert time.monotonic() - before_mono == pytest.approx(5.0, abs=0.5)
        assert timeit.default_timer() - before_mono > 4.0
    assert abs(time.time() - before_wall) < 1.0


def test_wall_only_process_clocks_leave_the_monotonic_clock_alone() -> None:
    clock = VirtualClock(flowing=True)
    with ProcessClocks(clock, wall_only=True).installed():
        before_mono = time.monotonic()
        before_wall = time.time()
        clock.jump(5_000)
        assert time.time() - before_wall == pytest.approx(5.0, abs=0.5)
        assert time.monotonic() - before_mono < 1.0


def test_process_clocks_reach_module_level_copies_outside_the_standard_library(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    peer = types.ModuleType("peer_lock")
    peer.clock = time.monotonic  # type: ignore[attr-defined]  # clock = time.monotonic
    monkeypatch.setitem(sys.modules, "peer_lock", peer)
    original = time.monotonic
    clock = VirtualClock(flowing=True)
    with ProcessClocks(clock).installed():
        before = original()
        clock.jump(5_000)
        assert peer.clock() - before == pytest.approx(5.0, abs=0.5)
        assert threading._time is original  # type: ignore[attr-defined]  # stdlib waits stay real
    assert peer.clock is original


def test_process_clocks_never_rebind_a_name_in_lockguide(monkeypatch: pytest.MonkeyPatch) -> None:
    # lockguide's locks take clock= instead; a copy in a lockguide module stays real.
    probe = types.ModuleType("lockguide.clock_probe")
    probe.clock = time.monotonic  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "lockguide.clock_probe", probe)
    clock = VirtualClock(flowing=True)
    with ProcessClocks(clock).installed():
        clock.jump(5_000)
        assert probe.clock is not time.monotonic  # the time module's is moved...
        assert abs(probe.clock() - time.monotonic() + 5.0) < 0.5  # ...the copy is not
    assert probe.clock is time.monotonic


def test_a_module_imported_while_installed_gets_the_real_clock_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    late = types.ModuleType("late_import")
    monkeypatch.setitem(sys.modules, "late_import", late)
    clock = VirtualClock(flowing=True)
    with ProcessClocks(clock).installed():
        late.clock = time.monotonic  # type: ignore[attr-defined]  # from time import monotonic
        clock.jump(5_000)
    assert late.clock is time.monotonic


def test_clock_readers_wait_until_a_held_clock_has_jumped() -> None:
    clock = VirtualClock(flowing=True)
    readings: list[float] = []
    with ProcessClocks(clock).installed():
        start = time.monotonic()
        with clock.held():
            reader = threading.Thread(target=lambda: readings.append(time.monotonic()))
            reader.start()
            reader.join(0.05)
            assert reader.is_alive()  # its clock reading waits for the jump
            clock.jump(5_000)
        reader.join(1.0)
    assert len(readings) == 1
    assert readings[0] - start >= 5.0


def test_a_standing_virtual_clock_moves_only_when_told() -> None:
    clock = VirtualClock()
    first = clock.monotonic()
    time.sleep(0.02)
    assert clock.monotonic() == first
    clock.tick(250)
    clock.advance_to(1_000)
    clock.jump(500)
    assert clock.now_ms() == 1_500
    assert clock.monotonic() - first == pytest.approx(1.5)
    with clock.real_time():
        time.sleep(0.02)
    assert clock.now_ms() > 1_510


@pytest.mark.parametrize(
    ("took_s", "said"),
    [
        (0.2, "within a few seconds"),
        (4.99, "within a few seconds"),
        (5.3, "after about 5 s"),
        (10.0, "after about 10 s"),
        (12.55, "after about 10 s"),  # a 10 s default on CI's loaded machine
        (14.9, "after about 10 s"),
        (20.0, "after about 20 s"),
    ],
)
def test_the_wait_rows_words_do_not_follow_the_machines_load(took_s: float, said: str) -> None:
    from lockguide_lab.audit.checks.lifecycle import _when

    assert _when(took_s) == said


class _Session:
    def __init__(self) -> None:
        self.cleanups = 0

    def cleanup(self) -> None:
        self.cleanups += 1


@pytest.mark.parametrize(("failures", "expected"), [(0, "pass"), (1, "pass"), (2, "error")])
def test_a_check_that_could_not_make_its_condition_happen_is_tried_again(
    monkeypatch: pytest.MonkeyPatch, failures: int, expected: str
) -> None:
    from lockguide_lab.audit import checks
    from lockguide_lab.audit.checks.common import row
    from lockguide_lab.audit.report import Status
    from lockguide_lab.audit.session import CheckError

    calls: list[int] = []

    def flaky(session: object) -> object:
        calls.append(1)
        if len(calls) <= failures:
            raise CheckError("no SET of the lock passed the links")
        return row("unique", Status.PASS, "yes")

    monkeypatch.setitem(checks.CHECK_FUNCTIONS, "unique", flaky)
    session = _Session()
    got = checks.run_check(session, "unique")  # type: ignore[arg-type]
    assert got.status.value == expected
    assert len(calls) == min(failures + 1, checks.TRIES)
    assert session.cleanups == len(calls)  # cleaned up after every try
    if expected == "error":
        assert got.summary == "the check could not run: no SET of the lock passed the links"


def test_the_audit_page_lists_every_declared_row_from_its_declaration() -> None:
    """The Audit page's table is made at build time from the rows' declarations
    (hooks/audit_rows.py): a new row is on the page with no edit to it."""
    from lockguide_lab.audit.checks import CHECKS
    from tests.docs.test_guide import load_hook
    from tests.sitebuild import ROOT

    hook = load_hook("audit_rows")
    page = (ROOT / "docs" / "audit.md").read_text("utf-8")
    assert page.count(hook.MARKER) == 1
    rendered = hook.on_page_markdown(page, None, None, None)
    assert hook.MARKER not in rendered
    rows = [line for line in rendered.splitlines() if line.startswith("| ")][2:]
    for check in CHECKS:
        line = next((r for r in rows if r.startswith(f"| {check.title} |")), None)
        assert line is not None, check.id
        assert check.does.replace("|", "\\|") in line
        assert check.passes in line
        assert all(f"[{item}](checklist.md#{item.lower()})" in line for item in check.items)


def test_a_row_declared_twice_or_in_another_rows_place_is_refused() -> None:
    from lockguide_lab.audit.checks import CHECKS
    from lockguide_lab.audit.checks.common import audit_row

    def nothing(session: object) -> object:
        raise AssertionError("never run")

    taken = CHECKS[0]
    with pytest.raises(ValueError, match="declared twice"):
        audit_row(taken.id, "again", must=False, order=10_000, does="", passes="")(nothing)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=f"share order={taken.order}"):
        audit_row("new", "new", must=False, order=taken.order, does="", passes="")(nothing)  # type: ignore[arg-type]
