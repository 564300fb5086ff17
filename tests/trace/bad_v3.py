"""The known-bad traces of what contract version 3 lets the checker see: logs rebuilt from
``log_append``'s ``prev_term`` and ``terms`` (Log Matching, Leader Completeness,
State-Machine Safety, appends of a term nobody won, commits beyond the leader's, commits
of a term the log does not hold), tablets from nowhere, lost files and skipped startups,
lost steps beyond the writer's guarantee, a copy from a stale source, malformed batches.

Each case is a valid history (the spec's ``Recorder``, checker/walks.py) with one
mutation, written to ``traces/bad/<case>/`` beside the version-2 cases, with its
``expected.json`` (``kind``, ``exit_code``, and ``at``: the file and line it must be
rejected at, by both engines). Each has a tablet and UUIDs of its own. Regenerate::

    python tests/trace/bad_v3.py traces/bad
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

from revivify.checker.walks import Recorder
from revivify.spec.system import default_spec

Line = dict[str, Any]
Case = Callable[[], tuple[Recorder, Line, list[str]]]

# name -> (build, expected kind, what it shows)
CASES: dict[str, tuple[Case, str, str]] = {}


def case(name: str, kind: str, what: str) -> Callable[[Case], Case]:
    def add(build: Case) -> Case:
        CASES[name] = (build, kind, what)
        return build
    return add


def new(seed: int) -> Recorder:
    return Recorder.new(default_spec(3), seed, created=True)


def append(r: Recorder, i: int, first: int, terms: list[list[int]], prev: int,
           check: bool = False) -> Line:
    """Server i appends a batch from ``first`` whose entries have these terms (run-length
    encoded), after an entry of term ``prev``: a version-3 log_append."""
    count = sum(c for _, c in terms)
    line = r.step(i, "log_append", check=check, first_index=first, op_term=terms[-1][0],
                  op_index=first + count - 1)
    line["args"]["prev_term"] = prev
    line["args"]["terms"] = terms
    return line


def lines_of(r: Recorder, server: int, inc: int) -> list[Line]:
    return r.files[(r.uuid(server), inc)]


def renumber(lines: list[Line]) -> None:
    for n, line in enumerate(lines):
        line["seq"] = n


@case("log-matching-two-starts", "LogMatching",
      "the entries of term 2 begin at index 3 in the leader's log and at index 2 in a "
      "follower's")
def log_matching() -> tuple[Recorder, Line, list[str]]:
    r = new(101)
    r.elect(0, 1, 1, (0, 0))
    append(r, 0, 1, [[1, 2]], 0)
    append(r, 1, 1, [[1, 2]], 0)
    r.step(0, "step_down")
    r.elect(1, 2, 2, (1, 2))
    append(r, 1, 3, [[2, 1]], 1)
    # Server 2 (in term 2 by its vote) holds (2, 2) after (1, 1): not the leader's run.
    at = append(r, 2, 1, [[1, 1], [2, 1]], 0)
    return r.stop_all(), at, []


@case("leader-misses-committed-entry", "LeaderCompleteness",
      "a node becomes leader of term 2 with an empty log while entries 1..2 were committed "
      "in term 1 (its vote request claimed a log it did not have)")
def leader_completeness() -> tuple[Recorder, Line, list[str]]:
    r = new(103)
    r.elect(0, 1, 1, (0, 0))
    append(r, 0, 1, [[1, 2]], 0)
    append(r, 1, 1, [[1, 2]], 0)
    r.step(0, "commit", index=2, op_term=1)
    r.step(2, "start_election", me=2)
    r.step(2, "start_election", me=2)  # alone in term 1; term 2 next
    # The claim is false (server 2's log is empty): the spec's system guard refuses it.
    r.step(1, "vote_granted", check=False, candidate=2, t=2, cand_last_term=1,
           cand_last_index=2)
    at = r.step(2, "become_leader", check=False, me=2, t=2)
    return r.stop_all(), at, []


@case("committed-entry-truncated", "CommittedEntryTruncated",
      "a follower cuts entry (1, 2) from its log after the leader committed it")
def committed_truncated() -> tuple[Recorder, Line, list[str]]:
    r = new(107)
    r.elect(0, 1, 1, (0, 0))
    append(r, 0, 1, [[1, 2]], 0)
    append(r, 1, 1, [[1, 2]], 0)
    r.step(0, "commit", index=2, op_term=1)
    at = append(r, 1, 1, [[1, 1]], 0)  # rewrites 1..1 and drops the committed (1, 2)
    return r.stop_all(), at, []


@case("append-of-unelected-term", "AppendOfUnelectedTerm",
      "a node appends an entry of term 2, which nobody won (every trace is here, every "
      "server stopped cleanly)")
def unelected() -> tuple[Recorder, Line, list[str]]:
    r = new(109)
    r.elect(0, 1, 1, (0, 0))
    append(r, 0, 1, [[1, 1]], 0)
    r.step(2, "learn_term", t=2)
    at = append(r, 2, 1, [[2, 1]], 0)
    return r.stop_all(), at, []


@case("follower-commits-beyond-leader", "CommitBeyondLeader",
      "a follower commits index 3 of term 1 while the leader of term 1 only ever committed "
      "index 1")
def beyond_leader() -> tuple[Recorder, Line, list[str]]:
    r = new(113)
    r.elect(0, 1, 1, (0, 0))
    append(r, 0, 1, [[1, 3]], 0)
    append(r, 1, 1, [[1, 3]], 0)
    r.step(0, "commit", index=1, op_term=1)
    at = r.step(1, "commit", check=False, index=3, op_term=1)
    return r.stop_all(), at, []


@case("commit-not-in-log", "CommitNotInLog",
      "a follower commits index 1 naming term 2, where its log holds term 1")
def commit_not_in_log() -> tuple[Recorder, Line, list[str]]:
    r = new(127)
    r.elect(0, 1, 1, (0, 0))
    append(r, 0, 1, [[1, 1]], 0)
    r.step(0, "step_down")
    r.elect(0, 1, 2, (1, 1))
    append(r, 0, 2, [[2, 1]], 1)
    append(r, 1, 1, [[1, 1], [2, 1]], 0)
    r.step(0, "commit", index=2, op_term=2)
    at = r.step(1, "commit", check=False, index=1, op_term=2)
    return r.stop_all(), at, []


@case("append-prev-term-mismatch", "ArgMismatch",
      "a follower's batch rewriting index 2 says the entry before it has term 0 where its "
      "log holds term 1")
def prev_mismatch() -> tuple[Recorder, Line, list[str]]:
    r = new(131)
    r.elect(0, 1, 1, (0, 0))
    append(r, 0, 1, [[1, 2]], 0)
    append(r, 1, 1, [[1, 2]], 0)
    at = append(r, 1, 2, [[1, 1]], 0)  # first_index 2 <= its last index: a truncation
    return r.stop_all(), at, []


@case("leader-appends-old-term", "ArgMismatch",
      "the leader of term 2 appends a batch holding an entry of term 1")
def leader_old_term() -> tuple[Recorder, Line, list[str]]:
    r = new(137)
    r.step(0, "start_election", me=0)
    r.elect(0, 1, 2, (0, 0))
    at = append(r, 0, 1, [[1, 1], [2, 1]], 0)
    return r.stop_all(), at, []


@case("phantom-tablet", "PhantomTablet",
      "a freshly formatted server starts up a READY tablet it never created or copied")
def phantom() -> tuple[Recorder, Line, list[str]]:
    r = Recorder.new(default_spec(3), 139, created=False)
    for i in (0, 1):
        r.step(i, "create_tablet", config_index=0)
    # Server 2 (formatted in this incarnation, its trace whole) reports server 0's replica.
    at = r.emit(2, "startup", {"case": "READY"}, r.sys[0], r.tablet)
    return r, at, []


@case("missing-incarnation", "MissingIncarnation",
      "a node's trace has incarnations 1, 2 and 4: the file of incarnation 3 is lost")
def missing_incarnation() -> tuple[Recorder, Line, list[str]]:
    r = new(149)
    for _ in range(3):
        r.stop(2)
        r.start(2)
    lost = f"{r.uuid(2)}.0003.jsonl"
    at = lines_of(r, 2, 4)[0]
    return r, at, [lost]


@case("startup-skipped", "MissingStartup",
      "an incarnation ends cleanly without the startup of a tablet on its disk")
def startup_skipped() -> tuple[Recorder, Line, list[str]]:
    r = new(151)
    r.stop(2)
    r.start(2)
    inc2 = lines_of(r, 2, 2)
    inc2[:] = [ln for ln in inc2 if ln["event"] != "startup"]
    renumber(inc2)
    r.seq[2] = len(inc2)
    r.stop(2)
    at = inc2[-1]  # the server_stop that ends incarnation 2
    return r, at, []


@case("two-steps-lost-at-crash", "StateMismatch",
      "a crash loses two steps (learn_term, then an append of that term): the writer loses "
      "at most the step in flight, so the default frontier (1) does not explain the next "
      "startup")
def two_lost() -> tuple[Recorder, Line, list[str]]:
    r = new(157)
    r.elect(0, 1, 1, (0, 0))
    append(r, 0, 1, [[1, 1]], 0)
    r.step(2, "learn_term", t=1)
    append(r, 2, 1, [[1, 1]], 0)
    f = lines_of(r, 2, 1)
    del f[-2:]  # both events lost: two unlogged steps
    r.crash(2)
    r.start(2)
    at = lines_of(r, 2, 2)[-1]
    return r, at, []


@case("copy-from-stale-source", "StaleCopySource",
      "a tombstone whose last logged entry is of term 1 merges the cmeta of a source in "
      "term 0")
def stale_copy() -> tuple[Recorder, Line, list[str]]:
    r = new(163)
    r.elect(0, 1, 1, (0, 0))
    append(r, 0, 1, [[1, 1]], 0)
    r.step(2, "learn_term", t=1)
    append(r, 2, 1, [[1, 1]], 0)
    for name in ("delete_shutdown", "delete_create_qdir", "delete_copy_superblock",
                 "delete_mark_deleted", "delete_copy_cmeta", "delete_move_wal"):
        r.step(2, name, check=False)
    r.step(2, "stc_accept", check=False, caller_term=1, expected_state=1, has_opid=0,
           opid_term=0, opid_index=0)
    r.step(2, "copy_begin", check=False)
    at = r.step(2, "copy_merge_cmeta", check=False, remote_term=0, remote_config_index=0)
    return r, at, []


@case("batch-terms-do-not-cover-it", "BadArgs",
      "a log_append whose runs hold 1 entry for a batch of 2")
def bad_terms() -> tuple[Recorder, Line, list[str]]:
    r = new(167)
    r.elect(0, 1, 1, (0, 0))
    at = append(r, 0, 1, [[1, 2]], 0)
    at["args"]["terms"] = [[1, 1]]
    return r, at, []


@case("votes-traced-after-the-election", "LeaderWithoutMajority",
      "the one vote a leader needed is traced after its become_leader: answered before "
      "it was durable (a crash then could let the voter vote again)")
def votes_after_election() -> tuple[Recorder, Line, list[str]]:
    r = new(171)
    r.step(0, "start_election", me=0)
    at = r.step(0, "become_leader", check=False, me=0, t=1)
    r.step(1, "vote_granted", candidate=0, t=1, cand_last_term=0, cand_last_index=0)
    return r.stop_all(), at, []


def write(root: str) -> list[str]:
    """(Re)write ``root/<case>/`` for every case; return the names."""
    for name, (build, kind, what) in CASES.items():
        r, at, drop = build()
        f = r.files[(at["node"], at["inc"])]
        expected: dict[str, Any] = {
            "kind": kind, "description": what,
            "exit_code": 2 if kind == "BadArgs" else 1,
            "at": {"file": f"{at['node']}.{at['inc']:04d}.jsonl",
                   "line": next(n for n, line in enumerate(f, 1) if line is at)}}
        for path in r.write_case(root, name, expected):
            if os.path.basename(path) in drop:
                os.remove(path)
    return list(CASES)


if __name__ == "__main__":
    print("\n".join(write(sys.argv[1] if len(sys.argv) > 1 else "traces/bad")))
