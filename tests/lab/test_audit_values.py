"""The audit's instruments on their own: value heuristics, the RESP parser, the clock warp."""

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

from lockguide import redlock as redlock_module
from lockguide_lab.audit.proxy import ClockWarp, RespRequests
from lockguide_lab.audit.values import MIN_BITS, judge_values


def sample(make: object, n: int = 6) -> list[bytes]:
    assert callable(make)
    return [str(make()).encode() for _ in range(n)]


def test_twenty_random_bytes_in_hex_pass() -> None:
    verdict = judge_values(sample(lambda: secrets.token_hex(20)))
    assert verdict.ok
    assert verdict.bits >= 160


def test_uuid4_passes_with_its_fixed_digits_discounted() -> None:
    verdict = judge_values(sample(uuid.uuid4))
    assert verdict.ok
    assert MIN_BITS <= verdict.bits < 128  # the version digit carries nothing


def test_uuid1_fails_as_time_and_mac() -> None:
    verdict = judge_values(sample(lambda: uuid.uuid1().hex))
    assert not verdict.ok
    assert verdict.problem is not None
    assert "uuid1" in verdict.problem


def test_host_pid_counter_fails_as_a_number() -> None:
    counter = iter(range(1, 100))
    verdict = judge_values(sample(lambda: f"web-3:{os.getpid()}:{next(counter)}"))
    assert not verdict.ok
    assert verdict.problem is not None
    assert "number" in verdict.problem


def test_timestamp_values_fail_as_a_number() -> None:
    verdict = judge_values(sample(time.time_ns))
    assert not verdict.ok


def test_a_repeated_value_fails() -> None:
    verdict = judge_values([b"same-token", b"other-token", b"same-token"])
    assert verdict.problem == "a value repeated across acquisitions"


def test_short_random_values_fail_for_lack_of_room() -> None:
    verdict = judge_values(sample(lambda: secrets.token_hex(8)))  # 64 bits
    assert not verdict.ok
    assert verdict.bits == pytest.approx(64)


def test_base64_of_18_random_bytes_passes() -> None:
    verdict = judge_values(sample(lambda: base64.b64encode(os.urandom(18)).decode()))
    assert verdict.ok


def test_shape_alone_cannot_tell_a_mersenne_twister_value() -> None:
    # 22 alphanumeric characters look random enough; only re-seeding exposes
    # them (the audit's value check does that; see test_audit.py for redlock-py).
    rng = random.Random(1)
    alphabet = string.ascii_letters + string.digits
    verdict = judge_values(sample(lambda: "".join(rng.choice(alphabet) for _ in range(22))))
    assert verdict.ok


def test_resp_parser_reassembles_commands_split_across_reads() -> None:
    wire = (
        b"*5\r\n$3\r\nSET\r\n$4\r\nlock\r\n$2\r\nv1\r\n$2\r\nNX\r\n$2\r\nPX\r\n*1\r\n$4\r\nPING\r\n"
    )
    parser = RespRequests()
    got = []
    for i in range(0, len(wire), 7):
        got += parser.feed(wire[i : i + 7])
    assert got == [[b"SET", b"lock", b"v1", b"NX", b"PX"], [b"PING"]]


def test_clock_warp_moves_every_clock_only_while_installed() -> None:
    warp = ClockWarp()
    with warp.installed():
        before_wall, before_mono = time.time(), time.monotonic()
        warp.jump(5.0)
        assert time.time() - before_wall == pytest.approx(5.0, abs=0.5)
        assert time.monotonic() - before_mono == pytest.approx(5.0, abs=0.5)
        assert timeit.default_timer() - before_mono > 4.0
    assert abs(time.time() - before_wall) < 1.0


def test_wall_only_warp_leaves_the_monotonic_clock_alone() -> None:
    warp = ClockWarp(wall_only=True)
    with warp.installed():
        before_mono = time.monotonic()
        before_wall = time.time()
        warp.jump(5.0)
        assert time.time() - before_wall == pytest.approx(5.0, abs=0.5)
        assert time.monotonic() - before_mono < 1.0


def test_clock_warp_reaches_module_level_copies_outside_the_standard_library() -> None:
    # lockguide.redlock times its attempts through ``_now = time.monotonic``.
    original = time.monotonic
    assert redlock_module._now is original
    warp = ClockWarp()
    with warp.installed():
        before = original()
        warp.jump(5.0)
        assert redlock_module._now() - before == pytest.approx(5.0, abs=0.5)
        assert threading._time is original  # type: ignore[attr-defined]  # stdlib waits stay real
    assert redlock_module._now is original


def test_a_module_imported_during_the_warp_gets_the_real_clock_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    late = types.ModuleType("late_import")
    monkeypatch.setitem(sys.modules, "late_import", late)
    warp = ClockWarp()
    with warp.installed():
        late.clock = time.monotonic  # type: ignore[attr-defined]  # from time import monotonic
        warp.jump(5.0)
    assert late.clock is time.monotonic


def test_clock_readers_wait_until_a_held_warp_has_jumped() -> None:
    warp = ClockWarp()
    readings: list[float] = []
    with warp.installed():
        start = time.monotonic()
        with warp.held():
            reader = threading.Thread(target=lambda: readings.append(time.monotonic()))
            reader.start()
            reader.join(0.05)
            assert reader.is_alive()  # its clock reading waits for the jump
            warp.jump(5.0)
        reader.join(1.0)
    assert len(readings) == 1
    assert readings[0] - start >= 5.0
