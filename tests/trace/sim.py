"""An in-process cluster run (impl/testing/cluster.py) whose traces exercise what contract
version 3 added: real Raft logs with ``prev_term`` and ``terms``, a leader cut off that
appends what it cannot commit and truncates it after the heal, a crash and restart, a
replica deleted and copied back (data blocks and all), a leader stepping down, a
StartTabletCopy refused, a member removed from the config and its replica deleted for
good, and every server stopped cleanly at the end."""

from __future__ import annotations

import contextlib

import trio
import trio.testing

from revivify.impl.consensus.messages import ConfigChange, Peer
from revivify.impl.rpc import RpcError
from revivify.impl.tablet.ops import RowOp
from revivify.impl.testing.cluster import Cluster, open_cluster
from revivify.impl.tserver import api

TABLET = "t1"


async def _write(cluster: Cluster, seq: int, to: list[int] | None = None,
                 tries: int = 200) -> bool:
    req = api.Write(TABLET, "c", seq, [RowOp("put", b"k%04d" % seq, b"v")])
    for _ in range(tries):
        for i in to if to is not None else range(len(cluster.servers)):
            if cluster.servers[i].server is None:
                continue
            try:
                with trio.move_on_after(2):
                    await cluster.call(i, api.DATA_WRITE, req, api.Written)
                    return True
            except (api.NotLeader, api.OperationAborted, api.TabletNotRunning, RpcError):
                continue
        await trio.sleep(0.1)
    return False


async def _scenario(cluster: Cluster) -> None:
    await cluster.create_tablet(TABLET)
    lead = await cluster.wait_for_leader(TABLET)
    seq = 0
    for _ in range(6):
        assert await _write(cluster, seq)
        seq += 1
    # The leader is cut off from its followers: a write reaches it (appended, never
    # committed) while the others elect a new leader and go on.
    others = [i for i in range(3) if i != lead]
    cluster.net.partition([cluster.servers[lead].host],
                          [cluster.servers[i].host for i in others])
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_write, cluster, 1000, [lead], 1)
        await trio.sleep(1)
    new = await cluster.wait_for_leader(TABLET, among=others)
    for _ in range(4):
        assert await _write(cluster, seq, [new])
        seq += 1
    cluster.net.heal()
    await trio.sleep(3)  # the old leader steps down and truncates its uncommitted entry
    # A follower crashes and restarts.
    lead = await cluster.wait_for_leader(TABLET)
    follower = (lead + 1) % 3
    await cluster.crash(follower)
    assert await _write(cluster, seq)
    seq += 1
    await cluster.start(follower)
    # A follower is deleted (a tombstone) and copied back from the leader.
    lead = await cluster.wait_for_leader(TABLET)
    victim = (lead + 2) % 3
    await cluster.call(victim, api.ADMIN_DELETE_TABLET, api.DeleteTablet(TABLET), api.Ack)
    await trio.sleep(5)
    for _ in range(3):
        assert await _write(cluster, seq)
        seq += 1
    # The leader steps down; a StartTabletCopy that expects no replica is refused.
    lead = await cluster.wait_for_leader(TABLET)
    await cluster.call(lead, api.ADMIN_STEP_DOWN, api.StepDown(TABLET), api.Ack)
    lead = await cluster.wait_for_leader(TABLET)
    info = await cluster.state(lead, TABLET)
    target = (lead + 1) % 3
    with contextlib.suppress(*api.APP_ERRORS):
        await cluster.call(target, api.ADMIN_START_TABLET_COPY, api.StartTabletCopy(
            TABLET, cluster.uuids[lead], info.term, cluster.uuids[lead],
            cluster.address(lead), "DOES_NOT_EXIST"), api.Ack)
    # A member leaves the config; its replica is then deleted for good.
    removed = (lead + 2) % 3
    await cluster.call(lead, api.ADMIN_CHANGE_CONFIG, api.ChangeConfig(
        TABLET, ConfigChange("REMOVE", Peer(cluster.uuids[removed], cluster.address(removed))),
        info.config_index), api.ConfigChanged)
    await trio.sleep(1)
    await cluster.call(removed, api.ADMIN_DELETE_TABLET, api.DeleteTablet(TABLET, "DELETED"),
                       api.Ack)
    for _ in range(3):
        assert await _write(cluster, seq, [i for i in range(3) if i != removed])
        seq += 1
    await trio.sleep(2)


def run(trace_dir: str, seed: int = 3) -> None:
    """Run the scenario; the traces land in ``trace_dir`` (every server stops cleanly)."""
    async def main() -> None:
        # Small flushes: the copy downloads data blocks too.
        async with open_cluster(trace_dir, 3, seed=seed,
                                options={"flush_threshold": 64}) as cluster:
            await cluster.start_all()
            await _scenario(cluster)

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
