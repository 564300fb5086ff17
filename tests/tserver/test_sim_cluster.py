"""Tablet servers in one process (impl/testing/cluster.py): SimDisk, MemoryNetwork, MockClock.

The same server code as the real processes, deterministic for a seed: elections, writes,
machine crashes that drop everything unsynced, restarts, partitions; every run's traces are
checked against the spec.
"""

from __future__ import annotations

import pytest
import trio
import trio.testing

from revivify.checker.local import check_paths
from revivify.impl.rpc import RpcError
from revivify.impl.tablet.ops import RowOp
from revivify.impl.testing.cluster import Cluster, open_cluster
from revivify.impl.tserver import api


def run_sim(fn, tmp_path, n=3, seed=0):  # type: ignore[no-untyped-def]
    async def main() -> None:
        async with open_cluster(str(tmp_path / "traces"), n, seed=seed) as cluster:
            await cluster.start_all()
            await fn(cluster)
    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    report = check_paths([str(tmp_path / "traces")])
    bad = [v for v in report.sorted() if v.severity != "warning"]
    assert report.events > 0
    assert not bad, "\n".join(f"{v.kind} {v.file}:{v.line} {v.message}" for v in bad[:10])


async def write(cluster: Cluster, tablet: str, client: str, seq: int, key: bytes,
                value: bytes) -> api.Written:
    """Write through whichever server leads, retrying (same client id and seq)."""
    req = api.Write(tablet, client, seq, [RowOp("put", key, value)])
    for _ in range(400):
        for i, s in enumerate(cluster.servers):
            if s.server is None:
                continue
            try:
                return await cluster.call(i, api.DATA_WRITE, req, api.Written)
            except (api.NotLeader, api.OperationAborted, api.TabletNotRunning, RpcError):
                continue
        await trio.sleep(0.1)
    raise AssertionError(f"write {client}/{seq} never acknowledged")


async def read(cluster: Cluster, tablet: str, key: bytes) -> bytes | None:
    for _ in range(400):
        for i, s in enumerate(cluster.servers):
            if s.server is None:
                continue
            try:
                r = await cluster.call(i, api.DATA_READ, api.Read(tablet, key), api.ReadResult)
                return r.value if r.found else None
            except (api.NotLeader, api.TabletNotRunning, RpcError):
                continue
        await trio.sleep(0.1)
    raise AssertionError(f"read of {key!r} never answered")


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_elect_write_crash_restart(tmp_path, seed) -> None:  # type: ignore[no-untyped-def]
    async def scenario(cluster: Cluster) -> None:
        await cluster.create_tablet("t1")
        lead = await cluster.wait_for_leader("t1")
        acked = {}
        for seq in range(30):
            key = b"k%03d" % seq
            await write(cluster, "t1", "c", seq, key, b"v" + key)
            acked[key] = b"v" + key
        await cluster.crash(lead)
        new = await cluster.wait_for_leader("t1", among=[i for i in range(3) if i != lead])
        assert new != lead
        for seq in range(30, 40):
            key = b"k%03d" % seq
            await write(cluster, "t1", "c", seq, key, b"v" + key)
            acked[key] = b"v" + key
        await cluster.start(lead)
        for key, value in acked.items():
            assert await read(cluster, "t1", key) == value
        # Everyone crashes at once: only what was fsync'd survives, and that is enough.
        for i in range(3):
            await cluster.crash(i)
        for i in range(3):
            await cluster.start(i)
        await cluster.wait_for_leader("t1")
        for key, value in acked.items():
            assert await read(cluster, "t1", key) == value

    run_sim(scenario, tmp_path, seed=seed)


def test_partitioned_leader_steps_down_and_majority_moves_on(tmp_path) -> None:  # type: ignore[no-untyped-def]
    async def scenario(cluster: Cluster) -> None:
        await cluster.create_tablet("t1")
        lead = await cluster.wait_for_leader("t1")
        await write(cluster, "t1", "c", 0, b"a", b"1")
        others = [cluster.servers[i].host for i in range(3) if i != lead]
        cluster.net.partition([cluster.servers[lead].host], [*others, "client"])
        new = await cluster.wait_for_leader("t1", among=[i for i in range(3) if i != lead])
        await write(cluster, "t1", "c", 1, b"b", b"2")
        await trio.sleep(3)  # check-quorum: the old leader notices it lost its majority
        cluster.net.heal()
        old = await cluster.state(lead, "t1")
        assert old.role != "LEADER"
        assert new != lead
        assert await read(cluster, "t1", b"b") == b"2"

    run_sim(scenario, tmp_path, seed=5)
