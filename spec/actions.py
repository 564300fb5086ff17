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
(servers still on their original UUID); appending to the log; committing.
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
    BLOCKS_PARTIAL,
    BLOCKS_PRESENT,
    COPYING,
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
    WAL_LIVE,
    WAL_QUARANTINED,
    ServerState,
    SystemState,
    majority,
)

Params = dict[str, Any]
LocalGuard = Callable[..., Bool]
LocalEffect = Callable[..., ServerState]
SystemGuard = Callable[..., Bool]
Enumerator = Callable[[SystemState, int, "Bounds"], Iterable[Params]]


@attrs.frozen
class Bounds:
    """Bounds on the values the explorer and Hypothesis feed into parameters."""

    max_term: int = 3
    max_index: int = 2
    max_crashes: int = 2
    max_wipes: int = 1


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


def is_member(s: ServerState) -> Bool:
    """Still on the UUID that the tablet's Raft config names (a wiped server is not)."""
    return eq(s.uuid_gen, 0)


def startup_case(s: ServerState) -> Int:
    """Seed "Tablet startup": which of the cases the on-disk state falls into."""
    return ite(
        eq(s.sb, DELETED),
        ite(eq(s.wal, WAL_LIVE), STARTUP_ROLL_FORWARD, STARTUP_TOMBSTONE),
        ite(
            eq(s.sb, COPYING),
            STARTUP_COPYING_TO_DELETED,
            ite(
                eq(s.sb, READY),
                ite(
                    all_(s.cmeta, eq(s.wal, WAL_LIVE), eq(s.blocks, BLOCKS_PRESENT)),
                    STARTUP_READY,
                    STARTUP_FAILED,
                ),
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
    live = eq(s.wal, WAL_LIVE)
    return _ev(
        s,
        wal=ite(live, WAL_QUARANTINED, s.wal),
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


def log_append_guard(s: ServerState, op_term: Int, op_index: Int) -> Bool:
    return all_(
        s.up, s.running, eq(s.op, OP_NONE), eq(s.sb, READY), eq(s.wal, WAL_LIVE),
        op_term >= 1, op_term <= s.term, op_index >= 1,
        # A leader appends the next index in its own term; a follower takes the leader's.
        implies(s.leader, all_(eq(op_term, s.term), eq(op_index, s.wal_last_index + 1))),
    )


def log_append_effect(s: ServerState, op_term: Int, op_index: Int) -> ServerState:
    return _ev(s, wal_last_term=op_term, wal_last_index=op_index, ghost_last_term=op_term,
               ghost_last_index=op_index)


def log_append_enum(sys: SystemState, i: int, b: Bounds) -> Iterator[Params]:
    s = sys[i]
    if not (s.up and s.running and s.op == OP_NONE and s.sb == READY and s.wal == WAL_LIVE):
        return
    if s.leader:
        if s.wal_last_index < b.max_index:
            yield {"op_term": s.term, "op_index": s.wal_last_index + 1}
        return
    for j, leader in enumerate(sys):
        if (j != i and leader.up and leader.leader and leader.term <= s.term
                and leader.wal_last_index >= 1
                and (leader.wal_last_term, leader.wal_last_index)
                != (s.wal_last_term, s.wal_last_index)):
            yield {"op_term": leader.wal_last_term, "op_index": leader.wal_last_index}


def commit_guard(s: ServerState, index: Int, op_term: Int) -> Bool:
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
    Action("log_append", "Raft: an entry appended to the WAL", ("op_term", "op_index"),
           log_append_guard, log_append_effect, log_append_enum),
    Action("commit", "Raft: an index committed", ("index", "op_term"), commit_guard,
           commit_effect, commit_enum, system_guard=leader_commit, volatile_only=True),
)

ACTIONS_BY_NAME: dict[str, Action] = {a.name: a for a in ACTIONS}


def replace_action(table: tuple[Action, ...], name: str, **changes: Any) -> tuple[Action, ...]:
    """A copy of the table with one row changed (how mutants are built)."""
    if name not in {a.name for a in table}:
        raise KeyError(name)
    return tuple(attrs.evolve(a, **changes) if a.name == name else a for a in table)


__all__ = [
    "ACTIONS", "ACTIONS_BY_NAME", "Action", "Bounds", "Params", "in_consensus", "is_member",
    "last_logged", "replace_action", "startup_case",
]
