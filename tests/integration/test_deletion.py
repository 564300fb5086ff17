"""Tablet deletion in real processes: the six durable steps, a crash after each one, the
roll-forward at startup, and tombstones that survive restarts. Traces are checked at the end."""

from __future__ import annotations

import os
from typing import Any

import pytest

from revivify.impl.consensus.messages import Peer
from revivify.impl.processes.tservers import ProcessCluster
from revivify.impl.rpc import RpcError
from revivify.impl.tserver import api
from revivify.impl.tserver.manager.shell import DELETE_STEPS

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

# These tests keep tombstones of replicas still in the config: no leader may re-copy them.
NO_AUTO_COPY = ["--no-auto-copy"]


def delete(c: ProcessCluster, i: int, tablet: str, **kw: Any) -> None:
    s = c.servers[i]
    call(s.address, s.uuid, api.ADMIN_DELETE_TABLET, api.DeleteTablet(tablet, **kw), api.Ack)


def replicas(c: ProcessCluster, i: int) -> dict[str, api.ReplicaInfo]:
    s = c.servers[i]
    status = call(s.address, s.uuid, api.ADMIN_STATUS, api.Empty(), api.ServerStatus)
    return {r.tablet_id: r for r in status.replicas}


def test_crash_after_each_deletion_step_rolls_forward(tmp_path: object) -> None:
    with ProcessCluster(str(tmp_path), 3, args=NO_AUTO_COPY) as c:
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
    with ProcessCluster(str(tmp_path), 3, args=NO_AUTO_COPY) as c:
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
                 api.CreateTablet("t1", [Peer(s.uuid, s.address)]), api.TabletCreated)
        for i in range(3):
            c.stop(i)
        assert_traces_clean(c)


def test_a_tombstone_votes_a_new_leader_in(tmp_path: object) -> None:
    """Three replicas; one is tombstoned, then the leader is killed: the survivor needs the
    tombstone's vote (from its retained cmeta and last OpId) to lead, and gets it."""
    with ProcessCluster(str(tmp_path), 3, args=NO_AUTO_COPY) as c:
        c.start_all()
        create_tablet(c, "t1")
        lead = leader(c, "t1")
        write_rows(c, "t1", 30, clients=3)
        tomb = (lead + 1) % 3
        survivor = 3 - lead - tomb
        target = state(c, lead, "t1").last_opid
        wait_for(lambda: tuple(state(c, tomb, "t1").last_opid) == tuple(target), 20,
                 "the replica to be deleted to catch up")
        delete(c, tomb, "t1")
        term_before = state(c, survivor, "t1").term
        c.kill(lead)
        new = leader(c, "t1", among=[survivor], seconds=30)
        assert new == survivor
        assert state(c, survivor, "t1").term > term_before
        info = replicas(c, tomb)["t1"]
        assert info.state == "TOMBSTONED"
        assert info.voted_for == c.servers[survivor].uuid  # the vote that made the leader
        # Restarted, the tombstone still knows its vote in that term.
        c.stop(tomb)
        c.start(tomb)
        assert replicas(c, tomb)["t1"].voted_for == c.servers[survivor].uuid
        for i in (survivor, tomb):
            c.stop(i)
        assert_traces_clean(c)


def test_replica_commands(tmp_path: object) -> None:
    """revivify replica list / delete as an operator runs them (real processes)."""
    import json
    import subprocess
    import sys

    def revivify(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "revivify.impl.cli.main", *args],
                              capture_output=True, text=True, timeout=60)

    with ProcessCluster(str(tmp_path), 3, args=NO_AUTO_COPY) as c:
        c.start_all()
        create_tablet(c, "t1")
        lead = leader(c, "t1")
        f = c.servers[(lead + 1) % 3]
        out = revivify("replica", "list", "--tserver", f.address, "--json")
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout)["replicas"][0]["state"] == "RUNNING"
        out = revivify("replica", "delete", "--tserver", f.address, "--tablet", "t1",
                       "--cas-config-index", "0", "--json")
        assert out.returncode == 0, out.stderr
        row = json.loads(revivify("replica", "list", "--tserver", f.address,
                                  "--json").stdout)["replicas"][0]
        assert row["state"] == "TOMBSTONED" and row["term"] >= 1
        assert {"tablet_id", "state", "reason", "last_opid", "term", "voted_for", "role",
                "commit_index", "config_index", "peers"} <= set(row)
        out = revivify("replica", "delete", "--tserver", f.address, "--tablet", "nope")
        assert out.returncode in (1, 2) and "nope" in out.stderr
        out = revivify("replica", "delete", "--tserver", "bad-address", "--tablet", "t1")
        assert out.returncode == 2
        for i in range(3):
            c.stop(i)
        assert_traces_clean(c)
