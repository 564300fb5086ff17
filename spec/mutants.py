"""Deliberately broken variants of the spec: the checkers are proven by rejecting these.

A checker that never fails proves nothing. Each mutant below seeds one bug that a real
implementation could plausibly have (most of them have happened in real Raft systems, or are
the opposite of a decision in ``actions``' header) into one or two rows of the transition
table, and names the claim that must catch it: one fault, one finding. A claim catches a
mutant only when the explorer reaches a state that breaks it, and it must be a claim, not a
strengthening invariant (proof scaffolding). When the broken claim is one the prover proves
inductive, the prover must also reject the mutant (``proof``); the claims about the log are
checked by exploration only (``invariants``), so their mutants are too.

``revivify prove --mutant NAME`` and ``revivify explore --mutant NAME`` show a mutant being
caught by hand. These are never used as the spec: ``Spec()`` / ``default_spec()`` is.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs

from revivify.spec import actions as A
from revivify.spec.actions import ACTIONS, Action, replace_action
from revivify.spec.catalog import DEFAULT as CATALOG_DEFAULT
from revivify.spec.catalog import CatalogSpec
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
    ite_map,
    member,
    ne,
    not_,
    opid_ge,
)
from revivify.spec.merge import merge_cmeta
from revivify.spec.model import (
    BLOCKS_LISTED,
    BLOCKS_PRESENT,
    COPY_MERGED,
    COPYING,
    DAMAGE_BLOCKS,
    DAMAGE_WAL,
    DELETED,
    DELETING_OPS,
    NO_VOTE,
    OP_COPY,
    OP_COPY_DELETE,
    OP_NONE,
    OP_ROLL_FORWARD,
    OP_UNDO_COPY,
    READY,
    STARTUP_FAILED,
    STARTUP_READY,
    STC_ALREADY_IN_PROGRESS,
    STC_STALE_TERM,
    WAL_DAMAGED,
    WAL_LIVE,
    WAL_QUARANTINED,
    ServerState,
    SystemState,
)
from revivify.spec.system import Spec

# Bounds under which the explorer reaches each mutant's violation (a mutant names one; a
# search stops at the first violation, so a small witness keeps the tests fast).
ONE_TERM_FAULTS = A.Bounds(max_term=1, max_index=0, max_crashes=1, max_wipes=1,
                           max_requests=3)
ONE_TERM_LOG = A.Bounds(max_term=1, max_index=1, max_crashes=1, max_wipes=1, max_requests=2)
ONE_TERM_LOG_ONE_REQUEST = A.Bounds(max_term=1, max_index=1, max_crashes=1, max_wipes=1,
                                    max_requests=1)
ONE_TERM_ABORT = A.Bounds(max_term=1, max_index=1, max_crashes=0, max_wipes=1,
                          max_requests=2)
TWO_TERMS = A.Bounds(max_term=2, max_index=0, max_crashes=0, max_wipes=0, max_requests=2)
TWO_TERMS_LOG = A.Bounds(max_term=2, max_index=1, max_crashes=0, max_wipes=0, max_requests=2)
TWO_TERMS_LOG_ONE_REQUEST = A.Bounds(max_term=2, max_index=1, max_crashes=0, max_wipes=0,
                                     max_requests=1)
# A config change needs a leader that committed an entry of its term: one term, one entry,
# no fault, two requests (config changes count as requests; the change is planned at index
# 2, one past the bound).
ONE_TERM_CONFIG = A.Bounds(max_term=1, max_index=1, max_crashes=0, max_wipes=0,
                           max_requests=2)
# Raft alone (no fault, no lifecycle request): one term and one entry, for a follower that
# takes a leader's entry.
ONE_TERM_RAFT = A.Bounds(max_term=1, max_index=1, max_crashes=0, max_wipes=0, max_requests=0)
# Two terms and two log indexes, Raft alone: the smallest bounds with two entries of one
# term (a committed [1, 1] against a candidate's [1]), which an off-by-one in the log's
# up-to-date comparison needs: with one index, two logs whose last terms are equal are
# equal. The real spec has 269,431 states within them (about 32 s of CPU), 18,436 at max
# index 1 (``TWO_TERMS_RAFT_ONE_INDEX``, at which the mutants these bounds catch explore
# clean); ``vote_index_off_by_one`` is caught after about 23,000.
TWO_TERMS_RAFT = A.Bounds(max_term=2, max_index=2, max_crashes=0, max_wipes=0,
                          max_requests=0)
TWO_TERMS_RAFT_ONE_INDEX = attrs.evolve(TWO_TERMS_RAFT, max_index=1)


@attrs.frozen
class Mutant:
    name: str
    bug: str
    # The claim that must catch the bug (a few when they are equally direct).
    caught_by: frozenset[str]
    table: Callable[[], tuple[Action, ...]]
    # Where the explorer finds it (and the most states it may take).
    bounds: A.Bounds = ONE_TERM_FAULTS
    max_states: int = 150_000
    # The broken claim is proven inductive for the real spec: the prover must fail too.
    proof: bool = True

    def build(self, n_servers: int = 3) -> Spec:
        return Spec(actions=self.table(), n_servers=n_servers, name=f"mutant:{self.name}")

    def changed_rows(self) -> frozenset[str]:
        """The rows of the table this mutant changes (the others are the real spec's)."""
        return frozenset(a.name for a, b in zip(self.table(), ACTIONS, strict=True)
                         if a is not b)


def _ev(s: ServerState, **changes: Any) -> ServerState:
    return attrs.evolve(s, **changes)


def _t(name: str, **changes: Any) -> Callable[[], tuple[Action, ...]]:
    return lambda: replace_action(ACTIONS, name, **changes)


def _chain(*steps: tuple[str, dict[str, Any]]) -> Callable[[], tuple[Action, ...]]:
    def build() -> tuple[Action, ...]:
        table = ACTIONS
        for name, changes in steps:
            table = replace_action(table, name, **changes)
        return table

    return build


# ---------------------------------------------------------------------------------------
# The cmeta merge.


def _merge_adopts_remote_term(s: ServerState, remote_term: Int,
                              remote_config_index: Int) -> ServerState:
    """Rule 1 broken: the remote term is adopted even when it is lower."""
    return _ev(s, cmeta=True, term=remote_term,
               voted_for=ite(remote_term > s.term, NO_VOTE, s.voted_for),
               config_index=remote_config_index, step=COPY_MERGED)


def _merge_forgets_vote(s: ServerState, remote_term: Int,
                        remote_config_index: Int) -> ServerState:
    """Rule 2 broken: the local vote for the local term is dropped."""
    m = merge_cmeta(s.cmeta, s.term, s.voted_for, remote_term, remote_config_index)
    return _ev(s, cmeta=True, term=m.term, voted_for=NO_VOTE, config_index=m.config_index,
               step=COPY_MERGED)


# ---------------------------------------------------------------------------------------
# Startup.


def _startup_variant(case_of: Callable[[ServerState], Int]) -> dict[str, Any]:
    def guard(s: ServerState, case: Int) -> Bool:
        return all_(not_(s.up), eq(case, case_of(s)))

    return {"guard": guard}


def _case_copying_ready(s: ServerState) -> Int:
    """Startup treats COPYING as READY."""
    return ite(eq(s.sb, COPYING), STARTUP_READY, A.startup_case(s))


def _case_ignores_damage(s: ServerState) -> Int:
    """Startup does not verify: every file there (damaged or not) is READY."""
    complete = all_(eq(s.sb, READY), s.cmeta, A.wal_in_place(s),
                    member(s.blocks, BLOCKS_LISTED))
    case = A.startup_case(s)
    return ite(all_(eq(case, STARTUP_FAILED), complete), STARTUP_READY, case)


def _case_finishes_copy(s: ServerState) -> Int:
    """Startup finds a COPYING replica's download complete and calls it READY (and the
    effect then makes it so)."""
    done = all_(eq(s.sb, COPYING), s.cmeta, eq(s.wal, WAL_LIVE), eq(s.blocks, BLOCKS_PRESENT))
    return ite(done, STARTUP_READY, A.startup_case(s))


def _startup_finishes_copy_effect(s: ServerState, case: Int) -> ServerState:
    after = A.startup_effect(s, case)
    done = all_(eq(s.sb, COPYING), eq(case, STARTUP_READY))
    return _ev(after, sb=ite(done, READY, after.sb),
               sb_last_term=ite(done, 0, after.sb_last_term),
               sb_last_index=ite(done, 0, after.sb_last_index),
               own_log=ite_map(done, s.log, after.own_log),
               ghost_last_term=ite(done, s.wal_last_term, after.ghost_last_term),
               ghost_last_index=ite(done, s.wal_last_index, after.ghost_last_index))


def _startup_forgets_tombstone_vote(s: ServerState, case: Int) -> ServerState:
    """A restarted tombstone reloads its cmeta without its vote."""
    after = A.startup_effect(s, case)
    return _ev(after, voted_for=ite(eq(s.sb, DELETED), NO_VOTE, s.voted_for))


# ---------------------------------------------------------------------------------------
# Deletion.


def _d4_moves_wal(s: ServerState) -> ServerState:
    """Step 4 moves the WAL (the seed's steps 4 and 6 swapped)."""
    live = eq(s.wal, WAL_LIVE)
    return _ev(s, wal=ite(live, WAL_QUARANTINED, s.wal), wal_last_term=0, wal_last_index=0,
               log=A.empty_log(s), step=4)


def _d5_any(s: ServerState) -> Bool:
    return A.at_step(s, (*DELETING_OPS, OP_ROLL_FORWARD), 4)


def _d6_marks_deleted(s: ServerState) -> ServerState:
    from_ready = eq(s.sb, READY)
    copy_next = eq(s.op, OP_COPY_DELETE)
    return _ev(s, sb=DELETED,
               sb_last_term=ite(from_ready, s.wal_last_term, s.sb_last_term),
               sb_last_index=ite(from_ready, s.wal_last_index, s.sb_last_index),
               sb_qdir=True, blocks=0,
               op=ite(copy_next, OP_COPY, OP_NONE), step=0,
               op_arg=ite(copy_next, s.op_arg, 0), op_src=ite(copy_next, s.op_src, -1))


def _d6_any(s: ServerState) -> Bool:
    return A.at_step(s, (*DELETING_OPS, OP_ROLL_FORWARD), 5)


def _d4_forgets_opid(s: ServerState) -> ServerState:
    """The last OpId is not stored in the tombstone."""
    return _ev(A.delete_mark_deleted_effect(s), sb_last_term=0, sb_last_index=0)


def _d4_undo_records_download(s: ServerState) -> ServerState:
    """The deletion that undoes a copy (after copy_abort, or at startup) records the
    downloaded WAL's last OpId, as a READY replica's deletion does."""
    after = A.delete_mark_deleted_effect(s)
    undo = all_(eq(s.op, OP_UNDO_COPY), eq(s.wal, WAL_LIVE))
    return _ev(after, sb_last_term=ite(undo, s.wal_last_term, after.sb_last_term),
               sb_last_index=ite(undo, s.wal_last_index, after.sb_last_index))


def _d4_damaged_wal_forgets(s: ServerState) -> ServerState:
    """Deleting a FAILED replica whose WAL is damaged records (0, 0): the damaged WAL
    cannot be read."""
    after = A.delete_mark_deleted_effect(s)
    damaged = all_(eq(s.sb, READY), eq(s.wal, WAL_DAMAGED))
    return _ev(after, sb_last_term=ite(damaged, 0, after.sb_last_term),
               sb_last_index=ite(damaged, 0, after.sb_last_index))


def _d1_retombstones(s: ServerState, cas_config_index: Int) -> Bool:
    """DeleteTablet(TOMBSTONE) of a tombstone runs the six steps again."""
    again = all_(s.up, eq(s.sb, DELETED), eq(s.op, OP_NONE))
    return any_(A.delete_shutdown_guard(s, cas_config_index), again)


def _d4_records_log(s: ServerState) -> ServerState:
    """Step 4 records the WAL's last OpId for every deletion but the undoing of a copy
    (what is in wals/<id>: (0, 0) for a tombstone deleted again)."""
    after = A.delete_mark_deleted_effect(s)
    mine = ne(s.op, OP_UNDO_COPY)
    return _ev(after, sb_last_term=ite(mine, s.wal_last_term, after.sb_last_term),
               sb_last_index=ite(mine, s.wal_last_index, after.sb_last_index))


def _d6_keeps_wal_opid(s: ServerState) -> ServerState:
    """The moved WAL keeps reporting its last OpId."""
    return _ev(A.delete_move_wal_effect(s), wal_last_term=s.wal_last_term,
               wal_last_index=s.wal_last_index)


def _d5_forgets_cmeta(s: ServerState) -> ServerState:
    """Step 5 does not copy the cmeta into the quarantine."""
    return _ev(A.delete_copy_cmeta_effect(s), q_cmeta=False)


def _d3_skipped(s: ServerState) -> ServerState:
    """Step 3 does not copy the superblock (and step 4 does not look)."""
    return _ev(A.delete_copy_superblock_effect(s), q_sb=False)


def _d4_without_copy(s: ServerState) -> Bool:
    return A.at_step(s, DELETING_OPS, 3)


def _d1_ignores_cas(s: ServerState, cas_config_index: Int) -> Bool:
    """DeleteTablet without its compare-and-set."""
    return all_(s.up, eq(s.sb, READY),
                any_(eq(s.op, OP_NONE), all_(eq(s.op, OP_COPY_DELETE), eq(s.step, 0))))


# ---------------------------------------------------------------------------------------
# StartTabletCopy and the copy.


def _stc_accept_with(failures: Callable[..., list[tuple[int, Bool]]],
                     check_lost: bool = True) -> Callable[..., Bool]:
    def guard(s: ServerState, caller: Int, caller_term: Int, expected_state: Int,
              has_opid: Int, opid_term: Int, opid_index: Int, dest: Int) -> Bool:
        fails = failures(s, caller_term, expected_state, has_opid, opid_term, opid_index)
        return all_(A.stc_request_ok(s, caller, caller_term, dest),
                    not_(s.cmeta_lost) if check_lost else True,
                    *[not_(f) for _, f in fails])

    return guard


def _failures_without(*codes: int) -> Callable[..., list[tuple[int, Bool]]]:
    def failures(s: ServerState, *args: Any) -> list[tuple[int, Bool]]:
        return [(c, f) for c, f in A.stc_failures(s, *args) if c not in codes]

    return failures


def _failures_term_from_wal(s: ServerState, caller_term: Int, expected_state: Int,
                            has_opid: Int, opid_term: Int,
                            opid_index: Int) -> list[tuple[int, Bool]]:
    """STALE_TERM compares with the WAL's last term (a tombstone's moved WAL: 0)."""
    return [(c, ite(eq(c, STC_STALE_TERM), caller_term < s.wal_last_term, f))
            for c, f in A.stc_failures(s, caller_term, expected_state, has_opid, opid_term,
                                       opid_index)]


def _stc_seed_order(s: ServerState, caller: Int, caller_term: Int, expected_state: Int,
                    has_opid: Int, opid_term: Int, opid_index: Int, dest: Int) -> Bool:
    """The seed's order: a READY tablet is deleted before the caller's term is checked."""
    checked = A.stc_accept_guard(s, caller, caller_term, expected_state, has_opid, opid_term,
                                 opid_index, dest)
    unchecked = _stc_accept_with(_failures_without(STC_STALE_TERM))(
        s, caller, caller_term, expected_state, has_opid, opid_term, opid_index, dest)
    return ite(eq(s.sb, READY), unchecked, checked)


def _d6_seed_order(s: ServerState) -> ServerState:
    """... and the copy is abandoned afterwards when the seed's term check (the cmeta's)
    fails, leaving a tombstone."""
    after = A.delete_move_wal_effect(s)
    stale = all_(eq(s.op, OP_COPY_DELETE), s.op_arg < s.term)
    return _ev(after, op=ite(stale, OP_NONE, after.op), op_arg=ite(stale, 0, after.op_arg),
               op_src=ite(stale, -1, after.op_src))


def _c5_early(s: ServerState) -> Bool:
    """The superblock is written READY before all blocks are downloaded."""
    return all_(A.at_step(s, (OP_COPY,), COPY_MERGED), s.cmeta, eq(s.wal, WAL_LIVE))


def _c5_before_wal(s: ServerState) -> Bool:
    """The superblock is written READY before the WAL is downloaded (blocks first)."""
    return all_(A.at_step(s, (OP_COPY,), COPY_MERGED), s.cmeta, eq(s.blocks, BLOCKS_PRESENT))


# ---------------------------------------------------------------------------------------
# Votes and elections.


def _lazy_ignoring_loss(s: ServerState) -> Bool:
    return all_(eq(s.sb, DELETED), not_(s.cmeta), member(s.op, (OP_NONE, OP_COPY)))


def _in_consensus_ignoring_loss(s: ServerState) -> Bool:
    return all_(s.up, not_(s.failed), any_(s.cmeta, _lazy_ignoring_loss(s)))


def _vote_guards(in_consensus: Callable[[ServerState], Bool],
                 grantable: Callable[..., Bool] = A.vote_grantable,
                 check_dest: bool = True) -> list[tuple[str, dict[str, Any]]]:
    def granted(s: ServerState, candidate: Int, t: Int, cand_last_term: Int,
                cand_last_index: Int, dest: Int) -> Bool:
        return all_(in_consensus(s), candidate >= 0,
                    A.addressed(s, dest) if check_dest else True,
                    grantable(s, candidate, t, cand_last_term, cand_last_index))

    def denied(s: ServerState, candidate: Int, t: Int, cand_last_term: Int,
               cand_last_index: Int, dest: Int) -> Bool:
        return all_(in_consensus(s), candidate >= 0,
                    A.addressed(s, dest) if check_dest else True,
                    not_(grantable(s, candidate, t, cand_last_term, cand_last_index)))

    def learn(s: ServerState, t: Int) -> Bool:
        return all_(in_consensus(s), t > s.term)

    return [("vote_granted", {"guard": granted}), ("vote_denied", {"guard": denied}),
            ("learn_term", {"guard": learn})]


def _grantable_without_log(s: ServerState, candidate: Int, t: Int, cand_last_term: Int,
                           cand_last_index: Int) -> Bool:
    """The vote's up-to-date comparison is missing."""
    return all_(t >= s.term,
                any_(t > s.term, eq(s.voted_for, NO_VOTE), eq(s.voted_for, candidate)))


def _grantable_from_wal(s: ServerState, candidate: Int, t: Int, cand_last_term: Int,
                        cand_last_index: Int) -> Bool:
    """A tombstone compares with its WAL's last OpId (moved into the quarantine: (0, 0))
    instead of the one its superblock retained."""
    return all_(t >= s.term,
                any_(t > s.term, eq(s.voted_for, NO_VOTE), eq(s.voted_for, candidate)),
                opid_ge(cand_last_term, cand_last_index, s.wal_last_term, s.wal_last_index))


def _no_majority(sys: SystemState, i: int, me: Int, t: Int) -> Bool:
    """A candidate leads with its own vote only."""
    votes = count(*[eq(get(k.member_votes, t), me) for k in sys])
    return all_(eq(me, i), votes >= 1)


def _opid_ge_off_by_one(a_term: Int, a_index: Int, b_term: Int, b_index: Int) -> Bool:
    """Raft's up-to-date comparison with an off-by-one where the last terms are equal: a
    candidate one entry behind passes (``a_index >= b_index - 1``)."""
    return any_(a_term > b_term, all_(eq(a_term, b_term), a_index >= b_index - 1))


def _grantable_off_by_one(s: ServerState, candidate: Int, t: Int, cand_last_term: Int,
                          cand_last_index: Int) -> Bool:
    """The vote rule with the off-by-one comparison of last OpIds."""
    lt, li = A.last_logged(s)
    return all_(t >= s.term,
                any_(t > s.term, eq(s.voted_for, NO_VOTE), eq(s.voted_for, candidate)),
                _opid_ge_off_by_one(cand_last_term, cand_last_index, lt, li))


def _leader_any_term(s: ServerState, me: Int, t: Int) -> Bool:
    """A candidate leads a term it has moved past (with that term's votes)."""
    return all_(s.up, s.running, eq(s.op, OP_NONE), not_(s.leader), t <= s.term, t >= 1,
                A.is_member(s), eq(get(s.votes, t), me))


def _leader_any_term_enum(sys: SystemState, i: int, b: A.Bounds) -> Any:
    for t in range(1, sys[i].term + 1):
        yield {"me": i, "t": t}


def _step_down_forgets_vote(s: ServerState) -> ServerState:
    """Stepping down clears the current term's vote."""
    return _ev(A.step_down_effect(s), voted_for=NO_VOTE)


def _no_dest(name: str) -> tuple[str, dict[str, Any]]:
    """The row without its destination check (the request names the config's UUID; the
    wiped server answers for it)."""
    original = A.ACTIONS_BY_NAME[name].guard

    def guard(s: ServerState, **p: Any) -> Bool:
        return original(attrs.evolve(s, uuid_gen=0), **p)

    return (name, {"guard": guard})


# ---------------------------------------------------------------------------------------
# The log.


def _leader_truncates_guard(s: ServerState, first_index: Int, op_term: Int, op_index: Int,
                            prev_term: Int, entries: Any, dest: Int) -> Bool:
    """A leader's batch may start anywhere in its log, as a follower's may."""
    appends = eq(first_index, s.wal_last_index + 1)
    return all_(
        s.up, s.running, eq(s.op, OP_NONE), eq(s.sb, READY), eq(s.wal, WAL_LIVE),
        A.addressed(s, dest), op_term >= 1, op_term <= s.term, op_index >= 1,
        first_index >= 1, first_index <= op_index, first_index <= s.wal_last_index + 1,
        implies(appends, op_term >= s.wal_last_term),
        implies(s.leader, eq(op_term, s.term)),
    )


def _leader_truncates_enum(sys: SystemState, i: int, b: A.Bounds) -> Any:
    yield from A.log_append_enum(sys, i, b)
    s = sys[i]
    if s.up and s.leader:
        # rewrite the log from index 1 with one entry of the leader's term
        from revivify.spec.logic import run_of

        yield {"first_index": 1, "op_term": s.term, "op_index": 1, "prev_term": 0,
               "entries": run_of(1, 1, s.term), "dest": s.uuid_gen}


_OP_TERM = "1 <= op_term <= the current term"


def _op_term_positive(s: ServerState, op_term: Int, **_: Any) -> Bool:
    return op_term >= 1


def _entries_without_adopting(sys: SystemState, i: int, **p: Any) -> Bool:
    """A follower takes the batch of a leader of a *later* term as if it were in that term,
    without adopting it (Raft adopts the leader's term first): the batch is checked against
    that leader's log, and the follower's term stays."""
    s = sys[i]
    as_if = [all_(lead.term > s.term, A.entries_from_leader(
        (*sys[:i], attrs.evolve(s, term=lead.term), *sys[i + 1:]), i, **p))
        for j, lead in enumerate(sys) if j != i]
    return any_(A.entries_from_leader(sys, i, **p), *as_if)


def _config_commit_beyond_log(s: ServerState, config_index: Int) -> Bool:
    """A config change is committed into the cmeta beyond the WAL's last index."""
    return _guard_without(A.config_commit_conditions,
                          "config_index <= the WAL's last index")(s, config_index=config_index)


def _config_commit_beyond_log_enum(sys: SystemState, i: int, b: A.Bounds) -> Any:
    yield from A.config_commit_enum(sys, i, b)
    s = sys[i]
    yield {"config_index": max(s.config_index, s.wal_last_index) + 1}


def _commit_with_one(sys: SystemState, i: int, index: Int, op_term: Int) -> Bool:
    """A leader commits an entry only its own log holds."""
    s = sys[i]
    return all_(s.leader, eq(op_term, s.term), eq(get(s.log, index), op_term))


def _guard_without(conditions: A.Conditions, dropped: str,
                   instead: Callable[..., Bool] | None = None) -> Callable[..., Bool]:
    """The guard of ``conditions`` without the one named ``dropped`` (and with ``instead``
    in its place): a mutant that breaks exactly one named check."""

    def guard(s: ServerState, **p: Any) -> Bool:
        conds = conditions(s, **p)
        kept = [c for name, c in conds if name != dropped]
        if len(kept) != len(conds) - 1:
            raise KeyError(f"no condition {dropped!r}")
        return all_(*kept, *([instead(s, **p)] if instead is not None else []))

    return guard


# ---------------------------------------------------------------------------------------
# Config changes.


def _le_cas(s: ServerState, cas_index: Int, config_index: Int) -> Bool:
    """DeleteTablet's CAS: the committed config index at most the caller's."""
    return s.config_index <= cas_index


_CAS = "the CAS: cas_index is the committed config index (else CAS_MISMATCH)"
_PENDING = "no config change of its own pending (else CHANGE_PENDING)"


# ---------------------------------------------------------------------------------------
# Disk faults.


def _damage_while_up(s: ServerState, what: Int) -> Bool:
    """A disk fault strikes a running replica, which goes on running."""
    return any_(all_(eq(what, DAMAGE_WAL), eq(s.wal, WAL_LIVE)),
                all_(eq(what, DAMAGE_BLOCKS), eq(s.blocks, BLOCKS_PRESENT)))


def _wipe_keeps_cmeta(s: ServerState) -> ServerState:
    """A wiped server takes a new UUID but keeps the old cmeta."""
    after = A.wipe_effect(s)
    return _ev(after, cmeta=s.cmeta, term=s.term, voted_for=s.voted_for)


def _full_delete_anytime(sys: SystemState, i: int, **_: Any) -> Bool:
    """A full delete needs no drop of the table."""
    return True


# ---------------------------------------------------------------------------------------
# An operator's purge of the quarantine (decision 10).


def _purge_any_deletion(s: ServerState) -> Bool:
    """The purge does not look for a deletion startup has still to roll forward (a DELETED
    superblock whose WAL is still in wals/<id>): it takes that quarantine too."""
    return all_(not_(s.up), s.qdir)


def _purge_forgets_opid(s: ServerState) -> ServerState:
    """The purge rewrites the tombstone's superblock (to drop the QDIR it names) and loses
    its last OpId on the way."""
    return _ev(A.purge_effect(s), sb_last_term=ite(eq(s.sb, DELETED), 0, s.sb_last_term),
               sb_last_index=ite(eq(s.sb, DELETED), 0, s.sb_last_index))


_ALL = (
    Mutant("merge_adopts_remote_term",
           "the cmeta merge adopts the remote term even when it is lower",
           frozenset({"TermMonotonic", "VotesMatchCmeta"}),
           _t("copy_merge_cmeta", effect=_merge_adopts_remote_term), bounds=TWO_TERMS),
    Mutant("merge_forgets_vote", "the cmeta merge drops the local vote for the local term",
           frozenset({"VotesMatchCmeta", "VoteOnce"}),
           _t("copy_merge_cmeta", effect=_merge_forgets_vote)),
    Mutant("startup_copying_is_ready", "startup treats a COPYING superblock as READY",
           frozenset({"RunningIsReady", "NoCopyingWhenQuiescent", "ReadyIsComplete"}),
           _t("startup", **_startup_variant(_case_copying_ready))),
    Mutant("wal_moves_before_tombstone",
           "the WAL moves to the quarantine before the DELETED superblock is durable",
           frozenset({"ReadyIsComplete", "TombstoneRetainsLastOpid"}),
           _chain(("delete_mark_deleted", {"effect": _d4_moves_wal}),
                  ("delete_copy_cmeta", {"guard": _d5_any}),
                  ("delete_move_wal", {"guard": _d6_any, "effect": _d6_marks_deleted}))),
    Mutant("last_opid_not_stored", "deletion does not record the last OpId in the tombstone",
           frozenset({"TombstoneRetainsLastOpid"}),
           _t("delete_mark_deleted", effect=_d4_forgets_opid), bounds=ONE_TERM_LOG),
    Mutant("stc_skips_term_check", "StartTabletCopy never checks the caller's term",
           frozenset({"StaleCallerCannotDestroy"}),
           _t("stc_accept", guard=_stc_accept_with(_failures_without(STC_STALE_TERM))),
           bounds=TWO_TERMS_LOG),
    Mutant("stc_seed_order",
           "StartTabletCopy deletes a READY tablet before checking the caller's term",
           frozenset({"StaleCallerCannotDestroy"}),
           _chain(("stc_accept", {"guard": _stc_seed_order}),
                  ("delete_move_wal", {"effect": _d6_seed_order})), bounds=TWO_TERMS_LOG),
    Mutant("tombstone_votes_twice", "a restarted tombstone forgets whom it voted for",
           frozenset({"VotesMatchCmeta", "VoteOnce"}),
           _t("startup", effect=_startup_forgets_tombstone_vote)),
    Mutant("new_uuid_keeps_cmeta", "a wiped server takes a new UUID but keeps its old cmeta",
           frozenset({"NewUuidInheritsNothing"}),
           _t("wipe", effect=_wipe_keeps_cmeta)),
    Mutant("leader_without_majority", "a candidate leads with its own vote only",
           frozenset({"OneLeaderPerTerm"}),
           _t("become_leader", system_guard=_no_majority)),
    Mutant("ready_before_blocks", "the copy writes READY before all blocks are downloaded",
           frozenset({"ReadyIsComplete"}),
           _t("copy_mark_ready", guard=_c5_early)),
    Mutant("leader_truncates_own_log",
           "a leader's batch may overwrite its own log (log_append_guard without the "
           "leader's first_index == last index + 1)",
           frozenset({"LeaderAppendOnly", "CommittedInLaterLeaders"}),
           _t("log_append", guard=_leader_truncates_guard, enum=_leader_truncates_enum,
              conditions=None), bounds=TWO_TERMS_LOG),
    Mutant("step_down_forgets_vote",
           "stepping down clears the vote of the current term (the former leader may vote "
           "for a rival in the term it led)",
           frozenset({"VotesMatchCmeta", "VoteOnce"}),
           _t("step_down", effect=_step_down_forgets_vote)),
    Mutant("config_commit_beyond_log",
           "a config change is committed into the cmeta beyond the WAL's last index "
           "(config_commit_guard without config_index <= last index)",
           frozenset({"ConfigCommittedFromLog"}),
           _t("config_commit", guard=_config_commit_beyond_log,
              enum=_config_commit_beyond_log_enum, conditions=None)),
    Mutant("damage_while_up",
           "a disk fault strikes a running replica, which goes on running (damage_guard "
           "without 'down')",
           frozenset({"RunningIsIntact"}),
           _t("damage", guard=_damage_while_up)),
    Mutant("startup_ignores_damage",
           "startup does not verify the WAL and the blocks: a damaged READY replica is "
           "reported READY and runs (FAILED reported as READY)",
           frozenset({"RunningIsIntact"}),
           _t("startup", **_startup_variant(_case_ignores_damage))),
    # -- contract version 3: one per decision of actions' header ------------------------
    Mutant("abort_records_downloaded_opid",
           "decision 1: the deletion that undoes a copy records the downloaded WAL's last "
           "OpId in the tombstone",
           frozenset({"TombstoneRetainsLastOpid"}),
           _t("delete_mark_deleted", effect=_d4_undo_records_download), bounds=ONE_TERM_ABORT),
    Mutant("failed_delete_forgets_opid",
           "decision 2: deleting a FAILED replica with a damaged WAL records (0, 0)",
           frozenset({"TombstoneRetainsLastOpid"}),
           _t("delete_mark_deleted", effect=_d4_damaged_wal_forgets), bounds=ONE_TERM_LOG),
    Mutant("lost_cmeta_votes_lazily",
           "decision 3: the tombstone of a replica whose cmeta a disk fault removed votes "
           "from an empty cmeta",
           frozenset({"VoteOnce"}),
           _chain(*_vote_guards(_in_consensus_ignoring_loss))),
    Mutant("lost_cmeta_takes_copy",
           "decision 3: a replica whose cmeta a disk fault removed accepts a copy (and votes "
           "again from the merged cmeta)",
           frozenset({"VoteOnce"}),
           _t("stc_accept", guard=_stc_accept_with(A.stc_failures, check_lost=False))),
    Mutant("stc_term_from_wal",
           "decision 4: STALE_TERM reads a tombstone's last logged term from its WAL (moved "
           "away: 0), so a stale caller overwrites it",
           frozenset({"StaleCallerCannotDestroy"}),
           _t("stc_accept", guard=_stc_accept_with(_failures_term_from_wal)),
           bounds=TWO_TERMS_LOG, max_states=400_000),
    Mutant("retombstone_rewrites_tombstone",
           "decision 6: deleting a tombstone again runs the six steps and records what is in "
           "wals/<id> as its last OpId",
           frozenset({"QuarantineHoldsEvidence", "TombstoneKeepsCmetaAndOpid",
                      "TombstoneRetainsLastOpid"}),
           _chain(("delete_shutdown", {"guard": _d1_retombstones, "conditions": None}),
                  ("delete_mark_deleted", {"effect": _d4_records_log}))),
    Mutant("ready_before_wal",
           "decision 7: with the blocks downloaded first, READY is written before the WAL",
           frozenset({"ReadyIsComplete"}),
           _t("copy_mark_ready", guard=_c5_before_wal)),
    Mutant("quarantine_keeps_wal_opid",
           "decision 8: the WAL moved into the quarantine still reports its last OpId",
           frozenset({"QuarantinedWalHasNoOpid"}),
           _t("delete_move_wal", effect=_d6_keeps_wal_opid), bounds=ONE_TERM_LOG),
    Mutant("full_delete_live_tablet",
           "decision 9: a full delete (the cmeta removed) of a tablet whose table was not "
           "dropped; its tombstone then votes again from an empty cmeta",
           frozenset({"VoteOnce"}),
           _t("delete_remove_cmeta", system_guard=_full_delete_anytime)),
    Mutant("purge_live_deletion",
           "decision 10: the quarantine of a deletion startup has still to roll forward is "
           "purged (its DELETED superblock's WAL still in wals/<id>): the roll-forward then "
           "moves the WAL into a quarantine that is gone",
           frozenset({"QuarantineHoldsEvidence"}),
           _t("purge", guard=_purge_any_deletion, conditions=None)),
    Mutant("purge_forgets_opid",
           "decision 10: purging the quarantine rewrites the tombstone without its last "
           "OpId (it then votes as if it had never logged anything)",
           frozenset({"TombstoneKeepsCmetaAndOpid", "TombstoneRetainsLastOpid"}),
           _t("purge", effect=_purge_forgets_opid), bounds=ONE_TERM_LOG_ONE_REQUEST),
    # -- the holes of version 2 -------------------------------------------------------------
    Mutant("vote_ignores_last_opid",
           "RequestVote without the up-to-date comparison of the candidate's last OpId",
           frozenset({"CommittedInLaterLeaders", "CommittedNeverLost"}),
           _chain(*_vote_guards(A.in_consensus, _grantable_without_log)), proof=False,
           bounds=TWO_TERMS_LOG),
    Mutant("tombstone_votes_from_moved_wal",
           "a tombstone answers RequestVote from its WAL's last OpId ((0, 0) once moved) "
           "instead of the one its superblock retained",
           frozenset({"CommittedInLaterLeaders", "CommittedNeverLost"}),
           _chain(*_vote_guards(A.in_consensus, _grantable_from_wal)), proof=False,
           bounds=TWO_TERMS_LOG_ONE_REQUEST, max_states=400_000),
    Mutant("vote_index_off_by_one",
           "RequestVote's up-to-date comparison lets a candidate one entry behind pass when "
           "the last terms are equal (needs two entries of one term: max index 2)",
           frozenset({"CommittedInLaterLeaders", "CommittedNeverLost"}),
           _chain(*_vote_guards(A.in_consensus, _grantable_off_by_one)), proof=False,
           bounds=TWO_TERMS_RAFT),
    Mutant("append_without_adopting_term",
           "a follower appends the entries of a leader of a later term without adopting "
           "its term (log_append without op_term <= the current term, entries_from_leader "
           "taking a leader of any later term)",
           frozenset({"NoEntryAboveCurrentTerm"}),
           _t("log_append", guard=_guard_without(A.log_append_conditions, _OP_TERM,
                                                 _op_term_positive),
              system_guard=_entries_without_adopting, conditions=None),
           bounds=ONE_TERM_RAFT),
    Mutant("commit_without_majority",
           "a leader commits an entry that only its own log holds",
           frozenset({"CommittedNeverLost", "CommittedInLaterLeaders"}),
           _t("commit", system_guard=_commit_with_one), proof=False, bounds=ONE_TERM_LOG),
    Mutant("leader_from_old_term",
           "a candidate that moved to a later term leads with an earlier term's votes",
           frozenset({"OneLeaderPerTerm"}),
           _t("become_leader", guard=_leader_any_term, enum=_leader_any_term_enum),
           bounds=TWO_TERMS_LOG),
    Mutant("no_destination_check",
           "requests are not checked against the server's UUID: a wiped server answers (and "
           "is counted) for its old UUID",
           frozenset({"RetiredUuidNeverVotes", "OneLeaderPerTerm"}),
           _chain(_no_dest("create_tablet"), _no_dest("vote_granted"),
                  _no_dest("vote_denied"), _no_dest("stc_accept"),
                  _no_dest("stc_reject"), _no_dest("log_append"))),
    Mutant("config_change_ignores_cas",
           "a config change takes DeleteTablet's CAS (the committed config index at most "
           "the caller's) instead of the exact one: a change planned on a config the leader "
           "has not committed is accepted",
           frozenset({"ConfigChangeCasHeld"}),
           _t("config_change", guard=_guard_without(A.config_change_conditions, _CAS, _le_cas),
              conditions=None), bounds=ONE_TERM_CONFIG),
    Mutant("config_change_while_pending",
           "a config change accepted while one the leader accepted is still uncommitted "
           "(config_change_guard without CHANGE_PENDING)",
           frozenset({"OneConfigChangePending"}),
           _t("config_change", guard=_guard_without(A.config_change_conditions, _PENDING),
              conditions=None), bounds=ONE_TERM_CONFIG),
    Mutant("delete_ignores_cas",
           "DeleteTablet without its compare-and-set on the committed config index",
           frozenset({"DeleteCasHeld"}),
           _t("delete_shutdown", guard=_d1_ignores_cas, conditions=None), bounds=ONE_TERM_LOG),
    Mutant("stc_replaces_operation",
           "StartTabletCopy accepted while another operation is in flight (no "
           "ALREADY_IN_PROGRESS)",
           frozenset({"OperationNeverReplaced"}),
           _t("stc_accept", guard=_stc_accept_with(
               _failures_without(STC_ALREADY_IN_PROGRESS)))),
    Mutant("cmeta_not_quarantined", "deletion step 5 does not copy the cmeta",
           frozenset({"QuarantineHoldsEvidence"}),
           _t("delete_copy_cmeta", effect=_d5_forgets_cmeta)),
    Mutant("superblock_not_quarantined",
           "deletion step 3 does not copy the superblock, and step 4 does not look",
           frozenset({"QuarantineHoldsEvidence"}),
           _chain(("delete_copy_superblock", {"effect": _d3_skipped}),
                  ("delete_mark_deleted", {"guard": _d4_without_copy}))),
    Mutant("startup_finishes_copy",
           "startup makes a COPYING replica whose download is complete READY instead of a "
           "tombstone",
           frozenset({"InterruptedCopyBecomesTombstone"}),
           _t("startup", effect=_startup_finishes_copy_effect,
              **_startup_variant(_case_finishes_copy))),
)

MUTANTS: dict[str, Mutant] = {m.name: m for m in _ALL}

__all__ = ["MUTANTS", "Mutant"]


# The masters' ordering contract (spec/catalog.py): one mutant per rule, the rule dropped.
# What must catch each: the known-bad master traces (traces/bad/catalog-*), at least one
# of which the mutant then accepts (tests/trace/test_catalog_checks.py).
CATALOG_MUTANTS: dict[str, CatalogSpec] = {
    f"catalog_without_{name}": CATALOG_DEFAULT.without(name) for name in CATALOG_DEFAULT.names()}

__all__ += ["CATALOG_MUTANTS"]
