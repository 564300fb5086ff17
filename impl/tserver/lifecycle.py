"""Tablet deletion with tombstones, and the startup cases of a deleted tablet.

Seed 001, "Tablet deletion": six steps, each durable (fsync'd) before the next and traced
right after it, so a crash between any two leaves a state that startup finishes:

    1. delete_shutdown         stop the replica (its driver, its WAL)          (volatile)
    2. delete_create_qdir      create quarantine/<tablet>.<n>/
    3. delete_copy_superblock  copy the superblock into it
    4. delete_mark_deleted     superblock := DELETED, tombstone_last_opid = the WAL's last
                               OpId, quarantine_dir = the QDIR, no live blocks
                               (the commit point: from here the deletion rolls forward)
    5. delete_copy_cmeta       copy the cmeta into the QDIR
    6. delete_move_wal         move wals/<tablet> into the QDIR (one rename)

The cmeta itself stays in place: a tombstone keeps its term and vote forever (it will vote
from them: Kudu's tombstoned voting), and its last logged OpId is in the superblock. The data
blocks stay on disk, listed by the quarantined superblock copy, until an operator purges the
quarantine of a stopped server.

Startup of a DELETED superblock: if the WAL is still live, the crash fell between steps 4
and 6: trace ``startup`` ROLL_FORWARD and redo steps 5 and 6 (both idempotent); else trace
``startup`` TOMBSTONE. A crash before step 4 leaves a READY superblock: the replica simply
starts again (the half-made QDIR is reported in its state and left alone).

``--fault-crash-after STEP`` (test-only): the process exits abruptly right after tracing the
named step, so tests can crash at every step.
"""

from __future__ import annotations

import logging
import os
import posixpath
import random
from typing import TYPE_CHECKING, Any, Final

import attrs
import trio

from revivify.impl.consensus.core import RaftCore
from revivify.impl.consensus.log import RaftLog
from revivify.impl.consensus.messages import Config, Message
from revivify.impl.storage.layout import QDIR_CMETA, QDIR_SUPERBLOCK, QDIR_WAL
from revivify.impl.storage.values import ConsensusMeta, DataState, OpId, Superblock
from revivify.impl.storage.wal import salvage_last_opid
from revivify.impl.trace import durable_state

from . import api
from .replica import config_from_storage, config_to_storage

if TYPE_CHECKING:
    from .server import TabletServer

logger = logging.getLogger(__name__)

DELETE_STEPS: Final = ("delete_shutdown", "delete_create_qdir", "delete_copy_superblock",
                       "delete_mark_deleted", "delete_copy_cmeta", "delete_move_wal")
FULL_DELETE_STEPS: Final = ("delete_remove_cmeta", "delete_remove_superblock")
COPY_STEPS: Final = ("copy_begin", "copy_merge_cmeta", "copy_download_wal",
                     "copy_download_block", "copy_blocks_done", "copy_mark_ready",
                     "copy_start_replica")
FAULT_POINTS: Final = (*DELETE_STEPS, *FULL_DELETE_STEPS, *COPY_STEPS)
TOMBSTONE = "TOMBSTONE"
DELETED_MODE = "DELETED"


def cmeta_view(cmeta: ConsensusMeta | None) -> dict[str, Any] | None:
    if cmeta is None:
        return None
    return {"term": cmeta.current_term, "voted_for": cmeta.voted_for,
            "config_index": cmeta.committed_config.opid_index or 0}


def opid_pair(opid: OpId | None) -> tuple[int, int]:
    return (opid.term, opid.index) if opid else (0, 0)


