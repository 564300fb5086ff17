"""The states of the replica lifecycle: one tablet, hosted by a set of servers.

Seed: seeds/001 ("Tablet directory structure", "Tablet deletion", "Follower Tablet Copy",
"Tablet startup"). Each server keeps, for the one tablet the spec follows:

durable (survives a crash exactly as far as the last fsync; the spec makes every step
atomic and durable, so "a crash between two steps" is "a crash after some step"):

* the superblock (``tablet-meta/<id>``): data state DOES_NOT_EXIST (no file) / DELETED
  (a tombstone) / COPYING / READY; the tombstone's last logged OpId; whether it points at a
  quarantine directory;
* the consensus metadata (``consensus-meta/<id>``): present or not, current term, voted-for,
  committed config (abstracted to the OpId index of the committed config);
* where the WAL directory is (absent / live in ``wals/<id>`` / moved into the quarantine /
  live but damaged: a segment fails verification, or the directory is gone), and the last
  OpId in it; the WAL's entries (``log``: index -> term; no trace carries them, only the
  last OpId: the trace checker never reads them);
* the data blocks the superblock lists (absent / partially downloaded / present / damaged:
  missing or corrupt blocks found at startup);
* the index of this replica's own config change entry not yet committed (``pending_config``,
  0 when none): the entry is in its WAL (or is the next one it appends), so it outlives a
  crash as Kudu's pending config does (Kudu reloads it from the log); no trace carries it,
  the trace checker rebuilds it from ``config_change``, ``log_append`` and
  ``config_commit``;
* the quarantine directory: exists, holds the superblock copy, holds the cmeta copy;
* the server's UUID generation: 0 is the UUID in the tablet's Raft config; a disk loss
  wipes the server and gives it a new UUID (generation + 1). The *old* UUID is retired: no
  server answers for it again (``UuidNeverReused``), and no vote the server casts after
  the wipe counts as its (``RetiredUuidNeverVotes``). The new UUID is a new server, not a
  member of the config the spec follows (the first one, whose quorums its election and
  commitment claims count); a config change may add it to a later config, as Kudu's
  master adds any live tablet server, but the spec's config changes move only the
  committed config index (``actions``, "The exact CAS of a config change"): membership
  across configs is the global checks' business (traces/README.md "Membership changes").

volatile (lost on a crash): process up, replica running, startup failed, leader, and the
lifecycle operation in flight with its last completed step, the argument that authorised
it (``op_arg``: the caller's term of a StartTabletCopy, the committed config index a
DeleteTablet's compare-and-set named) and the copy's source (``op_src``: the server that
asked for the copy, which Kudu copies from); whether a leader has committed an entry of its
own term (``leader_ready``: Kudu refuses a config change before, LEADER_NOT_READY).

ghost (history variables, not stored by any server; the proofs and the explorer need them):

* the vote cast in each term by the current UUID (reset by a wipe: the new UUID is a new
  identity), the votes cast while the server was a member of the tablet's config under its
  original UUID and the terms it led (never reset: that history is what election safety is
  argued from, and a wiped server's old UUID never votes again);
* the last OpId this server logged as its own (``ghost_last_*``) and that log itself
  (``own_log``): the live log while READY, what a tombstone (and a copy in flight) remembers
  of its former log, replaced when a copy makes the replica READY again;
* the entries this server committed as a leader (``committed``: index -> term, one per
  ``commit`` event: the entry it names);
* whether the tablet's table was dropped (``dropped``: the master's drop, which this server
  has been told; elections end with it, a full delete needs it), whether this UUID lost its
  cmeta to a disk fault (``cmeta_lost``) or removed it in a full delete (``cmeta_removed``),
  and whether an operator purged the quarantine while the server was down and no deletion
  has made a new one since (``purged``: a tombstone then has no quarantine, which the claims
  about the quarantine's evidence allow for it alone);
* for the pending config change: the committed config index it was planned on (the CAS
  the leader accepted it with: ``config_planned_on``) and how many config changes this
  server accepted since it last had none pending (``open_config_changes``). Both follow
  from logged steps (``config_change`` carries its CAS): the trace checker rebuilds them.

Every field is an int, a bool or a map (int -> value), so that a state can hold Python
values (replay, exploration) or z3 terms (proofs); see ``logic``.
"""

from __future__ import annotations

from typing import Any, Final

import attrs

from revivify.spec.logic import Bool, FMap, Int, Map, empty_map

