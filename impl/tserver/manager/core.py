"""The tablet manager's lifecycle core: one slot per tablet, one table, no I/O.

Rules of this file
------------------
* No trio, no files, no sockets (an import-linter contract). Inputs are method calls on
  ``LifecycleCore``: ``handle(tablet_id, input)``. Output is one ordered ``Batch`` of
  effects, which the shell (``impl/tserver/manager/shell.py``) executes in order: a
  ``LifecyclePersist`` is made durable (written and fsync'd) and only then its fact traced; a
  ``LifecycleTrace`` is a fact with no durable change; the other effects start or stop a volatile
  part (a replica's driver, a tombstone's voter, a copy's download). Results the core needs
  from a volatile effect (the WAL's last OpId once the replica stopped, a copy step made
  durable) come back as inputs of their own. So a crash between two effects leaves exactly
  the durable state of the last ``LifecyclePersist`` executed, and its fact is the last one traced
  (or the only one lost): the checker's crash frontier of one step per tablet.
* A tablet is in exactly ONE state (``Slot.state``, a tagged union): ABSENT (no slot: never
  hosted, or fully deleted), STARTING (found on disk, not yet opened), CREATING (a
  CreateTablet making its files), RUNNING (its replica runs), FAILED (offline, with the
  reason), COPYING (a tablet copy in flight, with its phase), TOMBSTONED (a tombstone: its
  voter runs), DELETING (a deletion in flight: a DeleteTablet's, or the tombstoning of a copy
  that ended before its commit point or of startup's ROLL_FORWARD and COPYING_TO_DELETED
  cases, until every durable step of it is done: ``DeletionEnded``).
  ``LIFECYCLE_TRANSITIONS`` lists every (state, input type) pair, keyed by the input's class
  as the Raft core's table is; a missing pair is a ``LifecycleProtocolError`` and
  tests/tserver/test_manager_table.py tries every pair.
* Refusals are typed (the api's errors), decided before anything is touched, and a refusal
  that the spec knows (StartTabletCopy's checks) is traced: ``Batch.refusal`` with its
  ``stc_reject`` fact (not a DELETING tablet's ALREADY_IN_PROGRESS: ``_busy_copy``).

Seed 001, as the rows implement it (the names match ``spec/actions.py``'s rows, which this
module never imports: the two meet only in the trace contract)
----------------------------------------------------------------------------------------
* Startup before serving (Kudu registers every tablet found on disk, NOT_INITIALIZED, before
  the server answers tablet RPCs): the shell registers every superblock it finds
  (``Register``) before it serves, then classifies each (``Classified``): READY (the replica
  is opened: ``StartReplica``, then ``ReplicaStarted`` traces ``startup`` READY), FAILED
  (``startup`` FAILED, offline), DELETED with a live WAL (ROLL_FORWARD: deletion steps 5 and
  6 again, both idempotent), DELETED (TOMBSTONE: the voter runs), COPYING
  (COPYING_TO_DELETED: deletion steps 2-6, keeping the tombstone's last OpId). A call for a
  STARTING tablet is refused with the retryable TabletNotRunning(STARTING): a leader that
  hears it waits; it never asks for a copy of a tablet that is only starting.
* Deletion (six steps, the fourth the commit point), in mode TOMBSTONE (the voter runs from
  the retained cmeta and last OpId) or DELETED (then the cmeta and the superblock go, in
  Kudu's order). A compare-and-set on the committed config index refuses a caller whose view
  is stale. Tombstoning a tombstone writes nothing.
* StartTabletCopy: ALREADY_IN_PROGRESS, ILLEGAL_STATE, STALE_TERM (below the last *logged*
  term), OPID_MISMATCH, in that order, before anything is touched; accepted: a READY or
  FAILED replica is tombstoned first, a tombstone stops voting, then the download runs;
  each of its durable steps comes back as ``CopyStepDone`` and is traced from here; the
  merged cmeta lets the COPYING replica vote again until its blocks are complete;
  ``copy_mark_ready`` is the commit point; before it a failure traces ``copy_abort`` and
  the replica tombstones itself, after it the replica starts.
* Crash, wipe and purge are not inputs of a live core: they happen to a stopped (or killed)
  process, and the next process's core sees their effects through ``Register`` and
  ``Classified`` (the contract's unlogged actions).
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import ClassVar, Final, Protocol

import attrs
import msgspec

from revivify.contract.events import (
    CmetaState,
    CopyAbortArgs,
    CopyBeginArgs,
    CreateArgs,
    DownloadWalArgs,
    DurableState,
    EventName,
    MergeArgs,
    NoArgs,
    SbName,
    StartupArgs,
    StcArgs,
    StcName,
    StcRejectArgs,
)
from revivify.impl.rpc.errors import AppError
from revivify.impl.storage.values import ConsensusMeta

from .. import api
from ..api import Kind
from ..durable import NO_OPID, Blocks, Durable, OpIdPair, Sb, Wal

# ------------------------------------------------------------------------------ values


@attrs.frozen
class LifecycleFact:
    """One trace line of a tablet: the event (one of the contract's names), its typed args
    (the contract's record) and the durable state after the step."""

    event: EventName
    args: msgspec.Struct
    state: DurableState


class Op(enum.Enum):
    """A durable change of the lifecycle; the shell makes it durable (fsync) before the
    fact that follows it is traced. The quarantine directory an op names is the newest one
    (``NEW_QDIR`` made it, in this batch or before a crash)."""

    NEW_QDIR = "new_qdir"  # mkdir quarantine/<tablet>.<n>, fsync the parent
    COPY_SUPERBLOCK = "copy_superblock"  # the superblock's copy into the qdir
    MARK_DELETED = "mark_deleted"  # superblock := DELETED, last OpId, the qdir (commit)
    COPY_CMETA = "copy_cmeta"  # the cmeta's copy into the qdir (if there is a cmeta)
    MOVE_WAL = "move_wal"  # wals/<tablet> into the qdir, one rename (if there is one)
    REMOVE_CMETA = "remove_cmeta"
    REMOVE_SUPERBLOCK = "remove_superblock"


@attrs.frozen
class LifecyclePersist:
    op: Op
    fact: LifecycleFact
    tombstone_last: OpIdPair = NO_OPID  # MARK_DELETED: the last OpId the tombstone keeps


@attrs.frozen
class LifecycleTrace:
    fact: LifecycleFact


class Volatile(enum.Enum):
    """Start or stop a volatile part of the tablet (no durable change of its own)."""

    STOP_REPLICA = "stop_replica"  # stop the driver and close the WAL; answer ``Stopped``
    START_REPLICA = "start_replica"  # open the replica; answer ReplicaStarted / StartFailed
    START_VOTER = "start_voter"  # the tombstone's (or COPYING replica's) voter
    STOP_VOTER = "stop_voter"  # waits for a vote being made durable
    RUN_COPY = "run_copy"  # start the download; answers CopyStepDone..., CopyEnded
    END_DELETION = "end_deletion"  # a deletion's steps are all durable: answer DeletionEnded


LifecycleEffect = LifecyclePersist | LifecycleTrace | Volatile


@attrs.frozen
class Batch:
    effects: tuple[LifecycleEffect, ...] = ()
    refusal: AppError | None = None  # the request is refused (after the effects, if any)

    def facts(self) -> tuple[LifecycleFact, ...]:
        return tuple(e.fact for e in self.effects
                     if isinstance(e, LifecyclePersist | LifecycleTrace))


EMPTY: Final = Batch()


class LifecycleProtocolError(Exception):
    """An input the table has no row for in the tablet's state (a bug in the shell)."""


# ------------------------------------------------------------------------------ states


class ReplicaHandle(Protocol):
    """What the core asks of a running replica (``impl/tserver/replica.py``)."""

    def durable(self) -> Durable: ...


class Mode(enum.Enum):
    TOMBSTONE = "TOMBSTONE"  # keep cmeta and last OpId, vote on
    DELETED = "DELETED"  # the table was dropped: then the cmeta and the superblock go


class CopyStage(enum.Enum):
    """Where a COPYING slot is in its lifecycle (the download's own finer progress, shown to
    operators, is ``copy.download.CopyPhase``; its durable steps are ``CopyStep``)."""

    TOMBSTONING = "TOMBSTONING"  # the READY replica it replaces is being tombstoned
    DOWNLOADING = "DOWNLOADING"  # run_copy's durable steps come back as their records
    STARTING = "STARTING"  # past the commit point (READY): the replica is being opened


@attrs.frozen
class Absent:
    kind: ClassVar[Kind] = Kind.ABSENT


@attrs.frozen
class Starting:
    durable: Durable  # what the superblock says (classification comes next)
    kind: ClassVar[Kind] = Kind.STARTING


@attrs.frozen
class Creating:
    kind: ClassVar[Kind] = Kind.CREATING


@attrs.frozen
class Running:
    replica: ReplicaHandle
    kind: ClassVar[Kind] = Kind.RUNNING


@attrs.frozen
class Failed:
    reason: str
    durable: Durable
    hosted: bool  # its WAL is still open (a driver that failed): stop it before deleting
    kind: ClassVar[Kind] = Kind.FAILED


@attrs.frozen
class Copying:
    phase: CopyStage
    durable: Durable
    source: str  # the source server's UUID
    kind: ClassVar[Kind] = Kind.COPYING


@attrs.frozen
class Tombstoned:
    durable: Durable
    kind: ClassVar[Kind] = Kind.TOMBSTONED


@attrs.frozen
class Deleting:
    mode: Mode
    # Until the replica stopped: the state it was deleted from; then the state the
    # deletion's steps (running now, DeletionEnded ends them) leave.
    durable: Durable
    kind: ClassVar[Kind] = Kind.DELETING


State = Absent | Starting | Creating | Running | Failed | Copying | Tombstoned | Deleting
ABSENT: Final = Absent()

# ------------------------------------------------------------------------------ inputs


class Case(enum.Enum):
    """How startup classified a tablet it found (the ``startup`` event's case)."""

    READY = "READY"
    FAILED = "FAILED"
    ROLL_FORWARD = "ROLL_FORWARD"
    TOMBSTONE = "TOMBSTONE"
    COPYING_TO_DELETED = "COPYING_TO_DELETED"


@attrs.frozen
class Register:
    """Startup found the tablet's superblock (before the server serves)."""

    durable: Durable


@attrs.frozen
class Classified:
    """Startup looked at the tablet's files: ``case`` with the durable state found (for
    FAILED, ``reason`` names what failed verification)."""

    case: Case
    durable: Durable
    reason: str = ""


@attrs.frozen
class ReplicaStarted:
    """The replica runs (``how``: startup, create or copy); ``durable`` as it starts."""

    replica: ReplicaHandle
    durable: Durable
    voters: tuple[str, ...] = ()  # CreateTablet: the first config's voters


@attrs.frozen
class ReplicaStartFailed:
    reason: str
    durable: Durable


@attrs.frozen
class ReplicaFailed:
    """A running replica's driver failed (a storage error): it goes offline."""

    reason: str


@attrs.frozen
class Create:
    """CreateTablet. ``from_master``: sent by a master (refused for a tablet this process
    deleted with mode DELETED, see ``LifecycleCore.deleted``), not by an operator."""

    from_master: bool = False


@attrs.frozen
class CreateFailed:
    reason: str


@attrs.frozen
class Delete:
    mode: Mode
    cas_config_index: int | None = None


@attrs.frozen
class DeletionEnded:
    """A deletion's durable steps are all done (``Volatile.END_DELETION``, the last effect
    of its batch): only now does the tablet leave DELETING, for a tombstone (mode
    TOMBSTONE; also an aborted copy's and startup's tombstoning) or for ABSENT (mode
    DELETED). Until then a copy, a create or another deletion of it is refused (Kudu's
    TSTabletManager keeps the tablet in its transition map meanwhile)."""


@attrs.frozen
class Stopped:
    """The replica stopped (deletion step 1): its durable state as the stop left it."""

    durable: Durable


@attrs.frozen
class StartCopy:
    """StartTabletCopy. ``at_rest``: the durable state of a tablet this server does not
    host (what a deletion may have left: a quarantine dir, a quarantined WAL)."""

    caller: str
    caller_term: int
    source: str
    expected_state: Sb
    last_opid: OpIdPair | None
    at_rest: Durable


class CopyStep(enum.Enum):
    """The durable steps of a tablet copy on its destination, in seed order, each named by
    the trace event that reports it (the one spelling of a copy's steps: the fault points,
    the step records below and the superblock's marks all come from here). The first six
    are run_copy's (copy/download.py), each coming back as its record; START_REPLICA is
    step 6, the replica opened past the commit point."""

    BEGIN = "copy_begin"
    MERGE_CMETA = "copy_merge_cmeta"
    DOWNLOAD_WAL = "copy_download_wal"
    DOWNLOAD_BLOCK = "copy_download_block"
    BLOCKS_DONE = "copy_blocks_done"
    MARK_READY = "copy_mark_ready"
    START_REPLICA = "copy_start_replica"

    @property
    def event(self) -> EventName:
        """The trace event that reports the step: its value (mypy checks that every value
        is one of the contract's event names)."""
        return self.value


# What a COPYING superblock records of its copy (``Superblock.copy_step``): the copy target
# writes the mark with the step it stands for (copy/service.py), and startup reads the
# furthest step back from it (manager/shell.py ``copying_durable``). No mark: before the WAL.
SUPERBLOCK_MARKS: Final[dict[CopyStep, str]] = {
    CopyStep.DOWNLOAD_WAL: "WAL",
    CopyStep.DOWNLOAD_BLOCK: "BLOCKS_PARTIAL",
    CopyStep.BLOCKS_DONE: "BLOCKS_DONE",
}


# One record per durable step of the download (made durable by run_copy, traced from
# here), each carrying exactly what its trace event reports.


@attrs.frozen
class CopyBegun:
    """Step 1: the superblock is COPYING."""

    step: ClassVar[CopyStep] = CopyStep.BEGIN


@attrs.frozen
class CmetaMerged:
    """Step 2: the source's cmeta merged into the local one (None: there was none)."""

    local: ConsensusMeta | None
    remote: ConsensusMeta
    result: ConsensusMeta
    step: ClassVar[CopyStep] = CopyStep.MERGE_CMETA


@attrs.frozen
class WalDownloaded:
    """Step 3: every WAL segment is durable; ``wal_last`` is the downloaded WAL's last
    OpId."""

    wal_last: OpIdPair
    step: ClassVar[CopyStep] = CopyStep.DOWNLOAD_WAL


@attrs.frozen
class BlockDownloaded:
    """Step 4, one block durable (the blocks are PARTIAL)."""

    block: str
    step: ClassVar[CopyStep] = CopyStep.DOWNLOAD_BLOCK


@attrs.frozen
class BlocksDone:
    """Step 4 done: every block is durable."""

    step: ClassVar[CopyStep] = CopyStep.BLOCKS_DONE


@attrs.frozen
class MarkedReady:
    """Step 5, the commit point: the superblock is READY."""

    step: ClassVar[CopyStep] = CopyStep.MARK_READY


CopyStepDone = CopyBegun | CmetaMerged | WalDownloaded | BlockDownloaded | BlocksDone | MarkedReady
COPY_STEP_TYPES: Final[tuple[type, ...]] = (
    CopyBegun, CmetaMerged, WalDownloaded, BlockDownloaded, BlocksDone, MarkedReady)


@attrs.frozen
class CopyEnded:
    """The download ended: ``reason`` None when it reached the commit point."""

    reason: str | None


@attrs.frozen
class VoteRecorded:
    """The tablet's voter made a new cmeta durable (the voter traces it right after, with
    the state this returns)."""

    cmeta: ConsensusMeta


Input = (Register | Classified | ReplicaStarted | ReplicaStartFailed | ReplicaFailed | Create
         | CreateFailed | Delete | DeletionEnded | Stopped | StartCopy | CopyStepDone
         | CopyEnded | VoteRecorded)
INPUT_TYPES: Final[tuple[type, ...]] = (
    Register, Classified, ReplicaStarted, ReplicaStartFailed, ReplicaFailed, Create,
    CreateFailed, Delete, DeletionEnded, Stopped, StartCopy, *COPY_STEP_TYPES, CopyEnded,
    VoteRecorded)


@attrs.define
class Slot:
    """One tablet on this server (identity): exactly one state at a time."""

    tablet_id: str
    state: State = ABSENT


# ------------------------------------------------------------------------------ helpers


def _fact(event: EventName, args: msgspec.Struct, durable: Durable) -> LifecycleFact:
    return LifecycleFact(event, args, durable.record())


_NO_ARGS: Final = NoArgs()


def _tombstone_steps(durable: Durable,
                     qdir_fresh: bool = True) -> tuple[list[LifecycleEffect], Durable]:
    """Deletion steps 2-6 from ``durable`` (a READY or FAILED replica after step 1, or a
    COPYING one whose copy failed or was interrupted): the tablet becomes a tombstone.

    Step 4 is the commit point: from there a crash rolls the deletion forward at the next
    startup. A READY (or FAILED) replica's tombstone keeps the WAL's last OpId; a COPYING
    one keeps the tombstone's it had before the copy (the downloaded WAL never was its
    log)."""
    assert durable.data_state in (Sb.READY, Sb.COPYING), durable
    assert qdir_fresh
    effects: list[LifecycleEffect] = []
    d = attrs.evolve(durable, quarantine=(False, False))
    effects.append(LifecyclePersist(Op.NEW_QDIR, _fact("delete_create_qdir", _NO_ARGS, d)))
    d = attrs.evolve(d, quarantine=(True, False))
    effects.append(LifecyclePersist(Op.COPY_SUPERBLOCK,
                                    _fact("delete_copy_superblock", _NO_ARGS, d)))
    last = d.wal_last if d.data_state is not Sb.COPYING else d.tombstone_last
    d = attrs.evolve(d, data_state=Sb.DELETED, tombstone_last=last, sb_qdir=True,
                     blocks=Blocks.ABSENT)
    effects.append(LifecyclePersist(Op.MARK_DELETED, _fact("delete_mark_deleted", _NO_ARGS, d),
                           tombstone_last=last))
    more, d = _finish_steps(d)
    return effects + more, d


def _finish_steps(durable: Durable) -> tuple[list[LifecycleEffect], Durable]:
    """Deletion steps 5 and 6 (also the roll-forward of an interrupted deletion): the
    cmeta's copy into the qdir (the cmeta itself stays: the tombstone votes from it), then
    the WAL directory into the qdir in one rename (a damaged one too: the move reads
    nothing)."""
    assert durable.data_state is Sb.DELETED and durable.sb_qdir, durable
    d = attrs.evolve(durable, quarantine=(True, durable.cmeta is not None))
    effects: list[LifecycleEffect] = [
        LifecyclePersist(Op.COPY_CMETA, _fact("delete_copy_cmeta", _NO_ARGS, d))]
    wal = Wal.QUARANTINED if d.wal in (Wal.LIVE, Wal.DAMAGED) else d.wal
    d = attrs.evolve(d, wal=wal, wal_last=NO_OPID)
    effects.append(LifecyclePersist(Op.MOVE_WAL, _fact("delete_move_wal", _NO_ARGS, d)))
    return effects, d


def _full_delete_steps(durable: Durable) -> tuple[list[LifecycleEffect], Durable]:
    """Mode DELETED after the tombstone: the cmeta goes (never vote again), then the
    superblock (the tablet no longer exists here; the quarantine stays until purged).
    Kudu's order: a crash between leaves a tombstone without a cmeta."""
    assert durable.data_state is Sb.DELETED, durable
    d = attrs.evolve(durable, cmeta=None)
    effects: list[LifecycleEffect] = [
        LifecyclePersist(Op.REMOVE_CMETA, _fact("delete_remove_cmeta", _NO_ARGS, d))]
    d = attrs.evolve(d, data_state=Sb.DOES_NOT_EXIST, tombstone_last=NO_OPID, sb_qdir=False)
    effects.append(LifecyclePersist(Op.REMOVE_SUPERBLOCK,
                           _fact("delete_remove_superblock", _NO_ARGS, d)))
    return effects, d


def _cas_refusal(committed: int, cas: int | None) -> AppError | None:
    if cas is not None and committed > cas:
        return api.ConfigChangeRefused(
            "CAS_MISMATCH", f"the replica's committed config index {committed} is above the "
            f"caller's {cas}: the caller's view is stale", committed)
    return None


def _in_progress(tablet_id: str) -> AppError:
    return api.OperationAborted(f"ALREADY_IN_PROGRESS: tablet {tablet_id} has a deletion or "
                                "a tablet copy in flight")


# ------------------------------------------------------------------------------ the core

# How many fully deleted tablet ids a server remembers (``LifecycleCore.deleted``): about
# 100 bytes each.
DELETED_MEMORY: Final = 65_536


Handler = Callable[["LifecycleCore", Slot, Input], Batch]


class LifecycleCore:
    """Every tablet's slot on one server, and the one table that moves them."""

    def __init__(self, *, max_concurrent_copies: int = 4,
                 deleted_memory: int = DELETED_MEMORY) -> None:
        assert max_concurrent_copies >= 1 and deleted_memory >= 1
        self.slots: dict[str, Slot] = {}
        self.max_concurrent_copies = max_concurrent_copies
        # The tablets this process deleted with mode DELETED, oldest first (at most
        # ``deleted_memory``). A master's CreateTablet for one of them is a late copy of a
        # create sent before the delete (an attempt that timed out and was delivered
        # later, or one from a deposed leader that did not know yet): nothing is undeleted
        # and a tablet id is never reused, so it is refused (TabletDeleted) instead of
        # making the tablet afresh at term 0. Kept in memory only: a late request dies with
        # the connection it came on when this process exits, and a master retries only
        # while its committed catalog still calls for the create (impl/master/calls.py).
        self.deleted: dict[str, None] = {}
        self.deleted_memory = deleted_memory

    # ---------------------------------------------------------------- queries

    def state(self, tablet_id: str) -> State:
        slot = self.slots.get(tablet_id)
        return ABSENT if slot is None else slot.state

    def copies(self) -> int:
        return sum(1 for s in self.slots.values() if isinstance(s.state, Copying))

    def durable(self, tablet_id: str) -> Durable | None:
        """The tablet's durable state now (None for ABSENT and CREATING)."""
        st = self.state(tablet_id)
        if isinstance(st, Running):
            return st.replica.durable()
        if isinstance(st, Starting | Failed | Copying | Tombstoned | Deleting):
            return st.durable
        return None

    # ---------------------------------------------------------------- the one entry

    def handle(self, tablet_id: str, event: Input) -> Batch:
        """Step ``event`` into the tablet's slot; the batch the shell must execute."""
        slot = self.slots.get(tablet_id) or Slot(tablet_id)
        handler = LIFECYCLE_TRANSITIONS.get((slot.state.kind, type(event)))
        if handler is None:
            raise LifecycleProtocolError(f"tablet {tablet_id}: no transition for "
                                f"{type(event).__name__} in state {slot.state.kind.value}")
        batch = handler(self, slot, event)
        # Exactly one state per tablet: ABSENT means no slot at all.
        if isinstance(slot.state, Absent):
            self.slots.pop(tablet_id, None)
        else:
            self.slots[tablet_id] = slot
        return batch

    # ---------------------------------------------------------------- startup

    def _register(self, slot: Slot, ev: Input) -> Batch:
        assert isinstance(ev, Register)
        slot.state = Starting(ev.durable)
        return EMPTY

    def _classified(self, slot: Slot, ev: Input) -> Batch:
        assert isinstance(ev, Classified) and isinstance(slot.state, Starting)
        d = ev.durable
        case = ev.case
        args = StartupArgs(case.value, ev.reason or None)
        if case is Case.READY:
            # The replica opens; its startup fact comes with ReplicaStarted (the WAL's
            # last OpId is known once the log is open).
            slot.state = Starting(d)
            return Batch((Volatile.START_REPLICA,))
        if case is Case.FAILED:
            assert ev.reason, "a FAILED startup names what failed"
            slot.state = Failed(ev.reason, d, hosted=False)
            return Batch((LifecycleTrace(_fact("startup", args, d)),))
        if case is Case.ROLL_FORWARD:
            assert d.data_state is Sb.DELETED and d.wal is Wal.LIVE, d
            effects, after = _finish_steps(d)
            slot.state = Deleting(Mode.TOMBSTONE, after)  # a tombstone once they are durable
            return Batch((LifecycleTrace(_fact("startup", args, d)), *effects,
                          Volatile.END_DELETION))
        if case is Case.TOMBSTONE:
            assert d.data_state is Sb.DELETED, d
            slot.state = Tombstoned(d)
            return Batch((LifecycleTrace(_fact("startup", args, d)), Volatile.START_VOTER))
        assert case is Case.COPYING_TO_DELETED and d.data_state is Sb.COPYING, d
        # An interrupted copy is never finished into READY (the source's session is gone):
        # the replica deletes itself back to a tombstone keeping its previous last OpId.
        effects, after = _tombstone_steps(d)
        slot.state = Deleting(Mode.TOMBSTONE, after)  # a tombstone once they are durable
        return Batch((LifecycleTrace(_fact("startup", args, d)), *effects,
                      Volatile.END_DELETION))

    def _started(self, slot: Slot, ev: Input) -> Batch:
        assert isinstance(ev, ReplicaStarted)
        prior, d = slot.state, ev.durable
        assert d.data_state is Sb.READY, d
        slot.state = Running(ev.replica)
        if isinstance(prior, Starting):
            fact = _fact("startup", StartupArgs("READY"), d)
        elif isinstance(prior, Creating):
            fact = _fact("create_tablet", CreateArgs(0, sorted(ev.voters)), d)
        else:
            assert isinstance(prior, Copying) and prior.phase is CopyStage.STARTING, prior
            fact = _fact(CopyStep.START_REPLICA.event, _NO_ARGS, d)
        return Batch((LifecycleTrace(fact),))

    def _start_failed(self, slot: Slot, ev: Input) -> Batch:
        """The replica could not be opened (a damaged WAL or block): startup case FAILED.
        A replica made READY by a copy that fails to open fails the same way."""
        assert isinstance(ev, ReplicaStartFailed) and ev.reason
        slot.state = Failed(ev.reason, ev.durable, hosted=False)
        fact = _fact("startup", StartupArgs("FAILED", ev.reason), ev.durable)
        return Batch((LifecycleTrace(fact),))

    def _replica_failed(self, slot: Slot, ev: Input) -> Batch:
        """The driver failed: offline, still hosted (its WAL is closed when it is deleted).
        Nothing durable changed, so nothing is traced."""
        assert isinstance(ev, ReplicaFailed) and isinstance(slot.state, Running)
        slot.state = Failed(ev.reason, slot.state.replica.durable(), hosted=True)
        return EMPTY

    # ---------------------------------------------------------------- create

    def _create(self, slot: Slot, ev: Input) -> Batch:
        assert isinstance(ev, Create)
        if ev.from_master and slot.tablet_id in self.deleted:
            return Batch(refusal=api.TabletDeleted(slot.tablet_id))
        self.deleted.pop(slot.tablet_id, None)  # an operator made it again, on purpose
        slot.state = Creating()
        return EMPTY

    def _create_failed(self, slot: Slot, ev: Input) -> Batch:
        slot.state = ABSENT
        return EMPTY

    def _exists(self, slot: Slot, ev: Input) -> Batch:
        return Batch(refusal=api.TabletAlreadyExists(slot.tablet_id))

    # ---------------------------------------------------------------- refusals

    def _not_found(self, slot: Slot, ev: Input) -> Batch:
        return Batch(refusal=api.TabletNotFound(slot.tablet_id))

    def _not_running(self, slot: Slot, ev: Input) -> Batch:
        return Batch(refusal=api.TabletNotRunning(slot.tablet_id, slot.state.kind.value, ""))

    def _busy(self, slot: Slot, ev: Input) -> Batch:
        return Batch(refusal=_in_progress(slot.tablet_id))

    # ---------------------------------------------------------------- delete

    def _delete(self, slot: Slot, ev: Input) -> Batch:
        assert isinstance(ev, Delete)
        st = slot.state
        if isinstance(st, Tombstoned):
            refusal = _cas_refusal(st.durable.committed_config_index(), ev.cas_config_index)
            if refusal is not None:
                return Batch(refusal=refusal)
            if ev.mode is Mode.TOMBSTONE:
                return EMPTY  # a tombstone is not deleted again: nothing written
            effects, after = _full_delete_steps(st.durable)
            # DELETING until the removals are durable (DeletionEnded), not ABSENT now: a
            # copy or a create let in between them would interleave with them.
            slot.state = Deleting(Mode.DELETED, after)
            return Batch((Volatile.STOP_VOTER, *effects, Volatile.END_DELETION))
        assert isinstance(st, Running | Failed), st
        durable = st.replica.durable() if isinstance(st, Running) else st.durable
        refusal = _cas_refusal(durable.committed_config_index(), ev.cas_config_index)
        if refusal is not None:
            return Batch(refusal=refusal)
        slot.state = Deleting(ev.mode, durable)
        # Step 1 (volatile): the replica stops; Stopped brings its WAL's last OpId.
        return Batch((Volatile.STOP_REPLICA,))

    def _deletion_ended(self, slot: Slot, ev: Input) -> Batch:
        """The deletion's durable steps are done: a tombstone (its voter starts) or, mode
        DELETED, nothing (ABSENT, remembered)."""
        assert isinstance(ev, DeletionEnded) and isinstance(slot.state, Deleting)
        st = slot.state
        if st.mode is Mode.TOMBSTONE:
            assert st.durable.data_state is Sb.DELETED, st
            slot.state = Tombstoned(st.durable)
            return Batch((Volatile.START_VOTER,))
        assert st.durable.data_state is Sb.DOES_NOT_EXIST, st
        self._gone(slot)
        return EMPTY

    def _gone(self, slot: Slot) -> None:
        """A DeleteTablet DELETED took the tablet away for good: ABSENT, and remembered."""
        slot.state = ABSENT
        self.deleted[slot.tablet_id] = None
        while len(self.deleted) > self.deleted_memory:
            del self.deleted[next(iter(self.deleted))]  # the oldest first

    def _stopped(self, slot: Slot, ev: Input) -> Batch:
        assert isinstance(ev, Stopped)
        st, d = slot.state, ev.durable
        shutdown = LifecycleTrace(_fact("delete_shutdown", _NO_ARGS, d))
        effects, after = _tombstone_steps(d)
        if isinstance(st, Deleting):
            # The slot stays DELETING while the steps run (DeletionEnded ends it): a copy
            # or a create let in between them would interleave with them.
            if st.mode is Mode.TOMBSTONE:
                slot.state = Deleting(Mode.TOMBSTONE, after)
                return Batch((shutdown, *effects, Volatile.END_DELETION))
            more, gone = _full_delete_steps(after)
            slot.state = Deleting(Mode.DELETED, gone)
            return Batch((shutdown, *effects, *more, Volatile.END_DELETION))
        # A copy replacing a READY replica: tombstoned first, no voter (the copy's merged
        # cmeta starts one), then the download.
        assert isinstance(st, Copying) and st.phase is CopyStage.TOMBSTONING, st
        slot.state = Copying(CopyStage.DOWNLOADING, after, st.source)
        return Batch((shutdown, *effects, Volatile.RUN_COPY))

    # ---------------------------------------------------------------- tablet copy

    def _start_copy(self, slot: Slot, ev: Input) -> Batch:
        """StartTabletCopy's checks, in order, before anything is touched; the first that
        fails is the answer (traced ``stc_reject``), else ``stc_accept``."""
        assert isinstance(ev, StartCopy)
        st = slot.state
        if isinstance(st, Running):
            current, durable = Sb.READY, st.replica.durable()
        elif isinstance(st, Failed):
            current, durable = Sb.READY, st.durable  # a FAILED replica counts as READY
        elif isinstance(st, Tombstoned):
            current, durable = Sb.DELETED, st.durable
        elif isinstance(st, Copying | Deleting):
            current, durable = st.durable.data_state, st.durable
        else:
            assert isinstance(st, Absent), st
            current, durable = Sb.DOES_NOT_EXIST, ev.at_rest
        last = durable.last_logged()
        checks = (
            ("ALREADY_IN_PROGRESS", isinstance(st, Copying | Deleting),
             "a deletion or a copy of this tablet is in flight"),
            ("ILLEGAL_STATE", current is not ev.expected_state,
             f"the replica is {current.value}, the caller expected "
             f"{ev.expected_state.value}"),
            ("STALE_TERM", ev.caller_term < last[0],
             f"the caller's term {ev.caller_term} is below this replica's last logged term "
             f"{last[0]}"),
            ("OPID_MISMATCH", ev.last_opid is not None and tuple(ev.last_opid) != last,
             f"the caller expects last OpId {ev.last_opid}, this replica's is {last}"),
        )
        opid = ev.last_opid or NO_OPID
        expected: SbName = ev.expected_state.value
        failed = next(((r, detail) for r, bad, detail in checks if bad), None)
        if failed is not None:
            reason: StcName = failed[0]  # type: ignore[assignment]
            fact = _fact("stc_reject", StcRejectArgs(
                ev.caller, ev.caller_term, expected, ev.last_opid is not None, opid[0],
                opid[1], answer=reason, reason=reason), durable)
            return Batch((LifecycleTrace(fact),), refusal=api.CopyRefused(reason, failed[1]))
        accept = LifecycleTrace(_fact("stc_accept", StcArgs(
            ev.caller, ev.caller_term, expected, ev.last_opid is not None, opid[0], opid[1],
            answer="OK"), durable))
        if isinstance(st, Running | Failed):
            slot.state = Copying(CopyStage.TOMBSTONING, durable, ev.source)
            return Batch((accept, Volatile.STOP_REPLICA))
        slot.state = Copying(CopyStage.DOWNLOADING, durable, ev.source)
        if isinstance(st, Tombstoned):
            # The tombstone stops voting while its superblock and cmeta change hands.
            return Batch((accept, Volatile.STOP_VOTER, Volatile.RUN_COPY))
        return Batch((accept, Volatile.RUN_COPY))

    def _busy_copy(self, slot: Slot, ev: Input) -> Batch:
        """StartTabletCopy while a DeleteTablet runs: ALREADY_IN_PROGRESS, not traced (as
        if never received, like THROTTLED). The spec's answer would depend on where the
        deletion is, which the DELETING slot does not follow step by step: before its
        ``delete_shutdown`` is traced, and between a full delete's ``delete_move_wal`` and
        ``delete_remove_cmeta``, the spec has no operation in flight (there its answer is
        ILLEGAL_STATE or an accept); a refusal that is not traced is legal at every step.
        The caller asks again; the deletion's end answers it."""
        assert isinstance(ev, StartCopy) and isinstance(slot.state, Deleting)
        return Batch(refusal=api.CopyRefused(
            "ALREADY_IN_PROGRESS", f"tablet {slot.tablet_id} is being deleted here; ask "
            "again once the deletion is done"))

    def _throttle_or_start_copy(self, slot: Slot, ev: Input) -> Batch:
        """THROTTLED (not traced: as if never received) when enough copies run here."""
        busy = isinstance(slot.state, Copying)  # ALREADY_IN_PROGRESS comes first
        if not busy and self.copies() >= self.max_concurrent_copies:
            return Batch(refusal=api.CopyRefused(
                "THROTTLED", f"{self.copies()} copies are running here (at most "
                f"{self.max_concurrent_copies}); ask again later"))
        return self._start_copy(slot, ev)

    def _copy_step(self, slot: Slot, ev: Input) -> Batch:
        assert isinstance(ev, COPY_STEP_TYPES) and isinstance(slot.state, Copying)
        st = slot.state
        assert st.phase is CopyStage.DOWNLOADING, st
        d = st.durable
        args: msgspec.Struct = _NO_ARGS
        after: tuple[LifecycleEffect, ...] = ()
        if isinstance(ev, CopyBegun):
            d = attrs.evolve(d, data_state=Sb.COPYING, sb_qdir=False)
            args = CopyBeginArgs(st.source)
        elif isinstance(ev, CmetaMerged):
            args = MergeArgs(ev.remote.current_term,
                             ev.remote.committed_config.opid_index or 0,
                             _cmeta_state(ev.local), _cmeta_record(ev.remote),
                             _cmeta_record(ev.result))
            d = attrs.evolve(d, cmeta=ev.result)
            after = (Volatile.START_VOTER,)  # the COPYING replica votes from the merge
        elif isinstance(ev, WalDownloaded):
            d = attrs.evolve(d, wal=Wal.LIVE, wal_last=ev.wal_last)
            args = DownloadWalArgs(*ev.wal_last)
        elif isinstance(ev, BlockDownloaded):
            d = attrs.evolve(d, blocks=Blocks.PARTIAL)
        elif isinstance(ev, BlocksDone):
            d = attrs.evolve(d, blocks=Blocks.PRESENT)
            after = (Volatile.STOP_VOTER,)  # the commit point follows: stop voting
        else:
            assert isinstance(ev, MarkedReady), ev
            d = attrs.evolve(d, data_state=Sb.READY, tombstone_last=NO_OPID)
        slot.state = Copying(st.phase, d, st.source)
        return Batch((LifecycleTrace(_fact(ev.step.event, args, d)), *after))

    def _copy_ended(self, slot: Slot, ev: Input) -> Batch:
        assert isinstance(ev, CopyEnded) and isinstance(slot.state, Copying)
        st = slot.state
        d = st.durable
        if d.data_state is Sb.READY:
            # Past the commit point (a failure after it changes nothing: startup would run
            # the READY replica): step 6, the replica starts.
            slot.state = Copying(CopyStage.STARTING, d, st.source)
            return Batch((Volatile.STOP_VOTER, Volatile.START_REPLICA))
        abort = LifecycleTrace(_fact("copy_abort",
                                     CopyAbortArgs(ev.reason or "the copy ended early"),
                            d))
        if d.data_state is Sb.COPYING:
            # Tombstoned again: DELETING until the steps are durable (DeletionEnded).
            effects, after = _tombstone_steps(d)
            slot.state = Deleting(Mode.TOMBSTONE, after)
            return Batch((Volatile.STOP_VOTER, abort, *effects, Volatile.END_DELETION))
        if d.data_state is Sb.DELETED:
            slot.state = Tombstoned(d)
            return Batch((abort, Volatile.START_VOTER))
        assert d.data_state is Sb.DOES_NOT_EXIST, d
        slot.state = ABSENT
        return Batch((abort,))

    # ---------------------------------------------------------------- votes

    def _vote_recorded(self, slot: Slot, ev: Input) -> Batch:
        assert isinstance(ev, VoteRecorded)
        st = slot.state
        assert isinstance(st, Tombstoned | Copying), st
        d = attrs.evolve(st.durable, cmeta=ev.cmeta)
        slot.state = attrs.evolve(st, durable=d)
        return EMPTY

    def _protocol_error(self, slot: Slot, ev: Input) -> Batch:
        raise LifecycleProtocolError(f"tablet {slot.tablet_id}: {type(ev).__name__} cannot "
                                     f"happen in state {slot.state.kind.value}")


def _cmeta_record(cm: ConsensusMeta) -> CmetaState:
    return CmetaState(cm.current_term, cm.voted_for, cm.committed_config.opid_index or 0)


def _cmeta_state(cm: ConsensusMeta | None) -> CmetaState | None:
    return None if cm is None else _cmeta_record(cm)


# ------------------------------------------------------------------------------ the table

_C = LifecycleCore
_ALL: Final = tuple(Kind)


def _rows() -> dict[tuple[Kind, type], Handler]:
    """(state, input) -> handler, every pair. Read it as the lifecycle's diagram."""
    A, S, C, R, F, P, T, D = (Kind.ABSENT, Kind.STARTING, Kind.CREATING, Kind.RUNNING,
                              Kind.FAILED, Kind.COPYING, Kind.TOMBSTONED, Kind.DELETING)
    rows: dict[tuple[Kind, type], Handler] = {}

    def row(states: tuple[Kind, ...], event: type, handler: Handler) -> None:
        for s in states:
            assert (s, event) not in rows, (s, event)
            rows[(s, event)] = handler

    # Startup: registration before serving, then classification.
    row((A,), Register, _C._register)
    row((S,), Classified, _C._classified)
    # The replica opened (from startup, CreateTablet or copy step 6) or failed to.
    row((S, C, P), ReplicaStarted, _C._started)
    row((S, P), ReplicaStartFailed, _C._start_failed)
    row((R,), ReplicaFailed, _C._replica_failed)
    # CreateTablet.
    row((A,), Create, _C._create)
    row((S, C, R, F, P, T, D), Create, _C._exists)
    row((C,), CreateFailed, _C._create_failed)
    # DeleteTablet.
    row((A,), Delete, _C._not_found)
    row((S, C), Delete, _C._not_running)
    row((R, F, T), Delete, _C._delete)
    row((P, D), Delete, _C._busy)
    row((D, P), Stopped, _C._stopped)
    row((D,), DeletionEnded, _C._deletion_ended)
    # StartTabletCopy (a STARTING or CREATING tablet: retryable, untraced).
    row((A, R, F, T, P), StartCopy, _C._throttle_or_start_copy)
    row((D,), StartCopy, _C._busy_copy)
    row((S, C), StartCopy, _C._not_running)
    for step_type in COPY_STEP_TYPES:
        row((P,), step_type, _C._copy_step)
    row((P,), CopyEnded, _C._copy_ended)
    # A voter's durable vote.
    row((T, P), VoteRecorded, _C._vote_recorded)
    # Everything else is the shell's bug: a named error, never a silent no-op.
    for s in _ALL:
        for event in INPUT_TYPES:
            rows.setdefault((s, event), _C._protocol_error)
    return rows


LIFECYCLE_TRANSITIONS: Final[dict[tuple[Kind, type], Handler]] = _rows()
# The pairs that are protocol errors (the shell never produces them): listed so that the
# totality test can tell a deliberate refusal from a forgotten row.
PROTOCOL_ERRORS: Final = frozenset(k for k, h in LIFECYCLE_TRANSITIONS.items()
                                   if h is _C._protocol_error)

__all__ = [
    "ABSENT",
    "COPY_STEP_TYPES",
    "DELETED_MEMORY",
    "EMPTY",
    "INPUT_TYPES",
    "LIFECYCLE_TRANSITIONS",
    "PROTOCOL_ERRORS",
    "SUPERBLOCK_MARKS",
    "Absent",
    "Batch",
    "BlockDownloaded",
    "BlocksDone",
    "Case",
    "Classified",
    "CmetaMerged",
    "CopyBegun",
    "CopyEnded",
    "CopyStage",
    "CopyStep",
    "CopyStepDone",
    "Copying",
    "Create",
    "CreateFailed",
    "Creating",
    "Delete",
    "Deleting",
    "DeletionEnded",
    "Failed",
    "Input",
    "Kind",
    "LifecycleCore",
    "LifecycleEffect",
    "LifecycleFact",
    "LifecyclePersist",
    "LifecycleProtocolError",
    "LifecycleTrace",
    "MarkedReady",
    "Mode",
    "Op",
    "Register",
    "ReplicaFailed",
    "ReplicaHandle",
    "ReplicaStartFailed",
    "ReplicaStarted",
    "Running",
    "Slot",
    "StartCopy",
    "Starting",
    "State",
    "Stopped",
    "Tombstoned",
    "Volatile",
    "VoteRecorded",
    "WalDownloaded",
]
