"""Clean traces of what real Kudu legally does and an older checker refused: each a run of
the spec (the ``Recorder`` of checker/walks.py, every step checked against the spec's
guards, the system guards included), written to ``traces/legal/<case>/`` with its
``expected.json`` (``description``, ``exit_code`` 0, and ``shows``: the events the case is
about, in order, on the server it is about). The checker must accept each, on both engines.
Regenerate::

    python tests/trace/legal_v3.py traces/legal
"""

from __future__ import annotations

import sys
from collections.abc import Callable

from revivify.checker.walks import Recorder
from revivify.spec.actions import startup_case
from revivify.spec.model import (
    DAMAGE_WAL,
    DELETED,
    DOES_NOT_EXIST,
    STARTUP_TOMBSTONE,
    WAL_ABSENT,
    WAL_QUARANTINED,
)
from revivify.spec.system import default_spec

Build = Callable[[], Recorder]

# name -> (build, what it shows, the events it is about, on server 2, in this order)
CASES: dict[str, tuple[Build, str, list[str]]] = {}

TOMBSTONE = ("delete_shutdown", "delete_create_qdir", "delete_copy_superblock",
             "delete_mark_deleted", "delete_copy_cmeta", "delete_move_wal")
COPY_REST = ("copy_download_wal", "copy_download_block", "copy_blocks_done",
             "copy_mark_ready", "copy_start_replica")


def case(name: str, what: str, shows: list[str]) -> Callable[[Build], Build]:
    def add(build: Build) -> Build:
        CASES[name] = (build, what, shows)
        return build
    return add


def new(seed: int, created: bool = True) -> Recorder:
    return Recorder.new(default_spec(3), seed, created=created)


def replicate(r: Recorder, index: int, term: int, to: tuple[int, ...]) -> None:
    """The leader (server 0) appends entry ``index`` of ``term``; ``to`` append it too."""
    for i in (0, *to):
        if r.sys[i].term < term:  # the AppendEntries raises the follower's term first
            r.step(i, "learn_term", t=term)
        r.step(i, "log_append", first_index=index, op_term=term, op_index=index)


def tombstone(r: Recorder, i: int, steps: tuple[str, ...] = TOMBSTONE) -> None:
    for name in steps:
        r.step(i, name)


def copy_from_leader(r: Recorder, i: int, caller_term: int, expected: int,
                     rest: tuple[str, ...] = COPY_REST) -> None:
    """Server 0 (leader in ``caller_term``) copies the tablet to server i."""
    r.step(i, "stc_accept", caller=0, caller_term=caller_term, expected_state=expected,
           has_opid=0, opid_term=0, opid_index=0)
    r.step(i, "copy_begin")
    src = r.sys[0]
    r.step(i, "copy_merge_cmeta", remote_term=src.term,
           remote_config_index=src.config_index)
    for name in rest:
        if name == "copy_download_wal":
            src = r.sys[0]
            r.step(i, name, remote_last_term=src.wal_last_term,
                   remote_last_index=src.wal_last_index)
        else:
            r.step(i, name)


@case("copy-abort-tombstones-in-place",
      "a copy into a tombstone fails after copy_begin: the replica tombstones itself at "
      "once (deletion steps 2-6, no restart), keeping the tombstone's last OpId (1, 1) and "
      "cmeta; its quarantined WAL's last_opid is [0, 0], the OpId is the superblock's",
      ["stc_accept", "copy_begin", "copy_merge_cmeta", "copy_abort", "delete_create_qdir",
       "delete_move_wal"])
def copy_abort() -> Recorder:
    r = new(201)
    r.elect(0, 1, 1, (0, 0))
    replicate(r, 1, 1, (1, 2))
    tombstone(r, 2)
    copy_from_leader(r, 2, 1, DELETED, rest=())
    r.step(2, "copy_abort")
    tombstone(r, 2, TOMBSTONE[1:])
    assert (r.sys[2].sb, r.sys[2].sb_last_term, r.sys[2].sb_last_index) == (DELETED, 1, 1)
    return r.stop_all()


@case("failed-replica-deleted-and-copied",
      "a replica whose WAL was lost while its server was down starts FAILED (with its "
      "reason), is tombstoned (recording the damaged WAL's last OpId) and copied again",
      ["startup", "delete_shutdown", "delete_move_wal", "stc_accept", "copy_start_replica"])
