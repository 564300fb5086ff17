"""Histories: the events a client log records, and the operations they pair into.

An *event* is one line of a history: a process invokes an operation, or the operation
completes (``ok``: it took effect and returned what the line says; ``fail``: it did not take
effect; ``info``: nobody knows whether, or when, it took effect). ``pair_events`` matches
each completion with its process's pending invocation and produces *operations*:

* ``ok`` completions become operations with both ends: invoked at the invocation's position
  in the file, returned at the completion's;
* ``fail`` completions are dropped: the operation is known never to have taken effect
  (Jepsen's meaning, and Knossos's: a failed compare-and-set is one that did not happen);
* ``info`` completions, and invocations never completed before the end of the file, become
  *open-ended* operations: they may take effect at any time after their invocation, or never.
  An open-ended read constrains nothing (its value is unknown) and is dropped.

Positions are the events' indexes in file order: real time as the recording client saw it.
Only their order matters; two events never share a position, so "A returned before B was
invoked" is ``A.ret < B.call``, and anything else is concurrency.

Every refusal is a ``HistoryError`` naming the file, the line and what was wrong with it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final, Literal, TypeAlias

import attrs

# A register's value: nil (None), an integer or a string. Booleans and floats are refused by
# the readers, so == between two values means what it says (in Python, True == 1 == 1.0).
Value: TypeAlias = int | str | None
# A write's value, a compare-and-set's (expected, new) pair, or a read's result (None on the
# invocation: the value is not known yet).
Argument: TypeAlias = Value | tuple[Value, Value]
Key: TypeAlias = int | str | None
Process: TypeAlias = int | str

EventType = Literal["invoke", "ok", "fail", "info"]
Function = Literal["read", "write", "cas"]
EVENT_TYPES: Final[tuple[EventType, ...]] = ("invoke", "ok", "fail", "info")
FUNCTIONS: Final[tuple[Function, ...]] = ("read", "write", "cas")


class HistoryError(Exception):
    """Unusable input: the file, the line (0 when the file as a whole is at fault), why."""

    def __init__(self, path: str, line: int, message: str) -> None:
        super().__init__(f"{path}:{line}: {message}" if line else f"{path}: {message}")
        self.path = path
        self.line = line
        self.message = message


@attrs.frozen
class Event:
    """One line of a history, decoded. ``value`` is as described for ``Argument``; for
    ``fail`` and ``info`` completions it is not used (Jepsen writes ``:timed-out`` there)."""

    line: int
    process: Process
    type: EventType
    f: Function
    key: Key
    value: Argument


@attrs.frozen
class Operation:
    """One operation of a history, invocation and completion paired.

    ``value``: a write's value, a cas's (expected, new) pair, an ok read's result.
    ``ret`` is None for an open-ended operation (``info``, or never completed), whose
    ``complete_line`` is the ``info`` line or None.
    """

    index: int
    process: Process
    f: Function
    key: Key
    value: Argument
    invoke_line: int
    complete_line: int | None
    call: int
    ret: int | None

    @property
    def open_ended(self) -> bool:
        return self.ret is None


@attrs.frozen
class History:
    """The operations of a file, in invocation order, with what pairing dropped."""

    path: str
    operations: tuple[Operation, ...]
    events: int
    failed: int  # fail completions: never took effect, dropped
    unknown_reads: int  # info or never-completed reads: constrain nothing, dropped

    def by_key(self) -> dict[Key, list[Operation]]:
        """P-compositionality: a history is linearizable iff each key's subhistory is
        (Herlihy & Wing's locality), so keys are checked one by one, in order of first use."""
        parts: dict[Key, list[Operation]] = {}
        for op in self.operations:
            parts.setdefault(op.key, []).append(op)
        return parts


def pair_events(path: str, events: Iterable[Event]) -> History:
    """Pair each completion with its process's pending invocation (see the module header)."""
    pending: dict[Process, tuple[int, Event]] = {}  # process -> (position, invocation)
    # Operations are numbered by invocation; those dropped leave no gap.
    built: list[tuple[int, Operation]] = []
    failed = unknown_reads = 0
    position = -1
    for position, event in enumerate(events):
        if event.type == "invoke":
            if event.process in pending:
                _, earlier = pending[event.process]
                raise HistoryError(
                    path, event.line,
                    f"process {event.process} invokes {event.f} while its {earlier.f} "
                    f"invoked at line {earlier.line} has not completed")
            pending[event.process] = (position, event)
            continue
        if event.process not in pending:
            raise HistoryError(
                path, event.line,
                f"{event.type} completion of {event.f} by process {event.process} "
                "without an invocation")
        call, invocation = pending.pop(event.process)
        if event.f != invocation.f:
            raise HistoryError(
                path, event.line,
                f"process {event.process} completes {event.f} but invoked {invocation.f} "
                f"at line {invocation.line}")
        if event.type == "fail":
            failed += 1
            continue
        if event.type == "info":
            if invocation.f == "read":
                unknown_reads += 1
            else:
                built.append((call, _operation(invocation, call, event.line, None)))
            continue
        # ok: a read returns its value; a write or cas echoes its invocation's argument.
        if event.key != invocation.key:
            raise HistoryError(
                path, event.line,
                f"ok of process {event.process} names key {event.key!r} but its invocation "
                f"at line {invocation.line} named {invocation.key!r}")
        if event.f == "read":
            value = event.value
        else:
            value = invocation.value
            if event.value != invocation.value:
                raise HistoryError(
                    path, event.line,
                    f"ok of {event.f} by process {event.process} has value "
                    f"{show(event.value)} but its invocation at line {invocation.line} "
                    f"had {show(invocation.value)}")
        op = _operation(invocation, call, event.line, position)
        built.append((call, attrs.evolve(op, value=value)))
    for call, invocation in pending.values():
        if invocation.f == "read":
            unknown_reads += 1
        else:
            built.append((call, _operation(invocation, call, None, None)))
    built.sort(key=lambda item: item[0])
    operations = tuple(attrs.evolve(op, index=i) for i, (_, op) in enumerate(built))
    return History(path=path, operations=operations, events=position + 1, failed=failed,
                   unknown_reads=unknown_reads)


def _operation(invocation: Event, call: int, complete_line: int | None,
               ret: int | None) -> Operation:
    return Operation(index=-1, process=invocation.process, f=invocation.f, key=invocation.key,
                     value=invocation.value if invocation.f != "read" else None,
                     invoke_line=invocation.line, complete_line=complete_line, call=call,
                     ret=ret)


def show(value: Argument) -> str:
    """A value as the reports print it: nil, 3, "text", [expected new]."""
    if isinstance(value, tuple):
        return f"[{show(value[0])} {show(value[1])}]"
    if value is None:
        return "nil"
    if isinstance(value, str):
        return f'"{value}"'
    return str(value)
