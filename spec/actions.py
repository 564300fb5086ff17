"""The one transition table of the replica lifecycle.

Rules of this file
------------------
* Every action is a row of ``ACTIONS``: a name (the trace event that stands for it), the seed
  step it implements, its parameters (all integers), a *local* guard and effect over one
  server's state, and, for the few actions whose enabling depends on other servers (a
  candidate needs a majority of votes), a *system* guard over all servers.
* Guards and effects obey the two-interpreter discipline of ``logic``: no ``if`` on state,
  ``ite`` instead; they run unchanged on Python values and on z3 terms.
* Each action is one atomic durable step (one fsync'd change) or one volatile step, so that a
  crash (another row) can fall between any two of them.
* Anything not in the table is not allowed. The trace checker replays events through the
  local guards and effects; the explorer, Hypothesis and the prover use both.

Theory of operation (seed 001)
------------------------------
Deletion (steps 1-6): shut the replica down; create the quarantine directory (QDIR); copy the
superblock into it; mark the superblock DELETED, recording the last logged OpId and the QDIR
(from here on the delete always rolls forward); copy the cmeta into the QDIR; move the WAL
directory into the QDIR. The cmeta itself stays in place forever: a tombstone keeps its term
and vote, and votes from them ("Future work": tombstones vote, as real Kudu later did).

Follower tablet copy (steps 1-6): rewrite the superblock as COPYING (keeping the tombstone's
last OpId, clearing the QDIR); download and *merge* the cmeta (``merge``); download the WAL;
download the blocks; write the superblock READY; start the replica.

StartTabletCopy: the seed's pseudo-code deletes a running tablet *before* checking the
caller's term. That order lets a deposed leader (a stale term) destroy a current replica and
leave it tombstoned after the term check finally fails. We check the term first, as real
Kudu does, and also refuse a caller whose term is below the tombstone's last logged term
(such a caller cannot hold the data the tombstone already acknowledged). The seed's order is
kept as a mutant (``mutants``) that the prover and the explorer must reject.

Startup: DELETED with the WAL still live rolls the deletion forward (steps 5 and 6 again);
COPYING deletes itself back to DELETED (steps 2-6, keeping the last OpId); READY with its
cmeta, WAL and blocks starts normally; READY with any of them missing stays offline (FAILED).

Raft, only as far as it touches the lifecycle: learning a higher term; RequestVote granted
or denied by READY, COPYING and DELETED replicas (a tombstone votes from its retained cmeta
and last OpId); starting an election; becoming leader with a majority of votes of *members*
(servers still on their original UUID); stepping down; appending to the log; committing;
committing a config change into the cmeta.

Departures from the seed for a real Raft server (trace contract version 2)
---------------------------------------------------------------------------
The seed treats Raft as a black box. A real tablet server with Raft per tablet does four
things the first version of this table could not express, and meets one kind of fault the
seed leaves to the operator. Each is a row (or a parameter) here; each new guard has a claim
in ``invariants`` it protects and a mutant in ``mutants`` that breaks it:

* Batched appends (``log_append`` gains ``first_index``). A server appends a batch of
  entries first_index..op_index with *one* fsync and logs one event after it; op_term is
  the last entry's term. The guard keeps a log without holes (first_index <= last index + 1)
  and lets a follower overwrite a suffix (first_index <= last index: truncate, then
  append); a pure append never lowers the last term (terms never decrease along a Raft
  log: a follower's batch follows the entry that matched the leader's log). A leader
  never truncates its own log (Raft's Leader Append-Only): it appends at last index + 1 in
  its own term. Claim: ``LeaderAppendOnly`` (step property); mutant
  ``leader_truncates_own_log``.
* ``step_down`` (volatile). A leader stops leading without learning a higher term
  (check-quorum lost a majority, an operator asked, a leadership transfer). The seed's
  table only ended leadership with a higher term, so a leader that stepped down in a real
  server could never be followed by ``start_election`` (which needs "not leader"). It keeps
  term and vote: a vote is for the term, not for the leadership. Letting a non-leader step
  down is harmless, so the mutant ``step_down_forgets_vote`` breaks the effect instead (it
  clears the vote: ``VotesMatchCmeta``, the former leader could vote twice in its term).
* ``config_commit`` (durable). A committed config change entry at index config_index is
  written into the cmeta (an atomic replace). The committed config only moves forward and
  only to an entry of the replica's own log. Claim: ``ConfigCommittedFromLog`` (step
  property); mutant ``config_commit_beyond_log``.
* ``commit`` once per batch. ``commit(index, op_term)`` says every index up to ``index``
  is committed, op_term being the term of the entry at ``index``. The row was already
  written that way (nothing here assumes consecutive indices); the trace checker compares
  only the (index, term) pairs events name (``checker.global_checks``).
* Startup of a damaged replica (``damage``: a disk fault while the server is down, like
  ``wipe``). The seed's startup says READY with something missing stays offline; a real
  server also finds a WAL whose segments fail verification, or missing or corrupt data
  blocks. ``damage`` marks the WAL or the blocks DAMAGED (a durable fact about the disk, not
  a step a process takes, so no trace logs it: the checker infers it at a crash boundary
  from the state the next ``startup`` reports); ``startup_case`` classifies READY with a
  damaged WAL or damaged blocks as FAILED, and the writer says so (``case`` FAILED with a
  ``reason``). A damaged replica never runs (``RunningIsIntact``; mutants
  ``damage_while_up`` and ``startup_ignores_damage``); ``ReadyIsComplete`` now says READY
  has its files (the WAL in place, every block listed), damaged or not. Deleting a damaged
  replica moves its WAL into the quarantine like a live one (the tombstone keeps the last
  OpId the WAL held: damage does not change it), and a tablet copy replaces it. The
  explorer and Hypothesis count damage with wipes (``FAULT_ACTIONS``, ``Bounds.max_wipes``).

RequestVote answers fold a term rise into themselves (``vote_granted`` / ``vote_denied``
with ``t`` above the current term adopt ``t``, clear the vote or cast it, and end any
leadership): a server logs no ``learn_term`` before such a vote.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

import attrs

from revivify.spec.logic import (
    Bool,
    Int,
    all_,
    any_,
    count,
    eq,
    get,
    implies,
    ite,
    member,
    ne,
    not_,
    opid_ge,
    put,
    put_if,
)
from revivify.spec.merge import merge_cmeta
from revivify.spec.model import (
    BLOCKS_ABSENT,
    BLOCKS_DAMAGED,
    BLOCKS_PARTIAL,
    BLOCKS_PRESENT,
    COPYING,
    DAMAGE_BLOCKS,
    DAMAGE_WAL,
    DELETED,
    DELETING_OPS,
    DOES_NOT_EXIST,
    NO_VOTE,
    OP_BOOT_DELETE,
    OP_COPY,
    OP_COPY_DELETE,
    OP_DELETE,
    OP_NONE,
    OP_ROLL_FORWARD,
    READY,
    STARTUP_COPYING_TO_DELETED,
    STARTUP_FAILED,
    STARTUP_NOTHING,
    STARTUP_READY,
    STARTUP_ROLL_FORWARD,
    STARTUP_TOMBSTONE,
    STC_ALREADY_IN_PROGRESS,
    STC_BAD_TERM,
    STC_ILLEGAL_STATE,
    STC_OPID_MISMATCH,
    STC_STALE_TOMBSTONE_TERM,
    WAL_DAMAGED,
    WAL_IN_PLACE,
    WAL_LIVE,
    WAL_QUARANTINED,
    ServerState,
    SystemState,
    majority,
)

Params = dict[str, Any]
LocalGuard = Callable[..., Bool]
# A guard spelled as named conditions (each must hold): the guard is their conjunction, and a
# trace checker names the ones a refused event breaks.
Conditions = Callable[..., list[tuple[str, Bool]]]
LocalEffect = Callable[..., ServerState]
SystemGuard = Callable[..., Bool]
Enumerator = Callable[[SystemState, int, "Bounds"], Iterable[Params]]


@attrs.frozen
class Bounds:
    """Bounds on the values the explorer and Hypothesis feed into parameters.

    ``max_wipes`` bounds the disk faults of a run (``FAULT_ACTIONS``: wipes and damage),
    which the spec itself never bounds; ``max_crashes`` bounds crashes."""

    max_term: int = 3
    max_index: int = 2
    max_crashes: int = 2
    max_wipes: int = 1


# Disk faults: they strike a server that is down, no process logs them, and the explorer,
# Hypothesis and the walks count them against ``Bounds.max_wipes``.
FAULT_ACTIONS: tuple[str, ...] = ("wipe", "damage")


@attrs.frozen
class Action:
    """A row of the transition table."""

    name: str
    seed: str
    params: tuple[str, ...]
    guard: LocalGuard
    effect: LocalEffect
    enum: Enumerator
    system_guard: SystemGuard | None = None
    # Actions that only move volatile state (a crash keeps nothing of them).
    volatile_only: bool = False
    # The guard's named conditions, when it is written as such (for explanations only: the
    # guard decides).
    conditions: Conditions | None = None

    def enabled_local(self, s: ServerState, p: Params) -> Bool:
        return self.guard(s, **p)

    def enabled(self, sys: SystemState, i: int, p: Params) -> Bool:
        local = self.guard(sys[i], **p)
        if self.system_guard is None:
            return local
        return all_(local, self.system_guard(sys, i, **p))

    def apply(self, sys: SystemState, i: int, p: Params) -> SystemState:
        new = self.effect(sys[i], **p)
        return (*sys[:i], new, *sys[i + 1 :])


# ---------------------------------------------------------------------------------------
# Helpers shared by guards (all interpreter-neutral).


def last_logged(s: ServerState) -> tuple[Int, Int]:
    """The OpId a replica votes and answers from: its WAL while READY, else the tombstone's
    retained last OpId (the WAL may be gone: that is why deletion records it)."""
    ready = eq(s.sb, READY)
    return ite(ready, s.wal_last_term, s.sb_last_term), ite(ready, s.wal_last_index,
                                                             s.sb_last_index)


def in_consensus(s: ServerState) -> Bool:
    """May take part in Raft for this tablet: up, has cmeta, not failed, and no lifecycle
    step that rewrites metadata is half done (a copy in flight may still vote)."""
    return all_(s.up, s.cmeta, not_(s.failed), member(s.op, (OP_NONE, OP_COPY)))


def wal_in_place(s: ServerState) -> Bool:
    """The WAL directory is in ``wals/<id>`` (live, or live but damaged)."""
    return member(s.wal, WAL_IN_PLACE)


def intact(s: ServerState) -> Bool:
    """Everything a replica starts from is there and undamaged: the cmeta, a live WAL that
    verifies, and every data block the superblock lists."""
    return all_(s.cmeta, eq(s.wal, WAL_LIVE), eq(s.blocks, BLOCKS_PRESENT))


def is_member(s: ServerState) -> Bool:
    """Still on the UUID that the tablet's Raft config names (a wiped server is not)."""
    return eq(s.uuid_gen, 0)


