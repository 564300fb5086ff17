"""Checking a history: key by key, and for a key that fails, its smallest failing window.

The verdict
-----------
The kv model is the register model per key: a history is linearizable iff every key's
subhistory is (locality, Herlihy & Wing 1990; Porcupine and Knossos call the split
P-compositionality). Each key starts as nil and is checked by ``wgl.search``; the
register model is the one key ``None``.

The smallest failing window
---------------------------
"Not linearizable" over thousands of operations says little; the report shows a short
stretch of the history that is not linearizable on its own. Events of the key are numbered
in file order, and a *window* ``[a, b)`` is the subhistory of the events a..b-1 with:

* the operations invoked in the window; those that completed in it keep their results,
  those that completed after it (or never) are open-ended: they may take effect at any time
  after their invocation, or never;
* the operations invoked before the window and completed in it or after it (*straddling*
  its start) as open-ended too: they may have taken effect before the window, or in it;
* nothing else: what completed before the window is summed up in the register's value at
  its start.

Soundness: if the history has a linearization, cut it at the instant of event ``a``: what
took effect before leaves the register at some value v; the rest, restricted to the window's
operations, is a legal run from v (an operation with a result took effect inside its own
interval, so inside the window or, for a straddler, possibly before: it is open-ended here;
an operation completing after ``b`` may be placed last, i.e. never). Hence a window that has
no linearization *from any initial value* proves the whole history is not linearizable.
Only finitely many values matter: nil, the values the window mentions, and one value it
never mentions (``UNWRITTEN``); one search from the set of them (``wgl._step_possible``)
answers for all. A window starting at the first event starts from nil.

Prefixes ``[0, b)`` are monotone (a failing prefix stays failing when extended), so the
shortest failing prefix is found by binary search, b* ; then the latest start a* with
``[a*, b*)`` failing from every value, by galloping back from b* and bisecting (windows
further back contain the ones nearer, so this finds the latest start whenever that holds;
every window reported was checked to fail). Each probe is a search over a small window,
so the minimisation costs a few times the verdict.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable, Sequence
from typing import Final, Literal

import attrs

from revivify.checker.linearizability.history import History, Key, Operation
from revivify.checker.linearizability.wgl import (
    CAS,
    CAS_UNKNOWN,
    READ,
    WRITE,
    SearchOp,
    search,
)


class CheckTimeout(Exception):
    """The deadline passed before a verdict: the answer is unknown (exit 2)."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"no verdict within {seconds:g} s")
        self.seconds = seconds


@attrs.frozen
class _Unwritten:
    """A register value no operation of the window mentions."""

    def __repr__(self) -> str:
        return "UNWRITTEN"


UNWRITTEN: Final = _Unwritten()

Role = Literal["complete", "pending", "straddling"]


@attrs.frozen
class WindowOp:
    """An operation of a window. ``role``: ``complete`` (invoked and completed in the
    window, with its result), ``pending`` (invoked in the window, completed after it or
    never: may take effect or not), ``straddling`` (invoked before the window: may have
    taken effect before it)."""

    op: Operation
    role: Role


@attrs.frozen
class Window:
    """A stretch of one key's history that is not linearizable on its own."""

    key: Key
    first_line: int
    last_line: int
    from_nil: bool  # True: starts at the first event, from nil; False: from any value
    operations: tuple[WindowOp, ...]
    minimal: bool  # False: the minimisation ran out of time; the window still fails


@attrs.frozen
class KeyResult:
    key: Key
    operations: int
    linearizable: bool
    steps: int
    configurations: int
    window: Window | None


@attrs.frozen
class CheckResult:
    linearizable: bool
    keys: tuple[KeyResult, ...]
    operations: int

    @property
    def failures(self) -> tuple[KeyResult, ...]:
        return tuple(k for k in self.keys if not k.linearizable)


ProgressNote = Callable[[str], None]


@attrs.define
class _Clock:
    """The deadline and the progress lines, consulted from the search's tick."""

    timeout: float | None
    progress: ProgressNote | None
    progress_seconds: float
    started: float = attrs.field(factory=time.monotonic)
    next_report: float = 0.0
    where: str = ""

    def __attrs_post_init__(self) -> None:
        self.next_report = self.started + self.progress_seconds

    def tick(self, steps: int) -> None:
        now = time.monotonic()
        if self.timeout is not None and now - self.started > self.timeout:
            raise CheckTimeout(self.timeout)
        if self.progress is not None and now >= self.next_report:
            self.next_report = now + self.progress_seconds
            self.progress(f"{self.where}: {steps:,} steps, {now - self.started:.1f} s")


