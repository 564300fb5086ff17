"""Known-bad and legal traces of the crashed shape: the global checks where servers crashed
(issue 20, "The checker: tighter where crashes are involved").

A crash is not an event: an incarnation with no ``server_stop`` may have taken steps it
never logged. The writer's guarantee bounds them (one per key, the step in flight, after
the key's last logged event: traces/README.md, "Majorities and causality"), and the global
checks bound their excuse by it (``global_checks.GlobalChecks._lost_*``). Every bad case
here ends with the guilty servers CRASHED, not stopped: each was let through while any
crash excused anything, and each is rejected at its line by its rule only. Each legal case
loses one step per crashed key where that step is what the rule needs (a vote, an
acknowledged append, a leader's commit), and is accepted.

Each case is a valid history (the spec's ``Recorder``, checker/walks.py) with one mutation,
written like ``bad_v3.py``: ``<root>/bad/<case>/`` with ``expected.json`` (``kind``,
``exit_code``, ``at``: the file and line both engines must reject it at), and
``<root>/legal/<case>/`` with ``expected.json`` (``description``, ``exit_code`` 0, the
``node`` it is about and the events it ``shows``). Each has a tablet and UUIDs of its own.
Regenerate::

    python tests/trace/bad_crashed.py traces
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import Callable
from typing import Any

from revivify.checker.walks import Recorder

try:  # imported as tests.trace.bad_crashed, or run as a script
    from .bad_catalog import WHOLE, History, create_table
    from .bad_v3 import append, new
except ImportError:
    from bad_catalog import (  # type: ignore[no-redef, import-not-found]
        WHOLE,
        History,
        create_table,
    )
    from bad_v3 import append, new  # type: ignore[no-redef, import-not-found]

Line = dict[str, Any]
# A bad case: the history, the line it must be rejected at, file names to leave out.
Case = Callable[[], tuple[Recorder, Line, list[str]]]
Legal = Callable[[], Recorder]

# name -> (build, expected kind, what it shows)
CASES: dict[str, tuple[Case, str, str]] = {}
# name -> (build, what it shows, the events it is about on server ``node``, that server)
LEGAL: dict[str, tuple[Legal, str, list[str], int]] = {}


def case(name: str, kind: str, what: str) -> Callable[[Case], Case]:
    def add(build: Case) -> Case:
        CASES[name] = (build, kind, what)
        return build
    return add


def legal(name: str, what: str, shows: list[str], node: int) -> Callable[[Legal], Legal]:
    def add(build: Legal) -> Legal:
        LEGAL[name] = (build, what, shows, node)
        return build
    return add


def file_name(r: Recorder, i: int, inc: int = 1) -> str:
    return f"{r.uuid(i)}.{inc:04d}.jsonl"


# -- the majority checks ----------------------------------------------------------------

@case("crashed-leader-without-majority", "LeaderWithoutMajority",
      "a node declares itself leader of term 1 with its own vote only: one voter logged "
      "its term-1 vote for another candidate, the other campaigned itself; both then "
      "crashed (a crash may hide one step, not a second vote in a term)")
def leader_without_majority() -> tuple[Recorder, Line, list[str]]:
    r = new(401)
    r.step(2, "start_election", me=2)
    r.step(1, "vote_granted", candidate=2, t=1, cand_last_term=0, cand_last_index=0)
    r.step(0, "start_election", me=0)
    at = r.step(0, "become_leader", check=False, me=0, t=1)
    return r, at, []


@case("crashed-voters-restart-without-the-vote", "LeaderWithoutMajority",
      "a node declares itself leader of term 1 with its own vote only; the two other "
      "voters crashed and restarted: their startups show term 0, so neither voted in "
      "term 1 unlogged before its crash")
def voters_restart() -> tuple[Recorder, Line, list[str]]:
    r = new(403)
    r.step(0, "start_election", me=0)
    for i in (1, 2):
        r.crash(i)
    at = r.step(0, "become_leader", check=False, me=0, t=1)
    for i in (1, 2):
        r.start(i)
    return r, at, []


@case("crashed-vote-denied-then-leader", "LeaderWithoutMajority",
      "a voter denied the candidate its term-2 vote (its log is ahead), then crashed in "
      "term 2 with no vote: a denial rules out an unlogged grant to that candidate in "
      "that term; the other voter campaigned itself")
def vote_denied() -> tuple[Recorder, Line, list[str]]:
    r = new(405)
    r.step(1, "start_election", me=1)
    r.step(2, "vote_granted", candidate=1, t=1, cand_last_term=0, cand_last_index=0)
    r.step(1, "become_leader", me=1, t=1)
    append(r, 1, 1, [[1, 1]], 0)
    append(r, 2, 1, [[1, 1]], 0)
    r.step(1, "step_down")
    r.step(0, "start_election", me=0)  # term 1, alone
    r.step(0, "start_election", me=0)  # term 2, its log empty
    r.step(2, "vote_denied", candidate=0, t=2, cand_last_term=0, cand_last_index=0)
    r.step(1, "start_election", me=1)  # term 2: server 1 votes for itself
    at = r.step(0, "become_leader", check=False, me=0, t=2)
    return r, at, []


@case("crashed-commit-without-majority", "CommitWithoutMajority",
      "the leader of term 1 commits index 2, which no follower ever held: one follower "
      "crashed in term 1 and restarted with an empty WAL (its startup shows no lost "
      "append), the other crashed in term 0 (an append of term 1 would need a term "
      "rise first: two lost steps)")
def commit_without_majority() -> tuple[Recorder, Line, list[str]]:
    r = new(407)
    r.elect(0, 1, 1, (0, 0))
    r.crash(1)
    r.crash(2)
    append(r, 0, 1, [[1, 2]], 0)
    at = r.step(0, "commit", check=False, index=2, op_term=1)
    r.start(1)
    return r, at, []


# -- the log checks ---------------------------------------------------------------------

@case("crashed-append-of-unelected-term", "AppendOfUnelectedTerm",
      "a node appends an entry of term 2, which nobody won; every other server crashed "
      "before it, in term 1 (an unseen leader of term 2 would have lost at least its "
      "become_leader and its append: two steps)")
def unelected() -> tuple[Recorder, Line, list[str]]:
    r = new(409)
    r.elect(0, 1, 1, (0, 0))
    append(r, 0, 1, [[1, 1]], 0)
    r.crash(0)
    r.crash(1)
    r.step(2, "learn_term", t=2)
    at = append(r, 2, 1, [[2, 1]], 0)
    return r, at, []


@case("crashed-follower-commits-beyond-leader", "CommitBeyondLeader",
      "a follower commits index 3 of term 1 while the leader of term 1 only ever "
      "committed index 1; the leader then learned term 2 and crashed: a commit lost at "
      "that crash was made in term 2, not as the leader of term 1")
def beyond_leader() -> tuple[Recorder, Line, list[str]]:
    r = new(411)
    r.elect(0, 1, 1, (0, 0))
    append(r, 0, 1, [[1, 3]], 0)
    append(r, 1, 1, [[1, 3]], 0)
    r.step(0, "commit", index=1, op_term=1)
    at = r.step(1, "commit", check=False, index=3, op_term=1)
    r.step(0, "learn_term", t=2)
    return r, at, []


@case("crashed-leader-misses-committed-entry", "LeaderCompleteness",
      "a node becomes leader of term 2 with an empty log while entries 1..2 were "
      "committed in term 1; every server crashed")
def leader_completeness() -> tuple[Recorder, Line, list[str]]:
    r = new(413)
    r.elect(0, 1, 1, (0, 0))
    append(r, 0, 1, [[1, 2]], 0)
    append(r, 1, 1, [[1, 2]], 0)
    r.step(0, "commit", index=2, op_term=1)
    r.step(2, "start_election", me=2)
    r.step(2, "start_election", me=2)
    r.step(1, "vote_granted", check=False, candidate=2, t=2, cand_last_term=1,
           cand_last_index=2)
    at = r.step(2, "become_leader", check=False, me=2, t=2)
    return r, at, []


@case("crashed-committed-entry-truncated", "CommittedEntryTruncated",
      "a follower cuts entry (1, 2) from its log after the leader committed it; every "
      "server crashed")
def committed_truncated() -> tuple[Recorder, Line, list[str]]:
    r = new(415)
    r.elect(0, 1, 1, (0, 0))
    append(r, 0, 1, [[1, 2]], 0)
    append(r, 1, 1, [[1, 2]], 0)
    r.step(0, "commit", index=2, op_term=1)
    at = append(r, 1, 1, [[1, 1]], 0)
    return r, at, []


@case("crashed-log-matching-two-starts", "LogMatching",
      "the entries of term 2 begin at index 3 in the leader's log and at index 2 in a "
      "follower's; every server crashed")
def log_matching() -> tuple[Recorder, Line, list[str]]:
    r = new(417)
    r.elect(0, 1, 1, (0, 0))
    append(r, 0, 1, [[1, 2]], 0)
    append(r, 1, 1, [[1, 2]], 0)
    r.step(0, "step_down")
    r.elect(1, 2, 2, (1, 2))
    append(r, 1, 3, [[2, 1]], 1)
    at = append(r, 2, 1, [[1, 1], [2, 1]], 0)
    return r, at, []


# -- the checks that take no crash excuse -----------------------------------------------

@case("crashed-two-leaders", "TwoLeaders",
      "two nodes lead term 1, each with the vote of a third whose trace is not in the "
      "input (so no majority can be counted); both leaders crashed")
def two_leaders() -> tuple[Recorder, Line, list[str]]:
    r = new(419)
    r.step(0, "start_election", me=0)
    r.step(1, "start_election", me=1)
    a = r.step(0, "become_leader", check=False, me=0, t=1)
    b = r.step(1, "become_leader", check=False, me=1, t=1)
    at = b if r.uuid(1) > r.uuid(0) else a  # the finding names the last node's line
    return r, at, [file_name(r, 2)]


@case("crashed-commit-term-mismatch", "CommitTermMismatch",
      "index 1 committed with term 1 by the leader of term 1 and with term 2 by a node "
      "that took it from a leader of term 2 whose trace (and the third voter's) is not "
      "in the input; every server crashed")
def commit_term_mismatch() -> tuple[Recorder, Line, list[str]]:
    r = new(421)
    r.elect(0, 2, 1, (0, 0))
    append(r, 0, 1, [[1, 1]], 0)
    append(r, 2, 1, [[1, 1]], 0)
    r.step(0, "commit", index=1, op_term=1)
    r.step(1, "learn_term", t=2)
    append(r, 1, 1, [[2, 1]], 0)
    at = r.step(1, "commit", check=False, index=1, op_term=2)
    return r, at, [file_name(r, 2)]


@case("crashed-vote-before-request", "CausalityViolation",
      "a vote for term 1 whose Lamport clock is below the candidate's start_election; "
      "every server crashed")
def vote_before_request() -> tuple[Recorder, Line, list[str]]:
    r = new(423)
    at = r.step(1, "vote_granted", check=False, candidate=0, t=1, cand_last_term=0,
                cand_last_index=0)
    r.step(0, "start_election", me=0)
    r.step(0, "become_leader", me=0, t=1, check=False)
    return r, at, []


@case("crashed-uuid-reused", "UuidReused",
      "a wiped server formats itself with its old UUID; every server crashed")
def uuid_reused() -> tuple[Recorder, Line, list[str]]:
    r = new(425)
    r.elect(0, 1, 1, (0, 0))
    r.crash(2)
    r.wipe(2)
    r.gen[2] -= 1  # the wiped server comes back with its old UUID,
    r.inc[2] = 1  # as its incarnation 2 (no gap: only the format is wrong)
    r.start(2)
    at = r.files[(r.uuid(2), 2)][0]  # its second server_format
    return r, at, []


# The masters' rules across nodes (checker/catalog.py, decided by the global checks): no
# crash excuses anything there; these end with the guilty masters killed. Written with
# bad_catalog.py's History (the real trace writer), salts of their own.
CatalogCase = Callable[[History], None]
CATALOG: dict[str, tuple[CatalogCase, str, str, int]] = {}


def catalog_case(name: str, kind: str, what: str,
                 salt: int) -> Callable[[CatalogCase], CatalogCase]:
    def add(build: CatalogCase) -> CatalogCase:
        CATALOG[name] = (build, kind, what, salt)
        return build
    return add


@catalog_case("crashed-catalog-two-ready-masters", "OneReadyLeaderPerTerm",
              "two masters pass the leader-ready gate in the same term; both killed", 61)
def two_ready(h: History) -> None:
    a, b = "a1" * 16, "b2" * 16
    h.start(a, 1)
    h.start(b, 1)
    h.ready(a, 1, 2, 4, WHOLE)
    h.ready(b, 1, 2, 4, WHOLE, at=True)  # b > a: the finding names the last file


@catalog_case("crashed-catalog-stale-ready", "ReadyHoldsCommitted",
              "the leader commits CreateTable and is killed; the next leader becomes ready "
              "at an index below that write and is killed too", 62)
def stale_ready(h: History) -> None:
    a, b = "a1" * 16, "b2" * 16
    h.start(a, 1)
    h.start(b, 1)
    h.ready(a, 1, 1, 1)
    create_table(h, a, 1, 1, 2)
    h.ready(b, 1, 2, 1, at=True)


# -- legal: one lost step per crashed key, the one the rule needs ------------------------

def drop_last(r: Recorder, i: int) -> None:
    """Server i crashes after the fsync of its last step, before its event: the event
    is lost (the writer's one step in flight)."""
    r.crash(i, drop_last=True)


@legal("crash-loses-the-vote-and-the-append",
       "a voter's grant is lost at its crash (it never restarts): the leader still won "
       "term 1 with it; a follower's append of (1, 1) is lost at its crash: the leader "
       "still committed index 1 with it; each crash lost one step, the one the majority "
       "needs", ["start_election", "become_leader", "log_append", "commit"], 0)
def lost_vote_and_append() -> Recorder:
    r = new(431)
    r.step(0, "start_election", me=0)
    r.step(1, "vote_granted", candidate=0, t=1, cand_last_term=0, cand_last_index=0)
    drop_last(r, 1)
    r.step(0, "become_leader", me=0, t=1)
    r.step(0, "log_append", first_index=1, op_term=1, op_index=1)
    r.step(2, "learn_term", t=1)
    r.step(2, "log_append", first_index=1, op_term=1, op_index=1)
    drop_last(r, 2)
    r.step(0, "commit", index=1, op_term=1)
    return r


@legal("crash-loses-the-leaders-commit",
       "the leader of term 1 commits index 2 and crashes before logging it (its appends "
       "carry the commit index first); a follower logs the commit it learned, and a "
       "voter whose lost vote its restart reveals (term 1, voted for the leader) counts "
       "toward the election", ["startup", "log_append", "commit"], 2)
def lost_leader_commit() -> Recorder:
    r = new(433)
    r.step(0, "start_election", me=0)
    r.step(2, "vote_granted", candidate=0, t=1, cand_last_term=0, cand_last_index=0)
    drop_last(r, 2)
    r.start(2)  # its startup shows the vote: term 1, voted for server 0
    r.step(0, "become_leader", me=0, t=1)
    r.step(1, "learn_term", t=1)
    for i in (0, 1, 2):
        r.step(i, "log_append", first_index=1, op_term=1, op_index=2)
    r.step(0, "commit", index=2, op_term=1)
    drop_last(r, 0)  # the leader's commit event (its last) is lost
    # A follower's commit is learned from the leader: the spec's system guard
    # (leader_commit) models only the leader's, so this step alone is not checked here.
    r.step(2, "commit", check=False, index=2, op_term=1)
    return r


def write(root: str) -> list[str]:
    """(Re)write ``root/bad/<case>/`` and ``root/legal/<case>/``; return the names."""
    for name, (build, kind, what) in CASES.items():
        r, at, drop = build()
        f = r.files[(at["node"], at["inc"])]
        expected: dict[str, Any] = {
            "kind": kind, "description": what, "exit_code": 1,
            "at": {"file": f"{at['node']}.{at['inc']:04d}.jsonl",
                   "line": next(n for n, line in enumerate(f, 1) if line is at)}}
        for path in r.write_case(os.path.join(root, "bad"), name, expected):
            if os.path.basename(path) in drop:
                os.remove(path)
    for name, (cbuild, kind, what, salt) in CATALOG.items():
        d = os.path.join(root, "bad", name)
        shutil.rmtree(d, ignore_errors=True)
        h = History(d, salt)
        cbuild(h)
        h.close()
        assert h.at is not None, name
        with open(os.path.join(d, "expected.json"), "w") as out:
            json.dump({"kind": kind, "description": what, "exit_code": 1,
                       "at": {"file": h.at[0], "line": h.at[1]}}, out, indent=2)
            out.write("\n")
    for name, (lbuild, what, shows, node) in LEGAL.items():
        r = lbuild()
        r.write_case(os.path.join(root, "legal"), name, {
            "description": what, "exit_code": 0, "shows": shows, "node": r.uuid(node)})
    return [*CASES, *CATALOG, *LEGAL]


if __name__ == "__main__":
    print("\n".join(write(sys.argv[1] if len(sys.argv) > 1 else "traces")))
