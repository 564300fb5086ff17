"""Invariants of the replica lifecycle, each guarding a sentence of the seed.

Two kinds:

* state invariants ``pred(system, t)``: must hold in every reachable state, for every term
  ``t`` (the prover makes ``t`` universally quantified; concrete checkers try every term that
  appears in the state plus one fresh term, which covers all others because maps are
  constant outside their stored keys);
* step properties ``pred(pre, post, t)`` over one server's state before and after any
  action: they state what no step may ever do (let a term go down, change a vote).

Invariants marked ``strengthening`` are not claims about safety in themselves: they are the
auxiliary facts that make the safety invariants inductive (Init => Inv, and Inv /\\ guard /\\
effect => Inv'), named as such so a reader can tell the claims from the proof scaffolding.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import attrs

from revivify.spec.logic import (
    Bool,
    FMap,
    Int,
    all_,
    any_,
    count,
    eq,
    get,
    implies,
    member,
    ne,
    not_,
    opid_ge,
)
from revivify.spec.model import (
    BLOCKS_LISTED,
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
    WAL_IN_PLACE,
    WAL_LIVE,
    ServerState,
    SystemState,
    majority,
)

StatePred = Callable[[SystemState, Int], Bool]
StepPred = Callable[[ServerState, ServerState, Int], Bool]


@attrs.frozen
class Invariant:
    name: str
    doc: str
    pred: StatePred
    strengthening: bool = False
    # per_server: the predicate is a conjunction over servers of a fact about one server
    # (so it can be checked on one server's state: the trace checker's per-key replay, the
    # explorer's per-server cache). reads_ghosts: it reads the ghost vote and leader
    # histories (votes, member_votes, led), which no trace carries; ghost_last_* are not
    # histories (they follow from the logged appends) and do not count.
    per_server: bool = False
    reads_ghosts: bool = False


@attrs.frozen
class StepProperty:
    name: str
    doc: str
    pred: StepPred
    reads_ghosts: bool = False


def _each(sys: SystemState, f: Callable[[ServerState], Bool]) -> Bool:
    return all_(*[f(s) for s in sys])


# ---------------------------------------------------------------------------------------
# Safety invariants.


def one_leader_per_term(sys: SystemState, t: Int) -> Bool:
    """Raft election safety: at most one leader per term. Tombstones that vote, copies that
    merge cmeta and servers that crash must never let two servers lead one term."""
    pairs = [
        not_(all_(get(a.led, t), get(b.led, t)))
        for i, a in enumerate(sys)
        for b in sys[i + 1 :]
    ]
    return all_(*pairs)


def ready_is_complete(sys: SystemState, t: Int) -> Bool:
    """"the minimum files needed to start a tablet are the consensus metadata file, the
    write-ahead logs, and the data blocks": READY implies the cmeta, the WAL directory in
    place and every block listed. (A disk fault may damage the WAL or the blocks of a READY
    replica afterwards; ``RunningIsIntact`` says such a replica never runs.)"""
    return _each(sys, lambda s: implies(
        eq(s.sb, READY), all_(s.cmeta, member(s.wal, WAL_IN_PLACE),
                              member(s.blocks, BLOCKS_LISTED))))


def running_is_intact(sys: SystemState, t: Int) -> Bool:
    """Startup of a damaged replica: a replica runs only on its cmeta, a live WAL that
    verifies and all its blocks, undamaged; a READY replica with a damaged WAL or damaged
    blocks stays offline (startup reports it FAILED)."""
    return _each(sys, lambda s: implies(
        s.running, all_(s.cmeta, eq(s.wal, WAL_LIVE), eq(s.blocks, BLOCKS_PRESENT))))


def running_is_ready(sys: SystemState, t: Int) -> Bool:
    """A replica only runs (serves, appends, leads) on a READY superblock."""
    return _each(sys, lambda s: all_(
        implies(s.running, all_(s.up, eq(s.sb, READY), not_(s.failed),
                                any_(eq(s.op, OP_NONE),
                                     all_(eq(s.op, OP_COPY_DELETE), eq(s.step, 0))))),
        implies(s.leader, s.running),
    ))


def tombstone_retains_last_opid(sys: SystemState, t: Int) -> Bool:
    """"Store the last OpId in the log into a field in the SuperBlock ... we need to know the
    last OpId in our log if we want to be able to vote in elections after being deleted and
    no longer having our WAL files": while DELETED or COPYING, the superblock holds the last
    OpId this server ever logged as its own."""
    return _each(sys, lambda s: implies(
        member(s.sb, (DELETED, COPYING)),
        all_(eq(s.sb_last_term, s.ghost_last_term), eq(s.sb_last_index, s.ghost_last_index))))


def quiescent_tombstone_has_no_live_wal(sys: SystemState, t: Int) -> Bool:
    """"if tablet.state is DELETED && WAL dir exists: Redo steps #5 and #6 (roll forward)":
    a server that is up with no operation in flight never sits on a DELETED superblock whose
    WAL is still in place (live or damaged), i.e. startup always rolls an interrupted
    deletion forward."""
    return _each(sys, lambda s: implies(
        all_(s.up, eq(s.op, OP_NONE), eq(s.sb, DELETED)), not_(member(s.wal, WAL_IN_PLACE))))


def no_copying_when_quiescent(sys: SystemState, t: Int) -> Bool:
    """"if tablet.state is COPYING: Delete self (go back to DELETED state)": COPYING only
    exists while a copy (or the startup deletion that undoes one) is in flight."""
    return _each(sys, lambda s: implies(all_(s.up, eq(s.op, OP_NONE)), ne(s.sb, COPYING)))


def stale_caller_cannot_destroy(sys: SystemState, t: Int) -> Bool:
    """StartTabletCopy: a replica is only torn down for a copy by a caller whose term is at
    least the replica's term and its tombstone's last logged term. (The seed's pseudo-code
    deletes first and checks the term after; a deposed leader could then destroy a current
    replica.)"""
    return _each(sys, lambda s: implies(
        eq(s.op, OP_COPY_DELETE), all_(s.op_term >= s.term, s.op_term >= s.sb_last_term)))


def one_vote_per_term_recorded(sys: SystemState, t: Int) -> Bool:
    """"Save consensus metadata such as current term, vote history": the cmeta agrees with
    the history of votes this UUID cast. (Together with the step property VoteOnce this is
    "at most one vote per (server UUID, tablet, term), ever".) Strengthening for election
    safety: votes exist only for terms up to the current one, and the current term's vote is
    the one in the cmeta."""
    return _each(sys, lambda s: all_(
        implies(s.cmeta, all_(implies(t > s.term, eq(get(s.votes, t), NO_VOTE)),
                              eq(get(s.votes, s.term), s.voted_for))),
        implies(not_(s.cmeta), eq(get(s.votes, t), NO_VOTE)),
    ))


# ---------------------------------------------------------------------------------------
# Strengthening invariants (proof scaffolding).


def leader_had_majority(sys: SystemState, t: Int) -> Bool:
    """Strengthening: whoever led term t got a majority of members' votes in t."""
    need = majority(len(sys))
    return all_(*[
        implies(get(s.led, t),
                count(*[eq(get(k.member_votes, t), i) for k in sys]) >= need)
        for i, s in enumerate(sys)
    ])


