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
from revivify.impl.consensus.messages import Message
from revivify.impl.storage.layout import QDIR_CMETA, QDIR_SUPERBLOCK, QDIR_WAL
from revivify.impl.storage.values import ConsensusMeta, DataState, OpId, Superblock
from revivify.impl.trace import durable_state

from . import api
from .replica import config_from_storage, config_to_storage

if TYPE_CHECKING:
    from .server import TabletServer

logger = logging.getLogger(__name__)

DELETE_STEPS: Final = ("delete_shutdown", "delete_create_qdir", "delete_copy_superblock",
                       "delete_mark_deleted", "delete_copy_cmeta", "delete_move_wal")
FAULT_POINTS: Final = DELETE_STEPS
TOMBSTONE = "TOMBSTONE"
DELETED_MODE = "DELETED"


def cmeta_view(cmeta: ConsensusMeta | None) -> dict[str, Any] | None:
    if cmeta is None:
        return None
    return {"term": cmeta.current_term, "voted_for": cmeta.voted_for,
            "config_index": cmeta.committed_config.opid_index or 0}


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

    def state(self) -> dict[str, Any]:
        return durable_state(data_state=self.data_state, tombstone_last_opid=self.tombstone_last,
                             superblock_qdir=self.sb_qdir, cmeta=cmeta_view(self.cmeta),
                             wal=self.wal, wal_last_opid=self.wal_last, blocks=self.blocks,
                             quarantine=self.quarantine)


@attrs.frozen
class Tombstone:
    """A deleted tablet this server still knows: its retained cmeta and last logged OpId."""

    tablet_id: str
    last_opid: tuple[int, int]
    cmeta: ConsensusMeta | None


class TombstoneVoter:
    """A tombstone's part in Raft: a RaftCore in the TOMBSTONE role that answers votes from
    the retained cmeta and last logged OpId (a vote is written to the cmeta, then traced,
    then answered), refuses appends (the leader learns the replica needs a copy) and never
    campaigns. Its trace states are the tombstone's durable state."""

    def __init__(self, server: TabletServer, tablet_id: str, core: RaftCore,
                 view: DiskView) -> None:
        self.server = server
        self.tablet_id = tablet_id
        self.core = core
        self.view = view
        self._inbox: list[Message | None] = []  # None: a tick
        self._wake = trio.Event()

    def deliver(self, messages: list[Message]) -> None:
        self._inbox.extend(messages)
        self._wake.set()

    def tick(self) -> None:
        self._inbox.append(None)
        self._wake.set()

    async def run(self) -> None:
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
                        await server.blocking(server.metadata.write_cmeta, cmeta)
                        self.view.cmeta = cmeta
                    server.tracer.event(step.fact.event, step.fact.args, self.view.state(),
                                        tablet=self.tablet_id)
                for m in rd.messages:
                    server.send(m.dest, self.tablet_id, [m])
                core.advance(rd)


