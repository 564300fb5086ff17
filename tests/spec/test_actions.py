"""The transition table on concrete states: each guard's cases by name, and a run from the
initial state (a witness that the spec reaches it) for every decision of contract version
3 (spec/actions.py's header) and every StartTabletCopy answer."""

from __future__ import annotations

import random
from collections import Counter
from typing import Any, Self

import attrs
import pytest

from revivify.checker.walks import Recorder
from revivify.spec import default_spec
from revivify.spec.actions import (
    ACTIONS,
    ACTIONS_BY_NAME,
    Bounds,
    log_append_conditions,
    startup_case,
)
from revivify.spec.logic import FMap, run_of
from revivify.spec.model import (
    BLOCKS_ABSENT,
    BLOCKS_DAMAGED,
    BLOCKS_PRESENT,
    COPYING,
    DAMAGE_BLOCKS,
    DAMAGE_CMETA,
    DAMAGE_WAL,
    DELETED,
    DOES_NOT_EXIST,
    OP_NONE,
    OP_UNDO_COPY,
    READY,
    STARTUP_COPYING_TO_DELETED,
    STARTUP_FAILED,
    STARTUP_READY,
    STARTUP_ROLL_FORWARD,
    STC_ALREADY_IN_PROGRESS,
    STC_ILLEGAL_STATE,
    STC_OPID_MISMATCH,
    STC_STALE_TERM,
    WAL_ABSENT,
    WAL_DAMAGED,
    WAL_LIVE,
    WAL_QUARANTINED,
    ServerState,
    created_replica,
    initial_system,
)

APPEND = ACTIONS_BY_NAME["log_append"]
STEP_DOWN = ACTIONS_BY_NAME["step_down"]
CONFIG = ACTIONS_BY_NAME["config_commit"]
DAMAGE = ACTIONS_BY_NAME["damage"]
DELETE_STEPS = ("delete_shutdown", "delete_create_qdir", "delete_copy_superblock",
                "delete_mark_deleted", "delete_copy_cmeta", "delete_move_wal")
UNDO_STEPS = DELETE_STEPS[1:]


def replica(**changes: object) -> ServerState:
    """A running follower in term 2 whose log is [1, 1, 1]."""
    log = run_of(1, 3, 1)
    base: dict[str, object] = {"term": 2, "wal_last_term": 1, "wal_last_index": 3,
                               "ghost_last_term": 1, "ghost_last_index": 3, "log": log,
                               "own_log": log}
    return attrs.evolve(created_replica(), **(base | changes))


def append(first: int, term: int, last: int, prev: int, **kw: Any) -> dict[str, Any]:
    return {"first_index": first, "op_term": term, "op_index": last, "prev_term": prev,
            "entries": run_of(first, last, term), "dest": 0, **kw}


def broken(s: ServerState, **p: Any) -> list[str]:
    return [name for name, ok in log_append_conditions(s, **p) if not ok]


class Run(Recorder):
    """A recorded run that checks every invariant and step property at every step."""

    @classmethod
    def new(cls, *args: Any, **kw: Any) -> Self:
        """Recorder.new, typed as the subclass it makes."""
        run = super().new(*args, **kw)
        assert isinstance(run, cls)
        return run

    def step(self, i: int, name: str, check: bool = True, **p: Any) -> dict[str, Any]:
        pre = self.sys
        line = super().step(i, name, check, **p)
        assert not self.spec.violations(self.sys), (name, self.spec.violations(self.sys))
        assert not self.spec.step_violations(pre, self.sys, i), name
        return line

    def fault(self, i: int, name: str, **p: Any) -> None:
        """A step no process logs (damage, drop)."""
        self._apply(i, self.spec.action(name), p)
        assert not self.spec.violations(self.sys)

    def steps(self, i: int, names: tuple[str, ...]) -> None:
        for name in names:
            self.step(i, name)

    def enabled(self, i: int, name: str, **p: Any) -> bool:
        return bool(self.spec.action(name).enabled(self.sys, i, self.fill_params(name, i, p)))

    @property
    def s(self) -> tuple[ServerState, ...]:
        return self.sys


