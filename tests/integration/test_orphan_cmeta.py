"""Issue 32's finding in real processes: a CreateTablet cut short after its cmeta and before
its superblock (the commit point) leaves an orphaned cmeta; a later tablet copy into that
server (which hosts no replica: DOES_NOT_EXIST) must start from no cmeta, as Kudu's does,
not merge the orphan (the trace checker's ArgMismatch at ``copy_merge_cmeta``).

The create is stopped deterministically between the two files by a disk fault (EIO on every
fsync under the victim's ``tablet-meta/`` or ``wals/``). That used to kill the server in the
middle of the create, leaving the cmeta; now the create fails its RPC and removes what it
wrote (second test), so what a crash (a kill, a power loss) between the two files leaves is
planted while the victim is down; then the fault is lifted and the victim started again."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
import trio

from revivify.impl import faultfile
from revivify.impl.consensus.messages import Config, Peer
from revivify.impl.processes.tservers import ProcessCluster
from revivify.impl.rpc import RpcError
from revivify.impl.rpc.errors import AppError
from revivify.impl.storage.disk import OsDisk
from revivify.impl.storage.layout import ServerLayout
from revivify.impl.storage.metadata import MetadataStore
from revivify.impl.storage.values import ConsensusMeta
from revivify.impl.storage.wal import open_log
from revivify.impl.tserver import api
from revivify.impl.tserver.replica import config_to_storage

from .helpers import assert_traces_clean, call, leader, wait_for
from .test_copy import running, stc, stop_all, traced
from .test_deletion import replicas

pytestmark = pytest.mark.timeout(300)


def set_faults(path: Path, disk: list[dict[str, str]]) -> None:
    """Replace the fault file and wait until every server has seen it (it polls)."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"disk": disk}))
    tmp.replace(path)
    time.sleep(10 * faultfile.POLL_SECONDS)


def create_on(c: ProcessCluster, i: int, tablet: str, peers: list[Peer]) -> None:
    s = c.servers[i]
    call(s.address, s.uuid, api.ADMIN_CREATE_TABLET, api.CreateTablet(tablet, peers),
         api.TabletCreated)


def plant_cut_create(root: str, tablet: str, peers: list[Peer], *, segment: bool) -> None:
    """What a CreateTablet killed between its cmeta and its superblock leaves on a stopped
    server's disk: the cmeta (term 0), and the WAL directory, empty or (``segment``) with
    its first, empty segment."""
    layout = ServerLayout(root, OsDisk())
    MetadataStore(layout).write_cmeta(ConsensusMeta(
        tablet, 0, None, config_to_storage(Config(0, tuple(peers)))))
    if not segment:
        os.makedirs(layout.wal_dir(tablet))
        return

    async def make() -> None:
        async with open_log(layout.disk, layout.wal_dir(tablet), tablet,
                            create_if_missing=True):
            pass

    trio.run(make)


