"""What schema version 2 added, end to end through the checker: batched appends and
commits, step_down, config_commit, votes that fold a term rise, and damaged replicas."""

from __future__ import annotations

from pathlib import Path

from revivify.checker.facts import CommitRun
from revivify.checker.global_checks import GlobalChecks
from revivify.checker.local import check_paths
from revivify.checker.walks import Recorder, scenario_batches, scenario_damage
from revivify.spec.model import DAMAGE_BLOCKS, DAMAGE_WAL


def _check(r: Recorder, tmp_path: Path) -> set[str]:
    r.write(str(tmp_path))
    return check_paths([str(tmp_path)]).kinds()


def test_damage_inferred_after_a_crash_with_lost_events(tmp_path: Path) -> None:
    """A crash that lost its last event, then damage while down: both are inferred."""
    r = scenario_batches()
    r.step(1, "learn_term", t=2)
    r.crash(1, drop_last=True)  # the learn_term event is lost
    r.damage(1, DAMAGE_WAL)
    r.damage(1, DAMAGE_BLOCKS)
    r.start(1)
    report_kinds = _check(r, tmp_path)
    assert report_kinds == set()
    report = check_paths([str(tmp_path)])
    assert report.frontiers.get(1, 0) == 1  # one unlogged step; the damage is not counted


def test_damage_reported_on_every_later_startup(tmp_path: Path) -> None:
    r = scenario_damage()
    r.stop(2)
    r.start(2)  # a tombstone now: the damaged WAL went to the quarantine
    assert _check(r, tmp_path) == set()
    startups = [line for key in r.order for line in r.files[key]
                if line["event"] == "startup"]
    assert startups[0]["args"]["case"] == "FAILED"
    assert startups[0]["state"]["wal"]["location"] == "DAMAGED"
    assert startups[-1]["args"] == {"case": "TOMBSTONE"}
    assert startups[-1]["state"]["wal"]["location"] == "QUARANTINED"


def test_a_damaged_replica_cannot_append(tmp_path: Path) -> None:
    """After a FAILED startup the replica does not run: a log_append is refused."""
    r = scenario_damage()
    files = r.files
    key = r.order[-1]
    line = next(ln for ln in files[key] if ln["event"] == "startup")
    del files[key][files[key].index(line) + 1:]
    r.emit(2, "log_append", {"first_index": 1, "op_term": 1, "op_index": 1}, r.sys[2],
           r.tablet)
    assert "GuardFailed" in _check(r, tmp_path)


def test_votes_fold_the_term_rise(tmp_path: Path) -> None:
    """A vote in a higher term needs no learn_term before it: granted or denied, the state
    after it shows the new term (a grant with the vote, a denial with none)."""
    r = scenario_batches()
    r.step(2, "start_election", me=2)
    r.step(2, "start_election", me=2)  # term 2, alone, with an empty log
    # server 1 (term 1, log up to (1, 3)) refuses the stale log, adopting term 2
    r.step(1, "vote_denied", candidate=2, t=2, cand_last_term=0, cand_last_index=0)
    # server 0 (the leader of term 1) steps down; then grants server 1's term-3 request
    r.step(0, "step_down")
    r.step(1, "start_election", me=1)
    r.step(0, "vote_granted", candidate=1, t=3, cand_last_term=1, cand_last_index=3)
    assert _check(r, tmp_path) == set()
    events = [ln for key in r.order for ln in r.files[key]]
    denied = next(ln for ln in events if ln["event"] == "vote_denied")
    granted = next(ln for ln in events if ln["event"] == "vote_granted"
                   and ln["args"]["t"] == 3)
    assert (denied["state"]["cmeta"]["term"], denied["state"]["cmeta"]["voted_for"]) == (2,
                                                                                      None)
    assert granted["state"]["cmeta"]["term"] == 3
    assert not any(ln["event"] == "learn_term" for ln in events)


def test_step_down_then_a_new_election(tmp_path: Path) -> None:
    r = scenario_batches()
    r.step(0, "step_down")
    r.step(0, "start_election", me=0)
    r.step(1, "vote_granted", candidate=0, t=2, cand_last_term=1, cand_last_index=3)
    r.step(0, "become_leader", me=0, t=2)
    r.step(0, "log_append", first_index=4, op_term=2, op_index=5)
    assert _check(r, tmp_path) == set()


def test_commits_compare_only_the_indices_events_name() -> None:
    """commit(index, op_term) names one index's term; a batch commit covers lower indices
    without naming their terms, so they are never compared. Runs are built from consecutive
    named indices only."""
    g = GlobalChecks()
    # key A commits index 2, then (one batch) up to 5, all in term 1
    g.fact(CommitRun("t", 2, 2, 1, "a", "fa", 1))
    g.fact(CommitRun("t", 5, 5, 1, "a", "fa", 2))
    # key B names index 3 and 4 with term 2: never named by A, so not compared
    g.fact(CommitRun("t", 3, 4, 2, "b", "fb", 1))
    assert g.violations() == []
    # ... but naming 5 with term 2 is a mismatch
    g.fact(CommitRun("t", 5, 5, 2, "b", "fb", 2))
    (v,) = g.violations()
    assert v.kind == "CommitTermMismatch" and v.subject == "tablet=t index=5"


def test_replay_keeps_batch_commits_as_single_indices(tmp_path: Path) -> None:
    """End to end, in version 2 (a batch says only its last entry's term): a leader that
    commits 1..3 as one event (index 3) and a replica that names index 2 with another term
    are not reported; naming index 3 is. (Version 3 says every entry's term: there the
    replica's commit of index 2 commits its entries 1..2 of term 2, a mismatch at once.)"""
    r = scenario_batches()
    r.step(2, "start_election", me=2)
    r.step(2, "start_election", me=2)
    r.step(2, "log_append", first_index=1, op_term=2, op_index=3, check=False)
    r.step(2, "commit", index=2, op_term=2, check=False)
    v3 = _check(r, tmp_path / "v3")
    for key in r.order:
        for line in r.files[key]:
            line["v"] = 2
            if line["event"] == "log_append":
                line["args"].pop("prev_term", None)
                line["args"].pop("terms", None)
    # (Server 2's term-2 batch comes from no leader: AppendOfUnelectedTerm, a fault of its
    # own that a crash no longer excuses, traces/README.md "Unlogged steps at a crash".)
    unelected = {"AppendOfUnelectedTerm"}
    assert _check(r, tmp_path / "a") == unelected
    assert "CommitTermMismatch" in v3
    r.step(2, "commit", index=3, op_term=2, check=False)
    for line in r.files[r.order[-1]]:
        line["v"] = 2
    assert _check(r, tmp_path / "b") == {"CommitTermMismatch"} | unelected