def startup_case(s: ServerState) -> Int:
    """Seed "Tablet startup": which of the cases the on-disk state falls into.

    A DELETED superblock whose WAL directory is still in place (damaged or not) rolls the
    deletion forward; READY starts only when everything is there and undamaged
    (``intact``), else the replica stays offline, FAILED (a missing file, a WAL that fails
    verification, missing or corrupt blocks)."""
    return ite(
        eq(s.sb, DELETED),
        ite(wal_in_place(s), STARTUP_ROLL_FORWARD, STARTUP_TOMBSTONE),
        ite(
            eq(s.sb, COPYING),
            STARTUP_COPYING_TO_DELETED,
            ite(
                eq(s.sb, READY),
                ite(intact(s), STARTUP_READY, STARTUP_FAILED),
                STARTUP_NOTHING,
            ),
        ),
    )


def at_step(s: ServerState, ops: tuple[int, ...], step: int) -> Bool:
    return all_(s.up, member(s.op, ops), eq(s.step, step))


def _ev(s: ServerState, **changes: Any) -> ServerState:
    return attrs.evolve(s, **changes)


def _none(sys: SystemState, i: int, b: Bounds) -> Iterator[Params]:
    yield {}


# ---------------------------------------------------------------------------------------
# Tablet creation (by the master's CreateTablet): written with the superblock last, so the
# superblock is the commit point (seed: "The primary indicator of a tablet's existence is
# the presence of a superblock file").


