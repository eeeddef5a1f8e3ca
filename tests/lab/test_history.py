"""The linearizability checker, on histories whose verdicts are known, and against brute force.

Hand-made histories (textbook cases, crashed operations, each model's
violations) pin the verdicts; hypothesis draws small random histories and
compares the search with a reference that tries every order of every subset,
so a search that prunes too much or too little shows up as a disagreement.
"""

from __future__ import annotations

import itertools
import json
import random
import subprocess
import sys
from collections.abc import Hashable, Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lockguide_lab.history import (
    FencedResource,
    HistoryError,
    LeaseService,
    Model,
    Op,
    Register,
    Status,
    check,
    linearizable,
    parse,
)
from lockguide_lab.history.__main__ import main

# -- writing histories by hand ----------------------------------------------------------------


def h(*lines: tuple[Any, ...]) -> str:
    """Lines as (process, type, f, value[, key])."""
    out = []
    for line in lines:
        data: dict[str, Any] = {"process": line[0], "type": line[1], "f": line[2]}
        data["value"] = line[3] if len(line) > 3 else None
        if len(line) > 4:
            data["key"] = line[4]
        out.append(json.dumps(data))
    return "\n".join(out) + "\n"


def verdict(model: Model, text: str) -> bool:
    return check(model, parse(text)).ok


# -- the register: textbook cases -------------------------------------------------------------


def test_a_read_after_a_completed_write_must_see_it() -> None:
    sees_it = h(
        (0, "invoke", "write", 1),
        (0, "ok", "write", 1),
        (1, "invoke", "read"),
        (1, "ok", "read", 1),
    )
    stale = sees_it.replace('"ok", "f": "read", "value": 1', '"ok", "f": "read", "value": null')
    assert verdict(Register(), sees_it)
    assert not verdict(Register(), stale)


def test_a_read_concurrent_with_a_write_may_see_either_value() -> None:
    for seen in (None, 1):
        text = h(
            (0, "invoke", "write", 1),
            (1, "invoke", "read"),
            (1, "ok", "read", seen),
            (0, "ok", "write", 1),
        )
        assert verdict(Register(), text), seen


def test_new_old_inversion_is_not_linearizable() -> None:
    # Herlihy & Wing's classic: during one long write, a read sees the new value and a
    # later read (begun after the first ended) sees the old one again.
    text = h(
        (0, "invoke", "write", 1),
        (1, "invoke", "read"),
        (1, "ok", "read", 1),
        (2, "invoke", "read"),
        (2, "ok", "read", None),
        (0, "ok", "write", 1),
    )
    result = check(Register(), parse(text))
    assert not result.ok
    assert result.prefix == 5
    assert result.unplaced is not None
    assert result.unplaced.process == 2
    # The same reads overlapping each other can be ordered old, new: linearizable.
    overlapping = h(
        (0, "invoke", "write", 1),
        (1, "invoke", "read"),
        (2, "invoke", "read"),
        (1, "ok", "read", 1),
        (2, "ok", "read", None),
        (0, "ok", "write", 1),
    )
    assert verdict(Register(), overlapping)


def test_two_writers_and_readers_that_disagree_on_the_order() -> None:
    # Writes 1 and 2 overlap; one reader sees 1 then 2, the other 2 then 1, all reads
    # sequential per reader and overlapping across readers: no single order fits both.
    text = h(
        (0, "invoke", "write", 1),
        (1, "invoke", "write", 2),
        (2, "invoke", "read"),
        (3, "invoke", "read"),
        (2, "ok", "read", 1),
        (3, "ok", "read", 2),
        (2, "invoke", "read"),
        (3, "invoke", "read"),
        (2, "ok", "read", 2),
        (3, "ok", "read", 1),
        (0, "ok", "write", 1),
        (1, "ok", "write", 2),
    )
    assert not verdict(Register(), text)


