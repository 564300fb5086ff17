"""The one order in which a shell executes a Ready: ``plan(ready) -> (PlanEffect, ...)``.

Rules of this file
------------------
* Pure: a Ready in, a flat tuple of effects out; no I/O. Every shell walks the same list
  in order (the tablet server's replica driver, impl/tserver/replica.py, a tombstone's
  voter, impl/tserver/manager/voter.py, and the test harness, impl/testing/raft.py), so the
  order is decided once, here, and tested here.
* One executor: a shell says what each kind of effect does to it (``PlanShell``: persist,
  trace, send, apply, release) and ``dispatch`` (or ``walk``, for a trio shell whose
  effects are awaited) routes every effect of the plan to it. No shell matches on the
  effect types itself, so adding an effect means one new method, checked by mypy in every
  shell.
* A crash may stop a shell after any prefix of the list, so each rule below is also a
  statement about what a crash can leave behind (the harness crashes at every position).

The effects
-----------
    PersistStep(step)  make the step's one durable change: a cmeta write (atomic replace)
                       or a WAL append, fsync'd. Only steps that change something durable.
    TraceStep(step)    write the step's fact, right after its PersistStep (or alone, for a
                       fact with no durable change: become_leader, commit, step_down, ...).
    Send(messages)     hand messages to the network.
    Apply(entries)     apply committed entries to the state machine, in index order.
    Release(...)       answer ReadIndex requests (confirmed, or failed: leadership lost).

    (The lifecycle core has its own effects, LifecyclePersist and LifecycleTrace: the names
    say which core's.)

The order, and why
------------------
1. Steps keep the core's order, each PersistStep immediately followed by its TraceStep. Durable
   order is trace order, and a crash loses at most the fact of the step in flight (a
   PersistStep without its TraceStep), which the trace checker's crash frontier allows.
2. A message leaves only once every step the core had emitted before sending it
   (``Ready.after_steps``) is durable AND traced. Durable: no vote is granted and no entry
   acknowledged before it survives a crash. Traced: the receiver's trace must never show
   a consequence before the sender's trace shows its cause; the Lamport clock a message
   carries is read when it leaves, so a new leader's first AppendRequest sent before its
   become_leader fact was written gives the follower's log_append a lower clock than
   that become_leader (the checker's CausalityViolation AppendAfterLeader: this was a
   real bug of the shell, which sent every AppendRequest before executing any step).
3. The one exception: an AppendRequest may leave before the WAL append steps that carry
   (some of) its own entries, so followers write to their disks while the leader writes
   to its own (Raft thesis 10.2.1). It is safe because the leader counts itself toward a
   commit only after ``advance`` (its own append durable), and what a crash of the leader
   at that point leaves (followers holding entries the leader lost) is an ordinary
   uncommitted suffix. It may overtake nothing else: not a fact-only step (become_leader,
   commit), not a cmeta write (the term it carries), not an append of other entries.
4. Messages to one destination leave in the order the core sent them (a link is FIFO in
   production; reordering would only cause spurious refusals).
5. Then Apply (the committed entries are durable here: every step is done), then Release
   (a read is answered at an index; the shell waits until it has applied it).
"""

from __future__ import annotations

from collections.abc import Awaitable, Sequence
from typing import Protocol, TypeVar

import attrs

from .core import ReadState, Ready, Step
from .messages import AppendRequest, Entry, Message

R_co = TypeVar("R_co", covariant=True)


@attrs.frozen
class PersistStep:
    """Make ``step``'s durable change (cmeta write or WAL append), fsync'd."""

    step: Step

    def __attrs_post_init__(self) -> None:
        assert self.step.cmeta is not None or self.step.entries, "nothing to persist"


@attrs.frozen
class TraceStep:
    """Write ``step``'s fact (after its PersistStep, if it has one)."""

    step: Step


@attrs.frozen
class Send:
    messages: tuple[Message, ...]


@attrs.frozen
class Apply:
    entries: tuple[Entry, ...]


@attrs.frozen
class Release:
    read_states: tuple[ReadState, ...]
    read_failures: tuple[int, ...]


PlanEffect = PersistStep | TraceStep | Send | Apply | Release


def may_overtake(message: Message, step: Step) -> bool:
    """Rule 3: an AppendRequest may leave before a WAL append of its own entries."""
    if not isinstance(message, AppendRequest) or not message.entries or not step.entries:
        return False
    if step.cmeta is not None:
        return False
    carried = {(e.term, e.index) for e in message.entries}
    return any((e.term, e.index) in carried for e in step.entries)