def create_guard(s: ServerState, config_index: Int) -> Bool:
    return all_(s.up, eq(s.op, OP_NONE), eq(s.sb, DOES_NOT_EXIST), not_(s.cmeta),
                config_index >= 0)


def create_effect(s: ServerState, config_index: Int) -> ServerState:
    return _ev(s, sb=READY, cmeta=True, term=0, voted_for=NO_VOTE, config_index=config_index,
               wal=WAL_LIVE, wal_last_term=0, wal_last_index=0, blocks=BLOCKS_PRESENT,
               running=True, failed=False)


def create_enum(sys: SystemState, i: int, b: Bounds) -> Iterator[Params]:
    yield {"config_index": 0}


# ---------------------------------------------------------------------------------------
# Deletion, seed steps 1-6.


def d1_guard(s: ServerState) -> Bool:
    # A deletion the master asks for (no op in flight), or the deletion that an accepted
    # StartTabletCopy of a READY replica does first.
    return all_(s.up, eq(s.sb, READY),
                any_(eq(s.op, OP_NONE), all_(eq(s.op, OP_COPY_DELETE), eq(s.step, 0))))


def d1_effect(s: ServerState) -> ServerState:
    return _ev(s, running=False, leader=False, failed=False,
               op=ite(eq(s.op, OP_NONE), OP_DELETE, s.op), step=1)


def d2_guard(s: ServerState) -> Bool:
    return at_step(s, DELETING_OPS, 1)


def d2_effect(s: ServerState) -> ServerState:
    return _ev(s, qdir=True, q_sb=False, q_cmeta=False, step=2)


def d3_guard(s: ServerState) -> Bool:
    return all_(at_step(s, DELETING_OPS, 2), s.qdir)


def d3_effect(s: ServerState) -> ServerState:
    return _ev(s, q_sb=True, step=3)


def d4_guard(s: ServerState) -> Bool:
    return all_(at_step(s, DELETING_OPS, 3), s.q_sb)


def d4_effect(s: ServerState) -> ServerState:
    # A READY replica records its WAL's last OpId. A COPYING one keeps the tombstone's (the
    # downloaded WAL was never its own log: real Kudu passes no OpId here and keeps the old).
    from_ready = eq(s.sb, READY)
    return _ev(
        s,
        sb=DELETED,
        sb_last_term=ite(from_ready, s.wal_last_term, s.sb_last_term),
        sb_last_index=ite(from_ready, s.wal_last_index, s.sb_last_index),
        sb_qdir=True,
        blocks=BLOCKS_ABSENT,  # the live superblock lists none; the QDIR copy has the old list
        step=4,
    )


def d5_guard(s: ServerState) -> Bool:
    return all_(at_step(s, (*DELETING_OPS, OP_ROLL_FORWARD), 4), eq(s.sb, DELETED), s.sb_qdir)


def d5_effect(s: ServerState) -> ServerState:
    return _ev(s, q_cmeta=s.cmeta, step=5)


def d6_guard(s: ServerState) -> Bool:
    return all_(at_step(s, (*DELETING_OPS, OP_ROLL_FORWARD), 5), eq(s.sb, DELETED))


def d6_effect(s: ServerState) -> ServerState:
    # A damaged WAL directory is moved like a live one (the move does not read it).
    return _ev(
        s,
        wal=ite(wal_in_place(s), WAL_QUARANTINED, s.wal),
        wal_last_term=0,
        wal_last_index=0,
        # A copy's own deletion hands over to the copy; every other deletion is finished.
        op=ite(eq(s.op, OP_COPY_DELETE), OP_COPY, OP_NONE),
        step=0,
        op_term=ite(eq(s.op, OP_COPY_DELETE), s.op_term, 0),
    )