@attrs.define
class DiskView:
    """What the trace contract reports of a tablet's durable state, tracked step by step."""

    data_state: str
    tombstone_last: tuple[int, int] = (0, 0)
    sb_qdir: bool = False
    cmeta: ConsensusMeta | None = None
    wal: str = "LIVE"
    wal_last: tuple[int, int] = (0, 0)
    blocks: str = "PRESENT"
    quarantine: tuple[bool, bool] | None = None
    # At most one durable step of the tablet between its write and its trace event: a
    # vote of the replica's voter and a copy step may run at once, and a crash between
    # their fsyncs and their events would lose two events (the writer promises at most
    # one per tablet: the checker's crash frontier is 1).
    step_lock: trio.Lock = attrs.field(factory=trio.Lock, eq=False, repr=False)

    def state(self) -> dict[str, Any]:
        return durable_state(data_state=self.data_state, tombstone_last_opid=self.tombstone_last,
                             superblock_qdir=self.sb_qdir, cmeta=cmeta_view(self.cmeta),
                             wal=self.wal, wal_last_opid=self.wal_last, blocks=self.blocks,
                             quarantine=self.quarantine)

    def last_logged(self) -> tuple[int, int]:
        """The last logged OpId as the spec's StartTabletCopy and votes see it: a
        tombstone's (or a COPYING replica's) retained one, else the WAL's."""
        return self.tombstone_last if self.data_state in ("DELETED", "COPYING") \
            else self.wal_last


class TombstoneVoter:
    """A tombstone's part in Raft: a RaftCore in the TOMBSTONE role that answers votes from
    the retained cmeta and last logged OpId (a vote is written to the cmeta, then traced,
    then answered), refuses appends (the leader learns the replica needs a copy) and never
    campaigns. A COPYING replica runs one too once its cmeta is merged (it votes while
    copying). A tombstone without a cmeta (a first copy that crashed before writing one)
    votes from an empty cmeta, written with its first vote. Its trace states are ``view``,
    the tablet's durable state, which the copy steps move on meanwhile."""

    def __init__(self, server: TabletServer, tablet_id: str, view: DiskView) -> None:
        self.server = server
        self.tablet_id = tablet_id
        self.view = view
        cm = view.cmeta
        last_term, last_index = view.tombstone_last
        config = config_from_storage(cm.committed_config) if cm else Config(0, ())
        self.core = RaftCore(me=server.uuid, term=cm.current_term if cm else 0,
                             voted_for=cm.voted_for if cm else None, committed_config=config,
                             log=RaftLog(base_term=last_term, base_index=last_index),
                             applied_index=last_index, rng=random.Random(0),
                             options=server.raft_options, tombstone=True)
        self._inbox: list[Message | None] = []  # None: a tick
        self._wake = trio.Event()
        self.scope = trio.CancelScope()
        self.done = trio.Event()

    def deliver(self, messages: list[Message]) -> None:
        self._inbox.extend(messages)
        self._wake.set()

    def tick(self) -> None:
        self._inbox.append(None)
        self._wake.set()

    async def stop(self) -> None:
        """Stop voting (a copy is about to change what the votes compare against); a vote
        being made durable finishes first (worker threads are not abandoned)."""
        self.scope.cancel()
        await self.done.wait()

    async def run(self) -> None:
        try:
            with self.scope:
                await self._run()
        finally:
            self.done.set()

    async def _run(self) -> None:
        server, core = self.server, self.core
        while True:
            if not self._inbox:
                await self._wake.wait()
            self._wake = trio.Event()
            inbox, self._inbox = self._inbox, []
            for m in inbox:
                if m is None:
                    core.tick()
                else:
                    core.step(m)
            while core.has_ready():
                rd = core.ready()
                for step in rd.steps:
                    if step.cmeta is not None:
                        cmeta = ConsensusMeta(self.tablet_id, step.cmeta.term,
                                              step.cmeta.voted_for,
                                              config_to_storage(step.cmeta.committed_config))
                        async with self.view.step_lock:
                            with trio.CancelScope(shield=True):  # durable, then traced
                                await server.blocking(server.metadata.write_cmeta, cmeta)
                                self.view.cmeta = cmeta
                                server.tracer.event(step.fact.event, step.fact.args,
                                                    self.view.state(), tablet=self.tablet_id)
                        continue
                    server.tracer.event(step.fact.event, step.fact.args, self.view.state(),
                                        tablet=self.tablet_id)
                for m in rd.messages:
                    server.send(m.dest, self.tablet_id, [m])
                core.advance(rd)


