"""The WGL search: Wing & Gong's linearizability search with Lowe's memoization, one register.

The question: is there a total order of the operations that (1) respects real time (if A
returned before B was invoked, A comes first) and (2) is a legal run of the sequential
register, every operation returning what it returned? Each operation then *took effect* at
one instant between its invocation and its return, its *linearization point*.

Theory of operation
-------------------
The history is a list of *entries* in real-time order: each operation's call entry and its
return entry. An open-ended operation (``info``, or never completed) has its return entry
after every real event: it may take effect at any time after its call, and taking effect
after everything else is the same as never taking effect (nothing observes it afterwards).

Wing & Gong's search walks the list from the front, keeping the sequential state of the
register and the set of operations linearized so far:

* at a *call* entry, it tries to linearize that operation now: if the register's step
  accepts it (a read sees the current value, a cas finds its expected value), the operation
  is removed from the list ("lifted": its call and its return), the old state is pushed on a
  stack, and the walk restarts from the front;
* otherwise it moves on to the next entry: a later call, of an operation concurrent with
  every call skipped so far, may go first;
* at a *return* entry, the operation that returned has not been linearized, and every
  order tried from here puts something after a return it must precede: dead end. The walk
  pops the last operation linearized, puts it back in the list ("unlifted") and tries the
  entries after it.

The history is linearizable when the list is empty (every operation placed), and is not
when a dead end has nothing to pop. Without memoization this is exponential in the
concurrency; Lowe's observation is that two paths reaching the same *configuration*, the
same set of linearized operations and the same register value, have the same future. The
cache holds every configuration entered, the set as a bitset (a Python int, bit i for
operation i), so no configuration is explored twice, and the search is bounded by the
number of distinct (set, value) pairs reachable, in practice close to linear for histories
of bounded concurrency.

The list is doubly linked, as in Porcupine (github.com/anishathalye/porcupine), so lifting
and unlifting an operation are O(1) pointer swaps and undo in stack order. Sentinels at
both ends keep every pointer non-null. The step of the register is inlined into the loop:
this is the one hot path of the checker.

The operations (``SearchOp``) are the register's four steps:

* ``READ a``: legal iff the value is ``a``; the value is unchanged;
* ``WRITE a``: always legal; the value becomes ``a`` (also an open-ended write);
* ``CAS a b`` that returned ok: legal iff the value is ``a``; it becomes ``b``;
* ``CAS_UNKNOWN a b``, an open-ended cas: always legal; the value becomes ``b`` if it was
  ``a`` and is unchanged otherwise (a cas that found another value had no effect).

An open-ended read constrains nothing and is never given to the search; a failed operation
took no effect and is not either (``history.pair_events``).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import Final

import attrs

READ: Final = 0
WRITE: Final = 1
CAS: Final = 2
CAS_UNKNOWN: Final = 3
KIND_NAMES: Final = ("read", "write", "cas", "cas?")

# How often (in loop iterations) the search calls its tick: cheap enough to be invisible,
# often enough to stop within a few milliseconds of a deadline.
TICK_EVERY: Final = 1 << 13


@attrs.frozen
class SearchOp:
    """What the search needs of an operation: its step and its real-time interval (``ret``
    None: open-ended). Positions are only compared, never subtracted."""

    kind: int
    a: Hashable
    b: Hashable
    call: int
    ret: int | None


@attrs.frozen
class SearchResult:
    linearizable: bool
    steps: int  # loop iterations
    configurations: int  # cache size: distinct (linearized set, value) pairs entered


class _Entry:
    """A node of the list: a call entry (``is_call``; ``match`` is its return entry) or a
    return entry (``match`` is itself). ``bit`` is the operation's bit in the bitset."""

    __slots__ = ("a", "b", "bit", "is_call", "kind", "match", "next", "prev")

    def __init__(self, is_call: bool, kind: int, a: Hashable, b: Hashable, bit: int) -> None:
        self.is_call = is_call
        self.kind = kind
        self.a = a
        self.b = b
        self.bit = bit
        self.prev: _Entry = self
        self.next: _Entry = self
        self.match: _Entry = self