# Superblock data states (seed: "a tablet will have 4 states its data can be in").
DOES_NOT_EXIST: Final = 0
DELETED: Final = 1  # tombstoned
COPYING: Final = 2
READY: Final = 3
SB_NAMES: Final = {DOES_NOT_EXIST: "DOES_NOT_EXIST", DELETED: "DELETED", COPYING: "COPYING",
                   READY: "READY"}

# Where the WAL directory is. DAMAGED is a WAL still in ``wals/<id>`` (where LIVE is) whose
# segments fail verification (a disk fault: the ``damage`` action); a replica never runs on
# it. ``WAL_IN_PLACE`` are the two locations in which the WAL directory is in ``wals/<id>``.
WAL_ABSENT: Final = 0
WAL_LIVE: Final = 1
WAL_QUARANTINED: Final = 2
WAL_DAMAGED: Final = 3
WAL_NAMES: Final = {WAL_ABSENT: "ABSENT", WAL_LIVE: "LIVE", WAL_QUARANTINED: "QUARANTINED",
                    WAL_DAMAGED: "DAMAGED"}
WAL_IN_PLACE: Final = (WAL_LIVE, WAL_DAMAGED)

# Data blocks the live superblock lists. DAMAGED: the superblock lists them all, but some
# are missing or corrupt (a disk fault: the ``damage`` action). ``BLOCKS_LISTED`` are the
# two values in which a complete block list was written (PRESENT, or later DAMAGED).
BLOCKS_ABSENT: Final = 0
BLOCKS_PARTIAL: Final = 1
BLOCKS_PRESENT: Final = 2
BLOCKS_DAMAGED: Final = 3
BLOCKS_NAMES: Final = {BLOCKS_ABSENT: "ABSENT", BLOCKS_PARTIAL: "PARTIAL",
                       BLOCKS_PRESENT: "PRESENT", BLOCKS_DAMAGED: "DAMAGED"}
BLOCKS_LISTED: Final = (BLOCKS_PRESENT, BLOCKS_DAMAGED)

# What a ``damage`` (a disk fault found at the next startup) hits: the WAL (a segment fails
# verification, or the directory is gone: DAMAGED, its last OpId as the server last knew
# it), the data blocks (missing or corrupt: DAMAGED), or the cmeta file (gone: the replica
# forgot its term and votes; it is FAILED, may be tombstoned, and never votes again).
DAMAGE_WAL: Final = 0
DAMAGE_BLOCKS: Final = 1
DAMAGE_CMETA: Final = 2
DAMAGE_NAMES: Final = {DAMAGE_WAL: "WAL", DAMAGE_BLOCKS: "BLOCKS", DAMAGE_CMETA: "CMETA"}
DAMAGE_KINDS: Final = (DAMAGE_WAL, DAMAGE_BLOCKS, DAMAGE_CMETA)

# The lifecycle operation in flight. The deletion steps 2-6 are shared by four operations:
# a deletion the master asked for, the deletion a StartTabletCopy of a READY replica does
# first, a COPYING replica turning itself back into a tombstone (at startup, or right away
# when its copy is aborted), and startup rolling a deletion forward (steps 5-6). A full
# delete (the table was dropped) adds two steps after a tombstone: the cmeta, then the
# superblock, removed.
OP_NONE: Final = 0
OP_DELETE: Final = 1
OP_COPY_DELETE: Final = 2
OP_COPY: Final = 3
OP_UNDO_COPY: Final = 4
OP_ROLL_FORWARD: Final = 5
OP_FULL_DELETE: Final = 6
OP_NAMES: Final = {OP_NONE: "NONE", OP_DELETE: "DELETE", OP_COPY_DELETE: "COPY_DELETE",
                   OP_COPY: "COPY", OP_UNDO_COPY: "UNDO_COPY",
                   OP_ROLL_FORWARD: "ROLL_FORWARD", OP_FULL_DELETE: "FULL_DELETE"}
DELETING_OPS: Final = (OP_DELETE, OP_COPY_DELETE, OP_UNDO_COPY)

# Steps of a copy (op COPY): accepted, superblock COPYING, cmeta merged (then the WAL and
# the blocks download, in either order), superblock READY. Step of a full delete: the cmeta
# is gone.
COPY_ACCEPTED: Final = 0
COPY_BEGUN: Final = 1
COPY_MERGED: Final = 2
COPY_READY: Final = 3
FULL_DELETE_CMETA_GONE: Final = 6

NO_VOTE: Final = -1
NO_SERVER: Final = -1