def elected(seed: int = 1) -> Run:
    """Server 0 leads term 1 with server 1's vote and has appended entry 1, which server 1
    holds too and which is committed."""
    r = Run.new(default_spec(3), seed, created=True)
    r.step(0, "start_election", me=0)
    r.step(1, "vote_granted", candidate=0, t=1, cand_last_term=0, cand_last_index=0)
    r.step(0, "become_leader", me=0, t=1)
    r.step(0, "log_append", first_index=1, op_term=1, op_index=1)
    r.step(1, "log_append", first_index=1, op_term=1, op_index=1)
    r.step(0, "commit", index=1, op_term=1)
    return r


def stc(r: Run, i: int, expected: int, term: int = 1, **kw: Any) -> None:
    r.step(i, "stc_accept", caller_term=term, expected_state=expected, has_opid=0,
           opid_term=0, opid_index=0, **kw)


class TestBatchedAppend:
    def test_follower_appends_a_batch(self) -> None:
        s = replica()
        assert APPEND.guard(s, **append(4, 2, 6, 1))
        post = APPEND.effect(s, **append(4, 2, 6, 1))
        assert (post.wal_last_term, post.wal_last_index) == (2, 6)
        assert [post.log[k] for k in range(1, 7)] == [1, 1, 1, 2, 2, 2]

    def test_follower_truncates_a_suffix(self) -> None:
        s = replica()
        post = APPEND.effect(s, **append(2, 2, 2, 1))
        assert APPEND.guard(s, **append(2, 2, 2, 1))  # last index drops
        assert (post.wal_last_index, post.log[3]) == (2, 0)

    def test_gap_refused(self) -> None:
        assert broken(replica(), **append(5, 2, 6, 1)) == [
            "no gap: first_index <= last index + 1"]

    def test_append_never_lowers_the_last_term(self) -> None:
        s = replica(wal_last_term=2, ghost_last_term=2)
        assert "an append (first_index = last index + 1) never lowers the last term" in \
            broken(s, **append(4, 1, 5, 2))

    def test_append_follows_the_last_entry(self) -> None:
        assert broken(replica(), **append(4, 2, 4, 2)) == [
            "an append's prev_term is the term of the last entry"]

    def test_leader_never_truncates(self) -> None:
        s = replica(leader=True, voted_for=0)
        assert APPEND.guard(s, **append(4, 2, 7, 1))
        assert broken(s, **append(3, 2, 4, 1)) == [
            "a leader appends at last index + 1 in its own term (it never truncates its "
            "log)"]

    def test_addressed_to_this_uuid(self) -> None:
        assert broken(replica(), **append(4, 2, 4, 1, dest=1) | {"dest": 1}) == [
            "addressed to this server's UUID"]

    def test_entries_come_from_a_leader_of_the_term(self) -> None:
        """The system guard: a follower's batch is a slice of the log of a leader of its
        own term, after an entry both logs hold; a leader's own are of its term."""
        lead = replica(leader=True, voted_for=0, log=run_of(1, 2, 2), own_log=run_of(1, 2, 2),
                       wal_last_term=2, wal_last_index=2, ghost_last_term=2,
                       ghost_last_index=2)
        follower = replica(log=run_of(1, 1, 2), own_log=run_of(1, 1, 2), wal_last_term=2,
                           wal_last_index=1, ghost_last_term=2, ghost_last_index=1)
        sys_ = (lead, follower, replica(up=False))
        ok = append(2, 2, 2, 2)
        assert APPEND.enabled(sys_, 1, ok)
        assert not APPEND.enabled(sys_, 1, append(2, 1, 2, 2))  # not the leader's term
        stale = (attrs.evolve(lead, term=1), follower, sys_[2])
        assert not APPEND.enabled(stale, 1, ok)  # a leader of another term
        moves = list(APPEND.enum(sys_, 1, Bounds(max_index=3)))
        assert {p["first_index"] for p in moves} == {1, 2}
        assert [p for p in moves if APPEND.enabled(sys_, 1, p)] == [
            {**ok, "entries": FMap(((2, 2),), 0)}]


class TestStepDownAndConfig:
    def test_step_down_only_a_leader(self) -> None:
        assert STEP_DOWN.guard(replica(leader=True))
        assert not STEP_DOWN.guard(replica())
        post = STEP_DOWN.effect(replica(leader=True, voted_for=0))
        assert not post.leader and post.term == 2 and post.voted_for == 0

    def test_config_commit_forward_and_within_the_log(self) -> None:
        s = replica(config_index=1)
        assert CONFIG.guard(s, config_index=3)
        assert CONFIG.effect(s, config_index=3).config_index == 3
        assert not CONFIG.guard(s, config_index=4)  # beyond the WAL
        assert not CONFIG.guard(s, config_index=1)  # not forward
        assert not CONFIG.guard(replica(running=False), config_index=2)


