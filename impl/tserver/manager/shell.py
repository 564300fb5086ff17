"""The tablet manager's shell: executes the lifecycle core's batches, hosts the replicas.

Rules of this file
------------------
* The core (``core.py``) decides; this shell only does what a batch says, in its order
  (``execute``): a ``LifecyclePersist`` is made durable (written, fsync'd) and then its
  fact traced, the pair shielded from cancellation and holding the tablet's step lock (at
  most one durable step of a tablet between its write and its event: a vote of its voter
  and a copy step may otherwise run at once, and a crash between their fsyncs and their
  events would lose two events where the checker's crash frontier allows one); a
  ``LifecycleTrace`` is traced; a ``Volatile`` starts or stops a replica, a voter or a
  copy, and what it learns (the WAL's last OpId once a replica stopped, a replica that
  opened) goes back into the core as an input of its own, whose batch runs next.
* Startup before serving: ``register_all`` removes what a CreateTablet cut before its
  superblock left (a cmeta and a WAL directory of no replica: ``orphans.py``), records
  every superblock on disk in the core (state STARTING), and runs before the RPC server
  accepts a call; ``start_all`` then
  classifies and opens each. A tablet call for a STARTING tablet is refused with the
  retryable TabletNotRunning(STARTING), never TabletNotFound: a leader that hears "not
  found" asks for a copy, and a copy of a tablet that is only starting would be refused
  ("is READY here") and traced as a broken restart.
* ``--fault-crash-after STEP`` (test-only): the process exits abruptly right after tracing
  the named step, so tests can crash at every step.
"""

from __future__ import annotations

import contextlib
import logging
import os
import posixpath
import zlib
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, Final, Protocol

import attrs
import trio

from revivify.impl.consensus import core as raft
from revivify.impl.observe.metrics import OFF, ServerMetrics
from revivify.impl.storage.blocks import BlockManager
from revivify.impl.storage.disk import Disk
from revivify.impl.storage.errors import StorageError
from revivify.impl.storage.layout import (
    QDIR_CMETA,
    QDIR_PARTIAL_WAL,
    QDIR_SUPERBLOCK,
    QDIR_WAL,
    ServerLayout,
)
from revivify.impl.storage.metadata import MetadataStore
from revivify.impl.storage.values import ConsensusMeta, DataState, OpId, Superblock
from revivify.impl.storage.wal import LogOptions, open_log, salvage_last_opid
from revivify.impl.tablet.errors import TabletError
from revivify.impl.tablet.store import TabletStore

from .. import api
from ..durable import NO_OPID, Blocks, Durable, Sb, Wal, opid_pair, running
from ..durable_step import durable_step
from ..orphans import discard_uncommitted_create, leftover_tablet_ids
from ..replica import Replica, Tracer, entry_from_wal, new_core
from .core import (
    SUPERBLOCK_MARKS,
    Absent,
    Batch,
    Case,
    Classified,
    Copying,
    CopyStep,
    Create,
    CreateFailed,
    Delete,
    Deleting,
    DeletionEnded,
    Failed,
    Input,
    Kind,
    LifecycleCore,
    LifecycleFact,
    LifecyclePersist,
    LifecycleTrace,
    Mode,
    Op,
    ReplicaFailed,
    ReplicaStarted,
    ReplicaStartFailed,
    Running,
    Starting,
    Stopped,
    Tombstoned,
    Volatile,
    VoteRecorded,
)
from .voter import TombstoneVoter

logger = logging.getLogger(__name__)

# The furthest copy step a COPYING superblock's mark stands for (core.SUPERBLOCK_MARKS).
_STEP_OF_MARK: Final = {mark: step for step, mark in SUPERBLOCK_MARKS.items()}
# The blocks a COPYING superblock holds after its furthest step (none before the first).
_BLOCKS_AFTER: Final[dict[CopyStep | None, Blocks]] = {
    CopyStep.DOWNLOAD_BLOCK: Blocks.PARTIAL, CopyStep.BLOCKS_DONE: Blocks.PRESENT}

DELETE_STEPS: Final = ("delete_shutdown", "delete_create_qdir", "delete_copy_superblock",
                       "delete_mark_deleted", "delete_copy_cmeta", "delete_move_wal")
FULL_DELETE_STEPS: Final = ("delete_remove_cmeta", "delete_remove_superblock")
COPY_STEPS: Final = tuple(step.value for step in CopyStep)
FAULT_POINTS: Final = (*DELETE_STEPS, *FULL_DELETE_STEPS, *COPY_STEPS)