# How a startup classified the tablet (seed "Tablet startup", cases 1-4, plus the two
# states that need nothing: never hosted, and a finished tombstone).
STARTUP_NOTHING: Final = 0
STARTUP_ROLL_FORWARD: Final = 1
STARTUP_COPYING_TO_DELETED: Final = 2
STARTUP_READY: Final = 3
STARTUP_FAILED: Final = 4
STARTUP_TOMBSTONE: Final = 5
STARTUP_NAMES: Final = {STARTUP_NOTHING: "NOTHING", STARTUP_ROLL_FORWARD: "ROLL_FORWARD",
                        STARTUP_COPYING_TO_DELETED: "COPYING_TO_DELETED",
                        STARTUP_READY: "READY", STARTUP_FAILED: "FAILED",
                        STARTUP_TOMBSTONE: "TOMBSTONE"}

# StartTabletCopy answers, in the order the checks run (see actions.stc_*). Contract
# version 2 had BAD_TERM (the cmeta term) and STALE_TOMBSTONE_TERM; version 3 has one term
# check, STALE_TERM, against the last *logged* term, as Kudu does.
STC_OK: Final = 0
STC_ALREADY_IN_PROGRESS: Final = 1
STC_ILLEGAL_STATE: Final = 2
STC_STALE_TERM: Final = 3
STC_OPID_MISMATCH: Final = 4
STC_NAMES: Final = {STC_OK: "OK", STC_ALREADY_IN_PROGRESS: "ALREADY_IN_PROGRESS",
                    STC_ILLEGAL_STATE: "ILLEGAL_STATE", STC_STALE_TERM: "STALE_TERM",
                    STC_OPID_MISMATCH: "OPID_MISMATCH"}

# Field groups. The trace contract carries exactly the durable fields (traces/schema.json);
# the checker compares them; the explorer hashes all of them.
DURABLE_FIELDS: Final = (
    "uuid_gen", "sb", "sb_last_term", "sb_last_index", "sb_qdir",
    "cmeta", "term", "voted_for", "config_index",
    "wal", "wal_last_term", "wal_last_index", "blocks",
    "qdir", "q_sb", "q_cmeta",
)
# Durable, but no trace carries it: the log's entries (only its last OpId; the trace
# checker never reads them) and the index of the pending config change's entry (the trace
# checker rebuilds it from ``config_change``, ``log_append`` and ``config_commit``).
UNTRACED_FIELDS: Final = ("log", "pending_config")
VOLATILE_FIELDS: Final = ("up", "running", "failed", "leader", "leader_ready", "op", "step",
                          "op_arg", "op_src")
GHOST_FIELDS: Final = ("votes", "member_votes", "led", "ghost_last_term", "ghost_last_index",
                       "own_log", "committed", "dropped", "cmeta_lost", "cmeta_removed",
                       "purged", "config_planned_on", "open_config_changes")

BOOL_FIELDS: Final = frozenset({"sb_qdir", "cmeta", "qdir", "q_sb", "q_cmeta", "up", "running",
                                "failed", "leader", "leader_ready", "dropped", "cmeta_lost",
                                "cmeta_removed", "purged"})
# Map fields and the value they hold where nothing is stored. The logs map an index to a
# term (0: no entry); the vote histories a term to a server (NO_VOTE); ``led`` a term to
# whether this server led it.
MAP_FIELDS: Final = {"votes": NO_VOTE, "member_votes": NO_VOTE, "led": False, "log": 0,
                     "own_log": 0, "committed": 0}
# Fields that store a server's index (the explorer's symmetry relabels them).
ID_FIELDS: Final = ("voted_for", "op_src")
ID_MAP_FIELDS: Final = ("votes", "member_votes")


