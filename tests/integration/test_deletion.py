"""Tablet deletion in real processes: the six durable steps, a crash after each one, the
roll-forward at startup, and tombstones that survive restarts. Traces are checked at the end."""

from __future__ import annotations

import os

import pytest

from revivify.impl.cli.localcluster import ProcessCluster
from revivify.impl.rpc import RpcError
from revivify.impl.tserver import api
from revivify.impl.tserver.lifecycle import DELETE_STEPS

from .helpers import (
    assert_acked_readable,
    assert_traces_clean,
    call,
    create_tablet,
    leader,
    state,
    wait_for,
)
from .test_tserver_processes import write_rows

pytestmark = pytest.mark.timeout(300)


def delete(c: ProcessCluster, i: int, tablet: str, **kw: object) -> None:
    s = c.servers[i]
    call(s.address, s.uuid, api.ADMIN_DELETE_TABLET, api.DeleteTablet(tablet, **kw), api.Ack)


def replicas(c: ProcessCluster, i: int) -> dict[str, api.ReplicaInfo]:
    s = c.servers[i]
    status = call(s.address, s.uuid, api.ADMIN_STATUS, api.Empty(), api.ServerStatus)
    return {r.tablet_id: r for r in status.replicas}


def test_crash_after_each_deletion_step_rolls_forward(tmp_path: object) -> None:
    with ProcessCluster(str(tmp_path), 3) as c:
        c.start_all()
        tablets = [f"t{k}" for k in range(len(DELETE_STEPS))]
        acked = {}
        for t in tablets:
            create_tablet(c, t)
            leader(c, t)
            acked[t] = write_rows(c, t, 30, clients=3, prefix=t)
        victim = 0
        for k, step in enumerate(DELETE_STEPS):
            c.stop(victim)
            c.start(victim, extra=["--fault-crash-after", step])
            with pytest.raises((RpcError, OSError)):
                delete(c, victim, tablets[k])
            proc = c.servers[victim].proc
            assert proc is not None and proc.wait(timeout=30) != 0  # it crashed
            c.kill(victim)
            c.start(victim)
            after = replicas(c, victim)[tablets[k]]
            if k < DELETE_STEPS.index("delete_mark_deleted"):
                # Before the commit point: the replica is READY again; delete it again.
                assert after.state == "RUNNING"
                delete(c, victim, tablets[k])
            assert replicas(c, victim)[tablets[k]].state == "TOMBSTONED", step
        # Every deletion finished: WALs quarantined, tombstones keep their cmeta and OpId.
        root = c.servers[victim].fs_root
        for t in tablets:
            assert not os.path.exists(os.path.join(root, "wals", t))
            assert os.path.exists(os.path.join(root, "consensus-meta", t))
            info = replicas(c, victim)[t]
            assert info.last_opid[1] > 0 and info.term > 0
        # A second restart rewrites nothing; a tombstone deleted again is a no-op.
        c.stop(victim)
        c.start(victim)
        delete(c, victim, tablets[0])
        assert {t: replicas(c, victim)[t].state for t in tablets} == dict.fromkeys(
            tablets, "TOMBSTONED")
        # The two other replicas still form a majority: the tablets keep working.
        for t in tablets:
            leader(c, t, among=[1, 2])
            assert_acked_readable(c, t, acked[t])
        for i in range(3):
            c.stop(i)
        assert_traces_clean(c)


def test_delete_refused_by_cas_and_data_calls_see_the_tombstone(tmp_path: object) -> None:
    with ProcessCluster(str(tmp_path), 3) as c:
        c.start_all()
        create_tablet(c, "t1")
        lead = leader(c, "t1")
        write_rows(c, "t1", 20, clients=2)
        f = (lead + 1) % 3
        committed = state(c, f, "t1").config_index
        wait_for(lambda: state(c, f, "t1").applied_index > 0, 10, "the follower to apply")
        with pytest.raises(api.InvalidArgument):
            delete(c, f, "t1", mode="BOGUS")
        delete(c, f, "t1", cas_config_index=committed)
        assert replicas(c, f)["t1"].state == "TOMBSTONED"
        s = c.servers[f]
        with pytest.raises(api.TabletNotRunning) as refused:
            call(s.address, s.uuid, api.DATA_READ, api.Read("t1", b"k"), api.ReadResult)
        assert refused.value.state == "TOMBSTONED"
        with pytest.raises(api.TabletAlreadyExists):
            call(s.address, s.uuid, api.ADMIN_CREATE_TABLET,
                 api.CreateTablet("t1", [api.Peer(s.uuid, s.address)]), api.TabletCreated)
        for i in range(3):
            c.stop(i)
        assert_traces_clean(c)