class Host(Protocol):
    """What the manager needs of its server (impl/tserver/server.py)."""

    uuid: str
    disk: Disk
    layout: ServerLayout
    metadata: MetadataStore
    blocks: BlockManager
    raft_options: raft.Options

    @property
    def tracer(self) -> Tracer: ...

    async def blocking(self, fn: Any, *args: Any) -> Any: ...

    def log_options(self) -> LogOptions: ...

    def make_replica(self, tablet_id: str, core: raft.RaftCore, log: Any,
                     store: TabletStore) -> Replica: ...

    def send(self, dest: str, tablet_id: str, messages: list[Any]) -> None: ...

    def replica_seed(self, tablet_id: str) -> int: ...


@attrs.define
class Hosted:
    """The task that owns one replica's WAL and driver."""

    scope: trio.CancelScope
    done: trio.Event
    replica: Replica | None = None
    started: bool = False  # the replica ran (its ``task_status.started()`` was called)


@attrs.define
class TabletTasks:
    """What this process runs for one tablet beside its slot in the lifecycle core (which
    alone says what state the tablet is in): the one record of a tablet's volatile parts.

    ``step_lock`` orders its durable steps (``TabletManager.durable_step``); ``hosted`` is
    the task owning its replica's WAL and driver (set from the replica's start until that
    task ends: a FAILED replica's stays until it is deleted); ``voter`` is its tombstone's
    (or COPYING replica's) voter while one runs. A record outlives its parts, as the step
    lock must (a step waiting on it holds it), so records are kept for every tablet this
    process has seen, about a hundred bytes each."""

    step_lock: trio.Lock = attrs.field(factory=trio.Lock)
    hosted: Hosted | None = None
    voter: TombstoneVoter | None = None