def member_history_is_votes(sys: SystemState, t: Int) -> Bool:
    """Strengthening: while a server is on its original UUID, its member vote history is its
    vote history; after a wipe the new UUID's votes never enter it."""
    return _each(sys, lambda s: implies(eq(s.uuid_gen, 0),
                                        eq(get(s.member_votes, t), get(s.votes, t))))


def votes_name_servers(sys: SystemState, t: Int) -> Bool:
    """Strengthening: a recorded vote names a server of the system (or none)."""
    n = len(sys)
    return _each(sys, lambda s: all_(get(s.votes, t) >= NO_VOTE, get(s.votes, t) < n,
                                     get(s.member_votes, t) >= NO_VOTE,
                                     get(s.member_votes, t) < n,
                                     s.voted_for >= NO_VOTE, s.voted_for < n))


def lifecycle_shape(sys: SystemState, t: Int) -> Bool:
    """Strengthening: what each (operation, step) pair implies about the durable state."""

    def one(s: ServerState) -> Bool:
        op, step = s.op, s.step
        deleting = member(op, (*DELETING_OPS, OP_ROLL_FORWARD))
        in_place = member(s.wal, WAL_IN_PLACE)

        def at(ops: tuple[int, ...], lo: int, hi: int) -> Bool:
            return all_(member(op, ops), step >= lo, step <= hi)

        return all_(
            # ranges
            s.uuid_gen >= 0, s.term >= 0, step >= 0, step <= 5,
            s.sb >= DOES_NOT_EXIST, s.sb <= READY,
            member(op, (OP_NONE, OP_COPY, OP_ROLL_FORWARD, *DELETING_OPS)),
            # volatile state exists only while up
            implies(not_(s.up), all_(eq(op, OP_NONE), not_(s.running), not_(s.failed))),
            implies(eq(op, OP_NONE), eq(step, 0)),
            implies(s.failed, all_(s.up, eq(s.sb, READY), not_(s.running),
                                   any_(eq(op, OP_NONE), all_(eq(op, OP_COPY_DELETE),
                                                              eq(step, 0))))),
            # no log entry, and no tombstone, carries a term above the current one
            implies(s.cmeta, s.sb_last_term <= s.term),
            # without cmeta the server never voted nor logged: nothing to remember
            implies(not_(s.cmeta), all_(eq(s.sb_last_term, 0), eq(s.sb_last_index, 0),
                                        eq(s.ghost_last_term, 0), eq(s.ghost_last_index, 0),
                                        not_(in_place))),
            implies(all_(s.cmeta, in_place), s.wal_last_term <= s.term),
            s.wal >= 0, s.wal <= 3, s.blocks >= 0, s.blocks <= 3,
            implies(member(op, (OP_DELETE, OP_BOOT_DELETE)), step >= 1),
            implies(eq(op, OP_ROLL_FORWARD), step >= 4),
            # never hosted: nothing at all
            implies(eq(s.sb, DOES_NOT_EXIST),
                    all_(not_(s.cmeta), not_(in_place), eq(s.sb_last_term, 0),
                         eq(s.sb_last_index, 0), eq(s.ghost_last_term, 0),
                         eq(s.ghost_last_index, 0))),
            # READY's WAL is this server's own log
            implies(eq(s.sb, READY), all_(eq(s.wal_last_term, s.ghost_last_term),
                                          eq(s.wal_last_index, s.ghost_last_index))),
            implies(eq(s.sb, DELETED), all_(s.sb_qdir, s.qdir, s.q_sb)),
            implies(eq(s.sb, COPYING), member(op, (OP_NONE, OP_COPY, OP_BOOT_DELETE))),
            implies(all_(eq(s.sb, COPYING), eq(op, OP_NONE)), not_(s.up)),
            # deleting: steps 1-3 before the superblock says DELETED, 4-5 after it
            implies(all_(deleting, step >= 2), s.qdir),
            implies(all_(deleting, step >= 3), s.q_sb),
            implies(all_(deleting, step >= 4), eq(s.sb, DELETED)),
            implies(at((OP_DELETE, OP_COPY_DELETE), 0, 3), eq(s.sb, READY)),
            implies(at((OP_BOOT_DELETE,), 1, 3), eq(s.sb, COPYING)),
            # copying: what each completed step left behind
            implies(at((OP_COPY,), 0, 0), member(s.sb, (DOES_NOT_EXIST, DELETED))),
            implies(at((OP_COPY,), 1, 4), eq(s.sb, COPYING)),
            implies(at((OP_COPY,), 5, 5), eq(s.sb, READY)),
            implies(at((OP_COPY,), 2, 5), s.cmeta),
            implies(at((OP_COPY,), 3, 5), eq(s.wal, WAL_LIVE)),
            implies(at((OP_COPY,), 4, 5), eq(s.blocks, BLOCKS_PRESENT)),
        )

    return _each(sys, one)