class TestDamage:
    def test_only_while_down(self) -> None:
        assert not DAMAGE.guard(replica(), what=DAMAGE_WAL)
        down = replica(up=False, running=False)
        for what in (DAMAGE_WAL, DAMAGE_BLOCKS, DAMAGE_CMETA):
            assert DAMAGE.guard(down, what=what)
        wal = DAMAGE.effect(down, what=DAMAGE_WAL)
        assert wal.wal == WAL_DAMAGED and (wal.wal_last_term, wal.wal_last_index) == (1, 3)
        assert not DAMAGE.guard(wal, what=DAMAGE_WAL)  # once is enough
        both = DAMAGE.effect(wal, what=DAMAGE_BLOCKS)
        assert both.blocks == BLOCKS_DAMAGED

    def test_startup_of_a_damaged_replica_is_failed(self) -> None:
        """Decision 5: a WAL that fails verification or is gone, blocks missing or corrupt,
        a cmeta file gone: FAILED."""
        down = replica(up=False, running=False)
        assert startup_case(down) == STARTUP_READY
        for what in (DAMAGE_WAL, DAMAGE_BLOCKS, DAMAGE_CMETA):
            assert startup_case(DAMAGE.effect(down, what=what)) == STARTUP_FAILED

    def test_deletion_moves_a_damaged_wal(self) -> None:
        s = replica(up=False, running=False, sb=DELETED, sb_qdir=True, qdir=True, q_sb=True,
                    blocks=BLOCKS_ABSENT, wal=WAL_DAMAGED)
        assert startup_case(s) == STARTUP_ROLL_FORWARD
        up = ACTIONS_BY_NAME["startup"].effect(s, case=STARTUP_ROLL_FORWARD)
        d5 = ACTIONS_BY_NAME["delete_copy_cmeta"].effect(up)
        assert ACTIONS_BY_NAME["delete_move_wal"].guard(d5)
        moved = ACTIONS_BY_NAME["delete_move_wal"].effect(d5)
        assert moved.wal == WAL_QUARANTINED and (moved.wal_last_term,
                                                 moved.wal_last_index) == (0, 0)


