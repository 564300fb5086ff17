"""The exact CAS of a config change (spec/actions.py, ``config_change``): the guard names
each of the server's refusals, and the pending change lives as long as its entry is in the
leader's log (committed, cut by a later leader, moved away by a deletion, or lost with a
crash before it was appended)."""

from __future__ import annotations

from typing import Any

import attrs
from test_actions import Run as CheckedRun

from revivify.checker.explore import explore
from revivify.spec import default_spec
from revivify.spec.actions import ACTIONS_BY_NAME, Bounds
from revivify.spec.model import ServerState

CHANGE = ACTIONS_BY_NAME["config_change"]
COMMIT_CONFIG = ACTIONS_BY_NAME["config_commit"]
DELETE_STEPS = ("delete_shutdown", "delete_create_qdir", "delete_copy_superblock",
                "delete_mark_deleted", "delete_copy_cmeta", "delete_move_wal")


class Run(CheckedRun):
    """A recorded run that checks every invariant and step property at every step
    (test_actions.Run), and asks the spec what it would allow."""

    def allows(self, i: int, name: str, **p: Any) -> bool:
        return bool(self.spec.action(name).enabled(self.sys, i, self.fill_params(name, i, p)))


def ready_leader(seed: int = 3) -> Run:
    """Server 0 leads term 1 and has committed entry 1 (of its term), which server 1 holds
    too: it may accept a config change at index 2."""
    r = Run.new(default_spec(3), seed, created=True)
    r.elect(0, 1, 1, (0, 0))
    for i in (0, 1):
        r.step(i, "log_append", first_index=1, op_term=1, op_index=1)
    r.step(0, "commit", index=1, op_term=1)
    assert r.sys[0].leader_ready
    return r


def refused(s: ServerState, **p: Any) -> list[str]:
    assert CHANGE.conditions is not None
    return [name for name, ok in CHANGE.conditions(s, **p) if not ok]


def test_each_refusal_is_named() -> None:
    r = ready_leader()
    s = r.sys[0]
    assert refused(s, cas_index=0, config_index=2) == []
    assert refused(s, cas_index=1, config_index=2) == [
        "the CAS: cas_index is the committed config index (else CAS_MISMATCH)"]
    assert refused(s, cas_index=0, config_index=3) == [
        "config_index the last index + 1 (where the config entry is appended)"]
    assert refused(attrs.evolve(s, leader_ready=False), cas_index=0, config_index=2) == [
        "the leader has committed an entry of its term (else LEADER_NOT_READY)"]
    r.step(0, "config_change", cas_index=0, config_index=2)
    assert refused(r.sys[0], cas_index=0, config_index=2) == [
        "no config change of its own pending (else CHANGE_PENDING)"]
    # A follower never accepts one.
    assert "a running READY leader with cmeta and no operation in flight" in refused(
        r.sys[1], cas_index=0, config_index=2)


def test_a_stale_or_a_newer_cas_is_refused() -> None:
    """The CAS is exact: a caller that saw an older committed config (DeleteTablet's <=
    would refuse it too) or one this leader has not committed (<= would accept it)."""
    r = ready_leader()
    r.step(1, "config_commit", config_index=1)  # a follower ahead of the leader
    assert r.sys[0].config_index == 0
    assert not r.allows(0, "config_change", cas_index=1, config_index=2)
    r.step(0, "config_commit", config_index=1)
    assert not r.allows(0, "config_change", cas_index=0, config_index=2)
    assert r.allows(0, "config_change", cas_index=1, config_index=2)


def test_readiness_comes_with_a_commit_of_its_own_term_and_ends_with_leading() -> None:
    r = Run.new(default_spec(3), 5, created=True)
    r.elect(0, 1, 1, (0, 0))
    assert not r.sys[0].leader_ready  # its no-op is not committed yet
    for i in (0, 1):
        r.step(i, "log_append", first_index=1, op_term=1, op_index=1)
    r.step(0, "commit", index=1, op_term=1)
    assert r.sys[0].leader_ready
    r.step(0, "step_down")
    assert not r.sys[0].leader_ready
    # Leading again (here: a new term), it is not ready until it commits in that term:
    # entry 1, of term 1, does not count.
    r.step(0, "start_election", me=0)
    r.step(2, "vote_granted", candidate=0, t=2, cand_last_term=1, cand_last_index=1)
    r.step(0, "become_leader", me=0, t=2)
    assert not r.sys[0].leader_ready
    assert not r.allows(0, "config_change", cas_index=0, config_index=2)


