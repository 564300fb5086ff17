"""What a tablet server does when its disk fails (in one process: SimDisk, MemoryNetwork,
MockClock, the fault file's disk hook around each server's disk): Kudu's behaviour, a
replica whose data cannot be written or synced goes FAILED, the server and the other
replicas keep serving, nothing acknowledged is lost, and a failed sync is never retried."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import trio
import trio.testing

from revivify.checker.local import check_paths
from revivify.impl.faultfile import FaultFile
from revivify.impl.rpc import RpcError
from revivify.impl.storage.faults import FaultyDisk
from revivify.impl.tablet.ops import RowOp
from revivify.impl.testing.cluster import Cluster, open_cluster
from revivify.impl.tserver import api

TABLET = "t1"


def set_faults(path: Path, disk: list[dict[str, str]]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"disk": disk}))
    tmp.replace(path)


async def write(cluster: Cluster, seq: int, key: bytes, value: bytes) -> int:
    req = api.Write(TABLET, "c1", seq, [RowOp("put", key, value)])
    for _ in range(400):
        for i, s in enumerate(cluster.servers):
            if s.server is None:
                continue
            try:
                return (await cluster.call(i, api.DATA_WRITE, req, api.Written)).index
            except (api.NotLeader, api.OperationAborted, api.TabletNotRunning, RpcError):
                continue
        await trio.sleep(0.1)
    raise AssertionError(f"write {seq} never acknowledged")


async def read(cluster: Cluster, key: bytes) -> bytes | None:
    for _ in range(400):
        for i, s in enumerate(cluster.servers):
            if s.server is None:
                continue
            try:
                r = await cluster.call(i, api.DATA_READ, api.Read(TABLET, key), api.ReadResult)
                return r.value if r.found else None
            except (api.NotLeader, api.TabletNotRunning, RpcError):
                continue
        await trio.sleep(0.1)
    raise AssertionError(f"read of {key!r} never answered")


async def replica_state(cluster: Cluster, i: int) -> str:
    try:
        return (await cluster.state(i, TABLET)).state
    except api.TabletNotRunning as exc:
        return exc.state


def run(tmp_path: Path, fault: dict[str, str], victim_is_leader: bool,
        flush_bytes: int | None = None, heal: str = "restart") -> None:
    fault_path = tmp_path / "faults.json"
    faults = FaultFile(str(fault_path), poll_seconds=0)
    options: dict[str, object] = {}
    if flush_bytes is not None:
        options["flush_threshold"] = flush_bytes

    async def main() -> None:
        async with open_cluster(str(tmp_path / "traces"), 3, seed=3,
                                options=options) as cluster:
            for s in cluster.servers:
                s.disk = FaultyDisk(s.disk, faults)  # type: ignore[assignment]
            await cluster.start_all()
            await cluster.create_tablet(TABLET)
            leader = await cluster.wait_for_leader(TABLET)
            victim = leader if victim_is_leader else (leader + 1) % 3
            acked: dict[bytes, bytes] = {}
            seq = 0
            for n in range(5):
                seq += 1
                await write(cluster, seq, b"k%d" % n, b"v%d" % n)
                acked[b"k%d" % n] = b"v%d" % n
            host = cluster.servers[victim].host
            set_faults(fault_path, [{**fault, "prefix": f"/srv/{host}/{fault['prefix']}"}])
            for n in range(5, 30):
                seq += 1
                await write(cluster, seq, b"k%d" % n, b"v%d" % n)
                acked[b"k%d" % n] = b"v%d" % n
            for _ in range(100):
                if await replica_state(cluster, victim) == "FAILED":
                    break
                await trio.sleep(0.1)
            # The victim's replica is offline; its server still answers (it did not
            # crash), and the other two still serve every acknowledged write.
            assert await replica_state(cluster, victim) == "FAILED"
            assert cluster.servers[victim].server is not None
            others = [i for i in range(3) if i != victim]
            for i in others:
                assert await replica_state(cluster, i) == "RUNNING"
            for key, value in acked.items():
                assert await read(cluster, key) == value
            # The fault lifted and the server restarted: the replica opens again and
            # catches up; nothing acknowledged was lost.
            set_faults(fault_path, [])
            if heal == "restart":
                await cluster.stop(victim)
                await cluster.start(victim)
            else:  # tombstoned: the leader copies the tablet back to it
                await cluster.call(victim, api.ADMIN_DELETE_TABLET,
                                   api.DeleteTablet(TABLET, "TOMBSTONE", None), api.Ack)
            for _ in range(200):
                if await replica_state(cluster, victim) == "RUNNING":
                    break
                await trio.sleep(0.1)
            assert await replica_state(cluster, victim) == "RUNNING"
            seq += 1
            await write(cluster, seq, b"after", b"heal")
            for key, value in acked.items():
                assert await read(cluster, key) == value

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    report = check_paths([str(tmp_path / "traces")])
    bad = [v for v in report.sorted() if v.severity != "warning"]
    assert not bad, "\n".join(f"{v.kind} {v.file}:{v.line} {v.message}" for v in bad[:10])


@pytest.mark.parametrize("victim_is_leader", [False, True], ids=["follower", "leader"])
def test_wal_fsync_eio_fails_the_replica_not_the_server(tmp_path: Path,
                                                         victim_is_leader: bool) -> None:
    """EIO on a WAL fsync: the replica goes FAILED (its log is dead, the sync not retried)."""
    run(tmp_path, {"prefix": "wals/", "op": "fsync", "errno": "EIO"}, victim_is_leader)


def test_wal_full_disk_fails_the_replica_not_the_server(tmp_path: Path) -> None:
    """ENOSPC on a WAL write: the replica goes FAILED, the server keeps serving."""
    run(tmp_path, {"prefix": "wals/", "op": "write", "errno": "ENOSPC"}, False)


@pytest.mark.parametrize("victim_is_leader", [False, True], ids=["follower", "leader"])
def test_data_block_write_eio_fails_the_replica_not_the_server(tmp_path: Path,
                                                               victim_is_leader: bool) -> None:
    """EIO writing a data block during a flush: the replica goes FAILED; the server (and
    its other tablets) keep running. It used to end the whole server: the flush ran in the
    server's nursery and its error escaped into it."""
    run(tmp_path, {"prefix": "data/", "op": "write", "errno": "EIO"}, victim_is_leader,
        flush_bytes=64)


@pytest.mark.parametrize("victim_is_leader", [False, True], ids=["follower", "leader"])
def test_a_replica_failed_on_its_wal_is_tombstoned_and_copied_back(
        tmp_path: Path, victim_is_leader: bool) -> None:
    """EIO on a WAL fsync, then the FAILED replica tombstoned: the leader copies it back.
    The tombstone records the WAL's last durable OpId: it used to take the Raft core's,
    which held the entry whose fsync failed (the trace checker: StateMismatch on
    delete_shutdown, then TombstoneRetainsLastOpid)."""
    run(tmp_path, {"prefix": "wals/", "op": "fsync", "errno": "EIO"}, victim_is_leader,
        heal="copy")
