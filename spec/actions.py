"""The one transition table of the replica lifecycle.

Rules of this file
------------------
* Every action is a row of ``ACTIONS``: a name (the trace event that stands for it), the seed
  step it implements, its parameters, a *local* guard and effect over one server's state,
  and, for the actions whose enabling depends on other servers (a candidate needs a majority
  of votes, a follower's entries come from a leader, a copy from its source), a *system*
  guard over all servers.
* Guards and effects obey the two-interpreter discipline of ``logic``: no ``if`` on state,
  ``ite`` instead; they run unchanged on Python values and on z3 terms.
* Each action is one atomic durable step (one fsync'd change) or one volatile step, so that a
  crash (another row) can fall between any two of them.
* Anything not in the table is not allowed. The trace checker replays events through the
  local guards and effects; the explorer, Hypothesis and the prover use both.
* A guard is the conjunction of named conditions (``copy_mark_ready_conditions``, built
  into ``copy_mark_ready_guard`` by ``_from_conditions``), each named for what must hold,
  in a user's words ("every block downloaded"): a trace checker names the ones a refused
  event breaks. A condition that is no conjunction itself (StartTabletCopy's first failing
  check, startup's classification) is explained by the checker from its parts.
* Enumerators (``*_enum``) generate what the environment may send: every request a server
  (a leader, a stale leader, the master) could make, every fault. They never filter with
  the guard's own conditions: a filter in front of a guard would hide every bug in it.

Theory of operation (seed 001)
------------------------------
Deletion (steps 1-6): shut the replica down; create the quarantine directory (QDIR); copy the
superblock into it; mark the superblock DELETED, recording the last logged OpId and the QDIR
(from here on the delete always rolls forward); copy the cmeta into the QDIR; move the WAL
directory into the QDIR. The cmeta itself stays in place: a tombstone keeps its term and
vote, and votes from them ("Future work": tombstones vote, as real Kudu later did).

Follower tablet copy (steps 1-6): rewrite the superblock as COPYING (keeping the tombstone's
last OpId, clearing the QDIR); download and *merge* the cmeta (``merge``); download the WAL
and the blocks (in either order); write the superblock READY; start the replica.

StartTabletCopy: the seed's pseudo-code deletes a running tablet *before* checking the
caller's term. That order lets a deposed leader (a stale term) destroy a current replica and
leave it tombstoned after the term check finally fails. Every check runs first here, as in
real Kudu; the seed's order is kept as a mutant (``mutants``) that the checkers reject.

Startup: DELETED with the WAL still in place rolls the deletion forward (steps 5 and 6
again); COPYING deletes itself back to DELETED (steps 2-6, keeping the last OpId); READY with
its cmeta, WAL and blocks intact starts normally; READY with anything missing or damaged
stays offline (FAILED).

Raft, as far as it touches the lifecycle: learning a higher term; RequestVote granted or
denied by READY, COPYING and DELETED replicas (a tombstone votes from its retained cmeta and
last OpId); starting an election; becoming leader with a majority of votes of *members*
(servers still on their original UUID); stepping down; appending batches to the log (the log
is a map index -> term, so that log matching, commitment and leader completeness can be
stated); committing; a leader accepting a config change (its exact CAS); committing a config
change into the cmeta.

Departures from the seed for a real Raft server (trace contract version 2)
---------------------------------------------------------------------------
* Batched appends (``log_append`` with ``first_index``): one fsync, one event; a follower
  may overwrite a conflicting suffix; a leader never truncates its own log (claim
  ``LeaderAppendOnly``; mutant ``leader_truncates_own_log``).
* ``step_down`` (volatile): a leader stops leading and keeps term and vote (mutant
  ``step_down_forgets_vote``: ``VoteOnce``).
* ``config_commit``: a committed config change entry written into the cmeta, only forward
  and only to an entry of the replica's own log (``ConfigCommittedFromLog``; mutant
  ``config_commit_beyond_log``).
* ``commit`` once per batch: ``commit(index, op_term)`` commits every index up to ``index``.
* Disk damage found at startup (``damage``, a fault while the server is down): FAILED, never
  runs (``RunningIsIntact``; mutants ``damage_while_up``, ``startup_ignores_damage``).

Decisions of trace contract version 3 (each: what real Kudu does, why, what guards it)
---------------------------------------------------------------------------------------
1. **copy_abort.** A copy that fails or is cancelled before its superblock says READY logs
   ``copy_abort``. Before ``copy_begin`` nothing changed: the replica stays what it was (a
   tombstone, or nothing). After it the replica tombstones itself right away, without a
   restart: deletion steps 2-6 (op UNDO_COPY, the same steps startup runs for COPYING),
   keeping the tombstone's previous last OpId and its cmeta (Kudu's TabletCopyClient does
   the same on Abort). Claim ``TombstoneRetainsLastOpid`` (a tombstone holds the last OpId
   of its *own* former log, never the downloaded one); mutant
   ``abort_records_downloaded_opid``.
2. **FAILED replicas are deleted and copied again.** A replica whose startup failed is a
   READY superblock that does not run; ``delete_shutdown`` and StartTabletCopy (which sees
   it as READY) take it like a running one; its tombstone records the damaged WAL's last
   OpId (damage does not change it). Mutant ``failed_delete_forgets_opid`` (the tombstone
   of a damaged WAL records (0, 0)): ``TombstoneRetainsLastOpid``.
3. **A tombstone without cmeta votes** (a first-time copy that crashed before its cmeta was
   merged, or a full delete interrupted between its two steps), from an empty cmeta (term
   0, no vote) created by its first vote, as Kudu does (KUDU-2123). It votes only while
   nothing but a copy is in flight. A replica whose cmeta a *disk fault* removed is not
   such a tombstone: it forgot votes it cast (amnesia, which the seed answers with a new
   UUID); it is FAILED, may be tombstoned, and never votes or takes a copy again. Mutants
   ``lost_cmeta_votes_lazily`` and ``lost_cmeta_takes_copy``: ``VoteOnce``.
4. **StartTabletCopy compares the caller's term with the last *logged* term** (a
   tombstone's retained one, a READY or FAILED replica's WAL's, 0 when the tablet does not
   exist), not with the cmeta term: a tombstone with cmeta term 2 and last logged term 1
   accepts a caller in term 1 or 2 (Kudu's ``CheckLeaderTermNotLower``). This departs from
   the seed's pseudo-code, whose ``ERR_BAD_TERM`` compares with ``self.term``: the cmeta
   term only says which elections the replica took part in, not what it holds; a caller
   in a term at least the last logged one holds every entry this replica can have
   acknowledged, and the cmeta is kept and merged (never lowered) anyway. One reason,
   STALE_TERM, replaces version 2's BAD_TERM and STALE_TOMBSTONE_TERM. Claim
   ``StaleCallerCannotDestroy``; mutants ``stc_skips_term_check``, ``stc_seed_order``,
   ``stc_term_from_wal`` (a tombstone's last logged term read from its moved WAL, 0).
5. **Lost WAL or blocks.** A WAL that fails verification *or is gone*, and blocks missing or
   corrupt, are one fault each (``damage``): the startup is FAILED with a reason, the state
   says DAMAGED, and the WAL's last OpId stays what the server last knew (the writer reads
   it from what still verifies or from its own record; traces/README.md). A lost cmeta is
   the third kind (decision 3).
6. **Deleting a tombstone again** (mode TOMBSTONE) is a no-op that writes nothing: there is
   no row for it. Re-running the steps would record the moved WAL's (0, 0) as the
   tombstone's last OpId: mutant ``retombstone_rewrites_tombstone``
   (``TombstoneKeepsCmetaAndOpid``).
7. **Blocks before the WAL** (Kudu's order) as well as after: both downloads follow the
   merge, in either order; READY needs both. Mutant ``ready_before_wal``
   (``ReadyIsComplete``).
8. **The quarantined WAL's last OpId.** ``wal.last_opid`` is the last OpId of the WAL in
   ``wals/<id>`` (LIVE or DAMAGED); once the directory is moved into the quarantine (or
   absent) it is (0, 0), and what the quarantined WAL held is the tombstone's
   ``superblock.last_opid``. Claim ``QuarantinedWalHasNoOpid``; mutant
   ``quarantine_keeps_wal_opid``.
9. **Full delete** (DeleteTablet mode DELETED). Real Kudu uses it only for a tablet whose
   table was dropped; it removes the cmeta, then the superblock (after the six tombstone
   steps for a READY or FAILED replica; alone for a tombstone). Losing a cmeta is amnesia,
   so the spec models why it is safe: ``drop`` (a ghost: the master dropped the table and
   told this server) must come first (the system guard of ``delete_remove_cmeta``), and
   after any drop no election is won (``become_leader``'s system guard), no replica is
   created or copied again: the tablet's life has ended cluster-wide. The claims about
   votes and commits hold for a tablet that is not dropped. Mutant
   ``full_delete_live_tablet`` (no drop needed): ``VoteOnce``.
10. **An operator's purge of the quarantine** (``revivify local-replica purge-quarantine``
   on a stopped server: impl/storage/offline.py, ``plan_purge``). The quarantine
   directories go, with the blocks only they reference; the superblock (a tombstone's
   DELETED, its last OpId, the path of the QDIR it names), the cmeta and a live WAL stay,
   so a tombstone keeps voting. No process logs it: ``purge`` is the environment's step
   while the server is down, like ``damage`` (the trace checker infers it at the next
   startup: no quarantine, and ABSENT where the WAL was QUARANTINED), budgeted with the
   faults. It is refused while a deletion startup must still roll forward (a DELETED
   superblock whose WAL is still in ``wals/<id>``: steps 5 and 6 write into the QDIR the
   superblock names; ``plan_purge`` skips such a tablet), so a purged tombstone starts up
   as TOMBSTONE, never ROLL_FORWARD (which would fill a quarantine that is gone). Like
   ``plan_purge`` it takes the quarantine whatever the superblock says: a replica copied
   over a tombstone keeps the old quarantine directory, and so does a fully deleted
   tablet. A purged tombstone no longer holds the evidence of its deletion, so
   ``QuarantineHoldsEvidence`` claims it for a tombstone not purged (the ghost ``purged``,
   cleared when a deletion creates a new quarantine directory) and for one a startup must
   roll forward. Mutants ``purge_live_deletion`` (a purge of a deletion startup has not
   finished: ``QuarantineHoldsEvidence``) and ``purge_forgets_opid`` (the purge rewrites the
   tombstone without its last OpId: ``TombstoneKeepsCmetaAndOpid``,
   ``TombstoneRetainsLastOpid``).

Holes the version-3 table closes
--------------------------------
* **The log and committed entries.** ``log`` holds the WAL's entries (index -> term);
  ``own_log`` (ghost) what a server last logged as its own, kept by its tombstone;
  ``committed`` (ghost) the entries each leader committed. Claims ``CommittedInLaterLeaders``
  (every leader of a term at least an entry's holds it) and ``CommittedNeverLost`` (every
  majority that can still vote contains a server that holds it: through deletion, copy,
  merge and wipe alike). They make the vote's up-to-date comparison matter (mutants
  ``vote_ignores_last_opid``, ``tombstone_votes_from_moved_wal``,
  ``vote_index_off_by_one``, which needs two entries of one term, ``max_index`` 2;
  ``commit_without_majority``). Appends come from a
  leader of the follower's term whose log matches at ``first_index - 1`` (``prev_term``);
  a copy downloads its source's log; the source is the server that asked for the copy.
* **No entry above the current term** (``NoEntryAboveCurrentTerm``): a follower appends
  only the batch of a leader of its own current term (``entries_from_leader``), so it has
  adopted the leader's term first (``learn_term``, or the vote that rose to it); a copy
  downloads a WAL no entry of which is above the merged cmeta's term. Mutant
  ``append_without_adopting_term``.
* **Election safety on the leader flag and the current term** (``OneLeaderPerTerm``: no two
  leaders with the same current term), so a candidate that moved to a later term cannot
  lead with the old term's votes (mutant ``leader_from_old_term``).
* **Destination UUIDs** (``dest``) on RequestVote, AppendEntries, StartTabletCopy and
  CreateTablet: a request names the UUID it is for (the config names the original UUIDs,
  generation 0) and a server refuses one for another UUID (the seed's ERR_INVALID_NAME; no
  event is written). A vote counts for the UUID the candidate addressed. Mutant
  ``no_destination_check`` (a wiped server answers for its old UUID): ``OneLeaderPerTerm``,
  ``RetiredUuidNeverVotes``. The config the spec follows is the first one: the new UUID is
  no member of it, though a later config may add it as a new server (a config change may
  name any UUID; see the simplifications of the config change below, and ``model``); what
  no config change brings back is the old UUID, whose votes the wipe forgot.
* **The CAS of DeleteTablet** (``cas_config_index``): a deletion is refused when the
  replica's committed config index is above the caller's (Kudu's
  ``cas_config_opid_index_less_or_equal``). Claim ``DeleteCasHeld``; mutant
  ``delete_ignores_cas``.
* **The exact CAS of a config change** (``config_change``, traced with its ``cas_index``):
  a leader accepts a ChangeConfig only when the caller's ``cas_index`` *equals* its
  committed config index (``<=`` is DeleteTablet's: a deletion planned on an older config
  is still a deletion, but a change is computed from one config and must be applied to
  that one), while no config change of its own is uncommitted (CHANGE_PENDING), and once
  it committed an entry of its own term (LEADER_NOT_READY, ``leader_ready``: set by such
  a ``commit``, cleared whenever leadership ends); the change's entry is the leader's next
  one (``config_index`` = last index + 1), appended by the ``log_append`` that follows.
  ``pending_config`` (durable: the entry is in the WAL, or is the next one appended) is
  the change's index until a ``config_commit`` at or above it commits it, a follower's
  batch starting at or below it cuts it, the WAL leaves ``wals/<id>`` (deletion step 6),
  or a crash comes before the entry was appended; a crash after it keeps it (Kudu reloads
  the pending config from the log), and so do a step-down and a higher term (the entry
  stays in the log until a later leader commits or cuts it). While it is pending, no
  config below it commits (``config_commit_guard``: it was the only uncommitted config
  entry in the leader's log, and its log below it stays). Claims ``ConfigChangeCasHeld``
  (while a change is pending, the committed config is the one it was planned on; ghost
  ``config_planned_on``) and ``OneConfigChangePending`` (at most one open change; ghost
  ``open_config_changes``); mutants ``config_change_ignores_cas`` and
  ``config_change_while_pending``. Simplifications, each for a reason: the spec's config
  stays its fixed set of members (a change moves only the committed config index; what
  a change adds or removes, a wiped server's new UUID among what it may add, and the
  overlap of successive majorities it keeps, are the global checks' business,
  traces/README.md "Membership changes"; the spec's election and commitment claims count
  the first config's members, whose UUIDs a wipe retires for good), so a config change
  entry is known only where the leader that accepted it holds it: ``pending_config`` is
  the change *this* replica accepted, and a follower's log keeps no mark of config
  entries (``config_commit`` never needs a ``config_change`` before it; CHANGE_PENDING
  after readiness only ever sees the leader's own entries, since readiness commits every
  entry of an earlier term). The explorer counts an accepted change as a request
  (``REQUEST_ACTIONS``) and lets its entry take the index one past ``max_index``: at the
  default bounds a leader is ready only once it committed the last index, so its change
  is explored up to its acceptance, and its append and commit need ``--max-index 2``.
* **One operation at a time** (ALREADY_IN_PROGRESS as a rule): claim
  ``OperationNeverReplaced``; mutant ``stc_replaces_operation``.
* **StartTabletCopy carries the caller's idea of the last OpId** (``has_opid``): the
  environment sends it, right or stale, and OPID_MISMATCH decides. (Kudu records (1, 0)
  as the last OpId of a first-time copy's tombstone, so that it refuses an empty
  candidate; the contract keeps (0, 0) and the spec does not need it: such a tombstone
  never held an entry, so it vouches for none, and ``CommittedNeverLost`` is argued from
  the servers that do. Tombstones and copies never lead: ``RunningIsReady``.)
* **Votes during a deletion.** A replica votes while it is being deleted (Kudu holds
  elections during a delete), from its WAL's last OpId until the superblock says DELETED
  and from the recorded one after.
* **What the quarantine holds** after steps 3 and 5 (``QuarantineHoldsEvidence``; mutant
  ``cmeta_not_quarantined``), and how an interrupted copy ends (always a tombstone, never
  READY: ``InterruptedCopyBecomesTombstone``; mutant ``startup_finishes_copy``).

RequestVote answers fold a term rise into themselves (``vote_granted`` / ``vote_denied``
with ``t`` above the current term adopt ``t``, clear the vote or cast it, and end any
leadership): a server logs no ``learn_term`` before such a vote.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

import attrs

from revivify.spec.logic import (
    Bool,
    FMap,
    Int,
    all_,
    all_in_range,
    any_,
    count,
    empty_map,
    empty_map_sym,
    eq,
    forall_entries,
    get,
    implies,
    ite,
    map_eq,
    member,
    ne,
    not_,
    opid_ge,
    overwrite_range,
    put,
    put_if,
    run_of,
)
from revivify.spec.merge import merge_cmeta
from revivify.spec.model import (
    BLOCKS_ABSENT,
    BLOCKS_DAMAGED,
    BLOCKS_PARTIAL,
    BLOCKS_PRESENT,
    COPY_ACCEPTED,
    COPY_BEGUN,
    COPY_MERGED,
    COPY_READY,
    COPYING,
    DAMAGE_BLOCKS,
    DAMAGE_CMETA,
    DAMAGE_KINDS,
    DAMAGE_WAL,
    DELETED,
    DELETING_OPS,
    DOES_NOT_EXIST,
    FULL_DELETE_CMETA_GONE,
    MAP_FIELDS,
    NO_SERVER,
    NO_VOTE,
    OP_COPY,
    OP_COPY_DELETE,
    OP_DELETE,
    OP_FULL_DELETE,
    OP_NONE,
    OP_ROLL_FORWARD,
    OP_UNDO_COPY,
    READY,
    STARTUP_COPYING_TO_DELETED,
    STARTUP_FAILED,
    STARTUP_NOTHING,
    STARTUP_READY,
    STARTUP_ROLL_FORWARD,
    STARTUP_TOMBSTONE,
    STC_ALREADY_IN_PROGRESS,
    STC_ILLEGAL_STATE,
    STC_NAMES,
    STC_OPID_MISMATCH,
    STC_STALE_TERM,
    WAL_ABSENT,
    WAL_DAMAGED,
    WAL_IN_PLACE,
    WAL_LIVE,
    WAL_QUARANTINED,
    ServerState,
    SystemState,
    majority,
)

Params = dict[str, Any]
LocalGuard = Callable[..., Bool]
# A guard spelled as named conditions (each must hold): the guard is their conjunction, and a
# trace checker names the ones a refused event breaks.
Conditions = Callable[..., list[tuple[str, Bool]]]
LocalEffect = Callable[..., ServerState]
SystemGuard = Callable[..., Bool]
Enumerator = Callable[[SystemState, int, "Bounds"], Iterable[Params]]


@attrs.frozen
class Bounds:
    """Bounds on what the explorer and Hypothesis feed the spec (the environment), never on
    what the spec allows.

    ``max_term`` and ``max_index`` bound elections and appends; ``max_wipes`` bounds the
    environment's faults of a run (``FAULT_ACTIONS``: wipes, damage, purges of the
    quarantine and the drop of the table; and ``FAILURE_ACTIONS``: a copy that fails),
    ``max_crashes`` crashes; the spec itself bounds none of them.
    ``max_ops_in_flight`` bounds the lifecycle requests the master and the leaders make:
    a DeleteTablet or a StartTabletCopy is sent to a server only while fewer than this many
    *other* servers have a lifecycle operation in flight (concurrent deletions and copies of
    several replicas of one tablet multiply the states without a new kind of step; the
    server's own ALREADY_IN_PROGRESS is its guard's business, not this bound's).
    ``max_requests`` bounds how many accepted requests of the environment
    (``REQUEST_ACTIONS``: lifecycle requests and config changes) a run makes in all (the
    explorer counts them like crashes)."""

    max_term: int = 3
    max_index: int = 2
    max_crashes: int = 2
    max_wipes: int = 1
    max_ops_in_flight: int = 1
    max_requests: int = 255


# Events of the environment no process logs: a disk wipe, disk damage, an operator's purge
# of the quarantine (all three strike a server that is down) and the drop of the table (the
# master's decision, a ghost here). The explorer, Hypothesis and the walks count them
# against ``Bounds.max_wipes``.
FAULT_ACTIONS: tuple[str, ...] = ("wipe", "damage", "purge", "drop")

# Requests of the environment the explorer counts against ``Bounds.max_requests``: the
# lifecycle requests (a DeleteTablet, a StartTabletCopy accepted, a full delete; a
# StartTabletCopy of a READY replica counts twice: its own deletion starts with
# ``delete_shutdown``) and a ChangeConfig a leader accepted (``config_change``).
REQUEST_ACTIONS: tuple[str, ...] = ("delete_shutdown", "stc_accept", "delete_remove_cmeta",
                                    "config_change")
# Failures a process logs (a copy that fails or is cancelled): the explorer counts them with
# the environment's faults (``Bounds.max_wipes``).
FAILURE_ACTIONS: tuple[str, ...] = ("copy_abort",)

# Parameters a log or a copy carries as a whole map (index -> term): z3 Arrays in proofs.
MAP_PARAMS: frozenset[str] = frozenset({"entries", "remote_log"})


# What a trace checker replaying one server's events puts in place of a spec parameter the
# trace does not carry. A server traces a request only after it passed the checks these
# parameters feed (the destination UUID: the server's own; a DeleteTablet's CAS: one that
# passes), and the log maps are not in traces at all (the replay keeps no logs). prev_term
# is in version-3 traces; a version-2 line lacks it (the term of its last entry, for an
# append).
def _own_uuid(s: ServerState, p: Params) -> Any:
    return s.uuid_gen


def _passing_cas(s: ServerState, p: Params) -> Any:
    return s.config_index


def _no_log(s: ServerState, p: Params) -> Any:
    return empty_map(0)


def _last_entry_term(s: ServerState, p: Params) -> Any:
    return s.wal_last_term


TRACE_FILLS: dict[str, Callable[[ServerState, Params], Any]] = {
    "dest": _own_uuid,
    "cas_config_index": _passing_cas,
    "entries": _no_log,
    "remote_log": _no_log,
    "prev_term": _last_entry_term,
}
# The parameters no trace ever carries (a writer must not write them).
SPEC_ONLY_PARAMS: frozenset[str] = frozenset({"dest", "cas_config_index", "entries",
                                              "remote_log"})


@attrs.frozen
class Action:
    """A row of the transition table."""

    name: str
    seed: str
    params: tuple[str, ...]
    guard: LocalGuard
    effect: LocalEffect
    enum: Enumerator
    system_guard: SystemGuard | None = None
    # Actions that only move volatile state (a crash keeps nothing of them).
    volatile_only: bool = False
    # The guard's named conditions (for explanations only: the guard decides; a mutant that
    # replaces the guard may leave them).
    conditions: Conditions | None = None
    # The part of the system guard that only compares server identities (``is_self``,
    # ``not_self``): a replay of one server's events checks it with the node's own identity
    # (it reads nothing of the other servers but how many there are).
    identity_guard: SystemGuard | None = None

    def enabled_local(self, s: ServerState, p: Params) -> Bool:
        return self.guard(s, **p)

    def enabled(self, sys: SystemState, i: int, p: Params) -> Bool:
        local = self.guard(sys[i], **p)
        if self.system_guard is None:
            return local
        return all_(local, self.system_guard(sys, i, **p))

    def apply(self, sys: SystemState, i: int, p: Params) -> SystemState:
        new = self.effect(sys[i], **p)
        return (*sys[:i], new, *sys[i + 1 :])


def _from_conditions(conditions: Conditions) -> LocalGuard:
    """The guard that is the conjunction of named conditions, named for them
    (``copy_mark_ready_conditions`` gives ``copy_mark_ready_guard``)."""

    def guard(s: ServerState, *args: Any, **p: Any) -> Bool:
        return all_(*[c for _, c in conditions(s, *args, **p)])

    name = conditions.__name__.removesuffix("_conditions") + "_guard"
    guard.__name__ = guard.__qualname__ = name
    guard.__doc__ = conditions.__doc__
    return guard


# ---------------------------------------------------------------------------------------
# Helpers shared by guards (all interpreter-neutral).


def last_logged(s: ServerState) -> tuple[Int, Int]:
    """The OpId a replica votes and answers from: its WAL while the superblock says READY
    (running, FAILED, or being deleted before step 4), else the tombstone's retained last
    OpId (a COPYING replica's too: the WAL it downloads is not yet its own log)."""
    ready = eq(s.sb, READY)
    return ite(ready, s.wal_last_term, s.sb_last_term), ite(ready, s.wal_last_index,
                                                             s.sb_last_index)


def votes_lazily(s: ServerState) -> Bool:
    """A tombstone without cmeta that votes from an empty one, created by its first vote
    (decision 3): not one whose cmeta a disk fault removed, and only while nothing but a
    copy is in flight."""
    return all_(eq(s.sb, DELETED), not_(s.cmeta), not_(s.cmeta_lost),
                member(s.op, (OP_NONE, OP_COPY)))


def in_consensus(s: ServerState) -> Bool:
    """May take part in Raft for this tablet: up, not FAILED, with a cmeta (or a tombstone
    that creates one lazily). A deletion or a copy in flight does not stop it (Kudu holds
    elections during both)."""
    return all_(s.up, not_(s.failed), any_(s.cmeta, votes_lazily(s)))


def wal_in_place(s: ServerState) -> Bool:
    """The WAL directory is in ``wals/<id>`` (live, or live but damaged)."""
    return member(s.wal, WAL_IN_PLACE)


def pending_config_held(s: ServerState) -> Bool:
    """The WAL can hold the pending config change's entry: none is pending, or its index
    is at most one past the last index of a WAL in ``wals/<id>`` (one past: accepted, not
    yet appended)."""
    return any_(eq(s.pending_config, 0),
                all_(wal_in_place(s), s.pending_config <= s.wal_last_index + 1))


def intact(s: ServerState) -> Bool:
    """Everything a replica starts from is there and undamaged: the cmeta, a live WAL that
    verifies, and every data block the superblock lists."""
    return all_(s.cmeta, eq(s.wal, WAL_LIVE), eq(s.blocks, BLOCKS_PRESENT))


def is_member(s: ServerState) -> Bool:
    """Still on the UUID that the tablet's Raft config names: a member of the config the
    spec follows (a wiped server is not; its new UUID may join a later config, which the
    spec does not follow: ``model``)."""
    return eq(s.uuid_gen, 0)


def addressed(s: ServerState, dest: Int) -> Bool:
    """A request names this server's current UUID (the seed's ``to == self.uuid``)."""
    return eq(dest, s.uuid_gen)


def as_reported(s: ServerState) -> ServerState:
    """A server state built from a durable state a trace reports, with the ghost facts
    that explain it (for a checker that starts from such a state, concrete values only):
    the last OpId it logged as its own (a tombstone's retained one, else its WAL's), and
    why its cmeta is missing: a READY replica, or a tombstone that recorded a last OpId
    without ever copying its cmeta into the quarantine, lost it to a disk fault; a
    tombstone whose cmeta the quarantine holds removed it in a full delete; a tombstone
    with no last OpId never had one (a first-time copy that crashed). A tombstone without
    a quarantine directory had it purged by an operator (``purged``; without its cmeta it
    reads as one that lost it: the quarantine that told the two apart is gone)."""
    mine = s.sb == READY
    no_cmeta = not s.cmeta
    return attrs.evolve(
        s,
        ghost_last_term=s.wal_last_term if mine else s.sb_last_term,
        ghost_last_index=s.wal_last_index if mine else s.sb_last_index,
        cmeta_lost=no_cmeta and (mine or (s.sb == DELETED and not s.q_cmeta
                                          and (s.sb_last_term, s.sb_last_index) != (0, 0))),
        cmeta_removed=no_cmeta and s.sb == DELETED and bool(s.qdir and s.q_cmeta),
        dropped=no_cmeta and s.sb == DELETED and bool(s.qdir and s.q_cmeta),
        purged=s.sb == DELETED and not s.qdir,
    )


# The map fields no trace carries (a replay of one server keeps them empty: no local
# guard reads them).
UNTRACED_MAPS: tuple[str, ...] = tuple(MAP_FIELDS)


def startup_case(s: ServerState) -> Int:
    """Seed "Tablet startup": which of the cases the on-disk state falls into.

    A DELETED superblock whose WAL directory is still in place (damaged or not) rolls the
    deletion forward; COPYING becomes a tombstone; READY starts only when everything is
    there and undamaged (``intact``), else the replica stays offline, FAILED (a missing
    cmeta, a WAL that fails verification or is gone, missing or corrupt blocks). A
    tombstone whose quarantine an operator purged is never rolled forward: the purge is
    refused while its WAL is still in place (decision 10)."""
    return ite(
        eq(s.sb, DELETED),
        ite(wal_in_place(s), STARTUP_ROLL_FORWARD, STARTUP_TOMBSTONE),
        ite(
            eq(s.sb, COPYING),
            STARTUP_COPYING_TO_DELETED,
            ite(
                eq(s.sb, READY),
                ite(intact(s), STARTUP_READY, STARTUP_FAILED),
                STARTUP_NOTHING,
            ),
        ),
    )


def at_step(s: ServerState, ops: tuple[int, ...], step: int) -> Bool:
    return all_(s.up, member(s.op, ops), eq(s.step, step))


def empty_log(s: ServerState) -> Any:
    """An empty log of the kind of ``s``'s logs (a concrete map or a z3 Array)."""
    return empty_map_sym(s.log, 0)


def _ev(s: ServerState, **changes: Any) -> ServerState:
    return attrs.evolve(s, **changes)


# What a replica keeps of a pending config change once its entry is committed, cut from its
# log or moved out of ``wals/<id>``: nothing (the ghosts about it go with it).
NO_PENDING_CONFIG: dict[str, int] = {"pending_config": 0, "config_planned_on": 0,
                                     "open_config_changes": 0}


def _pending_config_unless(s: ServerState, gone: Bool) -> dict[str, Any]:
    """The pending config change's fields, cleared where ``gone`` holds."""
    return {f: ite(gone, 0, getattr(s, f)) for f in NO_PENDING_CONFIG}


def _none(sys: SystemState, i: int, b: Bounds) -> Iterator[Params]:
    yield {}


def requests_held_back(sys: SystemState, i: int, b: Bounds) -> bool:
    """The environment's bound ``Bounds.max_ops_in_flight`` (concrete states only)."""
    busy = sum(1 for j, k in enumerate(sys) if j != i and k.op != OP_NONE)
    return busy >= b.max_ops_in_flight


def _server(sys: SystemState, index: Int, pred: Callable[[ServerState], Bool]) -> Bool:
    """``pred(sys[index])`` for a server index that may be a z3 term."""
    return any_(*[all_(eq(index, j), pred(k)) for j, k in enumerate(sys)])


def not_dropped_here(sys: SystemState, i: int, **_: Any) -> Bool:
    """The tablet's table was not dropped (as far as this server was told)."""
    return not_(sys[i].dropped)


def dropped_here(sys: SystemState, i: int, **_: Any) -> Bool:
    """The master dropped the table and told this server (a full delete needs it)."""
    return sys[i].dropped


# ---------------------------------------------------------------------------------------
# Tablet creation (by the master's CreateTablet): written with the superblock last, so the
# superblock is the commit point (seed: "The primary indicator of a tablet's existence is
# the presence of a superblock file").


def create_tablet_conditions(s: ServerState, config_index: Int,
                             dest: Int) -> list[tuple[str, Bool]]:
    return [
        ("up", s.up),
        ("no operation in flight", eq(s.op, OP_NONE)),
        ("no superblock (the tablet does not exist here)", eq(s.sb, DOES_NOT_EXIST)),
        ("no cmeta", not_(s.cmeta)),
        ("config_index >= 0", config_index >= 0),
        ("addressed to this server's UUID", addressed(s, dest)),
    ]


create_tablet_guard = _from_conditions(create_tablet_conditions)


def create_tablet_effect(s: ServerState, config_index: Int, dest: Int) -> ServerState:
    return _ev(s, sb=READY, cmeta=True, term=0, voted_for=NO_VOTE, config_index=config_index,
               wal=WAL_LIVE, wal_last_term=0, wal_last_index=0, log=empty_log(s),
               own_log=empty_log(s), ghost_last_term=0, ghost_last_index=0,
               blocks=BLOCKS_PRESENT, running=True, failed=False)


def create_tablet_enum(sys: SystemState, i: int, b: Bounds) -> Iterator[Params]:
    # The master creates the tablet on the UUIDs of its first config (generation 0).
    yield {"config_index": 0, "dest": 0}


# ---------------------------------------------------------------------------------------
# Deletion, seed steps 1-6.


def delete_shutdown_conditions(s: ServerState,
                               cas_config_index: Int) -> list[tuple[str, Bool]]:
    """Step 1: a DeleteTablet of a READY replica (running or FAILED), or the deletion a
    StartTabletCopy of one does first."""
    master = eq(s.op, OP_NONE)
    return [
        ("up", s.up),
        ("a READY superblock (a running or a FAILED replica)", eq(s.sb, READY)),
        ("no operation in flight (but the accepted StartTabletCopy's own deletion)",
         any_(master, all_(eq(s.op, OP_COPY_DELETE), eq(s.step, 0)))),
        ("a DeleteTablet's CAS: the committed config index is at most the caller's",
         implies(master, s.config_index <= cas_config_index)),
    ]


delete_shutdown_guard = _from_conditions(delete_shutdown_conditions)


def delete_shutdown_effect(s: ServerState, cas_config_index: Int) -> ServerState:
    master = eq(s.op, OP_NONE)
    return _ev(s, running=False, leader=False, leader_ready=False, failed=False,
               op=ite(master, OP_DELETE, s.op), step=1,
               op_arg=ite(master, cas_config_index, s.op_arg))


def delete_shutdown_enum(sys: SystemState, i: int, b: Bounds) -> Iterator[Params]:
    # The master's view of the committed config: any replica's (a stale one included).
    if requests_held_back(sys, i, b):
        return
    for cas in sorted({k.config_index for k in sys}):
        yield {"cas_config_index": cas}


def delete_create_qdir_conditions(s: ServerState) -> list[tuple[str, Bool]]:
    return [("a deletion in flight, its replica shut down (step 1 done)",
             at_step(s, DELETING_OPS, 1))]


delete_create_qdir_guard = _from_conditions(delete_create_qdir_conditions)


def delete_create_qdir_effect(s: ServerState) -> ServerState:
    # A new quarantine directory (an earlier deletion's stays beside it): whatever an
    # operator purged before, this deletion's evidence is kept (``purged`` cleared).
    return _ev(s, qdir=True, q_sb=False, q_cmeta=False, step=2, purged=False)


def delete_copy_superblock_conditions(s: ServerState) -> list[tuple[str, Bool]]:
    return [
        ("a deletion in flight, its quarantine directory created (step 2 done)",
         at_step(s, DELETING_OPS, 2)),
        ("a quarantine directory", s.qdir),
    ]


delete_copy_superblock_guard = _from_conditions(delete_copy_superblock_conditions)


def delete_copy_superblock_effect(s: ServerState) -> ServerState:
    return _ev(s, q_sb=True, step=3)


def delete_mark_deleted_conditions(s: ServerState) -> list[tuple[str, Bool]]:
    return [
        ("a deletion in flight, its superblock copied (step 3 done)",
         at_step(s, DELETING_OPS, 3)),
        ("the superblock's copy in the quarantine", s.q_sb),
    ]


delete_mark_deleted_guard = _from_conditions(delete_mark_deleted_conditions)


def delete_mark_deleted_effect(s: ServerState) -> ServerState:
    # A READY (or FAILED) replica records its WAL's last OpId (damage does not change it).
    # A COPYING one keeps the tombstone's: the downloaded WAL was never its own log.
    from_ready = eq(s.sb, READY)
    return _ev(
        s,
        sb=DELETED,
        sb_last_term=ite(from_ready, s.wal_last_term, s.sb_last_term),
        sb_last_index=ite(from_ready, s.wal_last_index, s.sb_last_index),
        sb_qdir=True,
        blocks=BLOCKS_ABSENT,  # the live superblock lists none; the QDIR copy has the old list
        step=4,
    )


def delete_copy_cmeta_conditions(s: ServerState) -> list[tuple[str, Bool]]:
    return [
        ("a deletion (or its roll-forward) in flight, its superblock marked DELETED "
         "(step 4 done)", at_step(s, (*DELETING_OPS, OP_ROLL_FORWARD), 4)),
        ("a DELETED superblock", eq(s.sb, DELETED)),
        ("the superblock naming its quarantine directory", s.sb_qdir),
    ]


delete_copy_cmeta_guard = _from_conditions(delete_copy_cmeta_conditions)


def delete_copy_cmeta_effect(s: ServerState) -> ServerState:
    return _ev(s, q_cmeta=s.cmeta, step=5)


def delete_move_wal_conditions(s: ServerState) -> list[tuple[str, Bool]]:
    return [
        ("a deletion (or its roll-forward) in flight, its cmeta copied (step 5 done)",
         at_step(s, (*DELETING_OPS, OP_ROLL_FORWARD), 5)),
        ("a DELETED superblock", eq(s.sb, DELETED)),
    ]


delete_move_wal_guard = _from_conditions(delete_move_wal_conditions)


def delete_move_wal_effect(s: ServerState) -> ServerState:
    # A damaged WAL directory is moved like a live one (the move does not read it). What it
    # held is the tombstone's last OpId now; wals/<id> holds nothing (decision 8).
    copy_next = eq(s.op, OP_COPY_DELETE)
    return _ev(
        s,
        wal=ite(wal_in_place(s), WAL_QUARANTINED, s.wal),
        wal_last_term=0,
        wal_last_index=0,
        log=empty_log(s),
        # A copy's own deletion hands over to the copy; every other deletion is finished.
        op=ite(copy_next, OP_COPY, OP_NONE),
        step=0,
        op_arg=ite(copy_next, s.op_arg, 0),
        op_src=ite(copy_next, s.op_src, NO_SERVER),
        **NO_PENDING_CONFIG,
    )


# Full delete (decision 9): after the tombstone, the cmeta goes, then the superblock.


def delete_remove_cmeta_conditions(s: ServerState,
                                   cas_config_index: Int) -> list[tuple[str, Bool]]:
    return [
        ("up", s.up),
        ("a tombstone at rest (no operation in flight)",
         all_(eq(s.sb, DELETED), eq(s.op, OP_NONE))),
        ("a DeleteTablet's CAS: the committed config index is at most the caller's",
         s.config_index <= cas_config_index),
    ]


delete_remove_cmeta_guard = _from_conditions(delete_remove_cmeta_conditions)


def delete_remove_cmeta_effect(s: ServerState, cas_config_index: Int) -> ServerState:
    # The vote history stays (it happened); the server has forgotten it (cmeta_removed).
    return _ev(s, cmeta=False, term=0, voted_for=NO_VOTE, config_index=0, leader=False,
               leader_ready=False, op=OP_FULL_DELETE, step=FULL_DELETE_CMETA_GONE,
               op_arg=cas_config_index, cmeta_removed=True)


def delete_remove_superblock_conditions(s: ServerState) -> list[tuple[str, Bool]]:
    return [
        ("a full delete in flight, its cmeta removed",
         at_step(s, (OP_FULL_DELETE,), FULL_DELETE_CMETA_GONE)),
        ("a DELETED superblock", eq(s.sb, DELETED)),
    ]


delete_remove_superblock_guard = _from_conditions(delete_remove_superblock_conditions)


def delete_remove_superblock_effect(s: ServerState) -> ServerState:
    # The tablet no longer exists here; the quarantine stays until an operator purges it
    # (``purge``).
    return _ev(s, sb=DOES_NOT_EXIST, sb_last_term=0, sb_last_index=0, sb_qdir=False,
               own_log=empty_map_sym(s.own_log, 0), ghost_last_term=0, ghost_last_index=0,
               op=OP_NONE, step=0, op_arg=0)


def drop_conditions(s: ServerState) -> list[tuple[str, Bool]]:
    """The master drops the table (once, as far as this server is concerned)."""
    return [("the table not dropped yet", not_(s.dropped))]


drop_guard = _from_conditions(drop_conditions)


def drop_effect(s: ServerState) -> ServerState:
    return _ev(s, dropped=True)


# ---------------------------------------------------------------------------------------
# StartTabletCopy: every check runs before anything is touched (decision 4).


def stc_failures(s: ServerState, caller_term: Int, expected_state: Int, has_opid: Int,
                 opid_term: Int, opid_index: Int, **_: Any) -> list[tuple[int, Bool]]:
    """The checks in the order they run, each as (answer, condition that fails it)."""
    lt, li = last_logged(s)
    return [
        (STC_ALREADY_IN_PROGRESS, any_(eq(s.sb, COPYING), ne(s.op, OP_NONE))),
        (STC_ILLEGAL_STATE, ne(s.sb, expected_state)),
        (STC_STALE_TERM, caller_term < lt),
        (STC_OPID_MISMATCH, all_(ne(has_opid, 0), any_(ne(opid_term, lt), ne(opid_index, li)))),
    ]


def first_failure_guard(failures: list[tuple[int, Bool]], reason: Int) -> Bool:
    """reason is the first check that fails (all before it passed)."""
    options = []
    passed: list[Bool] = []
    for code, fails in failures:
        options.append(all_(eq(reason, code), fails, *[not_(p) for p in passed]))
        passed.append(fails)
    return any_(*options)


def stc_request_ok(s: ServerState, caller: Int, caller_term: Int, dest: Int) -> Bool:
    """What a StartTabletCopy must be before its checks run: this server is up and is the
    UUID the request names (else ERR_INVALID_NAME, not traced), from a caller in a term."""
    return all_(s.up, addressed(s, dest), caller >= 0, caller_term >= 0)


# What each StartTabletCopy check needs to pass (``stc_failures``), by its answer.
_STC_PASSES: dict[int, str] = {
    STC_ALREADY_IN_PROGRESS: "no copy or other operation in flight (else ALREADY_IN_PROGRESS)",
    STC_ILLEGAL_STATE: "the superblock in the caller's expected_state (else ILLEGAL_STATE)",
    STC_STALE_TERM: "caller_term at least the last logged term (else STALE_TERM)",
    STC_OPID_MISMATCH: "the caller's OpId, when it sends one, the last logged one "
                       "(else OPID_MISMATCH)",
}
_STC_REQUEST = "up, addressed to this server's UUID, from a caller in a term"


def stc_accept_conditions(s: ServerState, caller: Int, caller_term: Int, expected_state: Int,
                          has_opid: Int, opid_term: Int, opid_index: Int,
                          dest: Int) -> list[tuple[str, Bool]]:
    fails = stc_failures(s, caller_term, expected_state, has_opid, opid_term, opid_index)
    # A replica that lost its cmeta to a disk fault never takes a copy (decision 3).
    return [
        (_STC_REQUEST, stc_request_ok(s, caller, caller_term, dest)),
        ("its cmeta not lost to a disk fault", not_(s.cmeta_lost)),
        *[(_STC_PASSES[code], not_(f)) for code, f in fails],
    ]


stc_accept_guard = _from_conditions(stc_accept_conditions)


def stc_accept_effect(s: ServerState, caller: Int, caller_term: Int, expected_state: Int,
                      has_opid: Int, opid_term: Int, opid_index: Int,
                      dest: Int) -> ServerState:
    # A READY (or FAILED) replica is tombstoned first; the caller is the copy's source.
    return _ev(s, op=ite(eq(s.sb, READY), OP_COPY_DELETE, OP_COPY), step=0,
               op_arg=caller_term, op_src=caller)


def stc_reject_conditions(s: ServerState, caller: Int, caller_term: Int, expected_state: Int,
                          has_opid: Int, opid_term: Int, opid_index: Int, dest: Int,
                          reason: Int) -> list[tuple[str, Bool]]:
    """The second condition is no conjunction (the first failing check, in order): a
    trace checker explains it by the checks' answers."""
    fails = stc_failures(s, caller_term, expected_state, has_opid, opid_term, opid_index)
    return [
        (_STC_REQUEST, stc_request_ok(s, caller, caller_term, dest)),
        ("reason the first StartTabletCopy check that fails",
         first_failure_guard(fails, reason)),
    ]


stc_reject_guard = _from_conditions(stc_reject_conditions)


def stc_reject_effect(s: ServerState, **_: Any) -> ServerState:
    return s


def caller_is_another(sys: SystemState, i: int, caller: Int, **_: Any) -> Bool:
    """The caller is another server of the system."""
    return all_(ne(caller, i), caller >= 0, caller < len(sys))


def stc_accept_system_guard(sys: SystemState, i: int, **p: Any) -> Bool:
    """From another server, for a tablet whose table was not dropped."""
    return all_(caller_is_another(sys, i, **p), not_dropped_here(sys, i))


def stc_requests(sys: SystemState, i: int, b: Bounds) -> Iterator[Params]:
    """Requests from every replica that believes itself leader (stale ones included), for
    every state the caller might believe the follower is in, without a last OpId or with
    one: the follower's (what the caller learnt from it) or the caller's own (a stale
    guess). Addressed to the follower's UUID in the config (generation 0)."""
    s = sys[i]
    if requests_held_back(sys, i, b):
        return
    lt, li = last_logged(s)
    for j, caller in enumerate(sys):
        if j == i or not (caller.up and caller.leader):
            continue
        opids = dict.fromkeys([(0, 0, 0), (1, lt, li),
                               (1, caller.wal_last_term, caller.wal_last_index)])
        for expected in (DOES_NOT_EXIST, DELETED, READY):
            for has, ot, oi in opids:
                yield {"caller": j, "caller_term": caller.term, "expected_state": expected,
                       "has_opid": has, "opid_term": ot, "opid_index": oi, "dest": 0}


def stc_reject_enum(sys: SystemState, i: int, b: Bounds) -> Iterator[Params]:
    for p in stc_requests(sys, i, b):
        for code in STC_NAMES:
            if code:
                yield {**p, "reason": code}


# ---------------------------------------------------------------------------------------
# Follower tablet copy, seed steps 1-6 (the downloads of step 3 and 4 in either order).


def copy_begin_conditions(s: ServerState) -> list[tuple[str, Bool]]:
    return [("a StartTabletCopy accepted, its copy not begun",
             at_step(s, (OP_COPY,), COPY_ACCEPTED))]


copy_begin_guard = _from_conditions(copy_begin_conditions)


def copy_begin_effect(s: ServerState) -> ServerState:
    # Keep last OpId (the tombstone's knowledge, needed to vote if we crash now), clear QDIR.
    return _ev(s, sb=COPYING, sb_qdir=False, step=COPY_BEGUN)


def copy_source_ok(sys: SystemState, i: int, pred: Callable[[ServerState], Bool]) -> Bool:
    """The copy's source (the server that asked for it) is up and serving its replica, and
    ``pred`` holds of it."""
    return _server(sys, sys[i].op_src,
                   lambda src: all_(src.up, src.running, eq(src.sb, READY), pred(src)))


def copy_merge_cmeta_conditions(s: ServerState, remote_term: Int,
                                remote_config_index: Int) -> list[tuple[str, Bool]]:
    return [
        ("a COPYING replica, its cmeta not yet merged", at_step(s, (OP_COPY,), COPY_BEGUN)),
        ("remote_term >= 0", remote_term >= 0),
        ("remote_config_index >= 0", remote_config_index >= 0),
    ]


copy_merge_cmeta_guard = _from_conditions(copy_merge_cmeta_conditions)


def copy_merge_cmeta_effect(s: ServerState, remote_term: Int,
                            remote_config_index: Int) -> ServerState:
    m = merge_cmeta(s.cmeta, s.term, s.voted_for, remote_term, remote_config_index)
    return _ev(s, cmeta=True, term=m.term, voted_for=m.voted_for,
               config_index=m.config_index, step=COPY_MERGED)


def remote_cmeta_is_sources(sys: SystemState, i: int, remote_term: Int,
                            remote_config_index: Int) -> Bool:
    """The downloaded cmeta is the source's."""
    return copy_source_ok(sys, i, lambda src: all_(
        src.cmeta, eq(remote_term, src.term), eq(remote_config_index, src.config_index)))


def copy_merge_cmeta_enum(sys: SystemState, i: int, b: Bounds) -> Iterator[Params]:
    # What any other server would send (the system guard takes the copy's source's only).
    for j, src in enumerate(sys):
        if j != i:
            yield {"remote_term": src.term, "remote_config_index": src.config_index}


# A copy's downloads (WAL and blocks, in either order) and its READY follow the merge.
_MERGED = "a COPYING replica with its cmeta merged"


def copy_download_wal_conditions(s: ServerState, remote_last_term: Int,
                                 remote_last_index: Int,
                                 remote_log: Any) -> list[tuple[str, Bool]]:
    return [
        (_MERGED, at_step(s, (OP_COPY,), COPY_MERGED)),
        ("the WAL not yet downloaded (nothing in wals/<id>)", not_(wal_in_place(s))),
        ("remote_last_term >= 0", remote_last_term >= 0),
        ("remote_last_index >= 0", remote_last_index >= 0),
        ("remote_last_term <= the merged cmeta's term", remote_last_term <= s.term),
    ]


copy_download_wal_guard = _from_conditions(copy_download_wal_conditions)


def copy_download_wal_effect(s: ServerState, remote_last_term: Int, remote_last_index: Int,
                             remote_log: Any) -> ServerState:
    return _ev(s, wal=WAL_LIVE, wal_last_term=remote_last_term,
               wal_last_index=remote_last_index, log=remote_log)


def remote_wal_is_sources(sys: SystemState, i: int, remote_last_term: Int,
                          remote_last_index: Int, remote_log: Any) -> Bool:
    """The downloaded WAL is the source's (its entries and its last OpId), and none of its
    entries is of a term above the merged cmeta's: the local guard bounds the last entry's
    term, this bounds every entry's (the same thing for a Raft log, whose terms never
    decrease along it; stated per entry because that is what ``NoEntryAboveCurrentTerm``
    needs, and the prover does not assume the log's shape). No trace carries the entries
    (``TRACE_FILLS``), so a trace checker never reads this part."""
    return all_(
        copy_source_ok(sys, i, lambda src: all_(
            eq(src.wal, WAL_LIVE), eq(remote_last_term, src.wal_last_term),
            eq(remote_last_index, src.wal_last_index), map_eq(remote_log, src.log))),
        forall_entries(remote_log, lambda j, u: u <= sys[i].term))


def copy_download_wal_enum(sys: SystemState, i: int, b: Bounds) -> Iterator[Params]:
    # What any other server would send (the system guard takes the copy's source's only).
    for j, src in enumerate(sys):
        if j != i:
            yield {"remote_last_term": src.wal_last_term,
                   "remote_last_index": src.wal_last_index, "remote_log": src.log}


def copy_download_block_conditions(s: ServerState) -> list[tuple[str, Bool]]:
    return [
        (_MERGED, at_step(s, (OP_COPY,), COPY_MERGED)),
        ("blocks still to download", ne(s.blocks, BLOCKS_PRESENT)),
    ]


copy_download_block_guard = _from_conditions(copy_download_block_conditions)


def copy_download_block_effect(s: ServerState) -> ServerState:
    return _ev(s, blocks=BLOCKS_PARTIAL)


def copy_blocks_done_conditions(s: ServerState) -> list[tuple[str, Bool]]:
    return [
        (_MERGED, at_step(s, (OP_COPY,), COPY_MERGED)),
        ("blocks still to download", ne(s.blocks, BLOCKS_PRESENT)),
    ]


copy_blocks_done_guard = _from_conditions(copy_blocks_done_conditions)


def copy_blocks_done_effect(s: ServerState) -> ServerState:
    return _ev(s, blocks=BLOCKS_PRESENT)


def copy_mark_ready_conditions(s: ServerState) -> list[tuple[str, Bool]]:
    """Step 5: the cmeta merged, the WAL and every block downloaded (in either order)."""
    return [
        (_MERGED, at_step(s, (OP_COPY,), COPY_MERGED)),
        ("a cmeta", s.cmeta),
        ("the WAL downloaded", eq(s.wal, WAL_LIVE)),
        ("every block downloaded", eq(s.blocks, BLOCKS_PRESENT)),
    ]


copy_mark_ready_guard = _from_conditions(copy_mark_ready_conditions)


def copy_mark_ready_effect(s: ServerState) -> ServerState:
    # The downloaded WAL is now this replica's log; the tombstone's OpId is superseded.
    return _ev(s, sb=READY, sb_last_term=0, sb_last_index=0, sb_qdir=False,
               own_log=s.log, ghost_last_term=s.wal_last_term,
               ghost_last_index=s.wal_last_index, step=COPY_READY)


def copy_start_replica_conditions(s: ServerState) -> list[tuple[str, Bool]]:
    return [
        ("a copy in flight, its superblock written READY (step 5 done)",
         at_step(s, (OP_COPY,), COPY_READY)),
        ("a READY superblock", eq(s.sb, READY)),
    ]


copy_start_replica_guard = _from_conditions(copy_start_replica_conditions)


def copy_start_replica_effect(s: ServerState) -> ServerState:
    return _ev(s, running=True, op=OP_NONE, step=0, op_arg=0, op_src=NO_SERVER)


def copy_abort_conditions(s: ServerState) -> list[tuple[str, Bool]]:
    """A copy fails or is cancelled before its superblock says READY (decision 1)."""
    return [
        ("up", s.up),
        ("a copy in flight", eq(s.op, OP_COPY)),
        ("its superblock not yet written READY", s.step < COPY_READY),
    ]


copy_abort_guard = _from_conditions(copy_abort_conditions)


def copy_abort_effect(s: ServerState) -> ServerState:
    # Before copy_begin nothing changed; after it the COPYING replica tombstones itself
    # (deletion steps 2-6, as startup does).
    begun = s.step >= COPY_BEGUN
    return _ev(s, op=ite(begun, OP_UNDO_COPY, OP_NONE), step=ite(begun, 1, 0), op_arg=0,
               op_src=NO_SERVER)


# ---------------------------------------------------------------------------------------
# Crash, startup and the environment's faults.


def crash_conditions(s: ServerState) -> list[tuple[str, Bool]]:
    return [("up", s.up)]


crash_guard = _from_conditions(crash_conditions)


def crash_effect(s: ServerState) -> ServerState:
    # A pending config change whose entry is in the WAL outlives the crash (Kudu reloads its
    # pending config from the log); one whose entry was never appended is lost with the
    # process.
    return _ev(s, up=False, running=False, failed=False, leader=False, leader_ready=False,
               op=OP_NONE, step=0, op_arg=0, op_src=NO_SERVER,
               **_pending_config_unless(s, s.pending_config > s.wal_last_index))


def startup_conditions(s: ServerState, case: Int) -> list[tuple[str, Bool]]:
    """The second condition is a classification (``startup_case``): a trace checker
    explains it by the case the spec expects."""
    return [
        ("down (starting)", not_(s.up)),
        ("case the startup case of the on-disk state", eq(case, startup_case(s))),
    ]


startup_guard = _from_conditions(startup_conditions)


def startup_effect(s: ServerState, case: Int) -> ServerState:
    rf = eq(case, STARTUP_ROLL_FORWARD)
    copying = eq(case, STARTUP_COPYING_TO_DELETED)
    return _ev(
        s,
        up=True,
        running=eq(case, STARTUP_READY),
        failed=eq(case, STARTUP_FAILED),
        leader=False,
        leader_ready=False,
        op=ite(rf, OP_ROLL_FORWARD, ite(copying, OP_UNDO_COPY, OP_NONE)),
        step=ite(rf, 4, ite(copying, 1, 0)),
        op_arg=0,
        op_src=NO_SERVER,
    )


def startup_enum(sys: SystemState, i: int, b: Bounds) -> Iterator[Params]:
    # The case is the server's own reading of its disk: any of them may be claimed, the
    # guard says which is right.
    for case in (STARTUP_NOTHING, STARTUP_ROLL_FORWARD, STARTUP_COPYING_TO_DELETED,
                 STARTUP_READY, STARTUP_FAILED, STARTUP_TOMBSTONE):
        yield {"case": case}


def wipe_conditions(s: ServerState) -> list[tuple[str, Bool]]:
    return [("down", not_(s.up))]


wipe_guard = _from_conditions(wipe_conditions)


def wipe_effect(s: ServerState) -> ServerState:
    """Seed "Failure of a disk with consensus metadata": wipe all data, new UUID."""
    fresh = ServerState(up=False)
    kept = {"member_votes", "led", "committed"}  # history, not state (and the drop stays)
    maps = {f: empty_map_sym(getattr(s, f), default) for f, default in MAP_FIELDS.items()
            if f not in kept}
    return attrs.evolve(fresh, uuid_gen=s.uuid_gen + 1, member_votes=s.member_votes,
                        led=s.led, committed=s.committed, dropped=s.dropped, **maps)


def damage_conditions(s: ServerState, what: Int) -> list[tuple[str, Bool]]:
    """A disk fault strikes while the server is down (like ``wipe``; a fault of a running
    server shows up at its next start too): the WAL fails verification or is gone, blocks
    are missing or corrupt, or a READY replica's cmeta file is gone."""
    return [
        ("down", not_(s.up)),
        ("what is intact: a live WAL, every block, or a READY replica's cmeta",
         any_(all_(eq(what, DAMAGE_WAL), eq(s.wal, WAL_LIVE)),
              all_(eq(what, DAMAGE_BLOCKS), eq(s.blocks, BLOCKS_PRESENT)),
              all_(eq(what, DAMAGE_CMETA), s.cmeta, eq(s.sb, READY)))),
    ]


damage_guard = _from_conditions(damage_conditions)


def damage_effect(s: ServerState, what: Int) -> ServerState:
    """The WAL's last OpId stays what it was (the server reads it from the segments that
    still verify, or its own record, see traces/README.md); a lost cmeta is gone with its
    term and vote (the vote history stays: it happened)."""
    cmeta = eq(what, DAMAGE_CMETA)
    return _ev(s, wal=ite(eq(what, DAMAGE_WAL), WAL_DAMAGED, s.wal),
               blocks=ite(eq(what, DAMAGE_BLOCKS), BLOCKS_DAMAGED, s.blocks),
               cmeta=ite(cmeta, False, s.cmeta), term=ite(cmeta, 0, s.term),
               voted_for=ite(cmeta, NO_VOTE, s.voted_for),
               config_index=ite(cmeta, 0, s.config_index),
               cmeta_lost=any_(cmeta, s.cmeta_lost))


def damage_enum(sys: SystemState, i: int, b: Bounds) -> Iterator[Params]:
    for what in DAMAGE_KINDS:
        yield {"what": what}


def purge_conditions(s: ServerState) -> list[tuple[str, Bool]]:
    """An operator purges the quarantine of a stopped server (decision 10: ``revivify
    local-replica purge-quarantine``, whose ``plan_purge`` keeps the quarantine of a
    deletion startup has still to roll forward)."""
    return [
        ("down (the server is stopped)", not_(s.up)),
        ("no deletion left for startup to roll forward (a DELETED superblock's WAL no "
         "longer in wals/<id>)", implies(eq(s.sb, DELETED), not_(wal_in_place(s)))),
        ("a quarantine directory", s.qdir),
    ]


purge_guard = _from_conditions(purge_conditions)


def purge_effect(s: ServerState) -> ServerState:
    """Every quarantine directory goes, and with them a WAL moved into one (ABSENT now;
    its last OpId was (0, 0) already, decision 8); the superblock (a tombstone's last OpId
    and the QDIR it names), the cmeta and a WAL in ``wals/<id>`` stay."""
    return _ev(s, qdir=False, q_sb=False, q_cmeta=False,
               wal=ite(eq(s.wal, WAL_QUARANTINED), WAL_ABSENT, s.wal), purged=True)


# ---------------------------------------------------------------------------------------
# Raft, as it touches the lifecycle.


_IN_CONSENSUS = ("in consensus (up, not FAILED, with a cmeta or a tombstone that votes "
                 "without one)")


def learn_term_conditions(s: ServerState, t: Int) -> list[tuple[str, Bool]]:
    return [(_IN_CONSENSUS, in_consensus(s)), ("t above the current term", t > s.term)]


learn_term_guard = _from_conditions(learn_term_conditions)


def learn_term_effect(s: ServerState, t: Int) -> ServerState:
    return _ev(s, cmeta=True, term=t, voted_for=NO_VOTE, leader=False, leader_ready=False)


def learn_term_enum(sys: SystemState, i: int, b: Bounds) -> Iterator[Params]:
    # Any message carries its sender's term.
    for t in sorted({o.term for j, o in enumerate(sys) if j != i and o.cmeta}):
        yield {"t": t}


def vote_grant_conditions(s: ServerState, candidate: Int, t: Int, cand_last_term: Int,
                          cand_last_index: Int) -> list[tuple[str, Bool]]:
    """Raft's vote rule: the candidate's term is current, this server has not voted for
    another in it, and the candidate's log is at least as up to date as the last OpId this
    server answers from (``last_logged``: a tombstone's and a copy's retained one)."""
    lt, li = last_logged(s)
    return [
        ("t at least the current term", t >= s.term),
        ("no vote for another candidate in term t",
         any_(t > s.term, eq(s.voted_for, NO_VOTE), eq(s.voted_for, candidate))),
        ("the candidate's last OpId at least this replica's last logged one",
         opid_ge(cand_last_term, cand_last_index, lt, li)),
    ]


def vote_grantable(s: ServerState, candidate: Int, t: Int, cand_last_term: Int,
                   cand_last_index: Int) -> Bool:
    """Raft's vote rule (``vote_grant_conditions``), as one condition."""
    return all_(*[c for _, c in vote_grant_conditions(s, candidate, t, cand_last_term,
                                                      cand_last_index)])


def vote_granted_conditions(s: ServerState, candidate: Int, t: Int, cand_last_term: Int,
                            cand_last_index: Int, dest: Int) -> list[tuple[str, Bool]]:
    return [
        (_IN_CONSENSUS, in_consensus(s)),
        ("candidate >= 0", candidate >= 0),
        ("addressed to this server's UUID", addressed(s, dest)),
        *vote_grant_conditions(s, candidate, t, cand_last_term, cand_last_index),
    ]


vote_granted_guard = _from_conditions(vote_granted_conditions)


def vote_granted_effect(s: ServerState, candidate: Int, t: Int, cand_last_term: Int,
                        cand_last_index: Int, dest: Int) -> ServerState:
    # The vote counts for the UUID the candidate addressed: a member's when it named one.
    return _ev(s, cmeta=True, term=t, voted_for=candidate, votes=put(s.votes, t, candidate),
               member_votes=put_if(all_(eq(dest, 0), not_(s.dropped)), s.member_votes, t,
                                   candidate),
               leader=ite(t > s.term, False, s.leader),
               leader_ready=ite(t > s.term, False, s.leader_ready))


def vote_denied_conditions(s: ServerState, candidate: Int, t: Int, cand_last_term: Int,
                           cand_last_index: Int, dest: Int) -> list[tuple[str, Bool]]:
    return [
        (_IN_CONSENSUS, in_consensus(s)),
        ("candidate >= 0", candidate >= 0),
        ("addressed to this server's UUID", addressed(s, dest)),
        ("a vote Raft does not grant (t below the current term, a vote for another "
         "candidate in t, or the candidate's log behind this replica's)",
         not_(vote_grantable(s, candidate, t, cand_last_term, cand_last_index))),
    ]


vote_denied_guard = _from_conditions(vote_denied_conditions)


def vote_denied_effect(s: ServerState, candidate: Int, t: Int, cand_last_term: Int,
                       cand_last_index: Int, dest: Int) -> ServerState:
    rises = t > s.term
    return _ev(s, cmeta=True, term=ite(rises, t, s.term),
               voted_for=ite(rises, NO_VOTE, s.voted_for), leader=ite(rises, False, s.leader),
               leader_ready=ite(rises, False, s.leader_ready))


def not_self(sys: SystemState, i: int, candidate: Int, **_: Any) -> Bool:
    """The candidate is another server of the system."""
    return all_(ne(candidate, i), candidate >= 0, candidate < len(sys))


def request_from_candidate(sys: SystemState, i: int, candidate: Int, t: Int,
                           cand_last_term: Int, cand_last_index: Int, **_: Any) -> Bool:
    """A RequestVote comes from another server, and the last OpId it carries is its log's
    (or was: a request that arrives late carries an older one, never a later one): the
    up-to-date comparison is made against the candidate's real log."""
    return all_(not_self(sys, i, candidate),
                _server(sys, candidate, lambda c: opid_ge(c.wal_last_term, c.wal_last_index,
                                                          cand_last_term, cand_last_index)))


def vote_requests(sys: SystemState, i: int, b: Bounds) -> Iterator[Params]:
    """RequestVote from every server campaigning in its current term, to this server's
    UUID in the config; the voter's guard decides."""
    for c, cand in enumerate(sys):
        if c == i or not (cand.up and cand.running and not cand.leader
                          and cand.voted_for == c and cand.term > 0):
            continue
        yield {"candidate": c, "t": cand.term, "cand_last_term": cand.wal_last_term,
               "cand_last_index": cand.wal_last_index, "dest": 0}


_MEMBER = "a member of the config (on its original UUID)"


def start_election_conditions(s: ServerState, me: Int) -> list[tuple[str, Bool]]:
    return [
        ("a running READY replica with no operation in flight",
         all_(s.up, s.running, eq(s.sb, READY), eq(s.op, OP_NONE))),
        ("not the leader", not_(s.leader)),
        (_MEMBER, is_member(s)),
        ("me >= 0", me >= 0),
    ]


start_election_guard = _from_conditions(start_election_conditions)


def start_election_effect(s: ServerState, me: Int) -> ServerState:
    return _ev(s, term=s.term + 1, voted_for=me, votes=put(s.votes, s.term + 1, me),
               member_votes=put_if(not_(s.dropped), s.member_votes, s.term + 1, me))


def is_self(sys: SystemState, i: int, me: Int, **_: Any) -> Bool:
    return eq(me, i)


def start_election_enum(sys: SystemState, i: int, b: Bounds) -> Iterator[Params]:
    if sys[i].term < b.max_term:
        yield {"me": i}


def become_leader_conditions(s: ServerState, me: Int, t: Int) -> list[tuple[str, Bool]]:
    return [
        ("a running replica with no operation in flight",
         all_(s.up, s.running, eq(s.op, OP_NONE))),
        ("not the leader already", not_(s.leader)),
        ("t the current term", eq(s.term, t)),
        ("its vote in the current term for itself", eq(s.voted_for, me)),
        (_MEMBER, is_member(s)),
    ]


become_leader_guard = _from_conditions(become_leader_conditions)


def become_leader_effect(s: ServerState, me: Int, t: Int) -> ServerState:
    # Not ready until it commits an entry of its term (its no-op, in a real server).
    return _ev(s, leader=True, leader_ready=False, led=put(s.led, t, True))


def has_majority(sys: SystemState, i: int, me: Int, t: Int) -> Bool:
    """A majority of the config's members voted for `me` in term t (the ghost vote history
    is the abstraction of the RequestVote responses the candidate received), and the
    tablet's table was not dropped (no election after a drop: decision 9)."""
    votes = count(*[eq(get(k.member_votes, t), me) for k in sys])
    return all_(eq(me, i), votes >= majority(len(sys)), *[not_(k.dropped) for k in sys])


def become_leader_enum(sys: SystemState, i: int, b: Bounds) -> Iterator[Params]:
    yield {"me": i, "t": sys[i].term}


def step_down_conditions(s: ServerState) -> list[tuple[str, Bool]]:
    """A leader may stop leading at any time without learning a higher term (check-quorum,
    an operator's request, a leadership transfer)."""
    return [("up", s.up), ("the leader", s.leader)]


step_down_guard = _from_conditions(step_down_conditions)


def step_down_effect(s: ServerState) -> ServerState:
    # Term and vote stay: the vote belongs to the term, whoever leads it. A pending config
    # change stays too: its entry is in the log, which a later leader commits or cuts.
    return _ev(s, leader=False, leader_ready=False)


def log_append_conditions(s: ServerState, first_index: Int, op_term: Int, op_index: Int,
                          prev_term: Int, entries: Any, dest: Int) -> list[tuple[str, Bool]]:
    """A batch first_index..op_index written with one fsync; op_term is its last entry's,
    prev_term the term of the entry before it (what matched the leader's log).

    * the log has no holes: the batch starts at most one past the last index;
    * first_index <= the last index is a follower truncating its log's suffix from
      first_index (where it conflicted with the leader's) and writing the batch instead;
    * a pure append (first_index = last index + 1) never lowers the last term (terms never
      decrease along a Raft log) and follows the last entry (prev_term is its term);
    * a leader never truncates its own log (Leader Append-Only): it appends at last index
      + 1, entries of its own term.

    The entries themselves (``entries``) are checked against the leader's log by the system
    guard: no trace carries them."""
    appends = eq(first_index, s.wal_last_index + 1)
    return [
        ("a running READY replica with a live WAL",
         all_(s.up, s.running, eq(s.op, OP_NONE), eq(s.sb, READY), eq(s.wal, WAL_LIVE))),
        ("addressed to this server's UUID", addressed(s, dest)),
        ("1 <= op_term <= the current term", all_(op_term >= 1, op_term <= s.term)),
        ("1 <= first_index <= op_index", all_(first_index >= 1, first_index <= op_index,
                                              op_index >= 1)),
        ("no gap: first_index <= last index + 1", first_index <= s.wal_last_index + 1),
        ("an append (first_index = last index + 1) never lowers the last term",
         implies(appends, op_term >= s.wal_last_term)),
        ("an append's prev_term is the term of the last entry",
         implies(appends, eq(prev_term, s.wal_last_term))),
        ("a leader appends at last index + 1 in its own term (it never truncates its log)",
         implies(s.leader, all_(eq(op_term, s.term), appends))),
    ]


log_append_guard = _from_conditions(log_append_conditions)


def log_append_effect(s: ServerState, first_index: Int, op_term: Int, op_index: Int,
                      prev_term: Int, entries: Any, dest: Int) -> ServerState:
    log = overwrite_range(s.log, first_index, op_index, entries)
    # A leader's own batch at the pending config change's index is that change's entry (it
    # appends at last index + 1, where the change was planned). A follower's batch that
    # starts at or below it replaces it (or takes its place, never appended): a later
    # leader's entry is no change of this replica's.
    cut = all_(ne(s.pending_config, 0), first_index <= s.pending_config, not_(s.leader))
    return _ev(s, wal_last_term=op_term, wal_last_index=op_index, log=log, own_log=log,
               ghost_last_term=op_term, ghost_last_index=op_index,
               **_pending_config_unless(s, cut))


def entries_from_leader(sys: SystemState, i: int, first_index: Int, op_term: Int,
                        op_index: Int, prev_term: Int, entries: Any, dest: Int) -> Bool:
    """Where a batch comes from. A leader's own: entries of its term. A follower's: the log
    of a leader of the follower's current term, from first_index to op_index (it has
    them), after an entry of term prev_term at first_index - 1 in both logs (AppendEntries'
    consistency check); a written entry that the follower already held conflicted (an
    entry held with the same term is skipped, never written)."""
    s = sys[i]
    own = all_(s.leader, all_in_range(first_index, op_index,
                                      lambda j: eq(get(entries, j), s.term)))
    followers = []
    for j, lead in enumerate(sys):
        if j == i:
            continue
        followers.append(all_(
            lead.up, lead.leader, eq(lead.term, s.term), lead.wal_last_index >= op_index,
            eq(get(lead.log, first_index - 1), prev_term),
            eq(get(s.log, first_index - 1), prev_term),
            all_in_range(first_index, op_index,
                         lambda k, lead=lead: eq(get(entries, k), get(lead.log, k))),
            implies(first_index <= s.wal_last_index,
                    ne(get(s.log, first_index), get(entries, first_index)))))
    return all_(eq(get(entries, op_index), op_term),
                any_(own, all_(not_(s.leader), any_(*followers))))


def _slice(log: FMap, lo: int, hi: int) -> FMap:
    return FMap(tuple((k, v) for k, v in log if lo <= k <= hi), log.default)


def log_append_enum(sys: SystemState, i: int, b: Bounds) -> Iterator[Params]:
    # A follower's own proposal and a leader's slice can be the same move: yield it once.
    seen: set[tuple[Any, ...]] = set()
    for p in _log_append_moves(sys, i, b):
        key = tuple(p.values())
        if key not in seen:
            seen.add(key)
            yield p


def _log_append_moves(sys: SystemState, i: int, b: Bounds) -> Iterator[Params]:
    s = sys[i]
    if s.up and s.running:
        # Its own proposals (the guard lets only a leader write them): one entry, or a
        # batch up to the bound.
        first = s.wal_last_index + 1
        for last in range(first, b.max_index + 1):
            yield {"first_index": first, "op_term": s.term, "op_index": last,
                   "prev_term": s.wal_last_term, "entries": run_of(first, last, s.term),
                   "dest": s.uuid_gen}
    # AppendEntries from every leader (stale ones included): any slice of its log, sent to
    # this server's UUID in the config.
    for j, lead in enumerate(sys):
        if j == i or not (lead.up and lead.leader):
            continue
        for first in range(1, lead.wal_last_index + 1):
            for last in range(first, lead.wal_last_index + 1):
                yield {"first_index": first, "op_term": lead.log[last], "op_index": last,
                       "prev_term": lead.log[first - 1],
                       "entries": _slice(lead.log, first, last), "dest": 0}


def commit_conditions(s: ServerState, index: Int, op_term: Int) -> list[tuple[str, Bool]]:
    """Every index up to ``index`` is committed (one event per batch); op_term is the term
    of the entry at ``index``, which this replica holds."""
    return [
        ("a running replica with no operation in flight",
         all_(s.up, s.running, eq(s.op, OP_NONE))),
        ("index >= 1", index >= 1),
        ("index <= the WAL's last index", index <= s.wal_last_index),
        ("op_term >= 1", op_term >= 1),
        ("op_term <= the WAL's last term", op_term <= s.wal_last_term),
    ]


commit_guard = _from_conditions(commit_conditions)


def commit_effect(s: ServerState, index: Int, op_term: Int) -> ServerState:
    # A leader that commits an entry of its own term has committed everything before it:
    # its log's earlier config entries are committed, and it may accept a config change.
    return _ev(s, committed=put(s.committed, index, op_term),
               leader_ready=any_(s.leader_ready, all_(s.leader, eq(op_term, s.term))))


def leader_commit(sys: SystemState, i: int, index: Int, op_term: Int) -> Bool:
    """Raft's commitment rule: the leader commits an entry of its own term, which its log
    holds, once a majority of members acknowledged it (earlier entries are committed with
    it). A member acknowledges it to this leader when its own log has it while it is in the
    leader's term: a follower, or a tombstone that did before its deletion (it still
    answers from that log's last OpId). (A member that acknowledged and then moved on to a
    later term no longer counts: stricter than Raft, which keeps the acknowledgement; a
    member that got the entry by a copy after moving on could never have acknowledged.)"""
    s = sys[i]
    holders = count(*[all_(is_member(k), eq(k.term, op_term),
                           eq(get(k.own_log, index), op_term)) for k in sys])
    return all_(s.leader, eq(op_term, s.term), eq(get(s.log, index), op_term),
                holders >= majority(len(sys)))


def commit_enum(sys: SystemState, i: int, b: Bounds) -> Iterator[Params]:
    s = sys[i]
    for index in range(1, s.wal_last_index + 1):
        yield {"index": index, "op_term": s.log[index]}


def config_commit_conditions(s: ServerState, config_index: Int) -> list[tuple[str, Bool]]:
    """A committed config change entry is written into the cmeta: a running replica's
    committed config only moves forward, and only to an entry its own WAL holds. While a
    config change this replica accepted as leader is pending, no config entry below it
    commits: it accepted the change only with no other config entry uncommitted in its
    log (CHANGE_PENDING, after LEADER_NOT_READY had every earlier entry committed), and its
    log below the change's entry stays as it was (a batch that cuts below it cuts the
    change too). A follower, which accepted no change, commits whatever config its leader
    committed: ``config_commit`` never needs a ``config_change`` before it."""
    return [
        ("a running READY replica with cmeta",
         all_(s.up, s.running, eq(s.op, OP_NONE), eq(s.sb, READY), s.cmeta)),
        ("config_index above the committed config's", config_index > s.config_index),
        ("config_index <= the WAL's last index", config_index <= s.wal_last_index),
        ("no config below this replica's own pending config change (the only config entry "
         "it left uncommitted)",
         implies(ne(s.pending_config, 0), config_index >= s.pending_config)),
    ]


config_commit_guard = _from_conditions(config_commit_conditions)


def config_commit_effect(s: ServerState, config_index: Int) -> ServerState:
    # Committing the config at config_index commits every entry up to it: the pending
    # change's own entry when it is at or below.
    return _ev(s, config_index=config_index,
               **_pending_config_unless(s, all_(ne(s.pending_config, 0),
                                                config_index >= s.pending_config)))


def config_commit_enum(sys: SystemState, i: int, b: Bounds) -> Iterator[Params]:
    for index in range(1, b.max_index + 1):
        yield {"config_index": index}


def config_change_conditions(s: ServerState, cas_index: Int,
                             config_index: Int) -> list[tuple[str, Bool]]:
    """A leader accepts a ChangeConfig (the server's ``propose_config_change``, Kudu's
    ``RaftConsensus::ChangeConfig``) and logs it before it appends the config entry (the
    ``log_append`` that follows, at ``config_index``). Each check is one of the server's
    refusals, none of which is logged: the exact CAS on the committed config index (a
    DeleteTablet takes ``<=``, a config change ``==``: it is computed from the committed
    config, and applied to another it could remove a voter twice or add one to a config
    that already dropped it), no config entry of its own uncommitted (after readiness its
    log holds no other uncommitted one), and a leader that committed an entry of its term
    (every config entry of an earlier term is then committed: a new leader cannot stack a
    change on one an old leader left uncommitted)."""
    return [
        ("a running READY leader with cmeta and no operation in flight",
         all_(s.up, s.running, eq(s.op, OP_NONE), eq(s.sb, READY), s.cmeta, s.leader)),
        ("the CAS: cas_index is the committed config index (else CAS_MISMATCH)",
         eq(cas_index, s.config_index)),
        ("no config change of its own pending (else CHANGE_PENDING)",
         eq(s.pending_config, 0)),
        ("the leader has committed an entry of its term (else LEADER_NOT_READY)",
         s.leader_ready),
        ("config_index the last index + 1 (where the config entry is appended)",
         eq(config_index, s.wal_last_index + 1)),
    ]


config_change_guard = _from_conditions(config_change_conditions)


def config_change_effect(s: ServerState, cas_index: Int, config_index: Int) -> ServerState:
    # Nothing durable yet: the log_append of the config entry follows. The ghosts record
    # the committed config the change was planned on and that one more change is open.
    return _ev(s, pending_config=config_index, config_planned_on=cas_index,
               open_config_changes=s.open_config_changes + 1)


def config_change_enum(sys: SystemState, i: int, b: Bounds) -> Iterator[Params]:
    # An operator's or the master's ChangeConfig, planned on the committed config index it
    # saw: any replica's (a stale one, or one this leader has not committed yet, included).
    # The entry may take any index up to one past the bound on appends: a change there is
    # explored up to its acceptance (its CAS), its append is beyond the bound.
    for cas in sorted({k.config_index for k in sys}):
        for index in range(1, b.max_index + 2):
            yield {"cas_index": cas, "config_index": index}


# ---------------------------------------------------------------------------------------
# The table.

_STC_PARAMS = ("caller", "caller_term", "expected_state", "has_opid", "opid_term",
               "opid_index", "dest")
_VOTE_PARAMS = ("candidate", "t", "cand_last_term", "cand_last_index", "dest")

ACTIONS: tuple[Action, ...] = (
    Action("create_tablet", "CreateTablet (superblock last)", ("config_index", "dest"),
           create_tablet_guard, create_tablet_effect, create_tablet_enum,
           system_guard=not_dropped_here, conditions=create_tablet_conditions),
    Action("delete_shutdown", "Tablet deletion step 1", ("cas_config_index",),
           delete_shutdown_guard, delete_shutdown_effect, delete_shutdown_enum,
           volatile_only=True, conditions=delete_shutdown_conditions),
    Action("delete_create_qdir", "Tablet deletion step 2", (), delete_create_qdir_guard,
           delete_create_qdir_effect, _none, conditions=delete_create_qdir_conditions),
    Action("delete_copy_superblock", "Tablet deletion step 3", (),
           delete_copy_superblock_guard, delete_copy_superblock_effect, _none,
           conditions=delete_copy_superblock_conditions),
    Action("delete_mark_deleted", "Tablet deletion step 4", (), delete_mark_deleted_guard,
           delete_mark_deleted_effect, _none, conditions=delete_mark_deleted_conditions),
    Action("delete_copy_cmeta", "Tablet deletion step 5", (), delete_copy_cmeta_guard,
           delete_copy_cmeta_effect, _none, conditions=delete_copy_cmeta_conditions),
    Action("delete_move_wal", "Tablet deletion step 6", (), delete_move_wal_guard,
           delete_move_wal_effect, _none, conditions=delete_move_wal_conditions),
    Action("delete_remove_cmeta", "Full delete (table dropped): the cmeta removed",
           ("cas_config_index",), delete_remove_cmeta_guard, delete_remove_cmeta_effect,
           delete_shutdown_enum, system_guard=dropped_here,
           conditions=delete_remove_cmeta_conditions),
    Action("delete_remove_superblock", "Full delete: the superblock removed", (),
           delete_remove_superblock_guard, delete_remove_superblock_effect, _none,
           conditions=delete_remove_superblock_conditions),
    Action("stc_accept", "StartTabletCopy (all checks pass)", _STC_PARAMS,
           stc_accept_guard, stc_accept_effect, stc_requests,
           system_guard=stc_accept_system_guard, volatile_only=True,
           conditions=stc_accept_conditions),
    Action("stc_reject", "StartTabletCopy (first failing check)", (*_STC_PARAMS, "reason"),
           stc_reject_guard, stc_reject_effect, stc_reject_enum,
           system_guard=caller_is_another, volatile_only=True, conditions=stc_reject_conditions),
    Action("copy_begin", "Follower Tablet Copy step 1", (), copy_begin_guard,
           copy_begin_effect, _none, conditions=copy_begin_conditions),
    Action("copy_merge_cmeta", "Follower Tablet Copy step 2",
           ("remote_term", "remote_config_index"), copy_merge_cmeta_guard,
           copy_merge_cmeta_effect, copy_merge_cmeta_enum,
           system_guard=remote_cmeta_is_sources, conditions=copy_merge_cmeta_conditions),
    Action("copy_download_wal", "Follower Tablet Copy step 3 (before or after the blocks)",
           ("remote_last_term", "remote_last_index", "remote_log"), copy_download_wal_guard,
           copy_download_wal_effect, copy_download_wal_enum,
           system_guard=remote_wal_is_sources, conditions=copy_download_wal_conditions),
    Action("copy_download_block", "Follower Tablet Copy step 4 (some blocks)", (),
           copy_download_block_guard, copy_download_block_effect, _none,
           conditions=copy_download_block_conditions),
    Action("copy_blocks_done", "Follower Tablet Copy step 4 (all blocks)", (),
           copy_blocks_done_guard, copy_blocks_done_effect, _none,
           conditions=copy_blocks_done_conditions),
    Action("copy_mark_ready", "Follower Tablet Copy step 5", (), copy_mark_ready_guard,
           copy_mark_ready_effect, _none, conditions=copy_mark_ready_conditions),
    Action("copy_start_replica", "Follower Tablet Copy step 6", (), copy_start_replica_guard,
           copy_start_replica_effect, _none, volatile_only=True,
           conditions=copy_start_replica_conditions),
    Action("copy_abort", "A copy failed or cancelled (tombstones a COPYING replica)", (),
           copy_abort_guard, copy_abort_effect, _none, volatile_only=True,
           conditions=copy_abort_conditions),
    Action("crash", "a crash at any point", (), crash_guard, crash_effect, _none,
           volatile_only=True, conditions=crash_conditions),
    Action("startup", "Tablet startup cases 1-4", ("case",), startup_guard, startup_effect,
           startup_enum, volatile_only=True, conditions=startup_conditions),
    Action("wipe", "Failure of a disk with consensus metadata (new UUID)", (), wipe_guard,
           wipe_effect, _none, conditions=wipe_conditions),
    Action("damage", "a disk fault found at startup (WAL, blocks or cmeta)", ("what",),
           damage_guard, damage_effect, damage_enum, conditions=damage_conditions),
    Action("purge", "an operator purges the quarantine of a stopped server (not logged)", (),
           purge_guard, purge_effect, _none, conditions=purge_conditions),
    Action("drop", "the master drops the table (a ghost: ends the tablet's life)", (),
           drop_guard, drop_effect, _none, conditions=drop_conditions),
    Action("learn_term", "Raft: a higher term seen in any RPC", ("t",), learn_term_guard,
           learn_term_effect, learn_term_enum, conditions=learn_term_conditions),
    Action("vote_granted", "Raft RequestVote granted (tombstones too)", _VOTE_PARAMS,
           vote_granted_guard, vote_granted_effect, vote_requests,
           system_guard=request_from_candidate, identity_guard=not_self,
           conditions=vote_granted_conditions),
    Action("vote_denied", "Raft RequestVote denied", _VOTE_PARAMS, vote_denied_guard,
           vote_denied_effect, vote_requests, system_guard=request_from_candidate,
           identity_guard=not_self, conditions=vote_denied_conditions),
    Action("start_election", "Raft: candidate votes for itself in term+1", ("me",),
           start_election_guard, start_election_effect, start_election_enum,
           system_guard=is_self, identity_guard=is_self, conditions=start_election_conditions),
    Action("become_leader", "Raft: a majority of members voted", ("me", "t"),
           become_leader_guard, become_leader_effect, become_leader_enum,
           system_guard=has_majority, volatile_only=True, conditions=become_leader_conditions),
    Action("step_down", "Raft: a leader stops leading (check-quorum, request, transfer)", (),
           step_down_guard, step_down_effect, _none, volatile_only=True,
           conditions=step_down_conditions),
    Action("log_append", "Raft: a batch of entries appended to the WAL (one fsync)",
           ("first_index", "op_term", "op_index", "prev_term", "entries", "dest"),
           log_append_guard, log_append_effect, log_append_enum,
           system_guard=entries_from_leader, conditions=log_append_conditions),
    Action("commit", "Raft: every index up to one committed", ("index", "op_term"),
           commit_guard, commit_effect, commit_enum, system_guard=leader_commit,
           conditions=commit_conditions),
    Action("config_commit", "Raft: a committed config change written into the cmeta",
           ("config_index",), config_commit_guard, config_commit_effect, config_commit_enum,
           conditions=config_commit_conditions),
    Action("config_change", "Raft: a leader accepts a config change (exact CAS), before its "
           "entry is appended", ("cas_index", "config_index"), config_change_guard,
           config_change_effect, config_change_enum, volatile_only=True,
           conditions=config_change_conditions),
)

ACTIONS_BY_NAME: dict[str, Action] = {a.name: a for a in ACTIONS}


def replace_action(table: tuple[Action, ...], name: str, **changes: Any) -> tuple[Action, ...]:
    """A copy of the table with one row changed (how mutants are built)."""
    if name not in {a.name for a in table}:
        raise KeyError(name)
    return tuple(attrs.evolve(a, **changes) if a.name == name else a for a in table)


__all__ = [
    "ACTIONS", "ACTIONS_BY_NAME", "FAILURE_ACTIONS", "FAULT_ACTIONS", "MAP_PARAMS",
    "NO_PENDING_CONFIG", "REQUEST_ACTIONS",
    "SPEC_ONLY_PARAMS",
    "TRACE_FILLS", "UNTRACED_MAPS", "Action", "Bounds", "Params", "addressed",
    "as_reported", "in_consensus", "intact",
    "is_member", "last_logged", "pending_config_held", "replace_action", "startup_case",
    "stc_failures", "votes_lazily", "wal_in_place",
]
