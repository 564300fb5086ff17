"""Masters and tablet servers in one process (impl/testing/mastercluster.py): SimDisk,
MemoryNetwork, MockClock. The seed's known issues as scenarios that run in simulated time:
machine crashes of the leader master (only what was fsync'd survives), partitions of the
catalog's majority, and the traces of every run checked clean.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

import trio
import trio.testing

from revivify.checker.local import check_paths
from revivify.impl.master import api
from revivify.impl.rpc import RpcError
from revivify.impl.testing.mastercluster import SimMasterCluster, open_master_cluster


def run(trace_dir: Path, scenario: Callable[[SimMasterCluster], Awaitable[None]], *,
        masters: int = 3, tservers: int = 3, seed: int = 1) -> None:
    async def main() -> None:
        async with open_master_cluster(str(trace_dir), masters, tservers, seed=seed) as c:
            await c.start_all()
            await scenario(c)
            await c.stop_all()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    report = check_paths([str(trace_dir)])
    bad = [v for v in report.sorted() if v.severity != "warning"]
    assert report.events > 0 and not bad, report.text()
    # The masters traced their decisions (the catalog checks had something to check).
    assert report.server_events > 0


async def create(c: SimMasterCluster, i: int, name: str, tablets: int, replicas: int
                 ) -> api.TableCreatedReply:
    request = api.CreateTableRequest(name, [], tablets, replicas, request_id=f"req-{name}")
    return await c.call_master(i, api.MASTER_CREATE_TABLE, request, api.TableCreatedReply)


async def live_servers(c: SimMasterCluster, i: int) -> int:
    got = await c.call_master(i, api.MASTER_LIST_TSERVERS, api.Empty(), api.TabletServerList)
    return sum(t.live for t in got.tservers)


async def until(check: Callable[[], Awaitable[bool]], what: str, limit: float = 120) -> None:
    with trio.fail_after(limit):  # simulated seconds
        while not await check():
            await trio.sleep(0.2)


async def running(c: SimMasterCluster, name: str) -> bool:
    try:
        leader = await c.ready_leader()
        locs = await c.call_master(leader, api.MASTER_TABLE_LOCATIONS, api.TableName(name),
                                   api.TableLocationsReply)
    except (RpcError, OSError):
        return False
    return all(t.state == "RUNNING" and sum(r.leader for r in t.replicas) == 1
               for t in locs.tablets)


def test_kudu_1358_create_table_right_after_a_machine_crash_of_the_leader(
        tmp_path: Path) -> None:
    """The new leader knows every live tablet server the moment it is ready (every master
    hears every heartbeat): a table created at once spreads over all three."""
    async def scenario(c: SimMasterCluster) -> None:
        leader = await c.ready_leader()
        await until(lambda: _live(c, leader, 3), "3 live servers")
        await c.crash_master(leader)
        new = await c.ready_leader()
        assert new != leader
        assert await live_servers(c, new) == 3
        made = await create(c, new, "t1358", 3, 3)
        locs = await c.call_master(new, api.MASTER_TABLE_LOCATIONS, api.TableName("t1358"),
                                   api.TableLocationsReply)
        assert sorted(t.tablet_id for t in locs.tablets) == sorted(made.tablet_ids)
        assert all(len({r.uuid for r in t.replicas}) == 3 for t in locs.tablets)
        await until(lambda: running(c, "t1358"), "t1358 RUNNING")
        await c.start_master(leader)  # back from its crashed disk, as a follower
        await until(lambda: _follower_caught_up(c, leader), "the old leader catches up")

    run(tmp_path, scenario)


def test_kudu_495_a_catalog_write_without_a_majority_fails_cleanly(tmp_path: Path) -> None:
    """The leader master cut off from the other masters: CreateTable fails (no crash, no
    half-made table), and once the cut heals the cluster serves and the name is free or
    the table whole."""
    async def scenario(c: SimMasterCluster) -> None:
        leader = await c.ready_leader()
        await until(lambda: _live(c, leader, 3), "3 live servers")
        others = [m.host for m in c.masters if m.index != leader]
        c.net.partition([c.masters[leader].host], others)
        failed = False
        try:
            await create(c, leader, "t495", 2, 3)
        except (api.CatalogWriteFailed, api.MasterNotLeader, api.ServiceUnavailable):
            failed = True
        assert failed, "a write with no majority must not succeed"
        assert c.masters[leader].master is not None  # still running
        c.net.heal()
        new = await c.ready_leader()
        tables = await c.call_master(new, api.MASTER_LIST_TABLES, api.Empty(), api.TableList)
        if any(t.name == "t495" for t in tables.tables):  # committed after all: whole
            await until(lambda: running(c, "t495"), "t495 RUNNING")
        else:
            await create(c, new, "t495", 2, 3)
            await until(lambda: running(c, "t495"), "t495 RUNNING")

    run(tmp_path, scenario)


async def _live(c: SimMasterCluster, i: int, n: int) -> bool:
    try:
        return await live_servers(c, i) >= n
    except (RpcError, OSError):
        return False


async def _follower_caught_up(c: SimMasterCluster, i: int) -> bool:
    try:
        status = await c.call_master(i, api.MASTER_STATUS, api.Empty(), api.MasterStatus)
    except (RpcError, OSError):
        return False
    return status.role == "FOLLOWER" and status.leader is not None