# ---------------------------------------------------------------------------------------
# StartTabletCopy (seed pseudo-code, with the term checks moved before the deletion).


def stc_failures(
    s: ServerState, caller_term: Int, expected_state: Int, has_opid: Int, opid_term: Int,
    opid_index: Int,
) -> list[tuple[int, Bool]]:
    """The checks in the order they run, each as (answer, condition that fails it)."""
    lt, li = last_logged(s)
    return [
        (STC_ALREADY_IN_PROGRESS, any_(eq(s.sb, COPYING), ne(s.op, OP_NONE))),
        (STC_ILLEGAL_STATE, ne(s.sb, expected_state)),
        (STC_BAD_TERM, caller_term < s.term),
        (STC_STALE_TOMBSTONE_TERM, caller_term < s.sb_last_term),
        (STC_OPID_MISMATCH, all_(ne(has_opid, 0), any_(ne(opid_term, lt), ne(opid_index, li)))),
    ]


def first_failure_guard(failures: list[tuple[int, Bool]], reason: Int) -> Bool:
    """reason is the first check that fails (all before it passed)."""
    options = []
    passed: list[Bool] = []
    for code, fails in failures:
        options.append(all_(eq(reason, code), fails, *[not_(p) for p in passed]))
        passed.append(fails)
    return any_(*options)


def stc_accept_guard(s: ServerState, caller_term: Int, expected_state: Int, has_opid: Int,
                     opid_term: Int, opid_index: Int) -> Bool:
    fails = stc_failures(s, caller_term, expected_state, has_opid, opid_term, opid_index)
    return all_(s.up, caller_term >= 0, *[not_(f) for _, f in fails])


def stc_accept_effect(s: ServerState, caller_term: Int, expected_state: Int, has_opid: Int,
                      opid_term: Int, opid_index: Int) -> ServerState:
    return _ev(s, op=ite(eq(s.sb, READY), OP_COPY_DELETE, OP_COPY), step=0,
               op_term=caller_term)


def stc_reject_guard(s: ServerState, caller_term: Int, expected_state: Int, has_opid: Int,
                     opid_term: Int, opid_index: Int, reason: Int) -> Bool:
    fails = stc_failures(s, caller_term, expected_state, has_opid, opid_term, opid_index)
    return all_(s.up, caller_term >= 0, first_failure_guard(fails, reason))


def stc_reject_effect(s: ServerState, **_: Any) -> ServerState:
    return s


def stc_requests(sys: SystemState, i: int, b: Bounds) -> Iterator[Params]:
    """Requests from every replica that believes itself leader (stale ones included), for
    every state the caller might believe the follower is in."""
    for j, caller in enumerate(sys):
        if j == i or not (caller.up and caller.leader):
            continue
        for expected in (DOES_NOT_EXIST, DELETED, READY):
            yield {"caller_term": caller.term, "expected_state": expected, "has_opid": 0,
                   "opid_term": 0, "opid_index": 0}


# The enumerators below first test the cheap preconditions of their own server that the
# action's local guard requires whatever the parameters (so skipping the loop over the other
# servers changes nothing the guard would have let through); the guard still decides.


def stc_accept_enum(sys: SystemState, i: int, b: Bounds) -> Iterator[Params]:
    s = sys[i]
    if not (s.up and s.op == OP_NONE and s.sb != COPYING):  # else ALREADY_IN_PROGRESS
        return iter(())
    return stc_requests(sys, i, b)


def stc_reject_enum(sys: SystemState, i: int, b: Bounds) -> Iterator[Params]:
    if not sys[i].up:
        return
    for p in stc_requests(sys, i, b):
        fails = stc_failures(sys[i], **p)
        for code, failed in fails:
            if failed:
                yield {**p, "reason": code}
                break


# ---------------------------------------------------------------------------------------
# Follower tablet copy, seed steps 1-6.


def c1_guard(s: ServerState) -> Bool:
    return at_step(s, (OP_COPY,), 0)


def c1_effect(s: ServerState) -> ServerState:
    # Keep last OpId (the tombstone's knowledge, needed to vote if we crash now), clear QDIR.
    return _ev(s, sb=COPYING, sb_qdir=False, step=1)


def c2_guard(s: ServerState, remote_term: Int, remote_config_index: Int) -> Bool:
    return all_(at_step(s, (OP_COPY,), 1), remote_term >= 0, remote_config_index >= 0)


def c2_effect(s: ServerState, remote_term: Int, remote_config_index: Int) -> ServerState:
    m = merge_cmeta(s.cmeta, s.term, s.voted_for, remote_term, remote_config_index)
    return _ev(s, cmeta=True, term=m.term, voted_for=m.voted_for,
               config_index=m.config_index, step=2)


def copy_sources(sys: SystemState, i: int) -> Iterator[ServerState]:
    for j, src in enumerate(sys):
        if j != i and src.up and src.sb == READY:
            yield src


def c2_enum(sys: SystemState, i: int, b: Bounds) -> Iterator[Params]:
    s = sys[i]
    if not (s.up and s.op == OP_COPY and s.step == 1):  # c2_guard's at_step
        return
    for src in copy_sources(sys, i):
        yield {"remote_term": src.term, "remote_config_index": src.config_index}


def c3_guard(s: ServerState, remote_last_term: Int, remote_last_index: Int) -> Bool:
    return all_(at_step(s, (OP_COPY,), 2), remote_last_term >= 0, remote_last_index >= 0,
                remote_last_term <= s.term)