@pytest.mark.parametrize("cut_at", ["wals", "tablet-meta"])
def test_a_copy_after_a_create_cut_before_its_superblock_starts_from_no_cmeta(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cut_at: str) -> None:
    """``cut_at`` is where the create's first failing fsync is: ``wals`` (the WAL
    directory's, right after its mkdir: the create leaves its cmeta and an empty WAL
    directory; the copy used to merge the orphan: the checker's ArgMismatch) or
    ``tablet-meta`` (the superblock's: the create leaves its cmeta and a WAL directory
    holding an empty segment, which used to make every copy into the server fail at its
    first step, "WAL directory ... is not empty"). The trace check comes before the
    assertions on the disk, so that the finding shows as it did in the nemesis run."""
    fault_path = tmp_path / "faults.json"
    set_faults(fault_path, [])
    monkeypatch.setenv(faultfile.ENV, str(fault_path))
    with ProcessCluster(str(tmp_path / "cluster"), 3, args=["--no-auto-copy"]) as c:
        c.start_all()
        victim = 2
        root = c.servers[victim].fs_root
        peers = [Peer(s.uuid, s.address) for s in c.servers]
        for i in range(3):
            if i != victim:
                create_on(c, i, "t1", peers)
        # The victim's CreateTablet writes its cmeta, then fails before its superblock: the
        # RPC fails and the create removes its cmeta (it used to kill the server instead).
        set_faults(fault_path, [{"prefix": os.path.join(root, cut_at) + "/",
                                 "op": "fsync", "errno": "EIO"}])
        with pytest.raises(api.TabletCreateFailed):
            create_on(c, victim, "t1", peers)
        cmeta = os.path.join(root, "consensus-meta", "t1")
        assert not os.path.exists(cmeta), "the failed create kept its cmeta"
        assert not os.path.exists(os.path.join(root, "tablet-meta", "t1"))
        # An abrupt end in the middle of a create (all-down) leaves its cmeta and WAL
        # directory (with its first segment, if it got that far): planted while the victim
        # is down, the fault gone, the victim back.
        c.kill(victim)
        set_faults(fault_path, [])
        plant_cut_create(root, "t1", peers, segment=cut_at == "tablet-meta")
        assert os.path.exists(cmeta)
        c.start(victim)
        assert "t1" not in replicas(c, victim), "startup registered a replica with no superblock"
        # Startup removed the leftovers before serving (checked after the trace check).
        leftovers = [p for p in (cmeta, os.path.join(root, "wals", "t1")) if os.path.exists(p)]
        lead = leader(c, "t1", among=[i for i in range(3) if i != victim], seconds=30)
        term = call(c.servers[lead].address, c.servers[lead].uuid, api.ADMIN_CONSENSUS_STATE,
                    api.TabletRef("t1"), api.ReplicaInfo).term
        stc(c, victim, "t1", lead, caller_term=term, expected="DOES_NOT_EXIST")
        wait_for(lambda: running(c, victim, "t1"), 60, "the copy to the victim to finish")
        stop_all(c)
        assert_traces_clean(c)  # issue 32: ArgMismatch at copy_merge_cmeta (args.local)
        merges = [r for r in traced(c, "copy_merge_cmeta")
                  if r["node"] == c.servers[victim].uuid]
        assert merges and all(r["args"]["local"] is None  # type: ignore[index]
                              for r in merges), merges
        assert not leftovers, f"startup kept the create's leftovers {leftovers}"


def test_a_disk_error_in_create_tablet_fails_the_rpc_and_the_server_keeps_serving(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A disk error (EIO) in a CreateTablet after its cmeta (the superblock's fsync) used to
    kill the whole process ("revivify tserver run: [Errno 5]": the create's task handed the
    error to the server's nursery, not to the create). Now the RPC fails with an error
    naming the tablet and the errno, the server keeps serving its other tablets, the create
    succeeds once the fault is lifted, and the traces are legal."""
    fault_path = tmp_path / "faults.json"
    set_faults(fault_path, [])
    monkeypatch.setenv(faultfile.ENV, str(fault_path))
    with ProcessCluster(str(tmp_path / "cluster"), 3, args=["--no-auto-copy"]) as c:
        c.start_all()
        victim = 2
        s = c.servers[victim]
        peers = [Peer(x.uuid, x.address) for x in c.servers]
        for i in range(3):
            create_on(c, i, "t0", peers)  # the victim's other tablet, which must keep serving
            if i != victim:
                create_on(c, i, "t1", peers)
        wait_for(lambda: running(c, victim, "t0"), 30, "t0 to run on the victim")
        set_faults(fault_path, [{"prefix": os.path.join(s.fs_root, "tablet-meta") + "/",
                                 "op": "fsync", "errno": "EIO"}])
        with pytest.raises((AppError, RpcError)) as failed:
            create_on(c, victim, "t1", peers)
        # Before the fix: ConnectionClosed (the process died of the EIO).
        assert getattr(failed.value, "code", None) == "tserver.create_failed", repr(failed.value)
        message = str(failed.value)
        assert "t1" in message and "Errno 5" in message, message
        assert isinstance(failed.value, api.TabletCreateFailed)
        assert failed.value.tablet_id == "t1" and failed.value.errno == 5
        # The server lives on: it answers status and still serves t0.
        call(s.address, s.uuid, api.ADMIN_STATUS, api.Empty(), api.ServerStatus)
        assert running(c, victim, "t0") and "t1" not in replicas(c, victim)
        # The fault lifted, the create is retried and the replica joins its peers.
        set_faults(fault_path, [])
        create_on(c, victim, "t1", peers)
        wait_for(lambda: running(c, victim, "t1"), 30, "t1 to run on the victim")
        leader(c, "t1", seconds=30)
        assert c.servers[victim].running
        stop_all(c)
        assert_traces_clean(c)