def test_the_change_is_pending_until_its_entry_is_committed() -> None:
    r = ready_leader()
    r.step(0, "config_change", cas_index=0, config_index=2)
    s = r.sys[0]
    assert (s.pending_config, s.config_planned_on, s.open_config_changes) == (2, 0, 1)
    # Its own append is the config entry: still pending.
    r.step(0, "log_append", first_index=2, op_term=1, op_index=2)
    r.step(1, "log_append", first_index=2, op_term=1, op_index=2)
    assert r.sys[0].pending_config == 2
    # No config below it commits while it is pending (there is none in its log).
    r.step(0, "log_append", first_index=3, op_term=1, op_index=3)
    r.step(1, "log_append", first_index=3, op_term=1, op_index=3)
    r.step(0, "commit", index=3, op_term=1)
    assert not r.allows(0, "config_commit", config_index=1)
    assert COMMIT_CONFIG.conditions is not None
    assert [n for n, ok in COMMIT_CONFIG.conditions(r.sys[0], config_index=1) if not ok] == [
        "no config below this replica's own pending config change (the only config entry it "
        "left uncommitted)"]
    # A follower has nothing pending: it commits whatever its leader committed.
    r.step(1, "config_commit", config_index=2)
    r.step(0, "config_commit", config_index=2)
    s = r.sys[0]
    assert (s.pending_config, s.config_planned_on, s.open_config_changes) == (0, 0, 0)
    assert r.allows(0, "config_change", cas_index=2, config_index=4)


def test_a_crash_keeps_an_appended_change_and_loses_one_never_appended() -> None:
    r = ready_leader()
    r.step(0, "config_change", cas_index=0, config_index=2)
    r.crash(0)
    assert r.sys[0].pending_config == 0  # lost with the process
    r.start(0)
    r = ready_leader(7)
    r.step(0, "config_change", cas_index=0, config_index=2)
    r.step(0, "log_append", first_index=2, op_term=1, op_index=2)
    r.crash(0)
    r.start(0)
    assert r.sys[0].pending_config == 2  # reloaded from the WAL, as Kudu does


def test_a_later_leaders_batch_over_the_entry_cuts_it() -> None:
    r = ready_leader()
    r.step(0, "config_change", cas_index=0, config_index=2)
    r.step(0, "log_append", first_index=2, op_term=1, op_index=2)
    r.step(0, "step_down")
    assert r.sys[0].pending_config == 2  # a step-down keeps it: it is in the log
    r.step(1, "start_election", me=1)
    r.step(2, "vote_granted", candidate=1, t=2, cand_last_term=1, cand_last_index=1)
    r.step(1, "become_leader", me=1, t=2)
    r.step(1, "log_append", first_index=2, op_term=2, op_index=2)
    r.step(0, "learn_term", t=2)
    r.step(0, "log_append", first_index=2, op_term=2, op_index=2)  # replaces (1, 2)
    assert r.sys[0].pending_config == 0


def test_a_batch_above_the_entry_keeps_it() -> None:
    r = ready_leader()
    r.step(0, "config_change", cas_index=0, config_index=2)
    r.step(0, "log_append", first_index=2, op_term=1, op_index=2)
    r.step(1, "log_append", first_index=2, op_term=1, op_index=2)
    r.step(0, "step_down")
    r.step(1, "start_election", me=1)
    r.step(2, "vote_granted", candidate=1, t=2, cand_last_term=1, cand_last_index=2)
    r.step(1, "become_leader", me=1, t=2)
    r.step(1, "log_append", first_index=3, op_term=2, op_index=3)
    r.step(0, "learn_term", t=2)
    r.step(0, "log_append", first_index=3, op_term=2, op_index=3)
    assert r.sys[0].pending_config == 2


def test_a_deletion_moves_the_entry_away() -> None:
    r = ready_leader()
    r.step(0, "config_change", cas_index=0, config_index=2)
    r.step(0, "log_append", first_index=2, op_term=1, op_index=2)
    for name in DELETE_STEPS[:-1]:
        r.step(0, name)
        assert r.sys[0].pending_config == 2  # its WAL is still in wals/<id>
    r.step(0, DELETE_STEPS[-1])
    assert r.sys[0].pending_config == 0


def test_claims_hold_where_the_entry_is_appended() -> None:
    """With a second index the explorer reaches the change's entry appended, replicated and
    committed (the default bounds stop at its acceptance: its entry would be index 2), and
    every claim holds."""
    bounds = Bounds(max_term=1, max_index=2, max_crashes=0, max_wipes=0, max_requests=1)
    result = explore(default_spec(), bounds)
    assert result.violation is None and result.complete
    assert result.coverage["config_change"] > 0 and result.coverage["config_commit"] > 0
