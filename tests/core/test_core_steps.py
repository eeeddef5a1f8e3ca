"""The decisions, without a server: the core's steps run on scripted replies.

Each test plays the part of a driver: it receives the effects the steps yield
(a ``Send``, a ``FanOut``, a ``Sleep``), answers with a reply or raises an
exception into them, and checks what they decided. No I/O, no redis-server.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from redis import exceptions as rx
from redis._parsers.base import BaseParser

from lockguide import LockLost, MasterError, NotOwned
from lockguide._core import (
    EXTEND,
    HAND_OFF,
    RELEASE,
    TAKE,
    UNSET,
    Send,
    ServerSteps,
    Sleep,
    Steps,
    Wait,
    drive,
)
from lockguide.redlock import FanOut, RedlockSteps

KEY = "lock:steps"


def parse_error(line: str) -> rx.ResponseError:
    """The exception redis-py makes of an error line from the server."""
    error: rx.ResponseError = BaseParser.parse_error(line)  # type: ignore[no-untyped-call]
    return error


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Steps1(ServerSteps):
    """The one-server steps with a scripted clock and random draw."""

    def __init__(self, *, timeout_ms: float | None = 1_000, cluster: bool = False) -> None:
        self.clock = FakeClock()
        self._init_lease(KEY, 10_000, {"timeout_ms": timeout_ms, "clock": self.clock})
        self._request_s, self._cluster, self._uniform = 0.5, cluster, lambda a, b: 100.0
        self._init_line()


def play(steps: Steps[Any], answer: Callable[[Any], Any]) -> tuple[Any, list[Any]]:
    """Drive ``steps`` with ``answer`` (which may raise); the result and every effect."""
    effects: list[Any] = []

    def perform(effect: Any) -> Any:
        effects.append(effect)
        return answer(effect)

    return drive(steps, perform), effects


def script(replies: list[Any]) -> Callable[[Any], Any]:
    """Answer each effect with the next reply (raised if it is an exception)."""
    queue: Iterator[Any] = iter(replies)

    def answer(effect: Any) -> Any:
        reply = next(queue)
        if isinstance(reply, BaseException):
            raise reply
        return reply

    return answer


def test_a_refused_waiter_keeps_its_place_and_wins_when_a_release_hands_it_over() -> None:
    lock = Steps1()
    woken = [b"{lock:steps}:wake:v", b"1"]
    won, effects = play(lock._acquire_steps(True, lock_unset()), script([0, woken]))
    assert won
    assert lock.held
    kinds = [type(e).__name__ for e in effects]
    assert kinds == ["Send", "Wait"], "the wake-up is the grant: no request after it"
    assert effects[0].commands[-1][:2] == ("EVALSHA", TAKE.sha), "SET NX, or a place in line"
    assert effects[1] == Wait("{lock:steps}:wake:" + (lock.value or ""), 0.15), "the longest pause"


def test_without_blocking_one_plain_set_nx() -> None:
    lock = Steps1()
    won, effects = play(lock._acquire_steps(False, lock_unset()), script([None]))
    assert won is False
    assert [e.commands[-1][:2] for e in effects] == [("SET", KEY)]


def test_a_waiter_that_gives_up_leaves_the_line() -> None:
    lock = Steps1(timeout_ms=300)
    steps = lock._acquire_steps(True, lock_unset())
    take = next(steps)  # take.lua: refused, a place kept (0)
    wait = steps.send(0)
    assert isinstance(wait, Wait)
    lock.clock.now = 0.3
    leave = steps.send(None)  # the pause is over, and the time: leave the line
    assert take.commands[-1][:2] == ("EVALSHA", TAKE.sha)
    assert leave.commands[-1][:2] == ("EVALSHA", HAND_OFF.sha)
    assert leave.commands[-1][-5] == take.commands[-1][-4], "its own value leaves"
    assert leave.commands[-1][-1] == "1", "leaving: its place goes first"
    with pytest.raises(StopIteration) as done:
        steps.send(0)
    assert done.value.value is False


def test_each_request_is_capped_to_the_time_left() -> None:
    lock = Steps1(timeout_ms=300)
    lock._request_s = 1.0
    steps = lock._acquire_steps(True, lock_unset())
    first = next(steps)
    assert first.timeout_s == pytest.approx(0.3), "the request may wait only the 300 ms left"
    lock.clock.now = 0.02
    second = steps.send(0)  # in line: wait for a wake-up, at most the pause
    assert isinstance(second, Wait)
    lock.clock.now = 0.25
    third = steps.send(None)  # no wake-up: the next try within the 50 ms left
    assert third.timeout_s == pytest.approx(0.05)
    lock.clock.now = 0.26
    leave = steps.send(0)  # 40 ms left: too little to listen (a BLPOP may end late)
    assert leave.commands[-1][:2] == ("EVALSHA", HAND_OFF.sha)
    assert leave.commands[-1][-1] == "1", "it leaves the line, so a release skips it"
    assert leave.timeout_s == pytest.approx(0.04)
    fourth = steps.send(0)  # then the pause, cut to the 40 ms left, is slept
    assert isinstance(fourth, Sleep)
    assert fourth.seconds == pytest.approx(0.04)


def test_a_timeout_is_retried_within_the_deadline_and_kept_as_last_error() -> None:
    lock = Steps1(timeout_ms=1_000)
    clock = lock.clock

    def answer(effect: Any) -> Any:
        if isinstance(effect, Wait | Sleep):
            clock.now += effect.seconds
            return None
        clock.now += effect.timeout_s  # the server never answers
        raise rx.TimeoutError("no reply")

    won, _effects = play(lock._acquire_steps(True, lock_unset()), answer)
    assert won is False
    assert isinstance(lock.last_error, rx.TimeoutError)
    assert clock.now <= 1.0 + 1e-9, "nothing is sent past the deadline"


def test_a_lost_reply_is_cleaned_up_with_compare_and_delete() -> None:
    lock = Steps1()
    steps = lock._acquire_steps(False, lock_unset())
    effect = next(steps)
    cleanup = steps.throw(rx.ConnectionError("reset after the SET ran"))
    assert isinstance(cleanup, Send)
    assert cleanup.commands[-1][:2] == ("EVALSHA", HAND_OFF.sha)
    with pytest.raises(StopIteration) as done:
        steps.send(1)
    assert done.value.value is False
    assert effect.commands[-1][0] == "SET"


def test_an_error_no_retry_fixes_cleans_up_then_raises() -> None:
    lock = Steps1()
    denied = parse_error("NOPERM this user has no permissions to run the 'set' command")
    with pytest.raises(rx.NoPermissionError):
        play(lock._acquire_steps(True, lock_unset()), script([denied, 0]))


def test_noscript_loads_the_script_and_sends_it_again() -> None:
    lock = Steps1()
    lock._won("v", 0.0)
    _, effects = play(lock._release_steps(), script([rx.NoScriptError("NOSCRIPT"), 1]))
    assert effects[1].commands[0] == ("SCRIPT", "LOAD", HAND_OFF.source)
    assert not lock.held


def test_on_a_cluster_moved_refreshes_and_ask_sends_asking_each_once() -> None:
    lock = Steps1(cluster=True)
    lock._won("v", 0.0)
    moved, ask = rx.MovedError("3999 127.0.0.1:7001"), rx.AskError("3999 127.0.0.1:7002")
    _, effects = play(lock._extend_steps(None), script([moved, ask, 1]))
    assert (effects[1].node, effects[1].refresh) == (("127.0.0.1", 7001), True)
    assert effects[2].node == ("127.0.0.1", 7002)
    assert effects[2].commands[0] == ("ASKING",)
    assert effects[2].commands[-1][:2] == ("EVALSHA", EXTEND.sha)
    single = Steps1()  # not a cluster: MOVED is an answer to raise, not to follow
    single._won("v", 0.0)
    with pytest.raises(rx.MovedError):
        play(single._release_steps(), script([moved]))


def test_a_release_answer_that_lands_after_a_new_grant_leaves_the_new_grant() -> None:
    lock = Steps1()
    lock._won("old", 0.0)
    steps = lock._release_steps()
    next(steps)
    lock._value = None  # meanwhile: released, and acquired again with a new value
    lock._won("new", 0.0)
    with pytest.raises(LockLost):
        steps.send(0)
    assert lock.held
    assert lock.value == "new"


def test_a_stale_extend_neither_clears_nor_moves_the_new_grant() -> None:
    lock = Steps1()
    lock._won("old", 0.0)
    steps = lock._extend_steps(None)
    next(steps)
    lock._won("new", 5.0)
    deadline = lock._deadline
    with pytest.raises(StopIteration):
        steps.send(1)
    assert lock.value == "new"
    assert lock._deadline == deadline


class StepsN(RedlockSteps):
    def __init__(self, n: int = 3) -> None:
        self.clock = FakeClock()
        self._init_lease(KEY, 10_000, {"timeout_ms": 1_000, "clock": self.clock})
        self._quorum, self._where = n // 2 + 1, [f"m{i}" for i in range(n)]
        self._max_extensions, self._extensions, self._released, self._last = None, 0, 0, None
        self._uniform, self._on_attempt = random.Random(1).uniform, None
        self._timeout_s = 0.05


def test_redlock_counts_a_busy_master_as_a_failed_vote() -> None:
    lock = StepsN()
    busy = parse_error("BUSY Redis is busy running a script")
    won, effects = play(lock._acquire_steps(False, lock_unset()), script([[b"OK", b"OK", busy]]))
    assert won
    assert isinstance(effects[0], FanOut)
    attempt = lock.last_attempt
    assert attempt is not None
    assert (attempt.granted, attempt.failed) == (2, 1)
    assert "BUSY" in attempt.causes[0]


def test_redlock_raises_master_error_for_an_error_no_retry_fixes_after_releasing() -> None:
    lock = StepsN()
    wrongpass = rx.AuthenticationError("WRONGPASS invalid username-password pair")
    steps = lock._acquire_steps(True, lock_unset())
    next(steps)
    cleanup = steps.send([b"OK", b"OK", wrongpass])
    assert cleanup.commands[0][:2] == ("EVALSHA", RELEASE.sha), "granted keys released first"
    with pytest.raises(MasterError, match=r"masters\[2\]"):
        steps.send([1, 1, 0])
    assert not lock.held


def test_not_owned_sends_nothing() -> None:
    lock = Steps1()
    with pytest.raises(NotOwned):
        play(lock._release_steps(), script([]))


def lock_unset() -> Any:
    return UNSET