def search(ops: Sequence[SearchOp], initial: Hashable,
           tick: Callable[[int], None] | None = None) -> SearchResult:
    """Is there a linearization of ``ops`` from the register value ``initial``? (From one
    of the values, if ``initial`` is a frozenset of them: ``_step_possible``.)

    ``tick(steps)`` is called every ``TICK_EVERY`` iterations; it may raise (a deadline) to
    abandon the search.
    """
    head, tail = _build_list(ops)
    linearized = 0
    state = initial
    cache: set[tuple[int, Hashable]] = set()
    stack: list[tuple[_Entry, Hashable]] = []
    entry = head.next
    steps = 0
    while head.next is not tail:
        steps += 1
        if tick is not None and not steps % TICK_EVERY:
            tick(steps)
        if entry.is_call:
            # Try to linearize this operation now: the register's step.
            new_state = _register_step(entry.kind, entry.a, entry.b, state)
            if new_state is _ILLEGAL:
                entry = entry.next
                continue
            new_linearized = linearized | entry.bit
            configuration = (new_linearized, new_state)
            if configuration in cache:
                # Some other path already explored this set and value, and failed (a
                # success would have ended the search): skip, try the next call.
                entry = entry.next
                continue
            cache.add(configuration)
            stack.append((entry, state))
            linearized = new_linearized
            state = new_state
            # Lift: unlink the call entry and its return entry.
            match = entry.match
            entry.prev.next = entry.next
            entry.next.prev = entry.prev
            match.prev.next = match.next
            match.next.prev = match.prev
            entry = head.next
        else:
            # A return entry whose operation is not linearized: every order tried from here
            # fails. Undo the last choice and try the calls after it.
            if not stack:
                return SearchResult(False, steps, len(cache))
            entry, state = stack.pop()
            linearized ^= entry.bit
            # Unlift, in the reverse order of the lift: the return entry first.
            match = entry.match
            match.prev.next = match
            match.next.prev = match
            entry.prev.next = entry
            entry.next.prev = entry
            entry = entry.next
    return SearchResult(True, steps, len(cache))


_ILLEGAL: Final = object()


def _register_step(kind: int, a: Hashable, b: Hashable, state: Hashable) -> Hashable:
    """The register's step (the module docstring: ``READ``, ``WRITE``, ``CAS``,
    ``CAS_UNKNOWN``) from the value ``state``, or from the set of values it may hold
    (``_step_possible``): the value after it, ``_ILLEGAL`` where it cannot be taken."""
    if state.__class__ is frozenset:
        return _step_possible(kind, a, b, state)
    if kind == READ:
        return state if state == a else _ILLEGAL
    if kind == WRITE:
        return a
    if kind == CAS:
        return b if state == a else _ILLEGAL
    return b if state == a else state  # CAS_UNKNOWN


def _step_possible(kind: int, a: Hashable, b: Hashable,
                   possible: frozenset[Hashable]) -> Hashable:
    """The register's step from a set of possible values (the search's ``initial`` given
    as a frozenset: a window of a history, whose value at its start is unknown): the values
    from which the step is legal, stepped; ``_ILLEGAL`` if none is. A run from the set
    succeeds iff it succeeds from one of its values (the set tracks exactly the values
    still consistent with the run so far)."""
    if kind in (READ, CAS):
        return (a if kind == READ else b) if a in possible else _ILLEGAL
    if kind == WRITE:
        return a
    stepped = frozenset(b if value == a else value for value in possible)
    return next(iter(stepped)) if len(stepped) == 1 else stepped


def _build_list(ops: Sequence[SearchOp]) -> tuple[_Entry, _Entry]:
    """The entries in real-time order between two sentinels; open-ended returns last, in
    call order (any order would do: they are all after every real event)."""
    last = max((max(op.call, op.ret if op.ret is not None else op.call) for op in ops),
               default=0)
    keyed: list[tuple[int, int, _Entry]] = []
    for i, op in enumerate(ops):
        assert op.ret is None or op.call < op.ret, f"operation {i} returns before its call"
        assert not (op.ret is None and op.kind == READ), "an open-ended read constrains nothing"
        bit = 1 << i
        call = _Entry(True, op.kind, op.a, op.b, bit)
        ret = _Entry(False, op.kind, op.a, op.b, bit)
        call.match = ret
        keyed.append((op.call, 0, call))
        keyed.append((op.ret if op.ret is not None else last + 1 + op.call, 1, ret))
    keyed.sort(key=lambda item: (item[0], item[1]))
    head = _Entry(False, -1, None, None, 0)
    tail = _Entry(False, -1, None, None, 0)
    previous = head
    for _, _, entry in keyed:
        previous.next = entry
        entry.prev = previous
        previous = entry
    previous.next = tail
    tail.prev = previous
    return head, tail