class TestDecisions:
    """Runs from the initial state, every step enabled and every claim holding."""

    def test_copy_abort_tombstones_without_restart(self) -> None:
        """Decision 1: a copy aborted after copy_begin tombstones itself right away,
        keeping its previous last OpId and cmeta."""
        r = elected()
        r.steps(1, DELETE_STEPS)
        tomb = r.s[1]
        assert (tomb.sb, tomb.sb_last_term, tomb.sb_last_index) == (DELETED, 1, 1)
        stc(r, 1, DELETED)
        r.steps(1, ("copy_begin",))
        r.step(1, "copy_merge_cmeta", remote_term=1, remote_config_index=0)
        r.step(1, "copy_download_wal", remote_last_term=1, remote_last_index=1)
        r.step(1, "copy_abort")
        assert (r.s[1].op, r.s[1].sb) == (OP_UNDO_COPY, COPYING)
        r.steps(1, UNDO_STEPS)
        after = r.s[1]
        assert (after.sb, after.op, after.wal) == (DELETED, OP_NONE, WAL_QUARANTINED)
        assert (after.sb_last_term, after.sb_last_index) == (1, 1)
        assert after.cmeta and after.term == tomb.term and after.voted_for == tomb.voted_for

    def test_copy_abort_before_begin_changes_nothing(self) -> None:
        r = elected()
        r.steps(2, DELETE_STEPS)
        before = r.s[2]
        stc(r, 2, DELETED)
        r.step(2, "copy_abort")
        assert r.s[2] == before

    def test_failed_replica_deleted_and_copied_again(self) -> None:
        """Decision 2: a FAILED replica (its WAL damaged while down) is taken by a
        StartTabletCopy like a READY one: its deletion records the damaged WAL's last
        OpId, then the copy makes it READY."""
        r = elected()
        r.crash(1)
        r.damage(1, DAMAGE_WAL)
        r.start(1)
        assert r.s[1].failed and r.s[1].wal == WAL_DAMAGED
        stc(r, 1, READY)
        r.steps(1, DELETE_STEPS)
        assert (r.s[1].sb_last_term, r.s[1].sb_last_index) == (1, 1)
        r.step(1, "copy_begin")
        r.step(1, "copy_merge_cmeta", remote_term=1, remote_config_index=0)
        r.step(1, "copy_download_wal", remote_last_term=1, remote_last_index=1)
        r.step(1, "copy_blocks_done")
        r.step(1, "copy_mark_ready")
        r.step(1, "copy_start_replica")
        assert r.s[1].running and r.s[1].sb == READY

    def test_tombstone_without_cmeta_votes_lazily(self) -> None:
        """Decision 3: a first-time copy that crashed before its cmeta was merged becomes
        a tombstone without cmeta; it votes from an empty cmeta, written by the vote."""
        r = Run.new(default_spec(3), 5, created=False)
        for i in (0, 1):
            r.step(i, "create_tablet", config_index=0)
        r.step(0, "start_election", me=0)
        r.step(1, "vote_granted", candidate=0, t=1, cand_last_term=0, cand_last_index=0)
        r.step(0, "become_leader", me=0, t=1)
        stc(r, 2, DOES_NOT_EXIST)
        r.step(2, "copy_begin")
        r.crash(2)
        r.start(2)
        r.steps(2, UNDO_STEPS)
        assert (r.s[2].sb, r.s[2].cmeta) == (DELETED, False)
        r.step(1, "start_election", me=1)
        r.step(2, "vote_granted", candidate=1, t=2, cand_last_term=0, cand_last_index=0)
        assert (r.s[2].cmeta, r.s[2].term, r.s[2].voted_for) == (True, 2, 1)

    def test_lost_cmeta_never_votes_nor_takes_a_copy(self) -> None:
        """Decision 3: a replica whose cmeta a disk fault removed is FAILED, may be
        tombstoned, and never votes or takes a copy (it forgot its votes)."""
        r = elected()
        r.crash(2)
        r.damage(2, DAMAGE_CMETA)
        r.start(2)
        assert r.s[2].failed and not r.s[2].cmeta
        r.steps(2, DELETE_STEPS)
        r.step(1, "step_down", check=False) if r.s[1].leader else None
        r.step(1, "start_election", me=1)
        assert not r.enabled(2, "vote_granted", candidate=1, t=2, cand_last_term=1,
                             cand_last_index=1)
        assert not r.enabled(2, "stc_accept", caller_term=1, expected_state=DELETED,
                             has_opid=0, opid_term=0, opid_index=0)

    def test_stale_term_is_the_last_logged_term(self) -> None:
        """Decision 4: a tombstone with cmeta term 2 and last logged term 1 accepts a
        caller in term 1 or 2 and refuses one in term 0 (STALE_TERM)."""
        r = elected()
        r.steps(1, DELETE_STEPS)
        r.step(2, "start_election", me=2)
        r.step(2, "start_election", me=2)
        r.step(1, "vote_denied", candidate=2, t=2, cand_last_term=0, cand_last_index=0)
        t = r.s[1]
        assert (t.term, t.sb_last_term) == (2, 1)
        reject = ACTIONS_BY_NAME["stc_reject"]
        accept = ACTIONS_BY_NAME["stc_accept"]
        base = {"caller": 0, "expected_state": DELETED, "has_opid": 0, "opid_term": 0,
                "opid_index": 0, "dest": 0}
        for term in (1, 2):
            assert accept.guard(t, caller_term=term, **base)
        assert reject.guard(t, caller_term=0, reason=STC_STALE_TERM, **base)

    def test_retombstoning_is_not_a_row(self) -> None:
        """Decision 6: nothing deletes a tombstone again (the no-op writes nothing)."""
        r = elected()
        r.steps(1, DELETE_STEPS)
        assert not r.enabled(1, "delete_shutdown")

    def test_blocks_before_the_wal(self) -> None:
        """Decision 7: Kudu's order, blocks first."""
        r = elected()
        r.steps(1, DELETE_STEPS)
        stc(r, 1, DELETED)
        r.step(1, "copy_begin")
        r.step(1, "copy_merge_cmeta", remote_term=1, remote_config_index=0)
        r.step(1, "copy_download_block")
        r.step(1, "copy_blocks_done")
        assert not r.enabled(1, "copy_mark_ready")
        r.step(1, "copy_download_wal", remote_last_term=1, remote_last_index=1)
        r.step(1, "copy_mark_ready")
        assert r.s[1].sb == READY and r.s[1].blocks == BLOCKS_PRESENT

    def test_quarantined_wal_reports_no_opid(self) -> None:
        """Decision 8: once moved, the WAL's last OpId is (0, 0); the superblock has it."""
        r = elected()
        r.steps(1, DELETE_STEPS)
        s = r.s[1]
        assert (s.wal, s.wal_last_term, s.wal_last_index) == (WAL_QUARANTINED, 0, 0)
        assert (s.sb_last_term, s.sb_last_index) == (1, 1)

    def test_full_delete_after_the_drop(self) -> None:
        """Decision 9: the cmeta, then the superblock, of a tombstone whose table was
        dropped; interrupted between the two, the tombstone votes from an empty cmeta;
        after a drop no election is won."""
        r = elected()
        r.steps(2, DELETE_STEPS)
        assert not r.enabled(2, "delete_remove_cmeta")
        r.fault(2, "drop")
        r.step(2, "delete_remove_cmeta")
        assert (r.s[2].sb, r.s[2].cmeta, r.s[2].q_cmeta) == (DELETED, False, True)
        r.crash(2)
        r.start(2)
        r.step(1, "start_election", me=1)
        r.step(2, "vote_granted", candidate=1, t=2, cand_last_term=1, cand_last_index=1)
        assert not r.spec.action("become_leader").enabled(r.sys, 1, {"me": 1, "t": 2})
        r.step(2, "delete_remove_cmeta")
        r.step(2, "delete_remove_superblock")
        s = r.s[2]
        assert (s.sb, s.cmeta, s.qdir) == (DOES_NOT_EXIST, False, True)

    def test_votes_during_a_deletion(self) -> None:
        """A replica votes while it is being deleted (Kudu holds elections then)."""
        r = elected()
        r.steps(1, DELETE_STEPS[:3])
        r.step(2, "start_election", me=2)
        r.step(2, "start_election", me=2)
        r.step(1, "vote_denied", candidate=2, t=2, cand_last_term=0, cand_last_index=0)
        assert r.s[1].term == 2

    def test_delete_cas(self) -> None:
        """DeleteTablet is refused when the committed config index is above the caller's."""
        r = elected()
        r.step(0, "config_commit", config_index=1)
        assert not r.enabled(0, "delete_shutdown", cas_config_index=0)
        assert r.enabled(0, "delete_shutdown", cas_config_index=1)

    def test_a_wiped_server_answers_no_request_for_its_old_uuid(self) -> None:
        r = elected()
        r.crash(2)
        r.wipe(2)
        r.start(2)
        assert not r.enabled(2, "create_tablet", config_index=0, dest=0)
        assert r.enabled(2, "create_tablet", config_index=0, dest=1)