def failed_copied() -> Recorder:
    r = new(203)
    r.elect(0, 1, 1, (0, 0))
    replicate(r, 1, 1, (1, 2))
    r.stop(2)
    r.damage(2, DAMAGE_WAL)
    r.start(2)
    tombstone(r, 2)
    copy_from_leader(r, 2, 1, DELETED)
    return r.stop_all()


@case("damaged-replica-starts-failed",
      "a WAL damaged while the server was down: the next startup reports the replica "
      "FAILED with a reason and the DAMAGED WAL with its last OpId as last known",
      ["startup"])
def damaged() -> Recorder:
    r = new(205)
    r.elect(0, 1, 1, (0, 0))
    replicate(r, 1, 1, (1, 2))
    r.stop(2)
    r.damage(2, DAMAGE_WAL)
    r.start(2)
    return r.stop_all()


@case("tombstone-without-cmeta-votes",
      "a first-time copy crashes before its merge: startup tombstones the COPYING replica, "
      "which has no cmeta file, and it then answers RequestVote from an empty cmeta "
      "created lazily",
      ["stc_accept", "copy_begin", "startup", "delete_move_wal", "vote_granted"])
def lazy_cmeta() -> Recorder:
    r = new(207, created=False)
    for i in (0, 1):
        r.step(i, "create_tablet", config_index=0)
    r.elect(0, 1, 1, (0, 0))
    r.step(2, "stc_accept", caller=0, caller_term=1, expected_state=DOES_NOT_EXIST,
           has_opid=0, opid_term=0, opid_index=0)
    r.step(2, "copy_begin")
    r.crash(2)
    r.start(2)
    tombstone(r, 2, TOMBSTONE[1:])
    assert not r.sys[2].cmeta
    r.step(1, "start_election", me=1)
    r.step(2, "vote_granted", candidate=1, t=2, cand_last_term=0, cand_last_index=0)
    return r.stop_all()


@case("copy-accepted-below-cmeta-term",
      "a tombstone with cmeta term 2 and last logged term 1 accepts a copy from the leader "
      "of term 1: StartTabletCopy compares the caller's term with the last *logged* term "
      "(as Kudu does); the merge keeps the higher local term",
      ["learn_term", "delete_move_wal", "stc_accept", "copy_merge_cmeta",
       "copy_start_replica"])
def below_cmeta_term() -> Recorder:
    r = new(209)
    r.elect(0, 1, 1, (0, 0))
    replicate(r, 1, 1, (1, 2))
    r.step(2, "learn_term", t=2)
    tombstone(r, 2)
    copy_from_leader(r, 2, 1, DELETED)
    assert r.sys[2].term == 2
    return r.stop_all()


@case("blocks-before-wal",
      "a copy downloads the blocks first, then the WAL (Kudu's order)",
      ["copy_merge_cmeta", "copy_download_block", "copy_blocks_done", "copy_download_wal",
       "copy_mark_ready"])
def blocks_first() -> Recorder:
    r = new(211)
    r.elect(0, 1, 1, (0, 0))
    replicate(r, 1, 1, (1, 2))
    tombstone(r, 2)
    copy_from_leader(r, 2, 1, DELETED, rest=(
        "copy_download_block", "copy_blocks_done", "copy_download_wal", "copy_mark_ready",
        "copy_start_replica"))
    return r.stop_all()


@case("votes-during-deletion",
      "a replica being tombstoned still answers RequestVote: from its WAL's last OpId "
      "before delete_mark_deleted, from the superblock's after (a second candidate of "
      "the term denied: it already voted)",
      ["delete_create_qdir", "vote_granted", "delete_mark_deleted", "vote_denied"])
def votes_while_deleting() -> Recorder:
    r = new(213)
    r.elect(0, 1, 1, (0, 0))
    replicate(r, 1, 1, (1, 2))
    tombstone(r, 2, TOMBSTONE[:2])
    r.step(1, "start_election", me=1)
    r.step(2, "vote_granted", candidate=1, t=2, cand_last_term=1, cand_last_index=1)
    tombstone(r, 2, TOMBSTONE[2:4])
    r.step(0, "step_down")
    r.step(0, "start_election", me=0)
    r.step(2, "vote_denied", candidate=0, t=2, cand_last_term=1, cand_last_index=1)
    tombstone(r, 2, TOMBSTONE[4:])
    return r.stop_all()