# ---------------------------------------------------------------------------------------
# Step properties.


def term_monotonic(pre: ServerState, post: ServerState, t: Int) -> Bool:
    """"we must ensure that our term remains monotonic": for one server UUID the cmeta, once
    written, never disappears and its term never decreases, across delete, copy, merge,
    crash and restart."""
    same_uuid = eq(pre.uuid_gen, post.uuid_gen)
    return implies(all_(same_uuid, pre.cmeta), all_(post.cmeta, post.term >= pre.term))


def vote_once(pre: ServerState, post: ServerState, t: Int) -> Bool:
    """"our memory of our votes is not lost": a vote, once cast by a UUID in a term, is never
    changed, so a UUID votes at most once per term, ever."""
    same_uuid = eq(pre.uuid_gen, post.uuid_gen)
    before = get(pre.votes, t)
    return implies(all_(same_uuid, ne(before, NO_VOTE)), eq(get(post.votes, t), before))


def tombstone_keeps_cmeta_and_opid(pre: ServerState, post: ServerState, t: Int) -> Bool:
    """"it must be tombstoned and retain its (now static) persistent Raft state forever": a
    DELETED replica keeps its cmeta and last OpId until a copy makes it READY again."""
    return implies(
        all_(eq(pre.sb, DELETED), member(post.sb, (DELETED, COPYING)),
             eq(pre.uuid_gen, post.uuid_gen)),
        all_(eq(post.sb_last_term, pre.sb_last_term), eq(post.sb_last_index, pre.sb_last_index),
             implies(pre.cmeta, post.cmeta)))


def new_uuid_inherits_nothing(pre: ServerState, post: ServerState, t: Int) -> Bool:
    """"the tablet server must adopt a new UUID and fully clear all of its data and state":
    a new UUID starts with no cmeta, no term, no vote, no superblock and no WAL."""
    return implies(
        ne(pre.uuid_gen, post.uuid_gen),
        all_(post.uuid_gen > pre.uuid_gen, not_(post.cmeta), eq(post.term, 0),
             eq(post.voted_for, NO_VOTE), eq(get(post.votes, t), NO_VOTE),
             eq(post.sb, DOES_NOT_EXIST), not_(member(post.wal, WAL_IN_PLACE))))


