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
effect => Inv'), named as such so a reader can tell the claims from the proof scaffolding. A
seeded bug counts as caught only when a reachable state breaks a claim that is *not*
strengthening (``tests/mutants``).

Invariants marked ``inductive=False`` are checked in every reachable state by the explorer
and the Hypothesis machine, and by bounded model checking in the prover, but are not proven
for every number of terms and log indexes: they are about the log (log matching, commitment,
leader completeness), whose inductive proof needs quantifier alternations this prover does
not attempt. ``revivify prove`` lists them as "bounded", never as "proved", and never assumes
them in a proof of another claim.

Where a claim is about the votes or the log of a *live* tablet, it says so: a full delete
(decision 9 of ``actions``) happens only after the table was dropped, and after the drop no
election is won; a replica whose cmeta a disk fault removed (decision 3) never votes again.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import attrs

from revivify.spec.actions import last_logged, pending_config_held
from revivify.spec.logic import (
    Bool,
    FMap,
    Int,
    all_,
    any_,
    count,
    eq,
    forall_entries,
    get,
    implies,
    log_well_formed,
    logs_match,
    map_eq,
    member,
    ne,
    not_,
    opid_ge,
)
from revivify.spec.model import (
    BLOCKS_ABSENT,
    BLOCKS_LISTED,
    BLOCKS_PRESENT,
    COPY_ACCEPTED,
    COPY_BEGUN,
    COPY_MERGED,
    COPY_READY,
    COPYING,
    DELETED,
    DELETING_OPS,
    DOES_NOT_EXIST,
    FULL_DELETE_CMETA_GONE,
    MAP_FIELDS,
    NO_SERVER,
    NO_VOTE,
    OP_COPY,
    OP_COPY_DELETE,
    OP_DELETE,
    OP_FULL_DELETE,
    OP_NONE,
    OP_ROLL_FORWARD,
    OP_UNDO_COPY,
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
    # explorer's per-server cache). reads_ghosts: it reads state no trace carries and the
    # trace checker does not rebuild: the ghost histories (votes, member_votes, led,
    # own_log, committed, dropped) or the log's entries. ghost_last_*, cmeta_lost,
    # cmeta_removed and purged follow from logged steps (and inferred damage and purges)
    # and do not count.
    per_server: bool = False
    reads_ghosts: bool = False
    # inductive: proven (Init => I, and preserved by every action) by ``checker.prove``;
    # else checked by exploration and bounded model checking only (see the module doc).
    inductive: bool = True
    # uses_term: the predicate reads its term argument (else one evaluation decides it).
    uses_term: bool = False


@attrs.frozen
class StepProperty:
    name: str
    doc: str
    pred: StepPred
    reads_ghosts: bool = False
    inductive: bool = True
    uses_term: bool = False


def _each(sys: SystemState, f: Callable[[ServerState], Bool]) -> Bool:
    return all_(*[f(s) for s in sys])


def _pairs(sys: SystemState, f: Callable[[ServerState, ServerState], Bool]) -> Bool:
    return all_(*[f(a, b) for i, a in enumerate(sys) for b in sys[i + 1:]])


def _deleting(s: ServerState) -> Bool:
    return member(s.op, (*DELETING_OPS, OP_ROLL_FORWARD))


def _none_dropped(sys: SystemState) -> Bool:
    return all_(*[not_(s.dropped) for s in sys])


# ---------------------------------------------------------------------------------------
# Safety invariants.


def one_leader_per_term(sys: SystemState, t: Int) -> Bool:
    """Raft election safety, on the state itself: no two servers lead with the same current
    term. (A candidate that moved to a later term cannot lead with the old term's votes:
    its leader flag goes with its current term.) Tombstones that vote, copies that merge
    cmeta and servers that crash must never let two servers lead one term."""
    return _pairs(sys, lambda a, b: not_(all_(a.leader, b.leader, eq(a.term, b.term))))


def ready_is_complete(sys: SystemState, t: Int) -> Bool:
    """"the minimum files needed to start a tablet are the consensus metadata file, the
    write-ahead logs, and the data blocks": READY implies the WAL directory in place, every
    block listed, and the cmeta unless a disk fault removed it. (A disk fault may damage the
    WAL, the blocks or the cmeta of a READY replica afterwards; ``RunningIsIntact`` says
    such a replica never runs.)"""
    return _each(sys, lambda s: implies(
        eq(s.sb, READY), all_(any_(s.cmeta, s.cmeta_lost), member(s.wal, WAL_IN_PLACE),
                              member(s.blocks, BLOCKS_LISTED))))


def running_is_intact(sys: SystemState, t: Int) -> Bool:
    """Startup of a damaged replica: a replica runs only on its cmeta, a live WAL that
    verifies and all its blocks, undamaged; a READY replica with anything damaged or lost
    stays offline (startup reports it FAILED)."""
    return _each(sys, lambda s: implies(
        s.running, all_(s.cmeta, eq(s.wal, WAL_LIVE), eq(s.blocks, BLOCKS_PRESENT))))


def running_is_ready(sys: SystemState, t: Int) -> Bool:
    """A replica only runs (serves, appends, leads) on a READY superblock: tombstones and
    copies in flight never lead."""
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
    OpId this server ever logged as its own (never a downloaded WAL's: an aborted copy's
    tombstone keeps its previous one)."""
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
    exists while a copy (or the deletion that undoes one) is in flight."""
    return _each(sys, lambda s: implies(all_(s.up, eq(s.op, OP_NONE)), ne(s.sb, COPYING)))


def stale_caller_cannot_destroy(sys: SystemState, t: Int) -> Bool:
    """StartTabletCopy: a replica is torn down, or overwritten by a copy, only for a caller
    whose term is at least the replica's last *logged* term (Kudu's check; such a caller
    holds everything this replica can have acknowledged). The seed's pseudo-code deletes
    first and checks the term after: a deposed leader could then destroy a current
    replica."""
    return _each(sys, lambda s: implies(
        any_(eq(s.op, OP_COPY_DELETE), all_(eq(s.op, OP_COPY), s.step < COPY_READY)),
        s.op_arg >= last_logged(s)[0]))


def delete_cas_held(sys: SystemState, t: Int) -> Bool:
    """DeleteTablet's compare-and-set: a deletion the master asked for runs only while the
    replica's committed config index is at most the one the master named (a master acting
    on a stale config never deletes a replica a newer config put back)."""
    return _each(sys, lambda s: implies(eq(s.op, OP_DELETE), s.config_index <= s.op_arg))


def config_change_cas_held(sys: SystemState, t: Int) -> Bool:
    """A config change's compare-and-set is exact: while a change this replica accepted as
    leader is pending (its entry not committed, nor cut from the log), the committed
    config is the one the change was planned on (the CAS it was accepted with). A change
    is computed from the committed config; applied to another one (planned on a config
    the leader has not committed, or one a later config replaced), it could remove a
    voter twice or bring back one a newer config removed. (A replica whose cmeta a disk
    fault removed has no committed config: FAILED, it never leads again.)"""
    return _each(sys, lambda s: implies(
        all_(ne(s.pending_config, 0), s.cmeta), eq(s.config_index, s.config_planned_on)))


def one_config_change_pending(sys: SystemState, t: Int) -> Bool:
    """One membership change at a time (Raft's single-server changes are safe only so): a
    replica never accepts a config change while one it accepted is still pending (not
    committed, nor cut from its log): at most one is open."""
    return _each(sys, lambda s: s.open_config_changes <= 1)


def quarantined_wal_has_no_opid(sys: SystemState, t: Int) -> Bool:
    """The contract's WAL OpId (decision 8): ``wal.last_opid`` is that of the WAL in
    ``wals/<id>``; once the directory is in the quarantine (or absent) it is (0, 0), and
    what the quarantined WAL held is the tombstone's superblock OpId."""
    return _each(sys, lambda s: implies(
        not_(member(s.wal, WAL_IN_PLACE)),
        all_(eq(s.wal_last_term, 0), eq(s.wal_last_index, 0))))


def quarantine_holds_evidence(sys: SystemState, t: Int) -> Bool:
    """"Copy current SuperBlock to QDIR" (step 3), "Copy the consensus metadata file into
    QDIR" (step 5): from step 3 on the quarantine holds the superblock's copy, and step 5
    copied the cmeta whenever the replica had one. A tombstone has its quarantine with the
    superblock's copy, unless an operator purged it (``purge``, decision 10 of
    ``actions``: the evidence is then gone by the operator's choice, and ``purged`` says so
    until a deletion creates a new quarantine). A tombstone startup must still roll forward
    has it even then: a purge never takes the quarantine of a deletion not finished."""
    return _each(sys, lambda s: all_(
        implies(all_(_deleting(s), s.step >= 3), s.q_sb),
        implies(all_(_deleting(s), eq(s.step, 5)), eq(s.q_cmeta, s.cmeta)),
        implies(all_(eq(s.sb, DELETED), any_(not_(s.purged), member(s.wal, WAL_IN_PLACE))),
                all_(s.qdir, s.q_sb)),
    ))


def one_vote_per_term_recorded(sys: SystemState, t: Int) -> Bool:
    """"Save consensus metadata such as current term, vote history": the cmeta agrees with
    the history of votes this UUID cast (for a UUID that never lost its cmeta). Together
    with the step property VoteOnce this is "at most one vote per (server UUID, tablet,
    term), ever". Also the strengthening for election safety: votes exist only for terms up
    to the current one, and the current term's vote is the one in the cmeta."""
    return _each(sys, lambda s: implies(
        all_(not_(s.cmeta_lost), not_(s.cmeta_removed)),
        all_(implies(s.cmeta, all_(implies(t > s.term, eq(get(s.votes, t), NO_VOTE)),
                                   eq(get(s.votes, s.term), s.voted_for))),
             implies(not_(s.cmeta), eq(get(s.votes, t), NO_VOTE)))))


def no_entry_above_current_term(sys: SystemState, t: Int) -> Bool:
    """Raft adopts the leader's term before it accepts the leader's entries (a follower
    appends only the batch of a leader of its own current term; a copy merges the source's
    cmeta, term and all, before it downloads the source's WAL): a replica holds no log
    entry of a term above its current term, neither in its WAL nor as the last OpId its
    tombstone retained. Were it otherwise, it could grant a vote, or start an election, in
    a term below an entry it holds. Said of a replica with a cmeta (the current term is
    the cmeta's): one without (a disk fault removed it, or it never had one) never votes
    from a log (it is FAILED, or holds none: ``LogOnlyInWals``), and a full delete's
    tombstone (its table dropped) never votes in an election that is won."""
    return _each(sys, lambda s: implies(
        all_(s.cmeta, not_(s.cmeta_removed)),
        all_(forall_entries(s.log, lambda j, u: u <= s.term), last_logged(s)[0] <= s.term)))


# ---------------------------------------------------------------------------------------
# Claims about the log (bounded: explored and model checked, not proven inductive).


def _committed_entries(sys: SystemState,
                       body: Callable[[ServerState, Int, Int], Bool]) -> Bool:
    """``body(committer, index, term)`` for every entry any server committed."""
    return all_(*[forall_entries(c.committed, lambda j, u, c=c: body(c, j, u)) for c in sys])


def committed_in_later_leaders(sys: SystemState, t: Int) -> Bool:
    """Raft's leader completeness, for a live tablet: an entry committed in term u (the
    leader of u committed it) is in the log of every leader of a term >= u. This is what
    the vote's up-to-date comparison is for, a tombstone's and a copy's included: through
    deletion, copy, merge and wipe, no candidate without a committed entry wins."""
    return implies(_none_dropped(sys), _committed_entries(sys, lambda c, j, u: all_(*[
        implies(all_(k.leader, k.term >= u), eq(get(k.log, j), u)) for k in sys])))


def committed_never_lost(sys: SystemState, t: Int) -> Bool:
    """No amnesia (what seed 001 is written against), for a live tablet: every majority of
    members that can still vote contains a server that holds each committed entry in its
    own log (a replica, or a tombstone or a copy in flight that answers from that log's
    last OpId). A wiped server (its old UUID retired: ``RetiredUuidNeverVotes``), or one
    whose cmeta a disk fault removed, never votes as a member again and is not counted."""
    need = majority(len(sys))
    return implies(_none_dropped(sys), _committed_entries(sys, lambda c, j, u: count(*[
        all_(eq(k.uuid_gen, 0), not_(k.cmeta_lost), ne(get(k.own_log, j), u))
        for k in sys]) < need))


def log_matching(sys: SystemState, t: Int) -> Bool:
    """Strengthening (Raft's Log Matching): two logs (live or a server's own) that hold an
    entry with the same index and term hold the same entries up to it."""
    logs = [m for s in sys for m in (s.log, s.own_log)]
    return all_(*[logs_match(a, b) for n, a in enumerate(logs) for b in logs[n + 1:]])


def _shaped(m: object, last_index: Int, last_term: Int, s: ServerState) -> Bool:
    # Terms are bounded by the current one while the cmeta remembers it.
    remembers = all_(s.cmeta, not_(s.cmeta_lost), not_(s.cmeta_removed))
    return log_well_formed(m, last_index, last_term, remembers, s.term)


def log_shape(sys: SystemState, t: Int) -> Bool:
    """Strengthening: a log holds entries exactly at 1..its last index, its last entry is
    its last OpId, terms never decrease along it and none is above the current term; a
    READY replica's own log is its live log."""
    return _each(sys, lambda s: all_(
        _shaped(s.log, s.wal_last_index, s.wal_last_term, s),
        _shaped(s.own_log, s.ghost_last_index, s.ghost_last_term, s),
        implies(eq(s.sb, READY), map_eq(s.log, s.own_log)),
    ))


# ---------------------------------------------------------------------------------------
# Strengthening invariants (proof scaffolding).


def leader_led_its_term(sys: SystemState, t: Int) -> Bool:
    """Strengthening: a leader leads its current term (the term it won)."""
    return _each(sys, lambda s: implies(s.leader, get(s.led, s.term)))


def led_once_per_term(sys: SystemState, t: Int) -> Bool:
    """Strengthening: at most one server ever led term t (the ghost history)."""
    return _pairs(sys, lambda a, b: not_(all_(get(a.led, t), get(b.led, t))))


def leader_had_majority(sys: SystemState, t: Int) -> Bool:
    """Strengthening: whoever led term t got a majority of members' votes in t."""
    need = majority(len(sys))
    return all_(*[
        implies(get(s.led, t),
                count(*[eq(get(k.member_votes, t), i) for k in sys]) >= need)
        for i, s in enumerate(sys)
    ])


def member_history_is_votes(sys: SystemState, t: Int) -> Bool:
    """Strengthening: while a server is on its original UUID and the table is not dropped,
    its member vote history is its vote history; after a wipe the new UUID's votes never
    enter it, and after a drop no vote does."""
    return _each(sys, lambda s: implies(all_(eq(s.uuid_gen, 0), not_(s.dropped)),
                                        eq(get(s.member_votes, t), get(s.votes, t))))


def full_delete_after_drop(sys: SystemState, t: Int) -> Bool:
    """Strengthening: a server removed its cmeta in a full delete only after the drop, and
    never hosts the tablet again (no copy is accepted, and no replica created, after the
    drop: no READY or COPYING superblock, no copy in flight); a replica that lost its cmeta
    is gone from the server only by a full delete."""
    return _each(sys, lambda s: all_(
        implies(s.cmeta_removed, all_(s.dropped, not_(member(s.sb, (READY, COPYING))),
                                      not_(member(s.op, (OP_COPY, OP_COPY_DELETE))))),
        implies(all_(s.cmeta_lost, eq(s.sb, DOES_NOT_EXIST)), s.dropped)))


def votes_name_servers(sys: SystemState, t: Int) -> Bool:
    """Strengthening: a recorded vote, and a copy's source, name a server of the system (or
    none)."""
    n = len(sys)
    return _each(sys, lambda s: all_(get(s.votes, t) >= NO_VOTE, get(s.votes, t) < n,
                                     get(s.member_votes, t) >= NO_VOTE,
                                     get(s.member_votes, t) < n,
                                     s.voted_for >= NO_VOTE, s.voted_for < n,
                                     s.op_src >= NO_SERVER, s.op_src < n))


def pending_config_in_log(sys: SystemState, t: Int) -> Bool:
    """Strengthening: a pending config change's entry is in the WAL in ``wals/<id>``, at
    most one past its last index (the entry not appended yet); the ghosts about it are
    zero when none is pending."""
    return _each(sys, lambda s: all_(
        s.pending_config >= 0, s.open_config_changes >= 0,
        implies(eq(s.pending_config, 0),
                all_(eq(s.open_config_changes, 0), eq(s.config_planned_on, 0))),
        pending_config_held(s),
    ))


def log_only_in_wals(sys: SystemState, t: Int) -> Bool:
    """Strengthening: a log's entries are the WAL's in ``wals/<id>``: where no WAL is there
    (never written, moved into the quarantine, or wiped) the log is empty. (A tombstone
    that creates its cmeta lazily by voting then holds no entry above its new term.)"""
    return _each(sys, lambda s: implies(not_(member(s.wal, WAL_IN_PLACE)),
                                        forall_entries(s.log, lambda j, u: False)))


def lifecycle_shape(sys: SystemState, t: Int) -> Bool:
    """Strengthening: what each (operation, step) pair implies about the durable state."""

    def one(s: ServerState) -> Bool:
        op, step = s.op, s.step
        deleting = _deleting(s)
        in_place = member(s.wal, WAL_IN_PLACE)
        copying_op = member(op, (OP_COPY_DELETE, OP_COPY))
        forgot = any_(s.cmeta_lost, s.cmeta_removed)

        def at(ops: tuple[int, ...], lo: int, hi: int) -> Bool:
            return all_(member(op, ops), step >= lo, step <= hi)

        return all_(
            # ranges
            s.uuid_gen >= 0, s.term >= 0, step >= 0, step <= FULL_DELETE_CMETA_GONE,
            s.sb >= DOES_NOT_EXIST, s.sb <= READY,
            member(op, (OP_NONE, OP_COPY, OP_ROLL_FORWARD, OP_FULL_DELETE, *DELETING_OPS)),
            s.wal >= 0, s.wal <= 3, s.blocks >= 0, s.blocks <= 3,
            s.sb_last_term >= 0, s.sb_last_index >= 0, s.config_index >= 0,
            s.wal_last_term >= 0, s.wal_last_index >= 0, s.ghost_last_term >= 0,
            s.ghost_last_index >= 0,
            # volatile state exists only while up, and only with an operation
            implies(not_(s.up), all_(eq(op, OP_NONE), not_(s.running), not_(s.failed))),
            # a leader's readiness (it committed an entry of its term) ends with leading
            implies(s.leader_ready, s.leader),
            implies(eq(op, OP_NONE), all_(eq(step, 0), eq(s.op_arg, 0))),
            eq(copying_op, s.op_src >= 0),
            implies(copying_op, s.op_arg >= 0),
            implies(s.failed, all_(s.up, eq(s.sb, READY), not_(s.running),
                                   any_(eq(op, OP_NONE), all_(eq(op, OP_COPY_DELETE),
                                                              eq(step, 0))))),
            # no log entry, and no tombstone, carries a term above the current one
            implies(all_(s.cmeta, not_(s.cmeta_removed)), s.sb_last_term <= s.term),
            implies(all_(s.cmeta, in_place), s.wal_last_term <= s.term),
            # a missing cmeta holds nothing (a lazily created one starts empty)
            implies(not_(s.cmeta), all_(eq(s.term, 0), eq(s.voted_for, NO_VOTE),
                                        eq(s.config_index, 0))),
            # without cmeta (never merged, never lost) the server never logged anything
            implies(all_(not_(s.cmeta), not_(forgot)),
                    all_(eq(s.sb_last_term, 0), eq(s.sb_last_index, 0),
                         eq(s.ghost_last_term, 0), eq(s.ghost_last_index, 0),
                         not_(in_place))),
            implies(s.cmeta_lost, all_(not_(s.cmeta), not_(copying_op))),
            implies(member(op, (OP_DELETE, OP_UNDO_COPY)), step >= 1),
            implies(eq(op, OP_ROLL_FORWARD), step >= 4),
            implies(deleting, step <= 5),
            implies(eq(op, OP_COPY), step <= COPY_READY),
            implies(eq(op, OP_FULL_DELETE),
                    all_(eq(step, FULL_DELETE_CMETA_GONE), eq(s.sb, DELETED),
                         not_(s.cmeta), s.cmeta_removed, not_(in_place))),
            # never hosted (or fully deleted): nothing at all
            implies(eq(s.sb, DOES_NOT_EXIST),
                    all_(not_(s.cmeta), not_(in_place), eq(s.sb_last_term, 0),
                         eq(s.sb_last_index, 0), eq(s.ghost_last_term, 0),
                         eq(s.ghost_last_index, 0), not_(s.sb_qdir),
                         eq(s.blocks, BLOCKS_ABSENT))),
            # READY's WAL is this server's own log
            implies(eq(s.sb, READY), all_(eq(s.wal_last_term, s.ghost_last_term),
                                          eq(s.wal_last_index, s.ghost_last_index))),
            implies(eq(s.sb, DELETED), all_(s.sb_qdir, eq(s.blocks, BLOCKS_ABSENT),
                                            any_(all_(s.qdir, s.q_sb), s.purged))),
            # a purged quarantine is gone until a deletion creates a new one
            implies(s.purged, not_(s.qdir)),
            implies(eq(s.sb, COPYING), member(op, (OP_NONE, OP_COPY, OP_UNDO_COPY))),
            implies(all_(eq(s.sb, COPYING), eq(op, OP_NONE)), not_(s.up)),
            # deleting: steps 1-3 before the superblock says DELETED, 4-5 after it
            implies(all_(deleting, step >= 2), s.qdir),
            implies(all_(deleting, step >= 3), s.q_sb),
            implies(all_(deleting, step >= 4), eq(s.sb, DELETED)),
            implies(at((OP_DELETE, OP_COPY_DELETE), 0, 3), eq(s.sb, READY)),
            implies(at((OP_UNDO_COPY,), 1, 3), eq(s.sb, COPYING)),
            # copying: what each completed step left behind
            implies(at((OP_COPY,), COPY_ACCEPTED, COPY_ACCEPTED),
                    member(s.sb, (DOES_NOT_EXIST, DELETED))),
            implies(at((OP_COPY,), COPY_BEGUN, COPY_MERGED), eq(s.sb, COPYING)),
            implies(at((OP_COPY,), COPY_ACCEPTED, COPY_BEGUN),
                    all_(not_(in_place), eq(s.blocks, BLOCKS_ABSENT))),
            implies(at((OP_COPY,), COPY_READY, COPY_READY),
                    all_(eq(s.sb, READY), eq(s.wal, WAL_LIVE), eq(s.blocks, BLOCKS_PRESENT))),
            implies(at((OP_COPY,), COPY_MERGED, COPY_READY), s.cmeta),
            implies(all_(eq(op, OP_COPY), eq(step, COPY_MERGED), in_place),
                    eq(s.wal, WAL_LIVE)),
        )

    return _each(sys, one)


# ---------------------------------------------------------------------------------------
# Step properties.


def term_monotonic(pre: ServerState, post: ServerState, t: Int) -> Bool:
    """"we must ensure that our term remains monotonic": for one server UUID the cmeta, once
    written, never disappears and its term never decreases, across delete, copy, merge,
    crash and restart (but a full delete of a dropped table, which removes it, and a disk
    fault that loses it: then the replica never votes again as a live member)."""
    same_uuid = eq(pre.uuid_gen, post.uuid_gen)
    return implies(all_(same_uuid, pre.cmeta, not_(post.cmeta_removed), not_(post.cmeta_lost)),
                   all_(post.cmeta, post.term >= pre.term))


def vote_once(pre: ServerState, post: ServerState, t: Int) -> Bool:
    """"our memory of our votes is not lost": a vote, once cast by a UUID in a term, is never
    changed, so a UUID votes at most once per term, ever (for a table not dropped)."""
    same_uuid = eq(pre.uuid_gen, post.uuid_gen)
    before = get(pre.votes, t)
    return implies(all_(same_uuid, ne(before, NO_VOTE), not_(post.dropped)),
                   eq(get(post.votes, t), before))


def tombstone_keeps_cmeta_and_opid(pre: ServerState, post: ServerState, t: Int) -> Bool:
    """"it must be tombstoned and retain its (now static) persistent Raft state forever": a
    DELETED replica keeps its cmeta and last OpId until a copy makes it READY again (or a
    full delete of its dropped table removes them)."""
    return implies(
        all_(eq(pre.sb, DELETED), member(post.sb, (DELETED, COPYING)),
             eq(pre.uuid_gen, post.uuid_gen)),
        all_(eq(post.sb_last_term, pre.sb_last_term), eq(post.sb_last_index, pre.sb_last_index),
             implies(all_(pre.cmeta, not_(post.cmeta_removed)), post.cmeta)))


def new_uuid_inherits_nothing(pre: ServerState, post: ServerState, t: Int) -> Bool:
    """"the tablet server must adopt a new UUID and fully clear all of its data and state":
    a new UUID starts with no cmeta, no term, no vote, no superblock and no WAL."""
    return implies(
        ne(pre.uuid_gen, post.uuid_gen),
        all_(post.uuid_gen > pre.uuid_gen, not_(post.cmeta), eq(post.term, 0),
             eq(post.voted_for, NO_VOTE), eq(get(post.votes, t), NO_VOTE),
             eq(post.sb, DOES_NOT_EXIST), not_(member(post.wal, WAL_IN_PLACE)),
             eq(post.ghost_last_term, 0), eq(post.ghost_last_index, 0)))


def uuid_never_reused(pre: ServerState, post: ServerState, t: Int) -> Bool:
    """A wiped server's UUID generation only grows: no UUID is ever reused."""
    return post.uuid_gen >= pre.uuid_gen


def retired_uuid_never_votes(pre: ServerState, post: ServerState, t: Int) -> Bool:
    """A wiped server's old UUID is retired: once the server is on a new UUID, no vote it
    casts counts as the old one's (its member vote history, what the quorums of the config
    the spec follows count, never changes again). The new UUID is a new server: a later
    config may add it (a config change may name any UUID, Kudu's master re-replicates onto
    a wiped server like onto any other), as a voter with no history, but it never answers
    for the UUID whose votes it forgot, in any term (``UuidNeverReused``: never reused)."""
    return implies(post.uuid_gen > 0,
                   eq(get(post.member_votes, t), get(pre.member_votes, t)))


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
    the superblock says COPYING then; nor is a disk fault that loses the cmeta)."""
    return implies(
        all_(eq(pre.sb, READY), eq(post.sb, READY), eq(pre.uuid_gen, post.uuid_gen),
             post.cmeta, ne(post.config_index, pre.config_index)),
        all_(post.config_index > pre.config_index,
             post.config_index <= post.wal_last_index))


def operation_never_replaced(pre: ServerState, post: ServerState, t: Int) -> Bool:
    """One lifecycle operation at a time (ALREADY_IN_PROGRESS as a rule): while a server is
    up, an operation in flight only moves on through its own steps, ends, or hands over as
    it is written to (a StartTabletCopy's deletion to its copy, an aborted copy to the
    deletion that undoes it); no request replaces it by another."""
    return implies(
        all_(pre.up, post.up, ne(pre.op, OP_NONE), eq(pre.uuid_gen, post.uuid_gen)),
        any_(eq(post.op, pre.op), eq(post.op, OP_NONE),
             all_(eq(pre.op, OP_COPY_DELETE), eq(post.op, OP_COPY)),
             all_(eq(pre.op, OP_COPY), eq(post.op, OP_UNDO_COPY))))


def interrupted_copy_becomes_tombstone(pre: ServerState, post: ServerState, t: Int) -> Bool:
    """"if tablet.state is COPYING: Delete self (go back to DELETED state)": a COPYING
    superblock ends as a tombstone, or READY only by its own copy's step 5 (never by a
    startup that finds the download complete: a copy is validated by the copy, not by
    the files it left)."""
    return implies(
        all_(eq(pre.sb, COPYING), ne(post.sb, COPYING), eq(pre.uuid_gen, post.uuid_gen)),
        any_(eq(post.sb, DELETED),
             all_(eq(post.sb, READY), pre.up, eq(pre.op, OP_COPY), eq(pre.step, COPY_MERGED))))


def _inv(f: StatePred, name: str, **flags: bool) -> Invariant:
    return Invariant(name, f.__doc__ or "", f, **flags)


def _prop(f: StepPred, name: str, **flags: bool) -> StepProperty:
    return StepProperty(name, f.__doc__ or "", f, **flags)


INVARIANTS: tuple[Invariant, ...] = (
    _inv(one_leader_per_term, "OneLeaderPerTerm"),
    _inv(ready_is_complete, "ReadyIsComplete", per_server=True),
    _inv(running_is_ready, "RunningIsReady", per_server=True),
    _inv(running_is_intact, "RunningIsIntact", per_server=True),
    _inv(tombstone_retains_last_opid, "TombstoneRetainsLastOpid", per_server=True),
    _inv(quiescent_tombstone_has_no_live_wal, "StartupRollsDeletionForward", per_server=True),
    _inv(no_copying_when_quiescent, "NoCopyingWhenQuiescent", per_server=True),
    _inv(stale_caller_cannot_destroy, "StaleCallerCannotDestroy", per_server=True),
    _inv(delete_cas_held, "DeleteCasHeld", per_server=True),
    _inv(config_change_cas_held, "ConfigChangeCasHeld", per_server=True),
    _inv(one_config_change_pending, "OneConfigChangePending", per_server=True),
    _inv(quarantined_wal_has_no_opid, "QuarantinedWalHasNoOpid", per_server=True),
    _inv(quarantine_holds_evidence, "QuarantineHoldsEvidence", per_server=True),
    _inv(one_vote_per_term_recorded, "VotesMatchCmeta", per_server=True, reads_ghosts=True,
         uses_term=True),
    _inv(no_entry_above_current_term, "NoEntryAboveCurrentTerm", per_server=True,
         reads_ghosts=True),
    _inv(committed_in_later_leaders, "CommittedInLaterLeaders", reads_ghosts=True,
         inductive=False),
    _inv(committed_never_lost, "CommittedNeverLost", reads_ghosts=True, inductive=False),
    _inv(leader_led_its_term, "LeaderLedItsTerm", strengthening=True, per_server=True,
         reads_ghosts=True),
    _inv(led_once_per_term, "LedOncePerTerm", strengthening=True, reads_ghosts=True,
         uses_term=True),
    _inv(leader_had_majority, "LeaderHadMajority", strengthening=True, reads_ghosts=True,
         uses_term=True),
    _inv(member_history_is_votes, "MemberHistoryIsVotes", strengthening=True,
         per_server=True, reads_ghosts=True, uses_term=True),
    _inv(full_delete_after_drop, "FullDeleteAfterDrop", strengthening=True,
         per_server=True, reads_ghosts=True),
    _inv(votes_name_servers, "VotesNameServers", strengthening=True, per_server=True,
         reads_ghosts=True, uses_term=True),
    _inv(pending_config_in_log, "PendingConfigInLog", strengthening=True, per_server=True),
    _inv(log_only_in_wals, "LogOnlyInWals", strengthening=True, per_server=True,
         reads_ghosts=True),
    _inv(lifecycle_shape, "LifecycleShape", strengthening=True, per_server=True),
    _inv(log_matching, "LogMatching", strengthening=True, reads_ghosts=True,
         inductive=False),
    _inv(log_shape, "LogShape", strengthening=True, per_server=True, reads_ghosts=True,
         inductive=False),
)

STEP_PROPERTIES: tuple[StepProperty, ...] = (
    _prop(term_monotonic, "TermMonotonic"),
    _prop(vote_once, "VoteOnce", reads_ghosts=True, uses_term=True),
    _prop(tombstone_keeps_cmeta_and_opid, "TombstoneKeepsCmetaAndOpid"),
    _prop(new_uuid_inherits_nothing, "NewUuidInheritsNothing", reads_ghosts=True,
          uses_term=True),
    _prop(uuid_never_reused, "UuidNeverReused"),
    _prop(retired_uuid_never_votes, "RetiredUuidNeverVotes", reads_ghosts=True,
          uses_term=True),
    _prop(leader_append_only, "LeaderAppendOnly"),
    _prop(config_committed_from_log, "ConfigCommittedFromLog"),
    _prop(operation_never_replaced, "OperationNeverReplaced"),
    _prop(interrupted_copy_becomes_tombstone, "InterruptedCopyBecomesTombstone"),
)

SAFETY_CLAIMS: frozenset[str] = frozenset(
    [i.name for i in INVARIANTS if not i.strengthening] + [p.name for p in STEP_PROPERTIES])


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
    out = []
    for inv in invariants:
        # An invariant that does not read the term is evaluated once.
        if not all(inv.pred(sys, t) for t in (terms if inv.uses_term else terms[:1])):
            out.append(inv.name)
    return out


def check_step(props: Iterable[StepProperty], pre: ServerState, post: ServerState) -> list[str]:
    """Names of the step properties a concrete step violates."""
    terms = relevant_terms((pre, post))
    return [p.name for p in props
            if not all(p.pred(pre, post, t) for t in (terms if p.uses_term else terms[:1]))]


__all__ = ["INVARIANTS", "MAP_FIELDS", "SAFETY_CLAIMS", "STEP_PROPERTIES", "Invariant",
           "StepProperty", "check_state", "check_step", "relevant_terms"]