class TestStartTabletCopyAnswers:
    """Every StartTabletCopy answer is the deciding one somewhere reachable, and the
    environment (the enumerator) sends a request that gets it."""

    def answers(self, r: Run, i: int) -> set[int]:
        reject = r.spec.action("stc_reject")
        bounds = Bounds(max_ops_in_flight=3)
        return {p["reason"] for p in reject.enum(r.sys, i, bounds)
                if reject.enabled(r.sys, i, p)}

    def test_already_in_progress_and_illegal_state(self) -> None:
        r = elected()
        r.step(2, "delete_shutdown")
        assert STC_ALREADY_IN_PROGRESS in self.answers(r, 2)
        assert STC_ILLEGAL_STATE in self.answers(r, 1)

    def test_stale_term(self) -> None:
        r = elected()
        # server 1 (holding entry 1) leads term 2 with server 2's vote and logs (2, 2);
        # server 0 still believes it leads term 1
        r.step(1, "start_election", me=1)
        r.step(2, "vote_granted", candidate=1, t=2, cand_last_term=1, cand_last_index=1)
        r.step(1, "become_leader", me=1, t=2)
        r.step(1, "log_append", first_index=2, op_term=2, op_index=2)
        assert r.s[0].leader and r.s[0].term == 1  # a stale leader
        assert STC_STALE_TERM in self.answers(r, 1)

    def test_opid_mismatch(self) -> None:
        r = elected()
        # server 2 holds nothing: the leader's guess, its own last OpId (1, 1), is wrong
        assert STC_OPID_MISMATCH in self.answers(r, 2)


