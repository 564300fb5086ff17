"""The rows schema version 2 added, on concrete states: each guard's cases, by name."""

from __future__ import annotations

import attrs

from revivify.spec.actions import (
    ACTIONS_BY_NAME,
    Bounds,
    log_append_conditions,
    startup_case,
)
from revivify.spec.model import (
    BLOCKS_ABSENT,
    BLOCKS_DAMAGED,
    DAMAGE_BLOCKS,
    DAMAGE_WAL,
    DELETED,
    STARTUP_FAILED,
    STARTUP_READY,
    STARTUP_ROLL_FORWARD,
    WAL_DAMAGED,
    WAL_QUARANTINED,
    ServerState,
    created_replica,
)

APPEND = ACTIONS_BY_NAME["log_append"]
STEP_DOWN = ACTIONS_BY_NAME["step_down"]
CONFIG = ACTIONS_BY_NAME["config_commit"]
DAMAGE = ACTIONS_BY_NAME["damage"]


def replica(**changes: object) -> ServerState:
    """A running follower in term 2 whose log ends at (1, 3)."""
    base: dict[str, object] = {"term": 2, "wal_last_term": 1, "wal_last_index": 3,
                               "ghost_last_term": 1, "ghost_last_index": 3}
    return attrs.evolve(created_replica(), **(base | changes))


def broken(s: ServerState, first_index: int, op_term: int, op_index: int) -> list[str]:
    return [name for name, ok in log_append_conditions(s, first_index, op_term, op_index)
            if not ok]


class TestBatchedAppend:
    def test_follower_appends_a_batch(self) -> None:
        s = replica()
        assert APPEND.guard(s, first_index=4, op_term=2, op_index=6)
        post = APPEND.effect(s, first_index=4, op_term=2, op_index=6)
        assert (post.wal_last_term, post.wal_last_index) == (2, 6)

    def test_follower_truncates_a_suffix(self) -> None:
        s = replica()
        assert APPEND.guard(s, first_index=2, op_term=2, op_index=2)  # last index drops
        assert APPEND.guard(s, first_index=1, op_term=1, op_index=1)  # lower last term too

    def test_gap_refused(self) -> None:
        assert broken(replica(), 5, 2, 6) == ["no gap: first_index <= last index + 1"]

    def test_append_never_lowers_the_last_term(self) -> None:
        s = replica(wal_last_term=2, ghost_last_term=2)
        assert broken(s, 4, 1, 5) == [
            "an append (first_index = last index + 1) never lowers the last term"]

    def test_empty_or_inverted_batch_refused(self) -> None:
        assert broken(replica(), 4, 2, 3)
        assert broken(replica(), 0, 2, 3)

    def test_leader_never_truncates(self) -> None:
        s = replica(leader=True, voted_for=0)
        assert APPEND.guard(s, first_index=4, op_term=2, op_index=7)
        assert broken(s, 3, 2, 4) == [
            "a leader appends at last index + 1 in its own term (it never truncates its "
            "log)"]
        assert not APPEND.guard(s, first_index=4, op_term=1, op_index=4)

    def test_enumerator_gives_first_index(self) -> None:
        leader = replica(leader=True, wal_last_term=2, wal_last_index=1)
        follower = replica()
        sys_ = (leader, follower, replica(up=False))
        moves = list(APPEND.enum(sys_, 1, Bounds(max_index=3)))
        assert moves == [{"first_index": 1, "op_term": 2, "op_index": 1}]  # truncation
        assert all(APPEND.guard(follower, **p) for p in moves)
        batches = list(APPEND.enum(sys_, 0, Bounds(max_index=3)))
        assert [p["op_index"] for p in batches] == [2, 3]
        assert all(p["first_index"] == 2 for p in batches)


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
        assert DAMAGE.guard(down, what=DAMAGE_WAL) and DAMAGE.guard(down, what=DAMAGE_BLOCKS)
        wal = DAMAGE.effect(down, what=DAMAGE_WAL)
        assert wal.wal == WAL_DAMAGED and (wal.wal_last_term, wal.wal_last_index) == (1, 3)
        assert not DAMAGE.guard(wal, what=DAMAGE_WAL)  # once is enough
        both = DAMAGE.effect(wal, what=DAMAGE_BLOCKS)
        assert both.blocks == BLOCKS_DAMAGED

    def test_startup_of_a_damaged_replica_is_failed(self) -> None:
        down = replica(up=False, running=False)
        assert startup_case(down) == STARTUP_READY
        for what in (DAMAGE_WAL, DAMAGE_BLOCKS):
            assert startup_case(DAMAGE.effect(down, what=what)) == STARTUP_FAILED

    def test_deletion_moves_a_damaged_wal(self) -> None:
        """A DELETED superblock with a damaged WAL still in place rolls forward, and step 6
        moves the damaged WAL into the quarantine."""
        s = replica(up=False, running=False, sb=DELETED, sb_qdir=True, qdir=True, q_sb=True,
                    blocks=BLOCKS_ABSENT, wal=WAL_DAMAGED)
        assert startup_case(s) == STARTUP_ROLL_FORWARD
        up = ACTIONS_BY_NAME["startup"].effect(s, case=STARTUP_ROLL_FORWARD)
        d5 = ACTIONS_BY_NAME["delete_copy_cmeta"].effect(up)
        assert ACTIONS_BY_NAME["delete_move_wal"].guard(d5)
        assert ACTIONS_BY_NAME["delete_move_wal"].effect(d5).wal == WAL_QUARANTINED