def test_cas_swaps_only_from_the_value_it_names() -> None:
    base = [(0, "invoke", "write", 1), (0, "ok", "write", 1)]
    swapped = h(
        *base,
        (1, "invoke", "cas", [1, 2]),
        (1, "ok", "cas", [1, 2]),
        (2, "invoke", "read"),
        (2, "ok", "read", 2),
    )
    wrong_from = h(*base, (1, "invoke", "cas", [3, 2]), (1, "ok", "cas", [3, 2]))
    refused = h(
        *base,
        (1, "invoke", "cas", [3, 2]),
        (1, "fail", "cas", [3, 2]),
        (2, "invoke", "read"),
        (2, "ok", "read", 1),
    )
    assert verdict(Register(), swapped)
    assert not verdict(Register(), wrong_from)
    assert verdict(Register(), refused)


# -- crashed and failed operations ------------------------------------------------------------


@pytest.mark.parametrize("ending", ["info", None], ids=["info", "no-completion"])
def test_a_crashed_write_may_have_happened_or_not_but_not_both(ending: str | None) -> None:
    crash = [(0, "invoke", "write", 1)] + ([(0, ending, "write", 1)] if ending else [])
    after = [(1, "invoke", "read"), (1, "ok", "read", 1), (1, "invoke", "read")]
    took_effect = h(*crash, *after, (1, "ok", "read", 1))
    never = h(*crash, (1, "invoke", "read"), (1, "ok", "read", None))
    both = h(*crash, *after, (1, "ok", "read", None))  # new, then old again
    assert verdict(Register(), took_effect)
    assert verdict(Register(), never)
    assert not verdict(Register(), both)


def test_a_crashed_write_takes_effect_only_after_its_invoke() -> None:
    text = h((1, "invoke", "read"), (1, "ok", "read", 1), (0, "invoke", "write", 1))
    assert not verdict(Register(), text)


def test_a_failed_write_did_not_happen() -> None:
    text = h(
        (0, "invoke", "write", 1),
        (0, "fail", "write", 1),
        (1, "invoke", "read"),
        (1, "ok", "read", 1),
    )
    assert not verdict(Register(), text)


def test_keys_are_checked_apart_and_the_failing_one_is_named() -> None:
    text = h(
        (0, "invoke", "write", 1, "x"),
        (0, "ok", "write", 1, "x"),
        (1, "invoke", "read", None, "y"),
        (1, "ok", "read", None, "y"),
        (1, "invoke", "read", None, "x"),
        (1, "ok", "read", 1, "x"),
    )
    result = check(Register(), parse(text))
    assert result.ok
    assert result.keys == 2
    bad = h(
        (0, "invoke", "write", 1, "x"),
        (0, "ok", "write", 1, "x"),
        (1, "invoke", "read", None, "y"),
        (1, "ok", "read", 1, "y"),
    )
    failed = check(Register(), parse(bad))
    assert not failed.ok
    assert failed.failing_key == "y"


# -- the lease service and the fenced resource ------------------------------------------------


def grant(p: int, start: float, end: float, f: str = "acquire", t: str = "ok") -> list[Any]:
    w = {"window": [start, end]}
    return [(p, "invoke", f, w), (p, t, f, w)]


def test_leases_one_after_another_pass_and_overlapping_ones_are_named() -> None:
    apart = h(*grant(0, 0, 100), *grant(1, 100, 200), *grant(0, 250, 300))
    assert verdict(LeaseService(), apart)
    overlap = h(*grant(0, 0, 100), *grant(1, 50, 150))
    result = check(LeaseService(), parse(overlap))
    assert not result.ok
    assert result.unplaced is not None
    assert result.unplaced.process == 1
    assert result.conflict is not None
    assert result.conflict.process == 0
    assert "conflicts with: process 0 acquire" in result.report()


def test_a_release_ends_the_window_early_and_a_renewal_needs_the_lease() -> None:
    released = h(
        *grant(0, 0, 100),
        (0, "invoke", "release", {"at": 40}),
        (0, "ok", "release", {"at": 40}),
        *grant(1, 50, 150),
    )
    assert verdict(LeaseService(), released)
    renewed = h(*grant(0, 0, 100), *grant(0, 90, 190, "renew"), *grant(1, 150, 250))
    assert not verdict(LeaseService(), renewed)
    stolen = h(*grant(0, 0, 100), *grant(1, 120, 220), *grant(0, 130, 230, "renew"))
    assert not verdict(LeaseService(), stolen)
    refused = h(*grant(0, 0, 100), *grant(1, 50, 150, t="fail"))
    assert verdict(LeaseService(), refused)


