"""Deliberately broken variants of the spec: the checkers are proven by rejecting these.

A checker that never fails proves nothing. Each mutant below seeds one bug that a real
implementation could plausibly have (most of them have happened in real Raft systems) into
one row of the transition table, and names the claims that must catch it. The tests assert
that every mutant fails a proof (``checker.prove``) and is caught by the explorer or by the
Hypothesis machine; ``revivify prove --mutant NAME`` shows the proof failing by hand.

These are never used as the spec: ``Spec()`` / ``default_spec()`` is the spec.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs

from revivify.spec import actions as A
from revivify.spec.actions import ACTIONS, Action, replace_action
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
    not_,
)
from revivify.spec.merge import merge_cmeta
from revivify.spec.model import (
    BLOCKS_LISTED,
    BLOCKS_PRESENT,
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
    READY,
    STARTUP_FAILED,
    STARTUP_READY,
    STC_BAD_TERM,
    STC_STALE_TOMBSTONE_TERM,
    WAL_LIVE,
    WAL_QUARANTINED,
    ServerState,
    SystemState,
)
from revivify.spec.system import Spec


@attrs.frozen
class Mutant:
    name: str
    bug: str
    # Claims (invariants or step properties) of which at least one must catch the bug.
    caught_by: frozenset[str]
    table: Callable[[], tuple[Action, ...]]

    def build(self, n_servers: int = 3) -> Spec:
        return Spec(actions=self.table(), n_servers=n_servers, name=f"mutant:{self.name}")


def _ev(s: ServerState, **changes: Any) -> ServerState:
    return attrs.evolve(s, **changes)


# 1. The merge adopts the remote term unconditionally (rule 1 broken).
def _merge_adopts_remote_term(s: ServerState, remote_term: Int,
                              remote_config_index: Int) -> ServerState:
    return _ev(s, cmeta=True, term=remote_term,
               voted_for=ite(remote_term > s.term, NO_VOTE, s.voted_for),
               config_index=remote_config_index, step=2)


# 2. The merge forgets the local vote (rule 2 broken).
def _merge_forgets_vote(s: ServerState, remote_term: Int,
                        remote_config_index: Int) -> ServerState:
    m = merge_cmeta(s.cmeta, s.term, s.voted_for, remote_term, remote_config_index)
    return _ev(s, cmeta=True, term=m.term, voted_for=NO_VOTE, config_index=m.config_index,
               step=2)


# 3. Startup treats COPYING as READY (case 2 broken).
def _startup_case_copying_ready(s: ServerState) -> Int:
    return ite(eq(s.sb, COPYING), STARTUP_READY, A.startup_case(s))


def _startup_guard_copying_ready(s: ServerState, case: Int) -> Bool:
    return all_(not_(s.up), eq(case, _startup_case_copying_ready(s)))


def _startup_enum_copying_ready(sys: SystemState, i: int, b: A.Bounds) -> Any:
    yield {"case": _startup_case_copying_ready(sys[i])}


# 4. The WAL moves into the quarantine before the DELETED superblock is durable: step 4
#    moves the WAL, step 6 marks the superblock (the seed's steps 4 and 6 swapped).
def _d4_moves_wal(s: ServerState) -> ServerState:
    live = eq(s.wal, WAL_LIVE)
    return _ev(s, wal=ite(live, WAL_QUARANTINED, s.wal), wal_last_term=0, wal_last_index=0,
               step=4)


def _d5_any(s: ServerState) -> Bool:
    return A.at_step(s, (*DELETING_OPS, OP_ROLL_FORWARD), 4)


def _d6_marks_deleted(s: ServerState) -> ServerState:
    from_ready = eq(s.sb, READY)
    return _ev(s, sb=DELETED,
               sb_last_term=ite(from_ready, s.wal_last_term, s.sb_last_term),
               sb_last_index=ite(from_ready, s.wal_last_index, s.sb_last_index),
               sb_qdir=True, blocks=0,
               op=ite(eq(s.op, OP_COPY_DELETE), OP_COPY, OP_NONE), step=0,
               op_term=ite(eq(s.op, OP_COPY_DELETE), s.op_term, 0))


def _d6_any(s: ServerState) -> Bool:
    return A.at_step(s, (*DELETING_OPS, OP_ROLL_FORWARD), 5)


# 5. The last OpId is not stored in the tombstone.
def _d4_forgets_opid(s: ServerState) -> ServerState:
    return _ev(s, sb=DELETED, sb_qdir=True, blocks=0, step=4)


# 6. StartTabletCopy skips the term checks.
def _stc_failures_no_term(s: ServerState, caller_term: Int, expected_state: Int,
                          has_opid: Int, opid_term: Int,
                          opid_index: Int) -> list[tuple[int, Bool]]:
    full = A.stc_failures(s, caller_term, expected_state, has_opid, opid_term, opid_index)
    return [(code, fails) for code, fails in full
            if code not in (STC_BAD_TERM, STC_STALE_TOMBSTONE_TERM)]


def _stc_accept_no_term(s: ServerState, caller_term: Int, expected_state: Int,
                        has_opid: Int, opid_term: Int, opid_index: Int) -> Bool:
    fails = _stc_failures_no_term(s, caller_term, expected_state, has_opid, opid_term,
                                  opid_index)
    return all_(s.up, caller_term >= 0, *[not_(f) for _, f in fails])


# 7. StartTabletCopy in the seed's order: a READY tablet is deleted first and the caller's
#    term checked only afterwards (the copy is then abandoned, leaving a tombstone).
def _stc_accept_seed_order(s: ServerState, caller_term: Int, expected_state: Int,
                           has_opid: Int, opid_term: Int, opid_index: Int) -> Bool:
    checked = A.stc_accept_guard(s, caller_term, expected_state, has_opid, opid_term,
                                 opid_index)
    unchecked = _stc_accept_no_term(s, caller_term, expected_state, has_opid, opid_term,
                                    opid_index)
    return ite(eq(s.sb, READY), unchecked, checked)


def _d6_seed_order(s: ServerState) -> ServerState:
    after = A.d6_effect(s)
    stale = all_(eq(s.op, OP_COPY_DELETE),
                 any_(s.op_term < s.term, s.op_term < s.sb_last_term))
    return _ev(after, op=ite(stale, OP_NONE, after.op), op_term=ite(stale, 0, after.op_term))


# 8. A tombstone votes twice in a term after restart: startup reloads a tombstone's cmeta
#    without its vote.
def _startup_forgets_tombstone_vote(s: ServerState, case: Int) -> ServerState:
    after = A.startup_effect(s, case)
    return _ev(after, voted_for=ite(eq(s.sb, DELETED), NO_VOTE, s.voted_for))


# 9. A wiped server takes a new UUID but keeps the old cmeta.
def _wipe_keeps_cmeta(s: ServerState) -> ServerState:
    after = A.wipe_effect(s)
    return _ev(after, cmeta=s.cmeta, term=s.term, voted_for=s.voted_for)


# 10. A candidate becomes leader without a majority (one vote, its own, is enough).
def _no_majority(sys: SystemState, i: int, me: Int, t: Int) -> Bool:
    votes = count(*[eq(get(k.member_votes, t), me) for k in sys])
    return all_(eq(me, i), votes >= 1)


# 11. The superblock is written READY before all blocks are downloaded.
def _c5_early(s: ServerState) -> Bool:
    return all_(s.up, eq(s.op, OP_COPY), any_(eq(s.step, 3), eq(s.step, 4)))


def _c5_early_effect(s: ServerState) -> ServerState:
    return _ev(A.c5_effect(s), step=5)


# 12. A leader truncates its own log: its batch may start anywhere in its log, as a
#     follower's may (Leader Append-Only broken).
def _leader_truncates_guard(s: ServerState, first_index: Int, op_term: Int,
                            op_index: Int) -> Bool:
    # log_append_conditions, with the leader's condition cut to its "own term" half
    appends = eq(first_index, s.wal_last_index + 1)
    return all_(
        s.up, s.running, eq(s.op, OP_NONE), eq(s.sb, READY), eq(s.wal, WAL_LIVE),
        op_term >= 1, op_term <= s.term, op_index >= 1,
        first_index >= 1, first_index <= op_index, first_index <= s.wal_last_index + 1,
        implies(appends, op_term >= s.wal_last_term),
        implies(s.leader, eq(op_term, s.term)),
    )


def _leader_truncates_enum(sys: SystemState, i: int, b: A.Bounds) -> Any:
    yield from A.log_append_enum(sys, i, b)
    s = sys[i]
    if s.up and s.leader:
        # rewrite the log from index 1 with one entry of the leader's term
        yield {"first_index": 1, "op_term": s.term, "op_index": 1}


# 13. Stepping down resets the election state, the vote of the current term included (so
#     the former leader may vote for a rival in the term it led).
def _step_down_forgets_vote(s: ServerState) -> ServerState:
    return _ev(s, leader=False, voted_for=NO_VOTE)


# 14. A config change is committed into the cmeta before its entry is in the WAL.
def _config_commit_beyond_log(s: ServerState, config_index: Int) -> Bool:
    return all_(s.up, s.running, eq(s.op, OP_NONE), eq(s.sb, READY), s.cmeta,
                config_index > s.config_index)


def _config_commit_beyond_log_enum(sys: SystemState, i: int, b: A.Bounds) -> Any:
    yield from A.config_commit_enum(sys, i, b)
    s = sys[i]
    if s.up and s.running and s.sb == READY:
        yield {"config_index": max(s.config_index, s.wal_last_index) + 1}


# 15. A disk fault is allowed to strike a running server unnoticed (damage while up: the
#     replica goes on serving from a damaged WAL or damaged blocks).
def _damage_while_up(s: ServerState, what: Int) -> Bool:
    return any_(all_(eq(what, DAMAGE_WAL), eq(s.wal, WAL_LIVE)),
                all_(eq(what, DAMAGE_BLOCKS), eq(s.blocks, BLOCKS_PRESENT)))


# 16. Startup does not verify the WAL and the blocks: a damaged READY replica is reported
#     READY and starts (hidden damage).
def _startup_case_ignores_damage(s: ServerState) -> Int:
    # Every file is there (the WAL in place, every block listed), damaged or not.
    complete = all_(eq(s.sb, READY), s.cmeta, A.wal_in_place(s),
                    member(s.blocks, BLOCKS_LISTED))
    case = A.startup_case(s)
    return ite(all_(eq(case, STARTUP_FAILED), complete), STARTUP_READY, case)


def _startup_guard_ignores_damage(s: ServerState, case: Int) -> Bool:
    return all_(not_(s.up), eq(case, _startup_case_ignores_damage(s)))


def _startup_enum_ignores_damage(sys: SystemState, i: int, b: A.Bounds) -> Any:
    yield {"case": _startup_case_ignores_damage(sys[i])}


def _t(name: str, **changes: Any) -> Callable[[], tuple[Action, ...]]:
    return lambda: replace_action(ACTIONS, name, **changes)


def _chain(*steps: tuple[str, dict[str, Any]]) -> Callable[[], tuple[Action, ...]]:
    def build() -> tuple[Action, ...]:
        table = ACTIONS
        for name, changes in steps:
            table = replace_action(table, name, **changes)
        return table

    return build


_ALL = (
    Mutant("merge_adopts_remote_term",
           "the cmeta merge adopts the remote term even when it is lower",
           # a lower term under votes already cast: the vote history outruns the cmeta
           frozenset({"TermMonotonic", "VotesMatchCmeta"}),
           _t("copy_merge_cmeta", effect=_merge_adopts_remote_term)),
    Mutant("merge_forgets_vote", "the cmeta merge drops the local vote for the local term",
           frozenset({"VotesMatchCmeta", "VoteOnce"}),
           _t("copy_merge_cmeta", effect=_merge_forgets_vote)),
    Mutant("startup_copying_is_ready", "startup treats a COPYING superblock as READY",
           frozenset({"RunningIsReady", "NoCopyingWhenQuiescent", "ReadyIsComplete"}),
           _t("startup", guard=_startup_guard_copying_ready,
              enum=_startup_enum_copying_ready)),
    Mutant("wal_moves_before_tombstone",
           "the WAL moves to the quarantine before the DELETED superblock is durable",
           frozenset({"ReadyIsComplete", "TombstoneRetainsLastOpid"}),
           _chain(("delete_mark_deleted", {"effect": _d4_moves_wal}),
                  ("delete_copy_cmeta", {"guard": _d5_any}),
                  ("delete_move_wal", {"guard": _d6_any, "effect": _d6_marks_deleted}))),
    Mutant("last_opid_not_stored", "deletion does not record the last OpId in the tombstone",
           frozenset({"TombstoneRetainsLastOpid"}),
           _t("delete_mark_deleted", effect=_d4_forgets_opid)),
    Mutant("stc_skips_term_check", "StartTabletCopy never checks the caller's term",
           frozenset({"StaleCallerCannotDestroy"}),
           _t("stc_accept", guard=_stc_accept_no_term)),
    Mutant("stc_seed_order",
           "StartTabletCopy deletes a READY tablet before checking the caller's term",
           frozenset({"StaleCallerCannotDestroy"}),
           _chain(("stc_accept", {"guard": _stc_accept_seed_order}),
                  ("delete_move_wal", {"effect": _d6_seed_order}))),
    Mutant("tombstone_votes_twice", "a restarted tombstone forgets whom it voted for",
           frozenset({"VotesMatchCmeta", "VoteOnce"}),
           _t("startup", effect=_startup_forgets_tombstone_vote)),
    Mutant("new_uuid_keeps_cmeta", "a wiped server takes a new UUID but keeps its old cmeta",
           frozenset({"NewUuidInheritsNothing"}),
           _t("wipe", effect=_wipe_keeps_cmeta)),
    Mutant("leader_without_majority", "a candidate leads with its own vote only",
           frozenset({"OneLeaderPerTerm", "LeaderHadMajority"}),
           _t("become_leader", system_guard=_no_majority)),
    Mutant("ready_before_blocks", "the copy writes READY before all blocks are downloaded",
           frozenset({"ReadyIsComplete"}),
           _t("copy_mark_ready", guard=_c5_early, effect=_c5_early_effect)),
    Mutant("leader_truncates_own_log",
           "a leader's batch may overwrite its own log (log_append_guard without the "
           "leader's first_index == last index + 1)",
           frozenset({"LeaderAppendOnly"}),
           _t("log_append", guard=_leader_truncates_guard, enum=_leader_truncates_enum,
              conditions=None)),
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
           _t("startup", guard=_startup_guard_ignores_damage,
              enum=_startup_enum_ignores_damage)),
)

MUTANTS: dict[str, Mutant] = {m.name: m for m in _ALL}

__all__ = ["MUTANTS", "Mutant"]