def c3_effect(s: ServerState, remote_last_term: Int, remote_last_index: Int) -> ServerState:
    return _ev(s, wal=WAL_LIVE, wal_last_term=remote_last_term,
               wal_last_index=remote_last_index, step=3)


def c3_enum(sys: SystemState, i: int, b: Bounds) -> Iterator[Params]:
    s = sys[i]
    if not (s.up and s.op == OP_COPY and s.step == 2):  # c3_guard's at_step
        return
    for src in copy_sources(sys, i):
        yield {"remote_last_term": src.wal_last_term, "remote_last_index": src.wal_last_index}


def c4_block_guard(s: ServerState) -> Bool:
    return all_(at_step(s, (OP_COPY,), 3), ne(s.blocks, BLOCKS_PRESENT))


def c4_block_effect(s: ServerState) -> ServerState:
    return _ev(s, blocks=BLOCKS_PARTIAL)


def c4_done_guard(s: ServerState) -> Bool:
    return at_step(s, (OP_COPY,), 3)


def c4_done_effect(s: ServerState) -> ServerState:
    return _ev(s, blocks=BLOCKS_PRESENT, step=4)


def c5_guard(s: ServerState) -> Bool:
    return at_step(s, (OP_COPY,), 4)


def c5_effect(s: ServerState) -> ServerState:
    # The downloaded WAL is now this replica's log; the tombstone's OpId is superseded.
    return _ev(s, sb=READY, sb_last_term=0, sb_last_index=0, sb_qdir=False,
               ghost_last_term=s.wal_last_term, ghost_last_index=s.wal_last_index, step=5)


def c6_guard(s: ServerState) -> Bool:
    return all_(at_step(s, (OP_COPY,), 5), eq(s.sb, READY))


def c6_effect(s: ServerState) -> ServerState:
    return _ev(s, running=True, op=OP_NONE, step=0, op_term=0)


# ---------------------------------------------------------------------------------------
# Crash, startup and disk loss.


def crash_guard(s: ServerState) -> Bool:
    return s.up


def crash_effect(s: ServerState) -> ServerState:
    return _ev(s, up=False, running=False, failed=False, leader=False, op=OP_NONE, step=0,
               op_term=0)


def startup_guard(s: ServerState, case: Int) -> Bool:
    return all_(not_(s.up), eq(case, startup_case(s)))


def startup_effect(s: ServerState, case: Int) -> ServerState:
    rf = eq(case, STARTUP_ROLL_FORWARD)
    copying = eq(case, STARTUP_COPYING_TO_DELETED)
    return _ev(
        s,
        up=True,
        running=eq(case, STARTUP_READY),
        failed=eq(case, STARTUP_FAILED),
        leader=False,
        op=ite(rf, OP_ROLL_FORWARD, ite(copying, OP_BOOT_DELETE, OP_NONE)),
        step=ite(rf, 4, ite(copying, 1, 0)),
        op_term=0,
    )


def startup_enum(sys: SystemState, i: int, b: Bounds) -> Iterator[Params]:
    yield {"case": startup_case(sys[i])}


def wipe_guard(s: ServerState) -> Bool:
    return not_(s.up)


def wipe_effect(s: ServerState) -> ServerState:
    """Seed "Failure of a disk with consensus metadata": wipe all data, new UUID."""
    fresh = ServerState(up=False)
    votes = fresh.votes if isinstance(s.votes, type(fresh.votes)) else empty_votes_array()
    # The original UUID's history (member_votes, led) is history, not state: it is kept.
    return attrs.evolve(fresh, uuid_gen=s.uuid_gen + 1, votes=votes,
                        member_votes=s.member_votes, led=s.led)


def empty_votes_array() -> Any:
    """The symbolic empty vote history (a constant z3 Array)."""
    import z3

    return z3.K(z3.IntSort(), z3.IntVal(NO_VOTE))


def damage_guard(s: ServerState, what: Int) -> Bool:
    """A disk fault strikes while the server is down (like ``wipe``; a fault of a running
    server shows up at its next start too): a live WAL whose segments then fail
    verification, or a complete block list with missing or corrupt blocks."""
    return all_(not_(s.up),
                any_(all_(eq(what, DAMAGE_WAL), eq(s.wal, WAL_LIVE)),
                     all_(eq(what, DAMAGE_BLOCKS), eq(s.blocks, BLOCKS_PRESENT))))


def damage_effect(s: ServerState, what: Int) -> ServerState:
    """Only the location (or the blocks' state) changes: the WAL's last OpId stays what it
    was (the server reads it from the segments that still verify, see traces/README.md)."""
    return _ev(s, wal=ite(eq(what, DAMAGE_WAL), WAL_DAMAGED, s.wal),
               blocks=ite(eq(what, DAMAGE_BLOCKS), BLOCKS_DAMAGED, s.blocks))


def damage_enum(sys: SystemState, i: int, b: Bounds) -> Iterator[Params]:
    s = sys[i]
    if s.wal == WAL_LIVE:
        yield {"what": DAMAGE_WAL}
    if s.blocks == BLOCKS_PRESENT:
        yield {"what": DAMAGE_BLOCKS}


# ---------------------------------------------------------------------------------------
# Raft, as it touches the lifecycle.


def learn_term_guard(s: ServerState, t: Int) -> Bool:
    return all_(in_consensus(s), t > s.term)