def write(p: int, token: int, data: str, t: str = "ok") -> list[Any]:
    v = {"token": token, "data": data}
    return [(p, "invoke", "write", v), (p, t, "write", v)]


def test_a_lower_token_accepted_after_a_higher_one_is_a_violation() -> None:
    good = h(
        *write(0, 1, "a"),
        *write(1, 2, "b"),
        *write(1, 2, "c"),
        (2, "invoke", "read"),
        (2, "ok", "read", "c"),
    )
    assert verdict(FencedResource(), good)
    stale = h(*write(1, 2, "b"), *write(0, 1, "a"))
    result = check(FencedResource(), parse(stale))
    assert not result.ok
    assert result.unplaced is not None
    assert result.unplaced.value["token"] == 1
    assert result.conflict is not None
    assert result.conflict.value["token"] == 2
    refused = h(
        *write(1, 2, "b"), *write(0, 1, "a", "fail"), (2, "invoke", "read"), (2, "ok", "read", "b")
    )
    assert verdict(FencedResource(), refused)
    lost = h(*write(0, 1, "a"), *write(1, 2, "b"), (2, "invoke", "read"), (2, "ok", "read", "a"))
    assert not verdict(FencedResource(), lost)


# -- the command line -------------------------------------------------------------------------


def run_cli(tmp_path: Path, text: str, model: str = "register") -> tuple[int, str, str]:
    path = tmp_path / "history.jsonl"
    path.write_text(text, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "lockguide_lab.history", "check", "--model", model, str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    return done.returncode, done.stdout, done.stderr


def test_cli_prints_the_verdict_and_exits_0_or_1(tmp_path: Path) -> None:
    good = h((0, "invoke", "write", 1), (0, "ok", "write", 1))
    code, out, _ = run_cli(tmp_path, good)
    assert code == 0
    assert out.startswith("linearizable (register model")
    bad = good + h((1, "invoke", "read"), (1, "ok", "read", 2))
    code, out, _ = run_cli(tmp_path, bad)
    assert code == 1
    assert out.startswith("not linearizable")
    assert "smallest failing prefix: lines 1-4" in out
    assert "could not place: process 1 read 2 (ok, lines 3-4)" in out


@pytest.mark.parametrize(
    ("text", "line", "words"),
    [
        (h((0, "invoke", "write", 1)) + h((1, "ok", "write", 1)), 2, "without an invoke"),
        (
            h((0, "invoke", "write", 1), (0, "ok", "write", 1), (0, "invoke", "push", 2)),
            3,
            "unknown f 'push'",
        ),
        (h((0, "invoke", "write", 1)) + '{"process": 0, "type": "ok",\n', 2, "bad JSON"),
        (h((0, "invoke", "read")) + h((0, "invoke", "read")), 2, "invokes again"),
        (h((0, "invoke", "cas", 1), (0, "ok", "cas", 1)), 1, "cas needs [from, to]"),
        (h((0, "begin", "read")), 1, "'type' must be one of"),
    ],
    ids=[
        "completion-without-invoke",
        "unknown-f",
        "bad-json",
        "double-invoke",
        "bad-cas",
        "bad-type",
    ],
)
def test_cli_exits_2_on_a_malformed_history_naming_the_line(
    tmp_path: Path, text: str, line: int, words: str
) -> None:
    code, out, err = run_cli(tmp_path, text)
    assert code == 2
    assert out == ""
    assert f"line {line}: " in err
    assert words in err


def test_cli_main_reads_stdin_and_refuses_a_missing_file(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import io

    monkeypatch.setattr(sys, "stdin", io.StringIO(h(*grant(0, 0, 10), *grant(1, 5, 20))))
    assert main(["check", "--model", "lease", "-"]) == 1
    assert "conflicts with: process 0 acquire" in capsys.readouterr().out
    assert main(["check", "--model", "lease", "/nonexistent/history.jsonl"]) == 2


# -- against brute force ----------------------------------------------------------------------


def reference(model: Model, ops: Sequence[Op]) -> bool:
    """Every subset of the unknown operations, every order of it with the ok ones."""
    live = [op for op in ops if op.status is not Status.FAIL]
    required = [op for op in live if op.required]
    optional = [op for op in live if not op.required]
    end = float("inf")

    def before(a: Op, b: Op) -> bool:
        return (a.ret if a.ret is not None else end) < b.call

    for size in range(len(optional) + 1):
        for chosen in itertools.combinations(optional, size):
            group = required + list(chosen)
            for order in itertools.permutations(group):
                if any(
                    before(order[j], order[i])
                    for i in range(len(order))
                    for j in range(i + 1, len(order))
                ):
                    continue
                state: Hashable = model.init()
                for op in order:
                    legal, state = model.step(state, op)
                    if not legal:
                        break
                else:
                    return True
    return False


@st.composite
def histories(draw: st.DrawFn, kind: str) -> str:
    """A small random history: up to 3 processes, 6 operations, any completions."""
    processes = draw(st.integers(1, 3))
    total = draw(st.integers(1, 6))
    lines: list[tuple[Any, ...]] = []
    busy: dict[int, tuple[str, Any]] = {}
    started = 0
    names = iter(range(100))
    procs = [next(names) for _ in range(processes)]
    while started < total or busy:
        p_index = draw(st.integers(0, processes - 1))
        p = procs[p_index]
        if p in busy:
            f, value = busy.pop(p)
            kind_of_end = draw(st.sampled_from(["ok", "ok", "ok", "fail", "info", "crash"]))
            if kind_of_end == "crash":
                procs[p_index] = next(names)  # the process is gone; a new one takes its place
                continue
            if f == "read" and kind_of_end == "ok":
                value = draw(
                    st.sampled_from([None, 1, 2])
                    if kind == "register"
                    else st.sampled_from([None, "a", "b"])
                )
            lines.append((p, kind_of_end, f, value))
        elif started < total:
            started += 1
            if kind == "register":
                f = draw(st.sampled_from(["read", "write", "cas"]))
                value = {
                    "read": None,
                    "write": draw(st.integers(1, 2)),
                    "cas": [draw(st.sampled_from([None, 1, 2])), draw(st.integers(1, 2))],
                }[f]
            elif kind == "lease":
                f = draw(st.sampled_from(["acquire", "acquire", "renew", "release"]))
                start = draw(st.integers(0, 4)) * 10
                value = (
                    {"at": start}
                    if f == "release"
                    else {"window": [start, start + draw(st.integers(1, 3)) * 10]}
                )
            else:
                f = draw(st.sampled_from(["write", "write", "read"]))
                value = (
                    None
                    if f == "read"
                    else {
                        "token": draw(st.integers(1, 3)),
                        "data": draw(st.sampled_from(["a", "b"])),
                    }
                )
            busy[p] = (f, value)
            lines.append((p, "invoke", f, value))
        else:
            continue
    return h(*lines)


MODEL_OF: dict[str, type[Model]] = {
    "register": Register,
    "lease": LeaseService,
    "fenced": FencedResource,
}


@pytest.mark.parametrize("kind", sorted(MODEL_OF))
@settings(max_examples=300, deadline=None, database=None)
@given(data=st.data())
def test_the_search_agrees_with_brute_force_on_small_random_histories(
    kind: str, data: st.DataObject
) -> None:
    text = data.draw(histories(kind))
    model = MODEL_OF[kind]()
    ops = parse(text)
    assert linearizable(model, ops) == reference(model, ops), text


class ForgetfulRegister(Register):
    """A register whose reads see whatever was written by anyone, ever: a broken model."""

    def step(self, state: Any, op: Op) -> tuple[bool, Hashable]:
        if op.f == "read":
            return True, state
        return super().step(state, op)


def test_the_brute_force_comparison_catches_a_broken_checker() -> None:
    # Break the checker once (a register that accepts every read) and the same
    # comparison disagrees on a history drawn the same way.
    stale = parse(
        h(
            (0, "invoke", "write", 1),
            (0, "ok", "write", 1),
            (1, "invoke", "read"),
            (1, "ok", "read", None),
        )
    )
    assert linearizable(ForgetfulRegister(), stale) != reference(Register(), stale)

    @settings(max_examples=300, deadline=None, database=None)
    @given(data=st.data())
    def compare(data: st.DataObject) -> None:
        ops = parse(data.draw(histories("register")))
        assert linearizable(ForgetfulRegister(), ops) == reference(Register(), ops)

    with pytest.raises(AssertionError):
        compare()


def test_histories_parse_into_operations_with_their_lines() -> None:
    ops = parse(
        h(
            (0, "invoke", "write", 1),
            (1, "invoke", "read"),
            (0, "ok", "write", 1),
            (1, "info", "read"),
        )
    )
    assert [(op.f, op.call, op.ret, op.status) for op in ops] == [
        ("write", 1, 3, Status.OK),
        ("read", 2, None, Status.UNKNOWN),
    ]
    with pytest.raises(HistoryError, match="line 2: completion of 'read' but process 0"):
        parse(h((0, "invoke", "write", 1), (0, "ok", "read", 1)))


def concurrent_register_history(ops: int, processes: int, seed: int) -> list[dict[str, Any]]:
    """A linearizable history by construction: each operation takes effect at a random
    instant inside its own span, on a register the generator keeps."""
    rng = random.Random(seed)
    free_at = [0.0] * processes
    spans = []
    for _ in range(ops):
        p = rng.randrange(processes)
        start = free_at[p] + rng.uniform(0, 2)
        end = start + rng.uniform(0.1, 5)
        free_at[p] = end
        spans.append((rng.uniform(start, end), p, rng.choice(["read", "write", "cas"]), start, end))
    state: int | None = None
    timed: list[tuple[float, int, dict[str, Any]]] = []
    for _, p, f, start, end in sorted(spans):
        ending = "ok"
        value: Any
        result: Any
        if f == "read":
            value, result = None, state
        elif f == "write":
            value = result = rng.randrange(4)
            state = value
        else:
            frm, to = rng.randrange(4), rng.randrange(4)
            value = result = [frm, to]
            if state == frm:
                state = to
            else:
                ending = "fail"
        timed.append((start, 0, {"process": p, "type": "invoke", "f": f, "value": value}))
        timed.append((end, 1, {"process": p, "type": ending, "f": f, "value": result}))
    return [line for _, _, line in sorted(timed, key=lambda x: (x[0], x[1]))]


def test_a_long_concurrent_history_is_judged_and_one_wrong_read_is_found() -> None:
    lines = concurrent_register_history(400, 6, seed=7)
    assert check(Register(), parse("".join(json.dumps(line) + "\n" for line in lines))).ok
    middle = next(i for i in range(len(lines) // 2, len(lines))
                  if lines[i]["type"] == "ok" and lines[i]["f"] == "read")  # fmt: skip
    lines[middle] = {**lines[middle], "value": 99}  # a value nobody wrote
    result = check(Register(), parse("".join(json.dumps(line) + "\n" for line in lines)))
    assert not result.ok
    assert result.prefix == middle + 1
    assert result.unplaced is not None
    assert result.unplaced.value == 99


def test_the_recorder_api_records_what_another_harness_does() -> None:
    # As a harness without lab Actors (the consensus scenarios) would record its run.
    from lockguide_lab.history import LEASE_KEY, RESOURCE_KEY, Recorder, judge

    now = [0.0]
    history = Recorder(clock=lambda: now[0])
    history.grant("A", 0, 100)
    now[0] = 10
    history.grant("B", 50, 150)  # granted while A's window is still open
    write = history.invoke("A", "write", {"token": 1, "data": "a"}, key=RESOURCE_KEY)
    write.ok({"token": 1, "data": "a"})
    crashed = history.invoke("B", "write", {"token": 2, "data": "b"}, key=RESOURCE_KEY)
    assert not crashed.done  # never completed: it may or may not have happened
    judgement = judge(history.text())
    assert judgement.pair(judgement.lease) == ("A", "B")
    assert judgement.fenced.ok
    assert {op.key for op in judgement.operations} == {LEASE_KEY, RESOURCE_KEY}
    with pytest.raises(RuntimeError, match="already complete"):
        write.fail()