class Lifecycle:
    def __init__(self, server: TabletServer, fault_crash_after: str | None = None) -> None:
        self.server = server
        self.fault_crash_after = fault_crash_after
        self.tombstones: dict[str, Tombstone] = {}
        self.voters: dict[str, TombstoneVoter] = {}
        self.in_progress: set[str] = set()

    # ------------------------------------------------------------------ helpers

    def _trace(self, tablet_id: str, event: str, view: DiskView,
               args: dict[str, Any] | None = None) -> None:
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

    # ------------------------------------------------------------------ deletion

    async def delete(self, tablet_id: str, mode: str, cas_config_index: int | None) -> None:
        server = self.server
        if mode not in (TOMBSTONE, DELETED_MODE):
            raise api.InvalidArgument(f"unknown delete mode {mode!r}: TOMBSTONE or DELETED")
        if mode == DELETED_MODE:
            raise api.InvalidArgument("mode DELETED (drop the cmeta too) is not supported yet")
        if tablet_id in self.tombstones:
            return  # tombstoning a tombstone: a no-op that writes nothing
        if tablet_id in self.in_progress:
            raise api.OperationAborted(f"ALREADY_IN_PROGRESS: tablet {tablet_id} is being "
                                       "deleted")
        replica = server.replicas.get(tablet_id)
        if replica is None:
            if tablet_id in server.failed:
                raise api.InvalidArgument(f"tablet {tablet_id} is FAILED; deleting a failed "
                                          "replica is not supported yet")
            raise api.TabletNotFound(tablet_id)
        committed = replica.core.committed_config.opid_index
        if cas_config_index is not None and committed > cas_config_index:
            raise api.ConfigChangeRefused(
                "CAS_MISMATCH", f"the replica's committed config index {committed} is above "
                f"the caller's {cas_config_index}: the caller's view is stale", committed)
        self.in_progress.add(tablet_id)
        try:
            await self._delete(tablet_id)
        finally:
            self.in_progress.discard(tablet_id)

    async def _delete(self, tablet_id: str) -> None:
        server = self.server
        layout, metadata = server.layout, server.metadata
        _, quarantine = self.quarantine_view(tablet_id)
        # 1. Shut the replica down: its driver stops, its WAL drains and closes.
        last = await server.stop_replica(tablet_id)
        cmeta = metadata.load_cmeta(tablet_id)
        view = DiskView("READY", cmeta=cmeta, wal_last=last, quarantine=quarantine)
        self._trace(tablet_id, "delete_shutdown", view)
        # 2. The quarantine directory.
        qdir = await server.blocking(layout.new_quarantine_dir, tablet_id)
        view.quarantine = (False, False)
        self._trace(tablet_id, "delete_create_qdir", view)
        # 3. The superblock's copy in it.
        await server.blocking(layout.copy_file_durably, layout.superblock_path(tablet_id), qdir,
                              QDIR_SUPERBLOCK)
        view.quarantine = (True, False)
        self._trace(tablet_id, "delete_copy_superblock", view)
        # 4. The commit point: DELETED, with the last logged OpId and the QDIR.
        old = metadata.load_superblock(tablet_id)
        assert old is not None
        tombstone = Superblock(tablet_id, DataState.DELETED, OpId(*last), qdir,
                               table_name=old.table_name, schema=old.schema)
        await server.blocking(metadata.write_superblock, tombstone)
        view.data_state, view.tombstone_last, view.sb_qdir = "DELETED", last, True
        view.blocks = "ABSENT"
        self._trace(tablet_id, "delete_mark_deleted", view)
        await self._finish(tablet_id, qdir, view)

    async def _finish(self, tablet_id: str, qdir: str, view: DiskView) -> None:
        """Steps 5 and 6 (also the roll-forward of an interrupted deletion)."""
        server = self.server
        layout = server.layout
        # 5. The cmeta's copy (the cmeta itself stays: the tombstone votes from it).
        if view.cmeta is not None:
            await server.blocking(layout.copy_file_durably, layout.cmeta_path(tablet_id), qdir,
                                  QDIR_CMETA)
        view.quarantine = (True, view.cmeta is not None)
        self._trace(tablet_id, "delete_copy_cmeta", view)
        # 6. The WAL directory into the QDIR, in one rename.
        wal_dir = layout.wal_dir(tablet_id)
        if layout.disk.is_dir(wal_dir):
            await server.blocking(layout.move_dir_durably, wal_dir,
                                  posixpath.join(qdir, QDIR_WAL))
        view.wal, view.wal_last = "QUARANTINED", (0, 0)
        self._trace(tablet_id, "delete_move_wal", view)
        self._tombstoned(tablet_id, view)

    def _tombstoned(self, tablet_id: str, view: DiskView) -> None:
        """Record the tombstone and, if it kept a cmeta, start its voter."""
        self.tombstones[tablet_id] = Tombstone(tablet_id, view.tombstone_last, view.cmeta)
        if view.cmeta is None:
            return
        cm = view.cmeta
        last_term, last_index = view.tombstone_last
        core = RaftCore(me=self.server.uuid, term=cm.current_term, voted_for=cm.voted_for,
                        committed_config=config_from_storage(cm.committed_config),
                        log=RaftLog(base_term=last_term, base_index=last_index),
                        applied_index=last_index, rng=random.Random(0),
                        options=self.server.raft_options, tombstone=True)
        voter = TombstoneVoter(self.server, tablet_id, core, view)
        self.voters[tablet_id] = voter
        self.server.start_background(voter.run)

    # ------------------------------------------------------------------ startup

    async def start_deleted(self, tablet_id: str, sb: Superblock) -> None:
        """Startup of a DELETED superblock: roll an interrupted deletion forward, or note
        the finished tombstone."""
        server = self.server
        layout = server.layout
        cmeta = server.metadata.load_cmeta(tablet_id)
        last = (sb.tombstone_last_opid.term, sb.tombstone_last_opid.index) \
            if sb.tombstone_last_opid else (0, 0)
        _, quarantine = self.quarantine_view(tablet_id)
        view = DiskView("DELETED", tombstone_last=last, sb_qdir=sb.quarantine_dir is not None,
                        cmeta=cmeta, wal="QUARANTINED", blocks="ABSENT", quarantine=quarantine)
        wal_dir = layout.wal_dir(tablet_id)
        if layout.disk.is_dir(wal_dir) and sb.quarantine_dir is not None:
            from revivify.impl.storage.wal import salvage_last_opid

            wal_last = await server.blocking(salvage_last_opid, layout.disk, wal_dir)
            view.wal = "LIVE"
            view.wal_last = (wal_last.term, wal_last.index) if wal_last else (0, 0)
            self._trace(tablet_id, "startup", view, {"case": "ROLL_FORWARD"})
            await self._finish(tablet_id, sb.quarantine_dir, view)
            return
        self._trace(tablet_id, "startup", view, {"case": "TOMBSTONE"})
        self._tombstoned(tablet_id, view)


__all__ = ["DELETE_STEPS", "FAULT_POINTS", "DiskView", "Lifecycle", "Tombstone",
           "TombstoneVoter", "cmeta_view"]