def learn_term_effect(s: ServerState, t: Int) -> ServerState:
    return _ev(s, term=t, voted_for=NO_VOTE, leader=False)


def learn_term_enum(sys: SystemState, i: int, b: Bounds) -> Iterator[Params]:
    if not in_consensus(sys[i]):
        return
    for t in sorted({o.term for o in sys if o.cmeta and o.term > sys[i].term}):
        yield {"t": t}


def vote_grantable(s: ServerState, candidate: Int, t: Int, cand_last_term: Int,
                   cand_last_index: Int) -> Bool:
    lt, li = last_logged(s)
    return all_(
        t >= s.term,
        any_(t > s.term, eq(s.voted_for, NO_VOTE), eq(s.voted_for, candidate)),
        opid_ge(cand_last_term, cand_last_index, lt, li),
    )


def vote_guard(s: ServerState, candidate: Int, t: Int, cand_last_term: Int,
               cand_last_index: Int) -> Bool:
    return all_(in_consensus(s), candidate >= 0,
                vote_grantable(s, candidate, t, cand_last_term, cand_last_index))


def vote_effect(s: ServerState, candidate: Int, t: Int, cand_last_term: Int,
                cand_last_index: Int) -> ServerState:
    return _ev(s, term=t, voted_for=candidate, votes=put(s.votes, t, candidate),
               member_votes=put_if(is_member(s), s.member_votes, t, candidate),
               leader=ite(t > s.term, False, s.leader))


def vote_denied_guard(s: ServerState, candidate: Int, t: Int, cand_last_term: Int,
                      cand_last_index: Int) -> Bool:
    return all_(in_consensus(s), candidate >= 0,
                not_(vote_grantable(s, candidate, t, cand_last_term, cand_last_index)))


def vote_denied_effect(s: ServerState, candidate: Int, t: Int, cand_last_term: Int,
                       cand_last_index: Int) -> ServerState:
    rises = t > s.term
    return _ev(s, term=ite(rises, t, s.term), voted_for=ite(rises, NO_VOTE, s.voted_for),
               leader=ite(rises, False, s.leader))


def not_self(sys: SystemState, i: int, candidate: Int, **_: Any) -> Bool:
    """The candidate is another server of the system."""
    return all_(ne(candidate, i), candidate >= 0, candidate < len(sys))


def vote_requests(sys: SystemState, i: int, b: Bounds) -> Iterator[Params]:
    """RequestVote from every server campaigning in its current term."""
    for c, cand in enumerate(sys):
        if c == i or not (cand.up and cand.running and not cand.leader
                          and cand.voted_for == c and cand.term > 0):
            continue
        yield {"candidate": c, "t": cand.term, "cand_last_term": cand.wal_last_term,
               "cand_last_index": cand.wal_last_index}


def vote_enum(sys: SystemState, i: int, b: Bounds) -> Iterator[Params]:
    if not in_consensus(sys[i]):
        return
    for p in vote_requests(sys, i, b):
        if vote_grantable(sys[i], **p):
            yield p


def vote_denied_enum(sys: SystemState, i: int, b: Bounds) -> Iterator[Params]:
    if not in_consensus(sys[i]):
        return
    for p in vote_requests(sys, i, b):
        if not vote_grantable(sys[i], **p):
            yield p


def start_election_guard(s: ServerState, me: Int) -> Bool:
    return all_(s.up, s.running, eq(s.sb, READY), eq(s.op, OP_NONE), not_(s.leader),
                is_member(s), me >= 0)


def start_election_effect(s: ServerState, me: Int) -> ServerState:
    return _ev(s, term=s.term + 1, voted_for=me, votes=put(s.votes, s.term + 1, me),
               member_votes=put(s.member_votes, s.term + 1, me))


def is_self(sys: SystemState, i: int, me: Int, **_: Any) -> Bool:
    return eq(me, i)


def start_election_enum(sys: SystemState, i: int, b: Bounds) -> Iterator[Params]:
    if sys[i].term < b.max_term:
        yield {"me": i}


def become_leader_guard(s: ServerState, me: Int, t: Int) -> Bool:
    return all_(s.up, s.running, eq(s.op, OP_NONE), not_(s.leader), eq(s.term, t),
                eq(s.voted_for, me), is_member(s))


def become_leader_effect(s: ServerState, me: Int, t: Int) -> ServerState:
    return _ev(s, leader=True, led=put(s.led, t, True))


def has_majority(sys: SystemState, i: int, me: Int, t: Int) -> Bool:
    """A majority of the config's members voted for `me` in term t (the ghost vote history
    is the abstraction of the RequestVote responses the candidate received)."""
    votes = count(*[eq(get(k.member_votes, t), me) for k in sys])
    return all_(eq(me, i), votes >= majority(len(sys)))


def become_leader_enum(sys: SystemState, i: int, b: Bounds) -> Iterator[Params]:
    yield {"me": i, "t": sys[i].term}


def step_down_guard(s: ServerState) -> Bool:
    """A leader may stop leading at any time without learning a higher term (check-quorum,
    an operator's request, a leadership transfer)."""
    return all_(s.up, s.leader)


def step_down_effect(s: ServerState) -> ServerState:
    # Term and vote stay: the vote belongs to the term, whoever leads it.
    return _ev(s, leader=False)