@case("tombstone-fully-deleted",
      "after the table is dropped, a tombstone is fully deleted (mode DELETED): its cmeta "
      "then its superblock removed, the quarantine kept",
      ["delete_move_wal", "delete_remove_cmeta", "delete_remove_superblock"])
def full_delete() -> Recorder:
    r = new(215)
    r.elect(0, 1, 1, (0, 0))
    replicate(r, 1, 1, (1, 2))
    tombstone(r, 2)
    r.drop(2)
    r.step(2, "delete_remove_cmeta")
    r.step(2, "delete_remove_superblock")
    return r.stop_all()


@case("tombstone-purged",
      "an operator purges a stopped server's quarantine (revivify local-replica "
      "purge-quarantine; no event): the restarted tombstone reports no quarantine and its "
      "WAL ABSENT (it was QUARANTINED), keeps its superblock (DELETED, last OpId (1, 1), "
      "the QDIR it names) and cmeta, and still answers RequestVote",
      ["delete_move_wal", "server_stop", "server_start", "startup", "vote_granted"])
def purged() -> Recorder:
    r = new(217)
    r.elect(0, 1, 1, (0, 0))
    replicate(r, 1, 1, (1, 2))
    tombstone(r, 2)
    assert r.sys[2].wal == WAL_QUARANTINED and r.sys[2].qdir
    r.stop(2)
    r.purge(2)
    s = r.sys[2]
    assert (s.sb, s.sb_last_term, s.sb_last_index, s.sb_qdir, s.cmeta) == (DELETED, 1, 1,
                                                                           True, True)
    assert (s.qdir, s.wal) == (False, WAL_ABSENT)
    assert startup_case(s) == STARTUP_TOMBSTONE
    r.start(2)
    r.step(1, "start_election", me=1)
    r.step(2, "vote_granted", candidate=1, t=2, cand_last_term=1, cand_last_index=1)
    return r.stop_all()


@case("config-change-pending-across-crash",
      "a leader that committed an entry of its term accepts a config change planned on its "
      "committed config (config_change: the exact CAS, then the log_append of the config "
      "entry); it crashes with the entry uncommitted in its WAL, restarts as a follower, "
      "and commits the config when the next leader commits past it (config_commit: no "
      "config_change of its own needed after its restart)",
      ["config_change", "log_append", "server_start", "startup", "learn_term",
       "config_commit"])
def config_change_across_crash() -> Recorder:
    r = new(219)
    r.elect(2, 1, 1, (0, 0))
    for i in (2, 1):
        r.step(i, "log_append", first_index=1, op_term=1, op_index=1)
    r.step(2, "commit", index=1, op_term=1)
    r.step(2, "config_change", cas_index=0, config_index=2)
    for i in (2, 1):
        r.step(i, "log_append", first_index=2, op_term=1, op_index=2)
    r.crash(2)
    r.start(2)
    assert r.sys[2].pending_config == 2  # the entry is in its WAL: still pending
    r.elect(1, 0, 2, (1, 2))
    r.step(1, "log_append", first_index=3, op_term=2, op_index=3)
    r.step(2, "learn_term", t=2)
    r.step(2, "log_append", first_index=3, op_term=2, op_index=3)
    r.step(1, "commit", index=3, op_term=2)
    r.step(1, "config_commit", config_index=2)
    r.step(2, "commit", index=3, op_term=2, check=False)  # a follower learns it
    r.step(2, "config_commit", config_index=2)
    assert r.sys[2].pending_config == 0
    return r.stop_all()


def write(root: str) -> list[str]:
    """(Re)write ``root/<case>/`` for every case; return the names."""
    for name, (build, what, shows) in CASES.items():
        r = build()
        r.write_case(root, name, {"description": what, "exit_code": 0, "shows": shows,
                                  "node": r.uuid(2)})
    return list(CASES)


if __name__ == "__main__":
    print("\n".join(write(sys.argv[1] if len(sys.argv) > 1 else "traces/legal")))