def test_undo_of_a_copy_at_startup() -> None:
    """COPYING at startup always ends a tombstone (never READY)."""
    r = elected()
    r.steps(1, DELETE_STEPS)
    stc(r, 1, DELETED)
    r.step(1, "copy_begin")
    r.step(1, "copy_merge_cmeta", remote_term=1, remote_config_index=0)
    r.step(1, "copy_download_wal", remote_last_term=1, remote_last_index=1)
    r.step(1, "copy_blocks_done")
    r.crash(1)
    assert startup_case(r.s[1]) == STARTUP_COPYING_TO_DELETED
    r.start(1)
    r.steps(1, UNDO_STEPS)
    assert r.s[1].sb == DELETED and r.s[1].wal == WAL_QUARANTINED


@pytest.mark.parametrize("wal", [WAL_ABSENT, WAL_LIVE])
def test_copy_download_needs_no_wal_in_place(wal: int) -> None:
    s = attrs.evolve(replica(), sb=COPYING, op=3, step=2, wal=wal, up=True, running=False)
    g = ACTIONS_BY_NAME["copy_download_wal"].guard
    assert bool(g(s, remote_last_term=1, remote_last_index=1,
                  remote_log=run_of(1, 1, 1))) == (wal == WAL_ABSENT)


# ---------------------------------------------------------------------------------------
# Named conditions: every guard is their conjunction, so that a trace checker can name the
# ones a refused event breaks ("every block downloaded"), never the guard function.


def sampled_systems() -> list[tuple[ServerState, ...]]:
    """Systems the spec reaches: seeded random walks from both initial systems, and a
    scripted run through an election, a deletion, a copy, a crash and a full delete."""
    spec = default_spec(3)
    out = []
    for created in (True, False):
        for seed in range(3):
            rng = random.Random(seed)
            sys = initial_system(3, created)
            for _ in range(25):
                out.append(sys)
                succ = [post for *_, post in spec.successors(sys, Bounds())]
                if not succ:
                    break
                sys = rng.choice(succ)
    r = elected()
    out.append(r.s)
    for name in DELETE_STEPS:
        r.step(1, name)
        out.append(r.s)
    stc(r, 1, DELETED)
    out.append(r.s)
    for name, p in (("copy_begin", {}),
                    ("copy_merge_cmeta", {"remote_term": 1, "remote_config_index": 0}),
                    ("copy_download_block", {}),
                    ("copy_download_wal", {"remote_last_term": 1, "remote_last_index": 1}),
                    ("copy_blocks_done", {}), ("copy_mark_ready", {}),
                    ("copy_start_replica", {})):
        r.step(1, name, True, **p)
        out.append(r.s)
    r.crash(1)
    out.append(r.s)
    r.steps(2, DELETE_STEPS)
    r.fault(2, "drop")
    for name in ("delete_remove_cmeta", "delete_remove_superblock"):
        r.step(2, name)
        out.append(r.s)
    return out


def test_every_guard_is_its_conditions_conjunction() -> None:
    tried: Counter[tuple[str, bool]] = Counter()
    for sys in sampled_systems():
        for action in ACTIONS:
            assert action.conditions is not None, action.name
            assert action.guard.__name__ == f"{action.name}_guard"
            for i, s in enumerate(sys):
                for p in action.enum(sys, i, Bounds()):
                    conds = action.conditions(s, **p)
                    names = [name for name, _ in conds]
                    assert len(set(names)) == len(names), names
                    assert not any("_guard" in name for name in names), names
                    allowed = bool(action.guard(s, **p))
                    assert allowed == all(bool(c) for _, c in conds), (action.name, p,
                                                                       s.describe())
                    tried[action.name, allowed] += 1
    assert {name for name, _ in tried} == set(ACTIONS_BY_NAME)
    assert all(tried[name, True] and tried[name, False] for name in ACTIONS_BY_NAME), tried


def test_a_refused_copy_names_what_it_lacks() -> None:
    s = attrs.evolve(replica(), sb=COPYING, op=3, step=2, blocks=BLOCKS_ABSENT,
                     running=False)
    ready = ACTIONS_BY_NAME["copy_mark_ready"]
    assert not ready.guard(s)
    assert ready.conditions is not None
    assert [name for name, ok in ready.conditions(s) if not ok] == ["every block downloaded"]
