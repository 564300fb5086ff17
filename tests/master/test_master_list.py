"""The master list is learnt from the masters (issue 19: "tablet servers and clients learn
the new master list from any master"; impl/tserver/master_api.py "The master list").

The rule on its own (MasterList: the newest committed config wins, by its index), then in
one process (MemoryNetwork, MockClock): tablet servers started with ONE master address
heartbeat the two masters added later, which therefore know every server live when the
first master dies and one of them leads; a client started with that one address finds the
new leader; the removed master stops being called."""

from __future__ import annotations

import functools
import random
from pathlib import Path

from test_master_sim import live_servers, run, until

from revivify.impl.client.master import open_master_client
from revivify.impl.master import api
from revivify.impl.master.server import MasterOptions, MasterServer
from revivify.impl.rpc import RpcError
from revivify.impl.testing.cluster import PORT
from revivify.impl.testing.mastercluster import SimMaster, SimMasterCluster
from revivify.impl.testing.simdisk import SimDisk
from revivify.impl.tserver.heartbeat import Heartbeater, MasterList
from revivify.impl.tserver.master_api import Heartbeat, HeartbeatResponse


class TestMasterList:
    def test_the_flag_until_a_master_names_a_config(self) -> None:
        ml = MasterList.from_flag(["b:1", "a:1", "b:1"])
        assert ml.addresses == ("b:1", "a:1") and ml.index == -1

    def test_a_newer_config_replaces_the_list(self) -> None:
        ml = MasterList.from_flag(["a:1"])
        assert ml.learn(3, ["c:1", "a:1"])
        assert ml.addresses == ("a:1", "c:1") and ml.index == 3

    def test_an_older_or_equal_config_is_ignored(self) -> None:
        """A removed master keeps naming the config it was removed from: older."""
        ml = MasterList.from_flag(["a:1"])
        ml.learn(5, ["a:1"])
        assert not ml.learn(4, ["a:1", "removed:1"])
        assert not ml.learn(5, ["a:1", "removed:1"])
        assert ml.addresses == ("a:1",)

    def test_an_empty_answer_says_nothing(self) -> None:
        ml = MasterList.from_flag(["a:1"])
        assert not ml.learn(9, [])
        assert ml.addresses == ("a:1",) and ml.index == -1

    def test_same_members_at_a_newer_index_is_no_change(self) -> None:
        ml = MasterList.from_flag(["a:1"])
        assert ml.learn(2, ["a:1"]) is False  # same set: no heartbeater to start or stop
        assert ml.index == 2


def test_an_old_master_answer_tells_nothing() -> None:
    """A HeartbeatResponse without the fields (an older master) leaves the list alone."""
    told: list[tuple[int, list[str]]] = []
    host = type("H", (), {"uuid": "ts", "address": "x:1", "tablets": None,
                          "incarnation": 1})()
    hb = Heartbeater(host, "m:1", 0.5, on_masters=lambda i, a: told.append((i, a)))
    beat = Heartbeat("ts", 1)
    hb.absorb(beat, {}, HeartbeatResponse("m", False, 1))
    assert told == []
    hb.absorb(beat, {}, HeartbeatResponse("m", False, 1, masters=["m:1"], masters_index=4))
    assert told == [(4, ["m:1"])]


async def start_joiner(c: SimMasterCluster, i: int) -> MasterServer:
    """Start master ``i`` (a new host) with ``--join``: it waits for the catalog copy."""
    m = SimMaster(i, f"m-{i}", SimDisk())
    c.masters.append(m)
    addresses = tuple(x.address for x in c.masters)
    options = MasterOptions(fs_root=f"/srv/{m.host}", rpc_host=m.host, rpc_port=PORT,
                            masters=addresses, trace_dir=c.trace_dir, threads=False,
                            seed=random.Random(i).randrange(1 << 30), join=True)
    return await c.serve_master(m, options)


async def add_master(c: SimMasterCluster, leader: int, i: int) -> None:
    await c.call_master(leader, api.MASTER_ADD_MASTER, api.MasterChangeRequest(
        address=c.masters[i].address), api.MasterChangeReply)

    async def voter() -> bool:
        replica = c.masters[leader].master.catalog_replica()  # type: ignore[union-attr]
        assert replica is not None
        committed = replica.core.status().committed_config
        uuid = c.masters[i].master.uuid  # type: ignore[union-attr]
        peer = committed.peer(uuid)
        return peer is not None and peer.member_type == "VOTER"

    await until(voter, f"master {i} a VOTER")


async def _heard(c: SimMasterCluster, i: int, n: int) -> bool:
    try:
        return await live_servers(c, i) == n
    except (RpcError, OSError):
        return False


def test_tablet_servers_and_clients_follow_the_master_config(tmp_path: Path) -> None:
    async def scenario(c: SimMasterCluster) -> None:
        assert c.tservers.servers[0].server is not None
        first = c.masters[0].address
        assert await c.ready_leader() == 0
        for i in (1, 2):
            await start_joiner(c, i)
            await add_master(c, 0, i)
        # The servers were told only m-0; the new masters hear from both of them.
        for i in (1, 2):
            await until(functools.partial(_heard, c, i, 2), f"master {i} hears every server")
        for s in c.tservers.servers:
            assert s.server is not None and s.server.heartbeats is not None
            assert sorted(s.server.heartbeats.beaters) == sorted(m.address for m in c.masters)
        async with open_master_client([first], network=c.net.host("client")) as client:
            await client.call(api.MASTER_LIST_TABLES, api.ListTablesRequest(), api.TableList)
            assert sorted(client.masters) == sorted(m.address for m in c.masters)
            assert client.masters_index > 0
            # The first master dies: one of the joined ones leads, and already knows
            # every tablet server live (it was heartbeated all along).
            await c.crash_master(0)
            leader = await c.ready_leader([1, 2])
            assert await live_servers(c, leader) == 2
            # The client, told one address at first, finds the new leader.
            made = await client.call(api.MASTER_CREATE_TABLE, api.CreateTableRequest(
                "after", [], 1, 1, request_id="r-after"), api.TableCreatedReply)
            assert made.table_id
        # Removing the dead master: the servers stop calling it.
        uuid0 = next(p.uuid for p in c.masters[leader].master.catalog_replica()  # type: ignore[union-attr]
                     .core.status().committed_config.peers if p.address == first)
        await c.call_master(leader, api.MASTER_REMOVE_MASTER,
                            api.MasterChangeRequest(uuid=uuid0), api.MasterChangeReply)

        async def dropped() -> bool:
            return all(s.server is not None and s.server.heartbeats is not None
                       and first not in s.server.heartbeats.beaters
                       for s in c.tservers.servers)

        await until(dropped, "the removed master dropped by every server")
        async with open_master_client([c.masters[leader].address],
                                      network=c.net.host("client2")) as client:
            await client.call(api.MASTER_LIST_TABLES, api.ListTablesRequest(), api.TableList)
            assert first not in client.masters and len(client.masters) == 2

    run(tmp_path, scenario, masters=1, tservers=2)