def uuid_never_reused(pre: ServerState, post: ServerState, t: Int) -> Bool:
    """A wiped server's UUID generation only grows: no UUID is ever reused."""
    return post.uuid_gen >= pre.uuid_gen


def leader_append_only(pre: ServerState, post: ServerState, t: Int) -> Bool:
    """Raft's Leader Append-Only: "a leader never overwrites or deletes entries in its log;
    it only appends new entries". While a server stays leader, its log's last index never
    goes down and its last OpId never goes back (a leader never truncates its own log,
    batched appends included)."""
    return implies(
        all_(pre.leader, post.leader, eq(pre.uuid_gen, post.uuid_gen)),
        all_(post.wal_last_index >= pre.wal_last_index,
             opid_ge(post.wal_last_term, post.wal_last_index, pre.wal_last_term,
                     pre.wal_last_index)))


def config_committed_from_log(pre: ServerState, post: ServerState, t: Int) -> Bool:
    """A committed config is a committed entry of the replica's own log: while a replica
    stays READY its committed config only moves forward, and only to an index its WAL
    holds (a tablet copy, which adopts the remote's committed config, is not such a step:
    the superblock says COPYING then)."""
    return implies(
        all_(eq(pre.sb, READY), eq(post.sb, READY), eq(pre.uuid_gen, post.uuid_gen),
             ne(post.config_index, pre.config_index)),
        all_(post.config_index > pre.config_index,
             post.config_index <= post.wal_last_index))


def _inv(f: StatePred, name: str, **flags: bool) -> Invariant:
    return Invariant(name, f.__doc__ or "", f, **flags)


def _prop(f: StepPred, name: str, **flags: bool) -> StepProperty:
    return StepProperty(name, f.__doc__ or "", f, **flags)


INVARIANTS: tuple[Invariant, ...] = (
    _inv(one_leader_per_term, "OneLeaderPerTerm", reads_ghosts=True),
    _inv(ready_is_complete, "ReadyIsComplete", per_server=True),
    _inv(running_is_ready, "RunningIsReady", per_server=True),
    _inv(running_is_intact, "RunningIsIntact", per_server=True),
    _inv(tombstone_retains_last_opid, "TombstoneRetainsLastOpid", per_server=True),
    _inv(quiescent_tombstone_has_no_live_wal, "StartupRollsDeletionForward", per_server=True),
    _inv(no_copying_when_quiescent, "NoCopyingWhenQuiescent", per_server=True),
    _inv(stale_caller_cannot_destroy, "StaleCallerCannotDestroy", per_server=True),
    _inv(one_vote_per_term_recorded, "VotesMatchCmeta", per_server=True, reads_ghosts=True),
    _inv(leader_had_majority, "LeaderHadMajority", strengthening=True, reads_ghosts=True),
    _inv(member_history_is_votes, "MemberHistoryIsVotes", strengthening=True,
         per_server=True, reads_ghosts=True),
    _inv(votes_name_servers, "VotesNameServers", strengthening=True, per_server=True,
         reads_ghosts=True),
    _inv(lifecycle_shape, "LifecycleShape", strengthening=True, per_server=True),
)

STEP_PROPERTIES: tuple[StepProperty, ...] = (
    _prop(term_monotonic, "TermMonotonic"),
    _prop(vote_once, "VoteOnce", reads_ghosts=True),
    _prop(tombstone_keeps_cmeta_and_opid, "TombstoneKeepsCmetaAndOpid"),
    _prop(new_uuid_inherits_nothing, "NewUuidInheritsNothing", reads_ghosts=True),
    _prop(uuid_never_reused, "UuidNeverReused"),
    _prop(leader_append_only, "LeaderAppendOnly"),
    _prop(config_committed_from_log, "ConfigCommittedFromLog"),
)


def relevant_terms(states: Iterable[ServerState]) -> list[int]:
    """Every term a concrete check must try: those that appear, plus one fresh term (maps are
    constant outside their keys, so one fresh term stands for all the others)."""
    terms: set[int] = {0}
    for s in states:
        terms.add(s.term)
        for m in (s.votes, s.member_votes, s.led):
            if isinstance(m, FMap):
                terms.update(k for k, _ in m)
    return [*sorted(terms), max(terms) + 1]


def check_state(invariants: Iterable[Invariant], sys: SystemState) -> list[str]:
    """Names of the invariants a concrete system state violates."""
    terms = relevant_terms(sys)
    return [inv.name for inv in invariants if not all(inv.pred(sys, t) for t in terms)]


def check_step(props: Iterable[StepProperty], pre: ServerState, post: ServerState) -> list[str]:
    """Names of the step properties a concrete step violates."""
    terms = relevant_terms((pre, post))
    return [p.name for p in props if not all(p.pred(pre, post, t) for t in terms)]

