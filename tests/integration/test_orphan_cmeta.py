"""Issue 32's finding in real processes: a CreateTablet cut short after its cmeta and before
its superblock (the commit point) leaves an orphaned cmeta; a later tablet copy into that
server (which hosts no replica: DOES_NOT_EXIST) must start from no cmeta, as Kudu's does,
not merge the orphan (the trace checker's ArgMismatch at ``copy_merge_cmeta``).

The create is stopped deterministically between the two files by a disk fault (EIO on every
fsync under the victim's ``tablet-meta/``: the superblock's write fails, the cmeta's
already succeeded); then the victim is killed (the nemesis's ``all-down``), the fault lifted
and the victim started again."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from revivify.impl import faultfile
from revivify.impl.consensus.messages import Peer
from revivify.impl.processes.tservers import ProcessCluster
from revivify.impl.rpc import RpcError
from revivify.impl.rpc.errors import AppError
from revivify.impl.tserver import api

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
        # The victim's CreateTablet writes its cmeta, then fails before its superblock (the
        # server dies of the EIO: an abrupt end in the middle of the create).
        set_faults(fault_path, [{"prefix": os.path.join(root, cut_at) + "/",
                                 "op": "fsync", "errno": "EIO"}])
        with pytest.raises((AppError, RpcError, OSError)):
            create_on(c, victim, "t1", peers)
        cmeta = os.path.join(root, "consensus-meta", "t1")
        assert os.path.exists(cmeta), "the create did not get as far as its cmeta"
        assert not os.path.exists(os.path.join(root, "tablet-meta", "t1"))
        # The abrupt end (all-down), the fault gone, the victim back.
        c.kill(victim)
        set_faults(fault_path, [])
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