class Lifecycle:
    """Deletion, tombstones and their voters, and the startup of deleted and half-copied
    tablets. ``in_progress`` holds every tablet with a lifecycle operation in flight
    (deletion or copy): a second one is refused with ALREADY_IN_PROGRESS."""

    def __init__(self, server: TabletServer, fault_crash_after: str | None = None) -> None:
        self.server = server
        self.fault_crash_after = fault_crash_after
        self.tombstones: dict[str, DiskView] = {}
        self.voters: dict[str, TombstoneVoter] = {}
        self.in_progress: set[str] = set()
        # The durable state of tablets whose deletion or copy is in flight (answers to
        # requests refused meanwhile report it).
        self.in_flight: dict[str, DiskView] = {}

    # ------------------------------------------------------------------ helpers

    def trace(self, tablet_id: str, event: str, view: DiskView,
              args: dict[str, Any] | None = None) -> None:
        """Trace a durable step (after it was made durable); the fault point follows."""
        self.server.tracer.event(event, args or {}, view.state(), tablet=tablet_id)
        if event == self.fault_crash_after:
            logger.error("fault injection: crashing right after %s of %s", event, tablet_id)
            os._exit(75)

    def quarantine_view(self, tablet_id: str) -> tuple[str | None, tuple[bool, bool] | None]:
        """The newest quarantine dir of the tablet, and whether it holds the superblock and
        the cmeta copies."""
        layout = self.server.layout
        dirs = layout.quarantine_dirs(tablet_id)
        if not dirs:
            return None, None
        qdir = dirs[-1]
        names = set(layout.disk.listdir(qdir))
        return qdir, (QDIR_SUPERBLOCK in names, QDIR_CMETA in names)

    def wal_at_rest(self, tablet_id: str) -> str:
        """Where the tablet's WAL is when no copy has downloaded one: QUARANTINED if a
        deletion moved one into a quarantine directory, else ABSENT."""
        layout = self.server.layout
        for qdir in layout.quarantine_dirs(tablet_id):
            if QDIR_WAL in layout.disk.listdir(qdir):
                return "QUARANTINED"
        return "ABSENT"

    def view_of(self, tablet_id: str) -> DiskView | None:
        """The durable state of a tablet that does not run: a tombstone, or FAILED."""
        return self.tombstones.get(tablet_id) or self.server.failed_views.get(tablet_id) \
            or self.in_flight.get(tablet_id)

    def start_voter(self, tablet_id: str, view: DiskView) -> TombstoneVoter:
        voter = TombstoneVoter(self.server, tablet_id, view)
        self.voters[tablet_id] = voter
        self.server.start_background(voter.run)
        return voter

    async def stop_voter(self, tablet_id: str) -> None:
        voter = self.voters.pop(tablet_id, None)
        if voter is not None:
            await voter.stop()

    # ------------------------------------------------------------------ deletion

    async def delete(self, tablet_id: str, mode: str, cas_config_index: int | None) -> None:
        """DeleteTablet: TOMBSTONE (keep cmeta and last logged OpId; vote on) or DELETED
        (the table was dropped: the tombstone, then the cmeta and the superblock go).
        Tombstoning a tombstone is a no-op that writes nothing."""
        server = self.server
        if mode not in (TOMBSTONE, DELETED_MODE):
            raise api.InvalidArgument(f"unknown delete mode {mode!r}: TOMBSTONE or DELETED")
        if tablet_id in self.in_progress:
            raise api.OperationAborted(f"ALREADY_IN_PROGRESS: tablet {tablet_id} has a "
                                       "deletion or a tablet copy in flight")
        tombstone = self.tombstones.get(tablet_id)
        replica = server.replicas.get(tablet_id)
        failed = server.failed_views.get(tablet_id)
        if tombstone is not None:
            if mode == TOMBSTONE:
                return
            cmeta = tombstone.cmeta
        elif replica is not None:
            cmeta = None
        elif failed is not None:
            cmeta = failed.cmeta
        else:
            raise api.TabletNotFound(tablet_id)
        committed = replica.core.committed_config.opid_index if replica is not None else (
            (cmeta.committed_config.opid_index or 0) if cmeta else 0)
        if cas_config_index is not None and committed > cas_config_index:
            raise api.ConfigChangeRefused(
                "CAS_MISMATCH", f"the replica's committed config index {committed} is above "
                f"the caller's {cas_config_index}: the caller's view is stale", committed)
        self.in_progress.add(tablet_id)
        try:
            # Local fsyncs only: once begun, a deletion finishes (a server stopping meanwhile
            # waits for it), so every durable step is traced before server_stop.
            with trio.CancelScope(shield=True):
                if tombstone is None:
                    view = await self.shutdown(tablet_id)
                    tombstone = await self.tombstone_steps(tablet_id, view,
                                                           start_voter=mode == TOMBSTONE)
                if mode == DELETED_MODE:
                    await self._full_delete(tablet_id, tombstone)
        finally:
            self.in_progress.discard(tablet_id)
            self.in_flight.pop(tablet_id, None)

    async def shutdown(self, tablet_id: str) -> DiskView:
        """Deletion step 1: stop the replica (a running or a FAILED one); return its view."""
        server = self.server
        failed = server.failed_views.pop(tablet_id, None)
        server.failed.pop(tablet_id, None)
        if failed is not None:
            view = failed
            if tablet_id in server.hosts:  # a replica whose driver failed: still hosted
                await server.stop_replica(tablet_id)
        else:
            _, quarantine = self.quarantine_view(tablet_id)
            last = await server.stop_replica(tablet_id)
            view = DiskView("READY", cmeta=server.metadata.load_cmeta(tablet_id),
                            wal_last=last, quarantine=quarantine)
        self.in_flight[tablet_id] = view
        self.trace(tablet_id, "delete_shutdown", view)
        return view

    async def tombstone_steps(self, tablet_id: str, view: DiskView, *,
                              start_voter: bool = True) -> DiskView:
        """Deletion steps 2-6 (a READY or FAILED replica after step 1, or a COPYING one whose
        copy failed or was interrupted): the tablet becomes a tombstone."""
        server = self.server
        layout, metadata = server.layout, server.metadata
        # 2. The quarantine directory.
        qdir = await server.blocking(layout.new_quarantine_dir, tablet_id)
        view.quarantine = (False, False)
        self.trace(tablet_id, "delete_create_qdir", view)
        # 3. The superblock's copy in it.
        await server.blocking(layout.copy_file_durably, layout.superblock_path(tablet_id), qdir,
                              QDIR_SUPERBLOCK)
        view.quarantine = (True, False)
        self.trace(tablet_id, "delete_copy_superblock", view)
        # 4. The commit point: DELETED, with the last logged OpId and the QDIR. A READY
        # (or FAILED) replica records its WAL's; a COPYING one keeps the tombstone's (the
        # downloaded WAL never was its log).
        old = metadata.load_superblock(tablet_id)
        assert old is not None
        if view.data_state != "COPYING":
            view.tombstone_last = view.wal_last
        tombstone = Superblock(tablet_id, DataState.DELETED, OpId(*view.tombstone_last), qdir,
                               table_name=old.table_name, schema=old.schema)
        await server.blocking(metadata.write_superblock, tombstone)
        view.data_state, view.sb_qdir, view.blocks = "DELETED", True, "ABSENT"
        self.trace(tablet_id, "delete_mark_deleted", view)
        await self._finish(tablet_id, qdir, view, start_voter=start_voter)
        return view

    async def _finish(self, tablet_id: str, qdir: str, view: DiskView, *,
                      start_voter: bool = True) -> None:
        """Steps 5 and 6 (also the roll-forward of an interrupted deletion)."""
        server = self.server
        layout = server.layout
        # 5. The cmeta's copy (the cmeta itself stays: the tombstone votes from it).
        if view.cmeta is not None:
            await server.blocking(layout.copy_file_durably, layout.cmeta_path(tablet_id), qdir,
                                  QDIR_CMETA)
        view.quarantine = (True, view.cmeta is not None)
        self.trace(tablet_id, "delete_copy_cmeta", view)
        # 6. The WAL directory into the QDIR, in one rename (a damaged one too: the move
        # does not read it).
        wal_dir = layout.wal_dir(tablet_id)
        if layout.disk.is_dir(wal_dir):
            await server.blocking(layout.move_dir_durably, wal_dir,
                                  posixpath.join(qdir, QDIR_WAL))
        if view.wal in ("LIVE", "DAMAGED"):
            view.wal = "QUARANTINED"
        view.wal_last = (0, 0)
        self.trace(tablet_id, "delete_move_wal", view)
        self.tombstones[tablet_id] = view
        if start_voter:
            self.start_voter(tablet_id, view)

    async def _full_delete(self, tablet_id: str, view: DiskView) -> None:
        """Mode DELETED after the tombstone: the cmeta goes (never vote again), then the
        superblock (the tablet no longer exists here; the quarantine stays until purged).
        Kudu's order: a crash between leaves a tombstone without cmeta."""
        server = self.server
        layout = server.layout
        await self.stop_voter(tablet_id)
        path = layout.cmeta_path(tablet_id)
        if layout.disk.exists(path):
            await server.blocking(_remove_durably, layout, path)
        view.cmeta = None
        self.trace(tablet_id, "delete_remove_cmeta", view)
        await server.blocking(_remove_durably, layout, layout.superblock_path(tablet_id))
        view.data_state, view.tombstone_last, view.sb_qdir = "DOES_NOT_EXIST", (0, 0), False
        self.tombstones.pop(tablet_id, None)
        self.trace(tablet_id, "delete_remove_superblock", view)

    # ------------------------------------------------------------------ startup

    async def start_deleted(self, tablet_id: str, sb: Superblock) -> None:
        """Startup of a DELETED superblock: roll an interrupted deletion forward, or note
        the finished tombstone."""
        server = self.server
        layout = server.layout
        cmeta = server.metadata.load_cmeta(tablet_id)
        _, quarantine = self.quarantine_view(tablet_id)
        view = DiskView("DELETED", tombstone_last=opid_pair(sb.tombstone_last_opid),
                        sb_qdir=sb.quarantine_dir is not None, cmeta=cmeta,
                        wal=self.wal_at_rest(tablet_id), blocks="ABSENT",
                        quarantine=quarantine)
        wal_dir = layout.wal_dir(tablet_id)
        if layout.disk.is_dir(wal_dir) and sb.quarantine_dir is not None:
            wal_last = await server.blocking(salvage_last_opid, layout.disk, wal_dir)
            view.wal, view.wal_last = "LIVE", opid_pair(wal_last)
            self.trace(tablet_id, "startup", view, {"case": "ROLL_FORWARD"})
            with trio.CancelScope(shield=True):
                await self._finish(tablet_id, sb.quarantine_dir, view)
            return
        self.trace(tablet_id, "startup", view, {"case": "TOMBSTONE"})
        self.tombstones[tablet_id] = view
        self.start_voter(tablet_id, view)

    async def start_copying(self, tablet_id: str, sb: Superblock) -> None:
        """Startup of a COPYING superblock: the copy was interrupted; the replica deletes
        itself back to a tombstone keeping its previous last OpId (never finished into
        READY: the source's session is gone)."""
        view = self.copying_view(tablet_id, sb)
        self.trace(tablet_id, "startup", view, {"case": "COPYING_TO_DELETED"})
        self.in_progress.add(tablet_id)
        try:
            with trio.CancelScope(shield=True):
                await self.tombstone_steps(tablet_id, view)
        finally:
            self.in_progress.discard(tablet_id)

    def copying_view(self, tablet_id: str, sb: Superblock) -> DiskView:
        """The durable state a COPYING superblock stands for (it records the copy's steps)."""
        server = self.server
        _, quarantine = self.quarantine_view(tablet_id)
        step = sb.copy_step
        wal_done = step in ("WAL", "BLOCKS_PARTIAL", "BLOCKS_DONE")
        return DiskView(
            "COPYING", tombstone_last=opid_pair(sb.tombstone_last_opid), sb_qdir=False,
            cmeta=server.metadata.load_cmeta(tablet_id),
            wal="LIVE" if wal_done else self.wal_at_rest(tablet_id),
            wal_last=opid_pair(sb.copy_wal_last) if wal_done else (0, 0),
            blocks={"BLOCKS_PARTIAL": "PARTIAL", "BLOCKS_DONE": "PRESENT"}.get(step, "ABSENT"),
            quarantine=quarantine)


def _remove_durably(layout: Any, path: str) -> None:
    layout.disk.unlink(path)
    layout.disk.fsync_dir(posixpath.dirname(path))


__all__ = ["COPY_STEPS", "DELETE_STEPS", "FAULT_POINTS", "FULL_DELETE_STEPS", "DiskView",
           "Lifecycle", "TombstoneVoter", "cmeta_view", "opid_pair"]
