"""What schema version 3 added, end to end: logs rebuilt from log_append's prev_term and
terms, the Raft checks over them, tablets from nowhere, lost files and skipped startups,
the crash frontier at the writer's guarantee, a copy from a stale source.

Each check is shown able to fail (the located cases of traces/bad/ written by bad_v3.py,
and mutations of a real run below) and silent on legal runs (the corpus, an in-process
cluster run with a truncation, a crash and a copy, and the soundness cases below)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from revivify.checker.facts import (
    CommittedRun,
    EntryTermAppend,
    FollowerCommit,
    Incarnation,
    KeyLast,
    Lead,
    LeaderCommit,
    LeaderLog,
    Named,
    Truncation,
)
from revivify.checker.global_checks import GlobalChecks
from revivify.checker.local import LocalChecker, check_paths
from revivify.checker.walks import Recorder, scenario_batches
from revivify.contract.events import SCHEMA_VERSION
from revivify.spec.system import default_spec

from .conftest import TRACES
from .test_driver import _same

CASES = TRACES / "bad"


def _lines(d: Path) -> dict[Path, list[dict[str, Any]]]:
    return {f: [json.loads(x) for x in f.read_text().splitlines()]
            for f in sorted(d.glob("*.jsonl"))}


def _write(files: dict[Path, list[dict[str, Any]]]) -> None:
    for f, lines in files.items():
        for n, line in enumerate(lines):
            line["seq"] = n
        f.write_text("".join(json.dumps(x) + "\n" for x in lines))


# -- a real run: clean, and every log check has something to look at -------------------


def test_cluster_run_is_clean_and_feeds_every_log_check(sim_traces: Path) -> None:
    c = LocalChecker()
    report = c.run([str(sim_traces)])
    bad = [v for v in report.sorted() if v.severity != "warning"]
    assert not bad, report.text()
    g = c.globals_
    assert g.starts and g.cruns and g.llogs and g.truncs and g.tappends and g.fcommits
    events = [x for lines in _lines(sim_traces).values() for x in lines]
    appends = [x for x in events if x["event"] == "log_append"]
    assert appends and all(x["v"] == SCHEMA_VERSION and "terms" in x["args"]
                           and "prev_term" in x["args"] for x in appends)
    assert any(x["event"] == "copy_download_wal" for x in events)
    assert report.frontiers.get(-1, 0) == 0


def test_cluster_run_same_as_reference(sim_traces: Path) -> None:
    """The drivers' shortcuts for the rebuilt log (appends extending the last run, commits
    inside it) do what the general path does, on real version-3 traces."""
    _same([str(sim_traces)])


def test_cluster_run_mutated_each_log_check_fires(sim_traces: Path, tmp_path: Path) -> None:
    """On the real run: a truncating batch whose prev_term contradicts the log (the spec's
    guard checks a pure append's), and a term whose election is taken out of the trace,
    are found."""
    d = tmp_path / "a"
    shutil.copytree(sim_traces, d)
    files = _lines(d)
    victim = None
    for lines in files.values():
        last = 0
        for x in lines:
            if x["event"] != "log_append":
                continue
            a = x["args"]
            if 1 < a["first_index"] <= last and a["prev_term"] > 0 and victim is None:
                victim = x
            last = a["op_index"]
    assert victim is not None, "the run has no truncating batch"
    victim["args"]["prev_term"] = 0
    _write(files)
    kinds = check_paths([str(d)]).kinds()
    assert "ArgMismatch" in kinds and "LogMatching" in kinds, kinds

    d = tmp_path / "b"
    shutil.copytree(sim_traces, d)
    files = _lines(d)
    # The first term: its appends come before the crash in the run (a crashed node may
    # have lost a vote for a leader named nowhere, which excuses appends after it).
    won = min(x["args"]["t"] for ls in files.values() for x in ls
              if x["event"] == "become_leader")
    for f in files:
        files[f] = [x for x in files[f] if not (x["event"] == "become_leader"
                                                and x["args"]["t"] == won)]
    _write(files)
    assert "AppendOfUnelectedTerm" in check_paths([str(d)]).kinds()


# -- the crash frontier: the writer's guarantee, and how many steps were inferred -------


def test_frontier_default_is_one_unlogged_step(capsys: Any) -> None:
    from revivify.checker.cli import trace_main

    case = str(CASES / "two-steps-lost-at-crash")
    assert check_paths([case]).exit_code() == 1
    wider = check_paths([case], max_frontier=2)
    assert wider.findings == {} and wider.unlogged_steps() == 2, wider.text()
    assert "unlogged steps inferred: 2" in wider.text()
    assert trace_main(["check", "--quiet", "--max-frontier", "2", "--json", case]) == 0
    assert json.loads(capsys.readouterr().out)["unlogged_steps"] == 2


def test_a_lost_create_tablet_explains_a_first_startup(tmp_path: Path) -> None:
    """A born node whose create_tablet event was the step in flight at a crash starts the
    tablet up in its next incarnation: one unlogged step, not a tablet from nowhere."""
    r = Recorder.new(default_spec(3), 71, created=False)
    for i in range(3):
        r.step(i, "create_tablet", config_index=0)
    r.crash(2, drop_last=True)
    r.start(2)
    r.write(str(tmp_path / "lost"))
    report = check_paths([str(tmp_path / "lost")])
    assert report.findings == {} and report.unlogged_steps() == 1, report.text()
    # The same after a clean stop: nothing was lost, so the tablet came from nowhere.
    r = Recorder.new(default_spec(3), 73, created=False)
    for i in range(3):
        r.step(i, "create_tablet", config_index=0)
    r.files[(r.uuid(2), 1)].pop()
    r.stop(2)
    r.start(2)
    r.write(str(tmp_path / "clean"))
    assert "PhantomTablet" in check_paths([str(tmp_path / "clean")]).kinds()


def test_missing_startup_only_when_the_tablet_may_be_on_disk(tmp_path: Path) -> None:
    """A clean incarnation without a startup for a tablet that a crash's lost step may
    have removed (the last deletion step, here a lost delete_move_wal leaves it on disk,
    so that one is flagged) ... and one for a tablet never on disk is fine."""
    r = Recorder.new(default_spec(3), 79, created=False)
    r.step(0, "create_tablet", config_index=0)
    r.stop(1)
    r.start(1)  # server 1 never had the tablet: no startup needed
    r.stop(1)
    r.write(str(tmp_path))
    assert check_paths([str(tmp_path)]).findings == {}


# -- the committed-entry checks --------------------------------------------------------


def test_a_follower_cutting_its_own_committed_entries(tmp_path: Path) -> None:
    """Version 2 (no terms): a follower that committed index 3 of a batch 1..3 whose
    entries 1..2 it does not know, then cuts the log back to index 1: reported by the key
    itself (the entries' terms are unknown, so no global fact could show it)."""
    r = scenario_batches(83)
    r.step(1, "log_append", check=False, first_index=1, op_term=1, op_index=1)
    r.write(str(tmp_path))
    report = check_paths([str(tmp_path)])
    found = [v for v in report.findings.values() if v.kind == "CommittedEntryTruncated"]
    assert found and found[0].line == len(r.files[(r.uuid(1), 1)]), report.text()


def _g(**incs: dict[int, tuple[int, int, bool]]) -> GlobalChecks:
    g = GlobalChecks()
    for node, by_inc in incs.items():
        for inc, (first, last, clean) in by_inc.items():
            g.fact(Incarnation(node, inc, first, last, clean))
    return g


def test_truncating_an_entry_committed_later_is_legal() -> None:
    """Raft's figure 8: an entry of term 1 that a leader of term 2 cut from a follower's
    log may still be committed later, by the leader of term 3 (so in term 3). Only a cut
    in a term at or above the commit's is a violation."""
    g = _g()
    # b, in term 2, cut (1, 2)
    g.fact(Truncation(tablet="t", lo=2, hi=2, term=1, node="b", file="fb", line=7, node_term=2))
    # a committed 1..3 (term 1), in 3
    g.fact(CommittedRun(tablet="t", lo=1, hi=3, term=1, node="a", file="fa", line=9,
                        committed_in=3))
    assert g.violations() == []
    # c, in term 3, cut it: no
    g.fact(Truncation(tablet="t", lo=2, hi=2, term=1, node="c", file="fc", line=4, node_term=3))
    (v,) = g.violations()
    assert v.kind == "CommittedEntryTruncated" and (v.file, v.line) == ("fc", 4)


def test_leader_completeness_reads_terms_below_the_leaders() -> None:
    """Entries committed in term u bind the leaders of terms above u, not the leader of u
    itself (it may have committed them as the leader that wrote them)."""
    g = _g()
    # committed 1..2 (term 1) in term 2
    g.fact(CommittedRun(tablet="t", lo=1, hi=2, term=1, node="a", file="fa", line=5,
                        committed_in=2))
    # b won term 2 with an empty log
    g.fact(LeaderLog(tablet="t", term=2, lo=1, hi=0, node="b", file="fb", line=3, lamport=1,
                     runs="[]"))
    assert g.violations() == []
    # c: (2, 2) at 2
    g.fact(LeaderLog(tablet="t", term=3, lo=1, hi=2, node="c", file="fc", line=8, lamport=9,
                     runs="[[1,1],[2,2]]"))
    (v,) = g.violations()
    assert v.kind == "LeaderCompleteness" and "index 2" in v.message


def test_unelected_term_needs_a_whole_input() -> None:
    """An append of a term nobody won is only flagged when every node the tablet names is
    present whole and none can be an unseen leader of it: that needs its become_leader and
    an append lost at one crash before the append, two steps, beyond the default frontier
    (traces/README.md, "Unlogged steps at a crash")."""
    whole = {1: (1, 50, True)}
    g = _g(a=whole, b=whole)
    g.fact(Named(tablet="t", copied=False, node="a", names="a\nb"))
    g.fact(EntryTermAppend(tablet="t", term=4, node="a", file="fa", line=9, lamport=20))
    assert [v.kind for v in g.violations()] == ["AppendOfUnelectedTerm"]
    crashed = {"a": whole, "b": {1: (1, 10, False)}}
    for incs, frontier in (({"a": whole}, 1), ({"a": whole, "b": {2: (1, 50, True)}}, 1),
                           (crashed, 2)):
        g = _g(**incs)
        g.max_frontier = frontier
        g.fact(Named(tablet="t", copied=False, node="a", names="a\nb"))
        g.fact(EntryTermAppend(tablet="t", term=4, node="a", file="fa", line=9, lamport=20))
        # b's state after its last event: the candidate of term 4 (two steps to lead it).
        g.fact(KeyLast(tablet="t", inc=1, term=4, wal_last_index=0, node="b", voted_for="b"))
        assert g.violations() == [], incs
    g = _g(**crashed)  # within the writer's guarantee (one step) b cannot have led term 4
    g.fact(Named(tablet="t", copied=False, node="a", names="a\nb"))
    g.fact(EntryTermAppend(tablet="t", term=4, node="a", file="fa", line=9, lamport=20))
    g.fact(KeyLast(tablet="t", inc=1, term=4, wal_last_index=0, node="b", voted_for="b"))
    assert [v.kind for v in g.violations()] == ["AppendOfUnelectedTerm"]


def _lead(term: int) -> Lead:
    """a became leader of ``term`` in incarnation 1, knowing the config 0 of a and b."""
    return Lead(tablet="t", term=term, config_index=0, inc=1, node="a", file="fa", line=3,
                lamport=3, voters='["a","b"]')


def test_commit_beyond_leader_excuses_a_crashed_leader() -> None:
    """A leader's commit event may be lost at a crash: a follower commit above every
    commit the leader logged is flagged unless the leader crashed in a term up to the
    follower's with a WAL reaching the follower's index (its last logged state: ``klast``
    term, WAL last index)."""
    for clean, last, expect in ((True, (1, 4), ["CommitBeyondLeader"]), (False, (1, 4), []),
                                (False, (1, 3), ["CommitBeyondLeader"]),
                                (False, (2, 4), ["CommitBeyondLeader"])):
        g = _g(a={1: (1, 50, clean)}, b={1: (1, 60, True)})
        g.fact(_lead(term=1))
        g.fact(LeaderCommit(tablet="t", term=1, index=2, config_index=-1, leader="a",
                            file="fa", line=5, lamport=5, voters=""))
        g.fact(FollowerCommit(tablet="t", term=1, index=4, node="b", file="fb", line=6,
                              lamport=9))
        g.fact(KeyLast(tablet="t", inc=1, term=last[0], wal_last_index=last[1], node="a",
                       voted_for="a"))
        assert [v.kind for v in g.violations()] == expect, (clean, last)
    # ... a leader that copied the tablet may start from the copied data's commit index ...
    g = _g(a={1: (1, 50, True)}, b={1: (1, 60, True)})
    g.fact(_lead(term=1))
    g.fact(Named(tablet="t", copied=True, node="a", names="a\nb"))
    g.fact(FollowerCommit(tablet="t", term=1, index=4, node="b", file="fb", line=6, lamport=9))
    assert g.violations() == []
    # ... and a commit index the leader learnt as a follower in an earlier term counts.
    g = _g(a={1: (1, 50, True)}, b={1: (1, 60, True)})
    g.fact(FollowerCommit(tablet="t", term=1, index=4, node="a", file="fa", line=2, lamport=2))
    g.fact(_lead(term=2))
    g.fact(FollowerCommit(tablet="t", term=2, index=4, node="b", file="fb", line=6, lamport=9))
    assert g.violations() == []


def test_an_empty_incarnation_file_is_not_a_lost_one(tmp_path: Path) -> None:
    """A process killed before its first event leaves an empty file (or a torn line): it
    is one of the node's incarnations, not a lost file."""
    r = Recorder.new(default_spec(3), 89, created=True)
    for _ in range(3):
        r.crash(2)
        r.start(2)
    r.write(str(tmp_path))
    (tmp_path / f"{r.uuid(2)}.0003.jsonl").write_text("")
    report = check_paths([str(tmp_path)])
    assert report.kinds() == {"EmptyFile"}, report.text()
    _same([str(tmp_path)])
    (tmp_path / f"{r.uuid(2)}.0003.jsonl").unlink()
    assert check_paths([str(tmp_path)]).kinds() == {"MissingIncarnation"}


def test_a_follower_commit_above_its_own_log(tmp_path: Path) -> None:
    """A commit of an index beyond the node's own last log index is refused by the spec's
    commit guard, which names the condition broken (``index <= the WAL's last index``),
    follower or leader."""
    r = scenario_batches(97)
    r.step(2, "learn_term", t=1)
    r.step(2, "commit", check=False, index=2, op_term=1)  # server 2 holds nothing
    r.write(str(tmp_path))
    report = check_paths([str(tmp_path)])
    (v,) = report.findings.values()
    assert (v.kind, v.event) == ("GuardFailed", "commit"), v
    assert "index <= the WAL's last index" in v.failed.split("; "), v