@attrs.frozen(cache_hash=True)
class ServerState:
    """One server's state for the tablet. Fields hold Python values or z3 terms
    (``Int``, ``Bool``, ``Map``: see ``logic``)."""

    # durable: identity
    uuid_gen: Int = 0
    # durable: superblock
    sb: Int = DOES_NOT_EXIST
    sb_last_term: Int = 0
    sb_last_index: Int = 0
    sb_qdir: Bool = False
    # durable: consensus metadata
    cmeta: Bool = False
    term: Int = 0
    voted_for: Int = NO_VOTE
    config_index: Int = 0
    # durable: WAL and data blocks
    wal: Int = WAL_ABSENT
    wal_last_term: Int = 0
    wal_last_index: Int = 0
    log: Map = attrs.field(factory=lambda: empty_map(0))
    # the index of this replica's own config change entry not yet committed (0: none)
    pending_config: Int = 0
    blocks: Int = BLOCKS_ABSENT
    # durable: quarantine directory contents
    qdir: Bool = False
    q_sb: Bool = False
    q_cmeta: Bool = False
    # volatile
    up: Bool = True
    running: Bool = False
    failed: Bool = False
    leader: Bool = False
    leader_ready: Bool = False
    op: Int = OP_NONE
    step: Int = 0
    op_arg: Int = 0
    op_src: Int = NO_SERVER
    # ghost
    votes: Map = attrs.field(factory=lambda: empty_map(NO_VOTE))
    member_votes: Map = attrs.field(factory=lambda: empty_map(NO_VOTE))
    led: Map = attrs.field(factory=lambda: empty_map(False))
    ghost_last_term: Int = 0
    ghost_last_index: Int = 0
    own_log: Map = attrs.field(factory=lambda: empty_map(0))
    committed: Map = attrs.field(factory=lambda: empty_map(0))
    dropped: Bool = False
    cmeta_lost: Bool = False
    cmeta_removed: Bool = False
    purged: Bool = False
    config_planned_on: Int = 0
    open_config_changes: Int = 0

    def durable(self) -> dict[str, Any]:
        """The abstract durable state, as the trace contract carries it."""
        return {f: getattr(self, f) for f in DURABLE_FIELDS}

    def describe(self) -> str:
        """A one-line human reading of the state (for counterexamples and reports)."""
        if not isinstance(self.sb, int):
            return repr(self)
        parts = [
            f"gen={self.uuid_gen}",
            f"sb={SB_NAMES.get(self.sb, self.sb)}",
        ]
        if self.sb_last_term or self.sb_last_index:
            parts.append(f"tombstone_last=({self.sb_last_term},{self.sb_last_index})")
        if self.cmeta:
            vote = "-" if self.voted_for == NO_VOTE else str(self.voted_for)
            parts.append(f"cmeta(term={self.term},vote={vote},cfg={self.config_index})")
        wal = WAL_NAMES.get(self.wal, self.wal)
        parts.append(f"wal={wal}({self.wal_last_term},{self.wal_last_index})")
        if len(self.log):
            parts.append(f"log={_terms(self.log)}")
        if self.pending_config:
            parts.append(f"pending_config={self.pending_config}"
                         f"(planned_on={self.config_planned_on},"
                         f"open={self.open_config_changes})")
        parts.append(f"blocks={BLOCKS_NAMES.get(self.blocks, self.blocks)}")
        if self.qdir:
            parts.append(f"qdir(sb={int(self.q_sb)},cmeta={int(self.q_cmeta)})")
        vol = "up" if self.up else "down"
        if self.running:
            vol += ",running"
        if self.leader:
            vol += ",leader" + ("(ready)" if self.leader_ready else "")
        if self.failed:
            vol += ",failed"
        if self.op != OP_NONE:
            vol += f",{OP_NAMES.get(self.op, self.op)}@{self.step}"
            if self.op_src != NO_SERVER:
                vol += f" from s{self.op_src}"
        parts.append(f"[{vol}]")
        if len(self.votes):
            parts.append(f"votes={self.votes!r}")
        if self.sb != READY and len(self.own_log):
            parts.append(f"own_log={_terms(self.own_log)}")
        if len(self.committed):
            parts.append(f"committed={self.committed!r}")
        flags = [f for f in ("dropped", "cmeta_lost", "cmeta_removed", "purged")
                 if getattr(self, f)]
        if flags:
            parts.append("{" + ",".join(flags) + "}")
        return " ".join(parts)


def _terms(log: FMap) -> str:
    """A log as the terms of its entries from index 1: ``[1,1,2]``."""
    top = max((k for k, _ in log), default=0)
    return "[" + ",".join(str(log[k]) for k in range(1, top + 1)) + "]"


def created_replica() -> ServerState:
    """A replica just created by the master: READY at term 0, empty WAL, no blocks yet."""
    return ServerState(sb=READY, cmeta=True, wal=WAL_LIVE, blocks=BLOCKS_PRESENT, running=True)


SystemState = tuple[ServerState, ...]


def initial_system(n_servers: int, created: bool = True) -> SystemState:
    """The initial state: the tablet created on every server of its config (or on none)."""
    one = created_replica() if created else ServerState()
    return tuple(one for _ in range(n_servers))


def majority(n_servers: int) -> int:
    return n_servers // 2 + 1


__all__ = [name for name in dir() if name.isupper()] + [
    "FMap", "ServerState", "SystemState", "created_replica", "initial_system", "majority",
]