def send_points(rd: Ready) -> tuple[int, ...]:
    """For each message of ``rd``, the number of steps that must be durable and traced
    before it leaves (rules 2-4)."""
    points: list[int] = []
    last_to: dict[str, int] = {}  # destination -> send point of its latest message
    for m, after in zip(rd.messages, rd.after_steps, strict=True):
        q = after
        while q > 0 and may_overtake(m, rd.steps[q - 1]):
            q -= 1
        q = max(q, last_to.get(m.dest, 0))  # rule 4: FIFO per destination
        assert 0 <= q <= after <= len(rd.steps)
        last_to[m.dest] = q
        points.append(q)
    return tuple(points)


def plan(rd: Ready) -> tuple[PlanEffect, ...]:
    """The effects of ``rd`` in the one order a shell executes them (module docstring)."""
    sends: list[list[Message]] = [[] for _ in range(len(rd.steps) + 1)]
    for m, q in zip(rd.messages, send_points(rd), strict=True):
        sends[q].append(m)
    effects: list[PlanEffect] = []
    for k, step in enumerate(rd.steps):
        if sends[k]:
            effects.append(Send(tuple(sends[k])))
        if step.cmeta is not None or step.entries:
            effects.append(PersistStep(step))
        effects.append(TraceStep(step))
    if sends[-1]:
        effects.append(Send(tuple(sends[-1])))
    if rd.committed:
        effects.append(Apply(rd.committed))
    if rd.read_states or rd.read_failures:
        effects.append(Release(rd.read_states, rd.read_failures))
    assert sum(len(e.messages) for e in effects if isinstance(e, Send)) == len(rd.messages)
    assert sum(isinstance(e, TraceStep) for e in effects) == len(rd.steps)
    return tuple(effects)


class PlanShell(Protocol[R_co]):
    """What a shell does with each kind of effect, in the plan's order. ``R_co`` is what one
    effect returns: None for the harness (in memory, synchronous), an awaitable for a trio
    shell (the write and the fsync take a worker thread)."""

    def persist_step(self, step: Step) -> R_co:
        """Make the step's cmeta write or WAL append durable (fsync'd)."""
        ...

    def trace_step(self, step: Step) -> R_co:
        """Write the step's fact (its PersistStep, if any, is durable by now)."""
        ...

    def send_messages(self, messages: tuple[Message, ...]) -> R_co: ...

    def apply_entries(self, entries: tuple[Entry, ...]) -> R_co: ...

    def release_reads(self, read_states: tuple[ReadState, ...],
                      read_failures: tuple[int, ...]) -> R_co: ...


def dispatch(effect: PlanEffect, shell: PlanShell[R_co]) -> R_co:
    """Route one effect of a plan to the shell's method for its kind: the one executor every
    shell uses (a shell walks ``plan(ready)`` calling this on each effect in turn)."""
    if isinstance(effect, PersistStep):
        return shell.persist_step(effect.step)
    if isinstance(effect, TraceStep):
        return shell.trace_step(effect.step)
    if isinstance(effect, Send):
        return shell.send_messages(effect.messages)
    if isinstance(effect, Apply):
        return shell.apply_entries(effect.entries)
    assert isinstance(effect, Release), effect
    return shell.release_reads(effect.read_states, effect.read_failures)


async def walk(effects: Sequence[PlanEffect], shell: PlanShell[Awaitable[None]]) -> None:
    """Execute a plan's effects in order on a shell whose effects are awaited (a trio
    shell: no trio here, only ``await``)."""
    for effect in effects:
        await dispatch(effect, shell)


def describe(effects: Sequence[PlanEffect]) -> list[str]:
    """One short line per effect (diagnostics and the scenario scripts)."""
    out: list[str] = []
    for e in effects:
        if isinstance(e, PersistStep):
            what = "cmeta" if e.step.cmeta is not None else \
                f"wal {e.step.entries[0].index}..{e.step.entries[-1].index}"
            out.append(f"persist {e.step.fact.event} ({what})")
        elif isinstance(e, TraceStep):
            out.append(f"trace {e.step.fact.event}")
        elif isinstance(e, Send):
            out.append("send " + " ".join(f"{type(m).__name__}->{m.dest}" for m in e.messages))
        elif isinstance(e, Apply):
            out.append(f"apply {e.entries[0].index}..{e.entries[-1].index}")
        else:
            out.append(f"release {len(e.read_states)} reads, {len(e.read_failures)} failed")
    return out


__all__ = [
    "Apply",
    "PersistStep",
    "PlanEffect",
    "PlanShell",
    "Release",
    "Send",
    "TraceStep",
    "describe",
    "dispatch",
    "may_overtake",
    "plan",
    "send_points",
    "walk",
]