def check_history(history: History, *, timeout: float | None = None,
                  progress: ProgressNote | None = None,
                  progress_seconds: float = 2.0) -> CheckResult:
    """The verdict for every key, and the smallest failing window of each failing key.

    Raises ``CheckTimeout`` when ``timeout`` seconds pass before every key's verdict; once
    every verdict is in, a minimisation cut short reports its best window (not minimal).
    """
    clock = _Clock(timeout, progress, progress_seconds)
    parts = history.by_key()
    verdicts: list[tuple[Key, list[Operation], bool, int, int]] = []
    for number, (key, ops) in enumerate(parts.items(), start=1):
        clock.where = (f"key {number}/{len(parts)} ({len(ops)} operations)"
                       if len(parts) > 1 or key is not None else f"{len(ops)} operations")
        result = search(to_search_ops(ops, 0, None), None, clock.tick)
        verdicts.append((key, ops, result.linearizable, result.steps, result.configurations))
    results = []
    for key, ops, linearizable, steps, configurations in verdicts:
        window = None
        if not linearizable:
            clock.where = f"smallest failing window of key {key!r}"
            window = smallest_window(key, ops, clock.tick)
        results.append(KeyResult(key, len(ops), linearizable, steps, configurations, window))
    return CheckResult(linearizable=all(r.linearizable for r in results),
                       keys=tuple(results), operations=len(history.operations))


def to_search_ops(ops: Sequence[Operation], start: int, end: int | None) -> list[SearchOp]:
    """The search's operations for the window ``[start, end)`` of event positions (``end``
    None: to the end of the history); see the module header for what each becomes."""
    out: list[SearchOp] = []
    for op in ops:
        if end is not None and op.call >= end:
            continue
        if op.call < start and op.ret is not None and op.ret < start:
            continue  # completed before the window: part of its initial value
        straddling = op.call < start
        ret = op.ret if not straddling and (end is None or (op.ret is not None
                                                            and op.ret < end)) else None
        if op.f == "read":
            if ret is None:
                continue  # an open-ended read constrains nothing
            out.append(SearchOp(READ, op.value, None, op.call, ret))
        elif op.f == "write":
            out.append(SearchOp(WRITE, op.value, None, op.call, ret))
        else:
            assert isinstance(op.value, tuple)
            expected, new = op.value
            out.append(SearchOp(CAS if ret is not None else CAS_UNKNOWN, expected, new, op.call,
                                ret))
    return out


def _fails(ops: Sequence[Operation], start: int, end: int,
           tick: Callable[[int], None]) -> bool:
    """Does the window ``[start, end)`` fail: from nil if it starts the history, else from
    every value that matters?"""
    window = to_search_ops(ops, start, end)
    if start == 0:
        return not search(window, None, tick).linearizable
    candidates: list[Hashable] = [None, UNWRITTEN]
    for op in window:
        for value in (op.a, op.b):
            if value not in candidates:
                candidates.append(value)
    return not search(window, frozenset(candidates), tick).linearizable


def smallest_window(key: Key, ops: Sequence[Operation],
                    tick: Callable[[int], None]) -> Window:
    """The smallest failing window of a key whose whole history fails (module header)."""
    positions = sorted({op.call for op in ops} | {op.ret for op in ops if op.ret is not None})
    # Shortest failing prefix: the smallest j with [0, positions[j] + 1) failing.
    low, high = 0, len(positions) - 1  # invariant: the prefix ending at high fails
    best_end, best_start, minimal = positions[-1] + 1, 0, False
    try:
        while low < high:
            middle = (low + high) // 2
            if _fails(ops, 0, positions[middle] + 1, tick):
                high = middle
            else:
                low = middle + 1
        best_end = positions[high] + 1
        # Latest failing start, galloping back from the end, then bisecting.
        last = high
        known_ok, step = last + 1, 1  # window starting at index known_ok passes (empty)
        failing = 0
        while True:
            candidate = max(last - step + 1, 0)
            if candidate == 0 or _fails(ops, positions[candidate], best_end, tick):
                failing = candidate
                break
            known_ok = candidate
            step *= 2
        while known_ok - failing > 1:  # failing fails, known_ok passes
            middle = (failing + known_ok) // 2
            if _fails(ops, positions[middle], best_end, tick):
                failing = middle
            else:
                known_ok = middle
        best_start = positions[failing] if failing > 0 else 0
        minimal = True
    except CheckTimeout:
        pass  # report the best window found so far, marked as not minimal
    return _window(key, ops, best_start, best_end, minimal)


def _window(key: Key, ops: Sequence[Operation], start: int, end: int,
            minimal: bool) -> Window:
    members: list[WindowOp] = []
    lines: list[tuple[int, int]] = []  # (position, line) of the window's events
    for op in ops:
        if op.call >= end or (op.call < start and op.ret is not None and op.ret < start):
            continue
        if op.call < start:
            if op.f == "read":
                continue
            role: Role = "straddling"
        elif op.ret is not None and op.ret < end:
            role = "complete"
        else:
            if op.f == "read":
                continue
            role = "pending"
        members.append(WindowOp(op, role))
        if op.call >= start:
            lines.append((op.call, op.invoke_line))
        if op.ret is not None and start <= op.ret < end and op.complete_line is not None:
            lines.append((op.ret, op.complete_line))
    lines.sort()
    return Window(key=key, first_line=lines[0][1], last_line=lines[-1][1], from_nil=start == 0,
                  operations=tuple(members), minimal=minimal)