class TabletManager:
    """Every tablet of one server: the lifecycle core and what executes its batches."""

    def __init__(self, host: Host, *, max_concurrent_copies: int = 4,
                 fault_crash_after: str | None = None,
                 metrics: ServerMetrics | None = None) -> None:
        self.host = host
        self.metrics = metrics if metrics is not None else OFF
        self.core = LifecycleCore(max_concurrent_copies=max_concurrent_copies)
        self.fault_crash_after = fault_crash_after
        self._tasks: dict[str, TabletTasks] = {}  # tablet id -> its volatile parts
        self._nursery: trio.Nursery | None = None
        # RUN_COPY: the server's copy service starts the download (impl/tserver/copy).
        self.run_copy: Callable[[str], None] = _no_copy
        # Test seam (impl/testing's Cluster): awaited before each tablet's startup, so a
        # test can hold one tablet STARTING while the server already serves.
        self.startup_gate: Callable[[str], Awaitable[None]] | None = None

    def attach(self, nursery: trio.Nursery) -> None:
        self._nursery = nursery

    # ---------------------------------------------------------------- queries

    # Whether a replica runs has one answer: its slot in the lifecycle core is RUNNING.
    # ``TabletTasks.hosted`` only says which task owns a WAL (a FAILED replica's stays open
    # until it is deleted), so every "does it run" below asks the core, never the Replica.

    def replica(self, tablet_id: str) -> Replica | None:
        """The tablet's hosted replica, running or not (a FAILED one stays hosted until it
        is deleted): for what it holds (its WAL, its core's config), not whether it runs."""
        tasks = self._tasks.get(tablet_id)
        hosted = tasks.hosted if tasks is not None else None
        return hosted.replica if hosted is not None else None

    def runs(self, tablet_id: str) -> bool:
        """The tablet's slot is RUNNING: its replica serves (``Replica`` asks this)."""
        return isinstance(self.core.state(tablet_id), Running)

    def running_replica(self, tablet_id: str) -> Replica | None:
        """The tablet's replica if its slot is RUNNING, else None."""
        return self.replica(tablet_id) if self.runs(tablet_id) else None

    def running(self) -> Iterator[tuple[str, Replica]]:
        for tablet_id, slot in list(self.core.slots.items()):
            if isinstance(slot.state, Running):
                replica = self.replica(tablet_id)
                if replica is not None:
                    yield tablet_id, replica

    def require_running(self, tablet_id: str) -> Replica:
        """The running replica, or the typed refusal a caller can act on: NotFound (never
        hosted here), TabletNotRunning with the state (STARTING is retryable)."""
        st = self.core.state(tablet_id)
        if isinstance(st, Running):
            replica = self.replica(tablet_id)
            assert replica is not None, f"tablet {tablet_id} RUNNING without a replica"
            return replica
        if isinstance(st, Absent):
            raise api.TabletNotFound(tablet_id)
        reason = st.reason if isinstance(st, Failed) else ""
        raise api.TabletNotRunning(tablet_id, st.kind.value, reason)

    def tasks(self, tablet_id: str) -> TabletTasks:
        """The tablet's record of volatile parts, made on first use: only by what starts a
        part or a step (a query never makes one, so calls naming unknown tablets cost
        nothing)."""
        tasks = self._tasks.get(tablet_id)
        if tasks is None:
            tasks = self._tasks[tablet_id] = TabletTasks()
        return tasks

    def voter(self, tablet_id: str) -> TombstoneVoter | None:
        """The tablet's voter, if its tombstone (or COPYING replica) votes now."""
        tasks = self._tasks.get(tablet_id)
        return tasks.voter if tasks is not None else None

    def voting(self) -> list[TombstoneVoter]:
        """Every voter running now (the server ticks them)."""
        return [t.voter for t in self._tasks.values() if t.voter is not None]

    def step_lock(self, tablet_id: str) -> trio.Lock:
        return self.tasks(tablet_id).step_lock

    def durable_step(self, tablet_id: str) -> contextlib.AbstractAsyncContextManager[None]:
        """One durable step of the tablet and its trace event: under its step lock,
        shielded (durable_step.py says why). The shell's deletion steps, the voter's votes
        and a copy's download steps all go through here."""
        return durable_step(self.step_lock(tablet_id))

    def quarantine_view(self, tablet_id: str) -> tuple[bool, bool] | None:
        """Whether the newest quarantine dir holds the superblock and the cmeta copies."""
        layout = self.host.layout
        dirs = layout.quarantine_dirs(tablet_id)
        if not dirs:
            return None
        names = set(layout.disk.listdir(dirs[-1]))
        return (QDIR_SUPERBLOCK in names, QDIR_CMETA in names)

    def wal_at_rest(self, tablet_id: str) -> Wal:
        """Where the WAL is when none is live: QUARANTINED if a deletion moved one into a
        quarantine directory, else ABSENT."""
        layout = self.host.layout
        for qdir in layout.quarantine_dirs(tablet_id):
            if QDIR_WAL in layout.disk.listdir(qdir):
                return Wal.QUARANTINED
        return Wal.ABSENT

    def at_rest(self, tablet_id: str) -> Durable:
        """A tablet this server does not host: what a deletion may have left."""
        return Durable(Sb.DOES_NOT_EXIST, wal=self.wal_at_rest(tablet_id),
                       quarantine=self.quarantine_view(tablet_id))

    # ---------------------------------------------------------------- the executor

    async def apply(self, tablet_id: str, event: Input, *, after_steps: bool = False) -> None:
        """Step ``event`` into the core and execute its batch; raise its refusal.

        ``after_steps``: stepped in under the tablet's step lock, so that a durable step in
        flight (a tombstone's vote: cmeta written, then recorded by the core, then traced)
        ends before the state changes under it. A DeleteTablet of a tombstone needs it: the
        vote would come back to a DELETING slot, and the deletion's removals must see the
        voted cmeta."""
        if after_steps:
            async with self.step_lock(tablet_id):
                batch = self.core.handle(tablet_id, event)
        else:
            batch = self.core.handle(tablet_id, event)
        await self.execute(tablet_id, batch)
        if batch.refusal is not None:
            raise batch.refusal

    def trace(self, tablet_id: str, fact: LifecycleFact) -> None:
        """Trace a fact (after its step was made durable); the fault point follows."""
        self.host.tracer.event(fact.event, fact.args, fact.state, tablet=tablet_id)
        if fact.event == self.fault_crash_after:
            logger.error("fault injection: crashing right after %s of %s", fact.event,
                         tablet_id)
            os._exit(75)

    async def execute(self, tablet_id: str, batch: Batch) -> None:
        """Run a batch's effects in order (the module header's rules)."""
        for effect in batch.effects:
            if isinstance(effect, LifecyclePersist):
                async with self.durable_step(tablet_id):  # durable, then traced: together
                    await self.host.blocking(self._persist, tablet_id, effect)
                    self.trace(tablet_id, effect.fact)
            elif isinstance(effect, LifecycleTrace):
                self.trace(tablet_id, effect.fact)
            elif effect is Volatile.STOP_REPLICA:
                durable = await self._stop_replica(tablet_id)
                await self.apply(tablet_id, Stopped(durable))
            elif effect is Volatile.START_REPLICA:
                await self._start_replica(tablet_id)
            elif effect is Volatile.START_VOTER:
                self._start_voter(tablet_id)
            elif effect is Volatile.STOP_VOTER:
                await self._stop_voter(tablet_id)
            elif effect is Volatile.END_DELETION:
                # Every step before it in this batch is durable and traced.
                await self.apply(tablet_id, DeletionEnded())
            else:
                assert effect is Volatile.RUN_COPY, effect
                self.run_copy(tablet_id)

    def _persist(self, tablet_id: str, effect: LifecyclePersist) -> None:
        """One durable step of a deletion (blocking: a worker thread runs it)."""
        layout, metadata, disk = self.host.layout, self.host.metadata, self.host.disk
        op = effect.op
        if op is Op.NEW_QDIR:
            layout.new_quarantine_dir(tablet_id)
            return
        sb = metadata.load_superblock(tablet_id)
        qdirs = layout.quarantine_dirs(tablet_id)
        # The superblock names its qdir once DELETED (step 4); before, the newest is it.
        qdir = (sb.quarantine_dir if sb is not None and sb.quarantine_dir else
                (qdirs[-1] if qdirs else None))
        if op is Op.COPY_SUPERBLOCK:
            assert qdir is not None
            layout.copy_file_durably(layout.superblock_path(tablet_id), qdir, QDIR_SUPERBLOCK)
        elif op is Op.MARK_DELETED:
            assert sb is not None and qdirs, tablet_id
            metadata.write_superblock(Superblock(
                tablet_id, DataState.DELETED, OpId(*effect.tombstone_last), qdirs[-1],
                table_name=sb.table_name, schema=sb.schema))
        elif op is Op.COPY_CMETA:
            assert qdir is not None
            if disk.exists(layout.cmeta_path(tablet_id)):
                layout.copy_file_durably(layout.cmeta_path(tablet_id), qdir, QDIR_CMETA)
        elif op is Op.MOVE_WAL:
            assert qdir is not None
            wal_dir = layout.wal_dir(tablet_id)
            if disk.is_dir(wal_dir):
                # The step's durable state says where the WAL ends up: QUARANTINED for the
                # replica's log; ABSENT when the directory is a copy's partial download
                # (cut in its WAL phase: it never was this replica's log), which goes aside
                # under another name, one rename either way.
                partial = effect.fact.state.wal.location == "ABSENT"
                layout.move_dir_durably(wal_dir, posixpath.join(
                    qdir, QDIR_PARTIAL_WAL if partial else QDIR_WAL))
        elif op is Op.REMOVE_CMETA:
            path = layout.cmeta_path(tablet_id)
            if disk.exists(path):
                _remove_durably(disk, path)
        else:
            assert op is Op.REMOVE_SUPERBLOCK, op
            _remove_durably(disk, layout.superblock_path(tablet_id))

    # ---------------------------------------------------------------- startup

    def register_all(self) -> int:
        """Startup, before serving: what a CreateTablet cut before its superblock left (a
        cmeta, a WAL directory: no replica's) is removed first (orphans.py: such a cmeta
        must never vote or be merged), then every tablet with a superblock gets its slot
        (STARTING). Blocking (reads every superblock); returns how many."""
        host = self.host
        for tablet_id in leftover_tablet_ids(host.layout):
            removed = discard_uncommitted_create(host.layout, host.metadata, tablet_id)
            if removed:
                logger.warning("tablet %s: removed what a CreateTablet cut before its "
                               "superblock left: %s", tablet_id, ", ".join(removed))
        n = 0
        for tablet_id in self.host.layout.tablet_ids():
            sb = self.host.metadata.load_superblock(tablet_id)
            if sb is None:
                continue  # removed meanwhile (a full delete finished before a crash)
            batch = self.core.handle(tablet_id, _register(sb))
            assert not batch.effects and batch.refusal is None
            n += 1
        return n

    async def start_all(self) -> None:
        """Classify and open every registered tablet (seed 001 "Tablet startup")."""
        for tablet_id, slot in sorted(self.core.slots.items()):
            if isinstance(slot.state, Starting):
                if self.startup_gate is not None:
                    await self.startup_gate(tablet_id)
                event = await self.host.blocking(self.classify, tablet_id)
                await self.apply(tablet_id, event)

    def classify(self, tablet_id: str) -> Classified:
        """What startup finds of one tablet (blocking)."""
        host = self.host
        layout, metadata = host.layout, host.metadata
        sb = metadata.load_superblock(tablet_id)
        assert sb is not None, tablet_id
        cmeta = metadata.load_cmeta(tablet_id)
        quarantine = self.quarantine_view(tablet_id)
        wal_dir = layout.wal_dir(tablet_id)
        if sb.data_state is DataState.DELETED:
            d = Durable(Sb.DELETED, tombstone_last=opid_pair(sb.tombstone_last_opid),
                        sb_qdir=sb.quarantine_dir is not None, cmeta=cmeta,
                        wal=self.wal_at_rest(tablet_id), blocks=Blocks.ABSENT,
                        quarantine=quarantine)
            if layout.disk.is_dir(wal_dir) and sb.quarantine_dir is not None:
                # A crash between deletion steps 4 and 6: roll forward.
                last = salvage_last_opid(layout.disk, wal_dir)
                return Classified(Case.ROLL_FORWARD,
                                  attrs.evolve(d, wal=Wal.LIVE, wal_last=opid_pair(last)))
            return Classified(Case.TOMBSTONE, d)
        if sb.data_state is DataState.COPYING:
            return Classified(Case.COPYING_TO_DELETED, self.copying_durable(tablet_id, sb))
        if cmeta is None:
            return Classified(Case.FAILED, self._failed_durable(tablet_id, None, Wal.LIVE,
                                                                Blocks.PRESENT),
                              f"consensus metadata {layout.cmeta_path(tablet_id)} is missing")
        return Classified(Case.READY, running(cmeta, NO_OPID, quarantine))

    def copying_durable(self, tablet_id: str, sb: Superblock) -> Durable:
        """The durable state a COPYING superblock stands for: its mark names the furthest
        copy step made durable (core.SUPERBLOCK_MARKS)."""
        done = _STEP_OF_MARK.get(sb.copy_step)  # None: no mark, the WAL is not down yet
        wal_done = done is not None
        return Durable(
            Sb.COPYING, tombstone_last=opid_pair(sb.tombstone_last_opid),
            cmeta=self.host.metadata.load_cmeta(tablet_id),
            wal=Wal.LIVE if wal_done else self.wal_at_rest(tablet_id),
            wal_last=opid_pair(sb.copy_wal_last) if wal_done else NO_OPID,
            blocks=_BLOCKS_AFTER.get(done, Blocks.ABSENT),
            quarantine=self.quarantine_view(tablet_id))

    def _failed_durable(self, tablet_id: str, cmeta: ConsensusMeta | None, wal: Wal,
                        blocks: Blocks) -> Durable:
        """A READY replica that failed verification; the WAL's last OpId as the segments
        that still verify record it."""
        layout = self.host.layout
        wal_dir = layout.wal_dir(tablet_id)
        last = salvage_last_opid(layout.disk, wal_dir) if layout.disk.is_dir(wal_dir) else None
        return Durable(Sb.READY, cmeta=cmeta, wal=wal, wal_last=opid_pair(last),
                       blocks=blocks, quarantine=self.quarantine_view(tablet_id))

    # ---------------------------------------------------------------- replicas

    async def create(self, tablet_id: str, cmeta: ConsensusMeta, voters: list[str],
                     from_master: bool = False) -> None:
        """CreateTablet: cmeta, then the WAL directory, then the superblock (the commit
        point; what a create cut before it leaves belongs to no replica and is removed
        before anything reads it: orphans.py); refused when the tablet exists here in any
        state, and a master's when this process deleted it with mode DELETED
        (``LifecycleCore.deleted``)."""
        await self.apply(tablet_id, Create(from_master))
        host = self.host
        try:
            if await host.blocking(host.metadata.load_superblock, tablet_id) is not None:
                raise api.TabletAlreadyExists(tablet_id)  # a leftover no startup registered
            # What an earlier create cut before its superblock left (one that failed here
            # and could not clean up, the disk refusing): no replica's, removed first.
            await host.blocking(discard_uncommitted_create, host.layout, host.metadata,
                                tablet_id)
            if await host.blocking(self._kept_leftover, tablet_id):
                # A WAL directory with entries and no superblock, kept for an operator
                # (orphans.py): never written over.
                raise api.TabletCreateFailed(
                    tablet_id, 0, f"{host.layout.wal_dir(tablet_id)} holds entries but "
                    "this server has no superblock of the tablet: kept for an operator")
            await host.blocking(host.metadata.write_cmeta, cmeta)
            assert self._nursery is not None
            # _host hands an error before the replica runs to this call, not to the
            # server's nursery (which it would take down with it).
            await self._nursery.start(self._host, tablet_id, "create", tuple(voters))
        except BaseException as exc:
            if self.core.state(tablet_id).kind is not Kind.CREATING:
                raise  # refused, or the replica runs (create_tablet traced)
            self.core.handle(tablet_id, CreateFailed(str(exc)))
            err = _disk_error(exc)  # the WAL's own nursery wraps it in a group
            if err is None:
                raise
            # A disk error: the create is not made (not traced; the spec's create_tablet is
            # one step, superblock last). Undo what it wrote, then answer with the error.
            logger.error("tablet %s: CreateTablet failed: %s", tablet_id, err)
            with trio.CancelScope(shield=True):
                await host.blocking(self._undo_create, tablet_id)
            raise api.TabletCreateFailed(tablet_id, _errno_of(err),
                                         f"{type(err).__name__}: {err}") from exc

    def _kept_leftover(self, tablet_id: str) -> bool:
        """A cmeta or WAL directory of the tablet is still here (blocking)."""
        layout = self.host.layout
        return (layout.disk.exists(layout.cmeta_path(tablet_id))
                or layout.disk.is_dir(layout.wal_dir(tablet_id)))

    def _undo_create(self, tablet_id: str) -> None:
        """Remove, durably, what a failed CreateTablet wrote (blocking): its superblock, if
        the error came after it (the create was never traced, so no replica of it may
        start: it is undone, not kept FAILED), then its cmeta and WAL directory
        (orphans.py). Best effort: if the disk refuses again, what is left has no
        superblock (startup and a copy into this server remove it) or, should the
        superblock's removal fail, is logged for an operator."""
        host = self.host
        try:
            if host.metadata.load_superblock(tablet_id) is not None:
                _remove_durably(host.disk, host.layout.superblock_path(tablet_id))
            removed = discard_uncommitted_create(host.layout, host.metadata, tablet_id)
        except (OSError, StorageError) as exc:
            logger.error("tablet %s: could not remove what the failed CreateTablet wrote "
                         "(%s); startup removes it", tablet_id, exc)
            return
        if removed:
            logger.warning("tablet %s: removed what the failed CreateTablet wrote: %s",
                           tablet_id, ", ".join(removed))

    async def _start_replica(self, tablet_id: str) -> None:
        st = self.core.state(tablet_id)
        how = "copy" if isinstance(st, Copying) else "startup"
        assert self._nursery is not None
        await self._nursery.start(self._host, tablet_id, how, ())

    async def _host(self, tablet_id: str, how: str, voters: tuple[str, ...], *,
                    task_status: trio.TaskStatus[None]) -> None:
        """The task that owns one replica: its WAL (open_log's tasks live here) and its
        driver. ``how``: "create" (CreateTablet), "startup", or "copy" (copy step 6).
        Started once the replica runs or has failed to start; ``_stop_replica`` cancels it
        (deletion step 1). An error that ends it before the replica runs and that it does
        not turn into a FAILED replica (a create's: the create answers it) is raised to
        ``nursery.start``'s caller, never to the server's nursery, which it would end."""
        hosted = Hosted(trio.CancelScope(), trio.Event())
        tasks = self.tasks(tablet_id)
        tasks.hosted = hosted
        escaping = False
        try:
            await self._host_body(tablet_id, how, voters, hosted, task_status)
        except BaseException:
            escaping = not hosted.started
            raise
        finally:
            if tasks.hosted is hosted:
                tasks.hosted = None
            hosted.done.set()
            if not hosted.started and not escaping:
                task_status.started()  # it failed to start (FAILED) or was stopped

    async def _host_body(self, tablet_id: str, how: str, voters: tuple[str, ...],
                         hosted: Hosted, task_status: trio.TaskStatus[None]) -> None:
        host = self.host
        create = how == "create"
        what = "data blocks"  # what a failure to open names (the store opens first)
        try:
            with hosted.scope:
                store: TabletStore | None = None
                if not create:
                    store = await host.blocking(TabletStore.open, host.layout, host.metadata,
                                                host.blocks, tablet_id)
                what = "WAL"
                async with open_log(host.disk, host.layout.wal_dir(tablet_id), tablet_id,
                                    host.log_options(), create_if_missing=create,
                                    metrics=self.metrics.wal) as log:
                    if create:
                        # CreateTablet: cmeta and WAL exist; the superblock commits.
                        await host.blocking(host.metadata.write_superblock,
                                            Superblock(tablet_id, DataState.READY))
                        store = await host.blocking(TabletStore.open, host.layout,
                                                    host.metadata, host.blocks, tablet_id)
                    assert store is not None
                    replica = await self._make(tablet_id, log, store)
                    hosted.replica = replica
                    await self.apply(tablet_id,
                                     ReplicaStarted(replica, replica.durable(), voters))
                    hosted.started = True
                    task_status.started()
                    await replica.run()
                    # run() returns only when the replica failed: keep it listed (FAILED),
                    # idle until it is deleted or the server stops.
                    await self.apply(tablet_id, ReplicaFailed(replica.reason))
                    await trio.sleep_forever()
        except BaseException as caught:
            exc = _disk_error(caught)  # the WAL's own nursery may wrap it in a group
            if exc is None:
                raise
            if hosted.started:
                # The WAL failed under a running replica (its driver catches its own
                # errors): offline, nothing durable changed, the server keeps serving.
                logger.error("tablet %s failed: %s", tablet_id, exc)
                if isinstance(self.core.state(tablet_id), Running):
                    self.core.handle(tablet_id, ReplicaFailed(f"WAL: {exc}"))
                return
            if create:
                raise  # to create(), which fails the RPC and undoes the create
            # Startup case FAILED: offline, listed with the reason; the server serves its
            # other tablets.
            logger.error("tablet %s failed to start: %s: %s", tablet_id, what, exc)
            await self.apply(tablet_id, ReplicaStartFailed(f"{what}: {exc}",
                                                           self._damaged(tablet_id, what)))

    def _damaged(self, tablet_id: str, what: str) -> Durable:
        cmeta = self.host.metadata.load_cmeta(tablet_id)
        if what == "WAL":
            return self._failed_durable(tablet_id, cmeta, Wal.DAMAGED, Blocks.PRESENT)
        return self._failed_durable(tablet_id, cmeta, Wal.LIVE, Blocks.DAMAGED)

    async def _make(self, tablet_id: str, log: Any, store: TabletStore) -> Replica:
        """The replica of an open store and WAL: its Raft core from the cmeta and the
        entries after the flushed point."""
        host = self.host
        cmeta = await host.blocking(host.metadata.load_cmeta, tablet_id)
        assert cmeta is not None, f"tablet {tablet_id}: a READY replica without a cmeta"
        base = store.flushed_opid
        base_term, base_index = (base.term, base.index) if base else (0, 0)
        entries = [entry_from_wal(e) for e in await log.read_entries(base_index + 1)]
        core = new_core(me=host.uuid, cmeta=cmeta, entries=entries, base_term=base_term,
                        base_index=base_index, applied_index=store.applied_index,
                        seed=host.replica_seed(tablet_id) ^ zlib.crc32(tablet_id.encode()),
                        options=host.raft_options)
        replica = host.make_replica(tablet_id, core, log, store)
        replica.quarantine = self.quarantine_view(tablet_id)
        return replica

    async def _stop_replica(self, tablet_id: str) -> Durable:
        """Deletion step 1: stop the replica (its driver and WAL); its durable state as
        the stop left it (a running one's WAL's last durable OpId)."""
        st = self.core.state(tablet_id)
        assert isinstance(st, Deleting | Copying), st
        tasks = self._tasks.get(tablet_id)
        hosted = tasks.hosted if tasks is not None else None
        if hosted is None:
            return st.durable  # a FAILED replica that never opened
        replica = hosted.replica
        if replica is not None:
            replica.fail("the replica is being deleted")
        hosted.scope.cancel()
        await hosted.done.wait()
        if replica is None:
            return st.durable
        # A replica that FAILED on a WAL error is read back from its log and cmeta too,
        # not taken from the Failed state: that was the Raft core's view, which holds the
        # entries (and term) it meant to persist when the write or fsync failed, so the
        # tombstone would claim a last OpId its WAL never made durable.
        last = replica.log.last_opid
        cmeta = await self.host.blocking(self.host.metadata.load_cmeta, tablet_id)
        return running(cmeta, opid_pair(last), self.quarantine_view(tablet_id))

    async def delete(self, tablet_id: str, mode: str, cas_config_index: int | None) -> None:
        """DeleteTablet: TOMBSTONE (keep cmeta and last logged OpId; vote on) or DELETED
        (the table was dropped). Local fsyncs only: once begun, a deletion finishes (a
        server stopping meanwhile waits for it), so every durable step is traced before
        server_stop."""
        try:
            parsed = Mode(mode)
        except ValueError:
            raise api.InvalidArgument(f"unknown delete mode {mode!r}: TOMBSTONE or "
                                      "DELETED") from None
        with trio.CancelScope(shield=True):
            await self.apply(tablet_id, Delete(parsed, cas_config_index), after_steps=True)
        self.metrics.tserver.deletions[parsed.value].inc()
        logger.info("tablet %s: deleted (%s%s)", tablet_id, parsed.value,
                    "" if cas_config_index is None
                    else f", planned on config index {cas_config_index}")

    # ---------------------------------------------------------------- voters

    def _start_voter(self, tablet_id: str) -> None:
        durable = self.core.durable(tablet_id)
        assert durable is not None
        voter = TombstoneVoter(self, tablet_id, durable)
        self.tasks(tablet_id).voter = voter
        assert self._nursery is not None
        self._nursery.start_soon(voter.run)

    async def _stop_voter(self, tablet_id: str) -> None:
        tasks = self.tasks(tablet_id)
        voter, tasks.voter = tasks.voter, None
        if voter is not None:
            await voter.stop()

    def durable_of(self, tablet_id: str) -> Durable | None:
        return self.core.durable(tablet_id)

    def may_vote(self, tablet_id: str) -> bool:
        """Whether the tablet still has a voter's place: TOMBSTONED, or COPYING (which
        votes once its cmeta is merged). A vote that finds it DELETING is dropped."""
        return isinstance(self.core.state(tablet_id), Tombstoned | Copying)

    def vote_recorded(self, tablet_id: str, cmeta: ConsensusMeta) -> Durable:
        """A voter made ``cmeta`` durable: the tablet's durable state now."""
        batch = self.core.handle(tablet_id, VoteRecorded(cmeta))
        assert not batch.effects
        durable = self.core.durable(tablet_id)
        assert durable is not None and durable.cmeta == cmeta
        return durable

    # ---------------------------------------------------------------- info

    def offline_infos(self) -> list[api.ReplicaInfo]:
        """Every tablet that does not run, from its durable state."""
        out: list[api.ReplicaInfo] = []
        for tablet_id, slot in sorted(self.core.slots.items()):
            st = slot.state
            if isinstance(st, Running):
                continue
            if isinstance(st, Failed):
                out.append(_offline_info(tablet_id, st.kind.value, st.reason, st.durable))
            elif isinstance(st, Tombstoned | Copying | Deleting | Starting):
                out.append(_offline_info(tablet_id, st.kind.value, "", st.durable))
        return out


