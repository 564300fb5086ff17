"""A crash at every durable step of the lifecycle, through SimDisk: the state the next
startup finds on disk is the state the last traced fact claims, or the one after it (the
step in flight made durable, its event lost): the checker's crash frontier of one step.

How: a real tablet is made on SimDisk by the in-process cluster (one server, a few writes,
a clean stop). Then, offline, the lifecycle core plans a deletion (each mode), a startup
roll-forward and the tombstoning of an interrupted copy; the shell's own ``_persist``
executes the first k durable ops on a copy of the disk; every crash outcome SimDisk allows
at that point (unsynced writes and directory entries kept or lost, in every order the
kernel could) is classified by the shell's own startup code and compared with the facts.
A step whose fact claims more than it fsync'd, or an op that is not durable before its
fact, fails here."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
import trio.testing

from revivify.impl.storage.layout import ServerLayout
from revivify.impl.storage.metadata import MetadataStore
from revivify.impl.storage.values import ConsensusMeta, DataState, OpId, RaftConfig, Superblock
from revivify.impl.storage.wal import LogOptions, open_log, salvage_last_opid
from revivify.impl.testing import SimDisk
from revivify.impl.testing.cluster import open_cluster
from revivify.impl.tserver import api
from revivify.impl.tserver.durable import Durable, Sb, running
from revivify.impl.tserver.manager.core import (
    Batch,
    Case,
    Classified,
    Delete,
    LifecyclePersist,
    Mode,
    Running,
    Slot,
    Stopped,
)
from revivify.impl.tserver.manager.shell import TabletManager

ROOT = "/srv/ts-0"


def _make_disk(tmp_path: Path) -> SimDisk:
    """A server directory on SimDisk holding tablet t1 (READY, a few writes), cleanly
    stopped."""
    box: list[SimDisk] = []

    async def main() -> None:
        async with open_cluster(str(tmp_path / "traces"), 1, seed=3) as cluster:
            await cluster.start_all()
            await cluster.create_tablet("t1", [0])
            await cluster.wait_for_leader("t1")
            for seq in range(6):
                await cluster.call(0, api.DATA_WRITE, api.Write(
                    "t1", "c", seq, [_put(b"k%d" % seq)]), api.Written)
            await cluster.stop(0)
            box.append(cluster.servers[0].disk)

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    return box[0].crash()  # exactly what was made durable


def _put(key: bytes) -> Any:
    from revivify.impl.tablet.ops import RowOp

    return RowOp("put", key, b"v" + key)


@attrs.frozen
class _Host:
    disk: SimDisk
    layout: ServerLayout
    metadata: MetadataStore


def _manager(disk: SimDisk) -> TabletManager:
    layout = ServerLayout(ROOT, disk)
    return TabletManager(_Host(disk, layout, MetadataStore(layout)))  # type: ignore[arg-type]


@attrs.frozen
class _Replica:
    d: Durable

    def durable(self) -> Durable:
        return self.d


def _found(disk: SimDisk) -> Durable | None:
    """What a startup on ``disk`` finds of t1 (None: nothing, the tablet is gone)."""
    manager = _manager(disk)
    if manager.register_all() == 0:
        return None
    event = manager.classify("t1")
    d = event.durable
    if event.case is Case.READY:
        # A READY replica's WAL is opened by its replica: its last OpId, read here.
        last = salvage_last_opid(disk, manager.host.layout.wal_dir("t1"))
        d = attrs.evolve(d, wal_last=(last.term, last.index) if last else (0, 0))
    return d


def _running_durable(disk: SimDisk) -> Durable:
    manager = _manager(disk)
    cmeta = manager.host.metadata.load_cmeta("t1")
    last = salvage_last_opid(disk, manager.host.layout.wal_dir("t1"))
    assert last is not None
    return running(cmeta, (last.term, last.index), manager.quarantine_view("t1"))


def _persists(batch: Batch) -> list[LifecyclePersist]:
    return [e for e in batch.effects if isinstance(e, LifecyclePersist)]


def _check_every_crash(disk: SimDisk, before: Durable, steps: list[LifecyclePersist]) -> int:
    """Execute the steps one by one on a copy of ``disk``; after each prefix, every crash
    outcome must show the last fact's state or the next one's. Returns outcomes checked."""
    checked = 0
    claims = [before.record()] + [p.fact.state for p in steps]
    for k in range(len(steps) + 1):
        work = disk.clone()
        manager = _manager(work)
        for p in steps[:k]:
            manager._persist("t1", p)
        # Every fact up to k is traced (durable before it); the next step may be durable
        # too only if it was in flight: here nothing of it ran, so exactly claims[k].
        allowed = [claims[k]]
        for outcome in work.crash_states(limit=64, seed=k):
            found = _found(outcome)
            record = found.record() if found is not None else None
            if record is None:
                assert k == len(steps) and claims[k].superblock.data_state == "DOES_NOT_EXIST"
            else:
                assert record in allowed, (
                    f"after {k} steps ({steps[k - 1].fact.event if k else 'none'}) a crash "
                    f"({outcome.crash_description}) left {found}, the facts claim {allowed}")
            checked += 1
    return checked


@pytest.mark.parametrize("mode", [Mode.TOMBSTONE, Mode.DELETED])
def test_a_crash_at_every_deletion_step(tmp_path: Path, mode: Mode) -> None:
    disk = _make_disk(tmp_path)
    before = _running_durable(disk)
    manager = _manager(disk)
    manager.core.slots["t1"] = Slot("t1", Running(_Replica(before)))
    first = manager.core.handle("t1", Delete(mode))
    assert first.refusal is None
    batch = manager.core.handle("t1", Stopped(before))
    steps = _persists(batch)
    assert len(steps) == (5 if mode is Mode.TOMBSTONE else 7)
    assert _check_every_crash(disk, before, steps) >= len(steps)


def test_a_crash_at_every_step_of_a_roll_forward(tmp_path: Path) -> None:
    """A crash between deletion steps 4 and 6; the restart rolls forward, and crashes at
    every step of that too."""
    disk = _make_disk(tmp_path)
    before = _running_durable(disk)
    manager = _manager(disk)
    manager.core.slots["t1"] = Slot("t1", Running(_Replica(before)))
    manager.core.handle("t1", Delete(Mode.TOMBSTONE))
    steps = _persists(manager.core.handle("t1", Stopped(before)))
    for p in steps[:3]:  # through delete_mark_deleted, the commit point
        manager._persist("t1", p)
    crashed = disk.crash()
    found = _found(crashed)
    assert found is not None and found.data_state is Sb.DELETED
    restart = _manager(crashed)
    restart.register_all()
    event = restart.classify("t1")
    assert isinstance(event, Classified) and event.case is Case.ROLL_FORWARD
    rolled = restart.core.handle("t1", event)
    again = _persists(rolled)
    assert [p.fact.event for p in again] == ["delete_copy_cmeta", "delete_move_wal"]
    _check_every_crash(crashed, event.durable, again)


def test_a_crash_at_every_step_of_an_interrupted_copy_tombstoning(tmp_path: Path) -> None:
    """A COPYING superblock (a copy interrupted by a crash) becomes a tombstone at the next
    startup, keeping the last OpId it had before the copy; crashes at every step."""
    disk = _make_disk(tmp_path)
    manager = _manager(disk)
    metadata = manager.host.metadata
    sb = metadata.load_superblock("t1")
    assert sb is not None
    # The copy had downloaded the WAL (wals/t1 is the downloaded one) when it crashed.
    last = salvage_last_opid(disk, manager.host.layout.wal_dir("t1"))
    metadata.write_superblock(attrs.evolve(sb, data_state=DataState.COPYING,
                                           tombstone_last_opid=OpId(1, 2), copy_step="WAL",
                                           copy_wal_last=last))
    copying = disk.crash()
    restart = _manager(copying)
    restart.register_all()
    event = restart.classify("t1")
    assert event.case is Case.COPYING_TO_DELETED
    steps = _persists(restart.core.handle("t1", event))
    assert steps[-1].fact.state.superblock.last_opid == (1, 2)
    _check_every_crash(copying, event.durable, steps)


def _create(disk: SimDisk, tablet_id: str) -> None:
    """A CreateTablet's durable ops, in ``TabletManager.create``'s order: the cmeta, the WAL
    directory (``open_log`` makes it and its first segment), the superblock (the commit
    point)."""
    layout = ServerLayout(ROOT, disk)
    metadata = MetadataStore(layout)

    async def main() -> None:
        metadata.write_cmeta(ConsensusMeta(tablet_id, 0, None, RaftConfig(0, ())))
        async with open_log(disk, layout.wal_dir(tablet_id), tablet_id,
                            LogOptions(use_threads=False), create_if_missing=True):
            metadata.write_superblock(Superblock(tablet_id, DataState.READY))

    trio.run(main)


def test_a_crash_at_every_op_of_a_create_leaves_the_tablet_or_nothing(
        tmp_path: Path) -> None:
    """A CreateTablet crashed after any of its ops, in every crash outcome SimDisk allows:
    once the next startup registered the tablets, the tablet is there (its superblock) or
    nothing of it is: no cmeta (an orphan would be merged by a copy as if it were a
    replica's: issue 32), no WAL directory (it would refuse every copy). The spec's
    create_tablet is one atomic step; this is what makes the disk agree."""
    disk = _make_disk(tmp_path)
    probe = disk.clone()
    before = probe.op_count
    _create(probe, "t2")
    total = probe.op_count - before
    assert total >= 6
    layout = ServerLayout(ROOT, disk)
    cmeta, wal_dir = layout.cmeta_path("t2"), layout.wal_dir("t2")
    outcomes = {"created": 0, "nothing": 0}
    for k in range(total + 1):
        work = disk.clone()
        work.crash_after(k)
        try:
            _create(work, "t2")
        except BaseException:
            if not work.crashed:
                raise
        for outcome in work.crash_states(limit=16, seed=k):
            manager = _manager(outcome)
            manager.register_all()
            if "t2" in manager.core.slots:
                assert outcome.exists(cmeta), outcome.crash_description
                outcomes["created"] += 1
            else:
                assert not outcome.exists(cmeta) and not outcome.exists(wal_dir), (
                    f"a create crashed after {k} ops ({outcome.crash_description}) left "
                    f"{'its cmeta' if outcome.exists(cmeta) else 'its WAL directory'} "
                    "without a superblock after startup")
                outcomes["nothing"] += 1
            assert "t1" in manager.core.slots  # the other tablet is untouched
    assert outcomes["created"] and outcomes["nothing"], outcomes


def test_the_crash_check_has_teeth(tmp_path: Path) -> None:
    """A fact that claims a step the disk does not hold is caught: skip the op of the
    commit point (the superblock stays READY) while its fact says DELETED."""
    disk = _make_disk(tmp_path)
    before = _running_durable(disk)
    manager = _manager(disk)
    manager.core.slots["t1"] = Slot("t1", Running(_Replica(before)))
    manager.core.handle("t1", Delete(Mode.TOMBSTONE))
    steps = _persists(manager.core.handle("t1", Stopped(before)))
    broken = [attrs.evolve(p, op=steps[0].op) if p.fact.event == "delete_mark_deleted" else p
              for p in steps[:3]]
    with pytest.raises(AssertionError):
        _check_every_crash(disk, before, broken)
