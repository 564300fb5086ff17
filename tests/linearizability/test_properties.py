"""Properties: histories of a real register under random concurrency are linearizable; a
read of a value never written is not; and on tiny arbitrary histories the search agrees
with brute force (every order of every choice of open-ended operations)."""

from __future__ import annotations

import itertools
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from revivify.checker.linearizability import History, check_history

from .histories import Line, fail, history, info, inv, ok

VALUES = st.integers(0, 3)


@st.composite
def real_register_runs(draw: st.DrawFn) -> list[Line]:
    """A register run by up to 4 concurrent clients. Each operation takes effect at one
    instant between its invocation and its completion (``apply``) on a real value; a client
    may crash (``info``) before or after its operation took effect, and is then replaced by
    a new process; an operation still pending at the end never completes."""
    register: Any = None
    lines: list[Line] = []
    clients = list(range(4))  # process ids of the live clients
    next_process = 4
    # process -> [f, value, applied?, result]
    pending: dict[int, list[Any]] = {}
    for _ in range(draw(st.integers(0, 40))):
        process = draw(st.sampled_from(clients))
        if process not in pending:
            f = draw(st.sampled_from(["read", "write", "cas"]))
            value: Any = (None if f == "read" else draw(VALUES) if f == "write"
                          else [draw(st.one_of(st.none(), VALUES)), draw(VALUES)])
            pending[process] = [f, value, False, None]
            lines.append(inv(process, f, value))
            continue
        f, value, applied, result = pending[process]
        action = draw(st.sampled_from(["apply", "complete", "crash"]))
        if action == "apply" and not applied:
            if f == "read":
                result = register
            elif f == "write":
                register = value
            else:
                result = register == value[0]
                if result:
                    register = value[1]
            pending[process] = [f, value, True, result]
        elif action == "complete" and applied:
            del pending[process]
            if f == "cas" and not result:
                lines.append(fail(process, f, value))  # found another value: no effect
            else:
                lines.append(ok(process, f, result if f == "read" else value))
        elif action == "crash":
            del pending[process]
            if not applied and draw(st.booleans()):
                lines.append(fail(process, f, value))  # known not to have happened
            else:
                lines.append(info(process, f, None))
                clients[clients.index(process)] = next_process  # Jepsen's new process
                next_process += 1
    return lines


@given(real_register_runs())
def test_a_real_register_is_linearizable(lines: list[Line]) -> None:
    assert check_history(history(lines)).linearizable


@given(real_register_runs())
def test_a_read_of_a_value_never_written_is_not(lines: list[Line]) -> None:
    lines = [*lines, inv(99, "read"), ok(99, "read", 1000)]
    result = check_history(history(lines))
    assert not result.linearizable
    window = result.keys[0].window
    assert window is not None and window.last_line == len(lines)
    assert ("read", 1000, "complete") in [(w.op.f, w.op.value, w.role)
                                          for w in window.operations]


@st.composite
def arbitrary_histories(draw: st.DrawFn) -> list[Line]:
    """Up to 5 operations on 3 processes, invocations and completions interleaved at
    random, results drawn at random (most such histories are not linearizable)."""
    lines: list[Line] = []
    pending: dict[int, tuple[str, Any]] = {}
    for _ in range(draw(st.integers(0, 10))):
        process = draw(st.integers(0, 2))
        if process not in pending:
            if len(lines) >= 10:
                continue
            f = draw(st.sampled_from(["read", "write", "cas"]))
            value: Any = (None if f == "read" else draw(st.integers(0, 2)) if f == "write"
                          else [draw(st.one_of(st.none(), st.integers(0, 2))),
                                draw(st.integers(0, 2))])
            pending[process] = (f, value)
            lines.append(inv(process, f, value))
        else:
            f, value = pending.pop(process)
            kind = draw(st.sampled_from(["ok", "ok", "info", "fail"]))
            result = draw(st.one_of(st.none(), st.integers(0, 2))) if f == "read" else value
            lines.append({"ok": ok, "info": info, "fail": fail}[kind](process, f, result))
    return lines


def brute_force(h: History) -> bool:
    """Some subset of the open-ended operations and some order of the chosen operations
    that respects real time is a legal run of the register."""
    ops = h.operations
    closed = [op for op in ops if not op.open_ended]
    open_ = [op for op in ops if op.open_ended]
    for r in range(len(open_) + 1):
        for chosen in itertools.combinations(open_, r):
            for order in itertools.permutations([*closed, *chosen]):
                if _respects_real_time(order) and _legal(order):
                    return True
    return False


def _respects_real_time(order: Any) -> bool:
    for i, later in enumerate(order):
        for earlier in order[i + 1:]:  # placed after `later`, so must not precede it
            if earlier.ret is not None and earlier.ret < later.call:
                return False
    return True


def _legal(order: Any) -> bool:
    value: Any = None
    for op in order:
        if op.f == "read":
            if op.value != value:
                return False
        elif op.f == "write":
            value = op.value
        else:
            expected, new = op.value
            if value == expected:
                value = new
            elif not op.open_ended:
                return False
    return True


@given(arbitrary_histories())
def test_the_search_agrees_with_brute_force(lines: list[Line]) -> None:
    h = history(lines)
    assert check_history(h).linearizable == brute_force(h)