def log_append_conditions(s: ServerState, first_index: Int, op_term: Int,
                          op_index: Int) -> list[tuple[str, Bool]]:
    """A batch first_index..op_index written with one fsync; op_term is its last entry's.

    * the log has no holes: the batch starts at most one past the last index;
    * first_index <= the last index is a follower truncating its log's suffix from
      first_index and appending the batch in its place;
    * a pure append (first_index = last index + 1) never lowers the last term: the terms of
      a Raft log never decrease along it (the batch follows the entry that was last);
    * a leader never truncates its own log (Leader Append-Only): it appends at last index
      + 1, entries of its own term.
    """
    appends = eq(first_index, s.wal_last_index + 1)
    return [
        ("a running READY replica with a live WAL",
         all_(s.up, s.running, eq(s.op, OP_NONE), eq(s.sb, READY), eq(s.wal, WAL_LIVE))),
        ("1 <= op_term <= the current term", all_(op_term >= 1, op_term <= s.term)),
        ("1 <= first_index <= op_index", all_(first_index >= 1, first_index <= op_index,
                                              op_index >= 1)),
        ("no gap: first_index <= last index + 1", first_index <= s.wal_last_index + 1),
        ("an append (first_index = last index + 1) never lowers the last term",
         implies(appends, op_term >= s.wal_last_term)),
        ("a leader appends at last index + 1 in its own term (it never truncates its log)",
         implies(s.leader, all_(eq(op_term, s.term), appends))),
    ]


def log_append_guard(s: ServerState, first_index: Int, op_term: Int, op_index: Int) -> Bool:
    return all_(*[c for _, c in log_append_conditions(s, first_index, op_term, op_index)])


def log_append_effect(s: ServerState, first_index: Int, op_term: Int,
                      op_index: Int) -> ServerState:
    return _ev(s, wal_last_term=op_term, wal_last_index=op_index, ghost_last_term=op_term,
               ghost_last_index=op_index)


def follower_first_index(s: ServerState, op_term: int, op_index: int) -> int:
    """Where a follower's batch ending at (op_term, op_index) starts: right after its last
    entry when that extends its log, else (the logs diverge) a truncation from the lower of
    the two last indexes. The spec's log is abstracted to its last OpId, so any start the
    guard allows leads to the same state; this picks one."""
    if op_index > s.wal_last_index and op_term >= s.wal_last_term:
        return int(s.wal_last_index + 1)
    return int(min(op_index, max(s.wal_last_index, 1)))


def log_append_enum(sys: SystemState, i: int, b: Bounds) -> Iterator[Params]:
    s = sys[i]
    if not (s.up and s.running and s.op == OP_NONE and s.sb == READY and s.wal == WAL_LIVE):
        return
    if s.leader:
        # One entry, or a batch up to the bound.
        first = s.wal_last_index + 1
        for last in range(first, b.max_index + 1):
            yield {"first_index": first, "op_term": s.term, "op_index": last}
        return
    for j, leader in enumerate(sys):
        if (j != i and leader.up and leader.leader and leader.term <= s.term
                and leader.wal_last_index >= 1
                and (leader.wal_last_term, leader.wal_last_index)
                != (s.wal_last_term, s.wal_last_index)):
            yield {"first_index": follower_first_index(s, leader.wal_last_term,
                                                       leader.wal_last_index),
                   "op_term": leader.wal_last_term, "op_index": leader.wal_last_index}


def commit_guard(s: ServerState, index: Int, op_term: Int) -> Bool:
    """Every index up to ``index`` is committed (one event per batch); op_term is the term
    of the entry at ``index``, which this replica holds."""
    return all_(s.up, s.running, eq(s.op, OP_NONE), index >= 1, index <= s.wal_last_index,
                op_term >= 1, op_term <= s.wal_last_term)


def commit_effect(s: ServerState, index: Int, op_term: Int) -> ServerState:
    return s


def leader_commit(sys: SystemState, i: int, index: Int, op_term: Int) -> Bool:
    """Raft's commitment rule: the leader commits an entry of its own term once a majority
    of members hold the log up to it (earlier entries are committed with it)."""
    s = sys[i]
    holders = count(*[all_(is_member(k), eq(k.sb, READY),
                           opid_ge(k.wal_last_term, k.wal_last_index, op_term, index))
                      for k in sys])
    return all_(s.leader, eq(op_term, s.term), holders >= majority(len(sys)))


def commit_enum(sys: SystemState, i: int, b: Bounds) -> Iterator[Params]:
    s = sys[i]
    if s.leader and s.wal_last_index >= 1 and s.wal_last_term == s.term:
        yield {"index": s.wal_last_index, "op_term": s.wal_last_term}


def config_commit_conditions(s: ServerState, config_index: Int) -> list[tuple[str, Bool]]:
    """A committed config change entry is written into the cmeta: a running replica's
    committed config only moves forward, and only to an entry its own WAL holds."""
    return [
        ("a running READY replica with cmeta",
         all_(s.up, s.running, eq(s.op, OP_NONE), eq(s.sb, READY), s.cmeta)),
        ("config_index above the committed config's", config_index > s.config_index),
        ("config_index <= the WAL's last index", config_index <= s.wal_last_index),
    ]


def config_commit_guard(s: ServerState, config_index: Int) -> Bool:
    return all_(*[c for _, c in config_commit_conditions(s, config_index)])


def config_commit_effect(s: ServerState, config_index: Int) -> ServerState:
    return _ev(s, config_index=config_index)


def config_commit_enum(sys: SystemState, i: int, b: Bounds) -> Iterator[Params]:
    s = sys[i]
    if not (s.up and s.running and s.op == OP_NONE and s.sb == READY and s.cmeta):
        return
    for index in range(s.config_index + 1, s.wal_last_index + 1):
        yield {"config_index": index}


