"""Tablet copy in real processes: the leader re-creates a tombstoned or missing replica on
its own, an operator's copy, crashes at every copy step, a source lost mid-copy, throttling,
cancellation, the StartTabletCopy checks. Traces are checked at the end of every test."""

from __future__ import annotations

import os

import pytest

from revivify.impl.cli.localcluster import ProcessCluster
from revivify.impl.rpc import RpcError
from revivify.impl.tserver import api
from revivify.impl.tserver.lifecycle import COPY_STEPS

from .helpers import (
    assert_acked_readable,
    assert_traces_clean,
    call,
    create_tablet,
    leader,
    state,
    wait_for,
)
from .test_deletion import delete, replicas
from .test_tserver_processes import write_rows

pytestmark = pytest.mark.timeout(300)


def stc(c: ProcessCluster, dest: int, tablet: str, source: int, *, caller_term: int,
        expected: str, last_opid: tuple[int, int] | None = None) -> None:
    d, s = c.servers[dest], c.servers[source]
    call(d.address, d.uuid, api.ADMIN_START_TABLET_COPY,
         api.StartTabletCopy(tablet, s.uuid, caller_term, s.uuid, s.address, expected,
                             last_opid), api.Ack)


def copies(c: ProcessCluster, i: int) -> list[api.CopyInfo]:
    s = c.servers[i]
    return call(s.address, s.uuid, api.ADMIN_LIST_COPIES, api.Empty(), api.CopyList).copies


def running(c: ProcessCluster, i: int, tablet: str) -> bool:
    info = replicas(c, i).get(tablet)
    return info is not None and info.state == "RUNNING"


def stop_all(c: ProcessCluster) -> None:
    for i in range(len(c.servers)):
        if c.servers[i].running:
            c.stop(i)


def test_leader_copies_a_tombstoned_follower_back(tmp_path: object) -> None:
    with ProcessCluster(str(tmp_path), 3, args=["--flush-mb", "0.05"]) as c:
        c.start_all()
        create_tablet(c, "t1")
        lead = leader(c, "t1")
        acked = write_rows(c, "t1", 200, clients=4)
        f = (lead + 1) % 3
        delete(c, f, "t1")
        # The leader hears TOMBSTONED and asks the follower to copy from it.
        wait_for(lambda: running(c, f, "t1"), 60, "the tombstoned follower to be copied back")
        target = state(c, lead, "t1").last_opid
        wait_for(lambda: tuple(state(c, f, "t1").last_opid) >= tuple(target), 30,
                 "the copied follower to catch up")
        more = write_rows(c, "t1", 50, clients=2, prefix="more")
        assert_acked_readable(c, "t1", {**acked, **more})
        root = c.servers[f].fs_root
        assert os.path.exists(os.path.join(root, "wals", "t1"))
        stop_all(c)
        assert_traces_clean(c)
