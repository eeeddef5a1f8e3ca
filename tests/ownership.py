"""The owner rules, tried from elsewhere: a forked child, another thread.

Shared by the Redis locks' tests and the consensus locks' tests, which check
the same rules on different locks.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable
from typing import Any

from lockguide import NotOwned

__all__ = ["Worker", "a_forked_child_does_nothing", "outcome_in_a_thread"]


def a_forked_child_does_nothing(
    lock: Any,
    actions: Iterable[Callable[[], object]],
    *,
    sent: Callable[[], bool] | None = None,
) -> None:
    """Fork with ``lock`` held: in the child, the lock is not held, each of ``actions``
    raises ``NotOwned``, leaving ``with lock:`` raises nothing, and (with ``sent``)
    ``sent()`` is False, no request having left. The child reports through its exit
    code; the parent asserts it is 0."""
    pid = os.fork()
    if pid == 0:  # the child: report through the exit code, never return into pytest
        code = 0
        try:
            code |= 1 if lock.held else 0
            for action in actions:
                try:
                    action()
                    code |= 2
                except NotOwned:
                    pass
            lock.__exit__(None, None, None)  # leaving `with lock:` in the child
            code |= 4 if sent is not None and sent() else 0
        except BaseException:
            code |= 8
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    assert code == 0, (
        f"child: held={bool(code & 1)} acted={bool(code & 2)} sent={bool(code & 4)}"
        f" crashed={code >= 8}"
    )


class Worker(threading.Thread):
    """A thread that runs ``work`` once: ``outcomes`` is ``[None]`` once it returned,
    ``[error]`` once it raised."""

    def __init__(self, work: Callable[[], object]) -> None:
        super().__init__()
        self.work = work
        self.outcomes: list[BaseException | None] = []

    def run(self) -> None:
        try:
            self.work()
        except BaseException as error:
            self.outcomes.append(error)
        else:
            self.outcomes.append(None)


def outcome_in_a_thread(work: Callable[[], object]) -> BaseException | None:
    """What ``work`` raised in a thread of its own (None: it returned)."""
    thread = Worker(work)
    thread.start()
    thread.join()
    [outcome] = thread.outcomes
    return outcome