def _offline_info(tablet_id: str, state: str, reason: str, d: Durable) -> api.ReplicaInfo:
    from ..replica import config_from_storage

    cm = d.cmeta
    return api.ReplicaInfo(
        tablet_id, state, reason, "", cm.current_term if cm else 0,
        cm.voted_for if cm else None, None, d.last_logged(), 0, 0,
        d.committed_config_index(),
        list(config_from_storage(cm.committed_config).peers) if cm else [], "NONE")


def _register(sb: Superblock) -> Input:
    from .core import Register

    state = {DataState.DELETED: Sb.DELETED, DataState.COPYING: Sb.COPYING,
             DataState.READY: Sb.READY}[sb.data_state]
    return Register(Durable(state, tombstone_last=opid_pair(sb.tombstone_last_opid)
                            if state is not Sb.READY else NO_OPID))


def _remove_durably(disk: Disk, path: str) -> None:
    disk.unlink(path)
    disk.fsync_dir(posixpath.dirname(path))


_DISK_ERRORS: Final = (OSError, StorageError, TabletError)


def _disk_error(exc: BaseException) -> BaseException | None:
    """``exc`` if it is a disk (or tablet storage) error, or the first of an exception
    group made of nothing else; None otherwise (a cancellation, a bug: raised on)."""
    if isinstance(exc, _DISK_ERRORS):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        match, rest = exc.split(_DISK_ERRORS)
        if match is not None and rest is None:
            leaf: BaseException = match
            while isinstance(leaf, BaseExceptionGroup):
                leaf = leaf.exceptions[0]
            return leaf
    return None


def _errno_of(exc: BaseException) -> int:
    """The OS error number behind ``exc`` (itself, its cause or its context), else 0."""
    seen: BaseException | None = exc
    for _ in range(8):
        if seen is None:
            break
        if isinstance(seen, OSError) and seen.errno is not None:
            return seen.errno
        seen = seen.__cause__ or seen.__context__
    return 0


def _no_copy(tablet_id: str) -> None:
    raise AssertionError(f"tablet {tablet_id}: no copy service attached")


__all__ = ["COPY_STEPS", "DELETE_STEPS", "FAULT_POINTS", "FULL_DELETE_STEPS", "Host",
           "TabletManager"]