# ---------------------------------------------------------------------------------------
# The table.

_STC_PARAMS = ("caller_term", "expected_state", "has_opid", "opid_term", "opid_index")

ACTIONS: tuple[Action, ...] = (
    Action("create_tablet", "CreateTablet (superblock last)", ("config_index",),
           create_guard, create_effect, create_enum),
    Action("delete_shutdown", "Tablet deletion step 1", (), d1_guard, d1_effect, _none,
           volatile_only=True),
    Action("delete_create_qdir", "Tablet deletion step 2", (), d2_guard, d2_effect, _none),
    Action("delete_copy_superblock", "Tablet deletion step 3", (), d3_guard, d3_effect, _none),
    Action("delete_mark_deleted", "Tablet deletion step 4", (), d4_guard, d4_effect, _none),
    Action("delete_copy_cmeta", "Tablet deletion step 5", (), d5_guard, d5_effect, _none),
    Action("delete_move_wal", "Tablet deletion step 6", (), d6_guard, d6_effect, _none),
    Action("stc_accept", "StartTabletCopy (all checks pass)", _STC_PARAMS,
           stc_accept_guard, stc_accept_effect, stc_accept_enum, volatile_only=True),
    Action("stc_reject", "StartTabletCopy (first failing check)", (*_STC_PARAMS, "reason"),
           stc_reject_guard, stc_reject_effect, stc_reject_enum, volatile_only=True),
    Action("copy_begin", "Follower Tablet Copy step 1", (), c1_guard, c1_effect, _none),
    Action("copy_merge_cmeta", "Follower Tablet Copy step 2",
           ("remote_term", "remote_config_index"), c2_guard, c2_effect, c2_enum),
    Action("copy_download_wal", "Follower Tablet Copy step 3",
           ("remote_last_term", "remote_last_index"), c3_guard, c3_effect, c3_enum),
    Action("copy_download_block", "Follower Tablet Copy step 4 (some blocks)", (),
           c4_block_guard, c4_block_effect, _none),
    Action("copy_blocks_done", "Follower Tablet Copy step 4 (all blocks)", (),
           c4_done_guard, c4_done_effect, _none),
    Action("copy_mark_ready", "Follower Tablet Copy step 5", (), c5_guard, c5_effect, _none),
    Action("copy_start_replica", "Follower Tablet Copy step 6", (), c6_guard, c6_effect,
           _none, volatile_only=True),
    Action("crash", "a crash at any point", (), crash_guard, crash_effect, _none,
           volatile_only=True),
    Action("startup", "Tablet startup cases 1-4", ("case",), startup_guard, startup_effect,
           startup_enum, volatile_only=True),
    Action("wipe", "Failure of a disk with consensus metadata (new UUID)", (), wipe_guard,
           wipe_effect, _none),
    Action("damage", "a disk fault found at startup (WAL or blocks DAMAGED)", ("what",),
           damage_guard, damage_effect, damage_enum),
    Action("learn_term", "Raft: a higher term seen in any RPC", ("t",), learn_term_guard,
           learn_term_effect, learn_term_enum),
    Action("vote_granted", "Raft RequestVote granted (tombstones too)",
           ("candidate", "t", "cand_last_term", "cand_last_index"), vote_guard, vote_effect,
           vote_enum, system_guard=not_self),
    Action("vote_denied", "Raft RequestVote denied",
           ("candidate", "t", "cand_last_term", "cand_last_index"), vote_denied_guard,
           vote_denied_effect, vote_denied_enum, system_guard=not_self),
    Action("start_election", "Raft: candidate votes for itself in term+1", ("me",),
           start_election_guard, start_election_effect, start_election_enum,
           system_guard=is_self),
    Action("become_leader", "Raft: a majority of members voted", ("me", "t"),
           become_leader_guard, become_leader_effect, become_leader_enum,
           system_guard=has_majority, volatile_only=True),
    Action("step_down", "Raft: a leader stops leading (check-quorum, request, transfer)", (),
           step_down_guard, step_down_effect, _none, volatile_only=True),
    Action("log_append", "Raft: a batch of entries appended to the WAL (one fsync)",
           ("first_index", "op_term", "op_index"), log_append_guard, log_append_effect,
           log_append_enum, conditions=log_append_conditions),
    Action("commit", "Raft: every index up to one committed", ("index", "op_term"),
           commit_guard, commit_effect, commit_enum, system_guard=leader_commit,
           volatile_only=True),
    Action("config_commit", "Raft: a committed config change written into the cmeta",
           ("config_index",), config_commit_guard, config_commit_effect, config_commit_enum,
           conditions=config_commit_conditions),
)

ACTIONS_BY_NAME: dict[str, Action] = {a.name: a for a in ACTIONS}


def replace_action(table: tuple[Action, ...], name: str, **changes: Any) -> tuple[Action, ...]:
    """A copy of the table with one row changed (how mutants are built)."""
    if name not in {a.name for a in table}:
        raise KeyError(name)
    return tuple(attrs.evolve(a, **changes) if a.name == name else a for a in table)


__all__ = [
    "ACTIONS", "ACTIONS_BY_NAME", "FAULT_ACTIONS", "Action", "Bounds", "Params",
    "in_consensus", "intact", "is_member", "last_logged", "replace_action", "startup_case",
    "wal_in_place",
]
