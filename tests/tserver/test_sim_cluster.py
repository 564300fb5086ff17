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


@pytest.mark.parametrize("seed", [0, 1])
def test_tombstoned_follower_is_copied_back_then_a_crash_mid_copy(
        tmp_path, seed, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The leader re-creates a tombstoned follower by tablet copy (SimDisk, deterministic);
    then the follower is tombstoned again and its machine crashes while copying: it restarts
    as a tombstone (COPYING_TO_DELETED) and the leader copies it back again."""
    from revivify.impl.tserver.copy import service as tablet_copy

    fetch = tablet_copy.RpcCopySource.fetch

    async def slow_fetch(self, request):  # type: ignore[no-untyped-def]
        await trio.sleep(0.01)  # a copy takes (virtual) time: the crash can fall inside it
        return await fetch(self, request)
    monkeypatch.setattr(tablet_copy.RpcCopySource, "fetch", slow_fetch)

    async def scenario(cluster: Cluster) -> None:
        await cluster.create_tablet("t1")
        lead = await cluster.wait_for_leader("t1")
        acked = {}
        for seq in range(40):
            key = b"k%03d" % seq
            await write(cluster, "t1", "c", seq, key, b"v" + key)
            acked[key] = b"v" + key
        f = (lead + 1) % 3

        async def state_of(i: int) -> str:
            status = await cluster.call(i, api.ADMIN_STATUS, api.Empty(), api.ServerStatus)
            return next((r.state for r in status.replicas if r.tablet_id == "t1"), "")

        async def until(i: int, wanted: str) -> None:
            for _ in range(600):
                if await state_of(i) == wanted:
                    return
                await trio.sleep(0.05)
            raise AssertionError(f"server {i} never reached {wanted}")

        await cluster.call(f, api.ADMIN_DELETE_TABLET, api.DeleteTablet("t1"), api.Ack)
        await until(f, "RUNNING")
        await cluster.call(f, api.ADMIN_DELETE_TABLET, api.DeleteTablet("t1"), api.Ack)
        server = cluster.servers[f].server
        assert server is not None
        for _ in range(20_000):  # catch the copy between two steps
            job = server.copies.jobs.get("t1")
            if job is not None and job.progress is not None and \
                    job.progress.phase.value in ("cmeta", "wal", "blocks"):
                break
            await trio.sleep(0.001)
        else:
            raise AssertionError("the leader never started a copy")
        await cluster.crash(f)
        await cluster.start(f)
        await until(f, "RUNNING")
        await cluster.crash(lead)  # the copied replica is needed for a majority
        await cluster.wait_for_leader("t1", among=[i for i in range(3) if i != lead])
        for key, value in acked.items():
            assert await read(cluster, "t1", key) == value
    run_sim(scenario, tmp_path, seed=seed)


def test_a_follower_far_behind_on_large_rows_catches_up(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A follower down while 300 rows of 64 KiB (19 MB) were written catches up by Raft
    alone. Before appends were capped in bytes (the core's max_append_bytes, the sender's
    RAFT_CALL_BYTES), its catch-up was one message over the 16 MiB frame limit, refused at
    every try, and the follower stayed behind for ever (`make demo` found it)."""
    async def scenario(cluster: Cluster) -> None:
        await cluster.create_tablet("t1")
        lead = await cluster.wait_for_leader("t1")
        f = (lead + 1) % 3
        await cluster.crash(f)
        value = b"x" * (64 << 10)
        for seq in range(300):
            await write(cluster, "t1", "c", seq, b"big-%03d" % seq, value)
        await cluster.start(f)
        target = (await cluster.state(lead, "t1")).last_opid
        for _ in range(600):
            if (await cluster.state(f, "t1")).last_opid >= target:
                break
            await trio.sleep(0.05)
        else:
            raise AssertionError(f"server {f} stayed behind {target}")
        await cluster.crash(lead)  # the caught-up follower is needed for a majority
        await cluster.wait_for_leader("t1", among=[i for i in range(3) if i != lead])
        assert await read(cluster, "t1", b"big-299") == value

    run_sim(scenario, tmp_path, seed=3)


def test_raft_messages_are_split_into_calls_under_the_byte_limit() -> None:
    from revivify.impl.consensus.messages import AppendRequest, Entry, Message
    from revivify.impl.tserver.server import split_for_calls

    def app(*sizes: int) -> AppendRequest:
        entries = tuple(Entry(1, i + 1, "write", b"x" * n) for i, n in enumerate(sizes))
        return AppendRequest("a", "b", 1, prev_term=1, prev_index=0, entries=entries,
                             commit_index=0)
    heartbeat = app()
    msgs: list[Message] = [app(3, 3), heartbeat, app(4), app(10), app(1)]
    parts = split_for_calls(msgs, 7)
    assert [m for p in parts for m in p] == msgs  # nothing lost, order kept
    assert [len(p) for p in parts] == [2, 1, 1, 1]  # 6+0 | 4 | 10 (alone) | 1
    assert split_for_calls([], 7) == []
