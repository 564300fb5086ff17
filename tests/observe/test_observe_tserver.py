"""Tablet servers' metrics and operator logs, in process (SimDisk, MemoryNetwork, MockClock):
the numbers move with the events they count, every exposition parses, and the log has one
line per event an operator cares about, none per write."""

from __future__ import annotations

from pathlib import Path

import trio
import trio.testing
from observe_helpers import Samples, captured_logs, parse, total, value

from revivify.impl.rpc import RpcError
from revivify.impl.tablet.ops import RowOp
from revivify.impl.testing.cluster import Cluster, open_cluster
from revivify.impl.tserver import api


def run(tmp_path: Path, scenario: object, *, n: int = 3,
        options: dict[str, object] | None = None) -> None:
    async def main() -> None:
        async with open_cluster(str(tmp_path / "traces"), n, seed=3, options=options) as c:
            await c.start_all()
            await scenario(c)  # type: ignore[operator]
    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


def metrics(c: Cluster, i: int) -> Samples:
    server = c.servers[i].server
    assert server is not None
    return parse(server.metrics.exposition())


async def write(c: Cluster, seq: int) -> None:
    req = api.Write("t1", "client", seq, [RowOp("put", b"k%04d" % seq, b"v" * 100)])
    for _ in range(400):
        for i, s in enumerate(c.servers):
            if s.server is None:
                continue
            try:
                await c.call(i, api.DATA_WRITE, req, api.Written)
                return
            except (api.NotLeader, api.OperationAborted, api.TabletNotRunning, RpcError):
                continue
        await trio.sleep(0.1)
    raise AssertionError(f"write {seq} never acknowledged")


async def state_of(c: Cluster, i: int) -> str:
    status = await c.call(i, api.ADMIN_STATUS, api.Empty(), api.ServerStatus)
    return next((r.state for r in status.replicas if r.tablet_id == "t1"), "")


async def until_state(c: Cluster, i: int, wanted: str) -> None:
    for _ in range(1200):
        if await state_of(c, i) == wanted:
            return
        await trio.sleep(0.05)
    raise AssertionError(f"server {i} never reached {wanted}")


def test_writes_elections_and_copies_move_their_numbers(tmp_path: Path) -> None:
    async def scenario(c: Cluster) -> None:
        await c.create_tablet("t1")
        lead = await c.wait_for_leader("t1")
        before = metrics(c, lead)
        for seq in range(30):
            await write(c, seq)
        after = metrics(c, lead)
        # A write is one WAL group on the leader at least: its append, fsync and bytes.
        for name in ("revivify_wal_append_seconds_count", "revivify_wal_fsync_seconds_count",
                     "revivify_wal_group_batches_count", "revivify_wal_appended_bytes_total"):
            assert value(after, name) > value(before, name), name
        assert value(after, "revivify_wal_appended_bytes_total") > 30 * 100
        assert value(after, "revivify_rpc_server_calls_total", method="Data.Write",
                     status="OK") >= 30
        assert value(after, "revivify_rpc_server_call_seconds_count",
                     method="Data.Write") >= 30
        # The election that made this leader; the others saw a leader appear.
        assert value(after, "revivify_raft_elections_won_total") >= 1
        assert value(after, "revivify_raft_elections_started_total") >= 1
        assert value(after, "revivify_raft_replicas", role="LEADER") == 1
        assert value(after, "revivify_replicas", state="RUNNING") == 1
        followers = [i for i in range(3) if i != lead]
        for i in followers:
            m = metrics(c, i)
            assert value(m, "revivify_raft_leader_changes_total") >= 1
            assert value(m, "revivify_raft_replicas", role="FOLLOWER") == 1
            assert value(m, "revivify_raft_elections_won_total") == 0
        won = {i: value(metrics(c, i), "revivify_raft_elections_won_total") for i in followers}
        # The leader's machine crashes: one of the others wins a new election.
        await c.crash(lead)
        new = await c.wait_for_leader("t1", among=followers)
        assert value(metrics(c, new), "revivify_raft_elections_won_total") == won[new] + 1
        other = next(i for i in followers if i != new)
        await c.start(lead)
        # A follower tombstoned: the leader copies it back (a copy here, a session there).
        await c.call(other, api.ADMIN_DELETE_TABLET, api.DeleteTablet("t1"), api.Ack)
        m = metrics(c, other)
        assert value(m, "revivify_tablet_deletions_total", mode="TOMBSTONE") == 1
        await until_state(c, other, "RUNNING")
        for _ in range(100):  # the job's end is counted once its last step is done
            m = metrics(c, other)
            if value(m, "revivify_copy_sessions_finished_total", result="ok") >= 1:
                break
            await trio.sleep(0.05)
        assert value(m, "revivify_copy_sessions_started_total") >= 1
        assert value(m, "revivify_copy_sessions_finished_total", result="ok") >= 1
        assert value(m, "revivify_copy_bytes_total") > 0
        assert value(m, "revivify_copy_seconds_count") >= 1
        assert value(metrics(c, new), "revivify_copy_source_sessions_total") >= 1

    run(tmp_path, scenario)


def test_the_log_has_a_line_per_event_and_none_per_write(tmp_path: Path) -> None:
    async def scenario(c: Cluster) -> None:
        with captured_logs() as lines:
            await c.create_tablet("t1")
            lead = await c.wait_for_leader("t1")
            await trio.sleep(1)  # the followers hear of the leader
            mark = len(lines.records)
            for seq in range(60):
                await write(c, seq)
            during = lines.messages(mark)
            other = (lead + 1) % 3
            await c.call(other, api.ADMIN_DELETE_TABLET, api.DeleteTablet("t1"), api.Ack)
            await until_state(c, other, "RUNNING")
            await trio.sleep(1)
            await c.stop(other)
            await c.start(other)
            await trio.sleep(1)
        text = "\n".join(lines.messages())
        assert len(during) <= 2, during  # 60 writes: no line of theirs
        assert "won the election of term" in text
        assert "leader is now" in text
        assert "deleted (TOMBSTONE" in text
        assert "tablet copy of t1 from" in text and "started" in text
        assert "finished:" in text and "bytes in" in text and "MiB/s" in text
        assert "config committed at index" not in text or "VOTER" in text
        assert f"serving on {c.address(other)}: tablets 1 RUNNING" in text

    run(tmp_path, scenario)


def test_per_tablet_series_only_behind_the_flag_and_no_metrics_counts_nothing(
        tmp_path: Path) -> None:
    async def scenario(c: Cluster) -> None:
        await c.create_tablet("t1")
        await c.wait_for_leader("t1")
        for i in range(3):
            m = metrics(c, i)
            assert value(m, "revivify_tablet_raft_term", tablet="t1") >= 1
            assert total(m, "revivify_tablet_raft_role") == 1
    run(tmp_path / "per-tablet", scenario, options={"metrics_per_tablet": True})

    async def aggregated(c: Cluster) -> None:
        await c.create_tablet("t1")
        await c.wait_for_leader("t1")
        m = metrics(c, 0)
        assert total(m, "revivify_raft_replicas") == 1
        assert total(m, "revivify_tablet_raft_term") == 0
    run(tmp_path / "aggregated", aggregated)

    async def off(c: Cluster) -> None:
        await c.create_tablet("t1")
        await c.wait_for_leader("t1")
        await write(c, 0)
        for i in range(3):
            server = c.servers[i].server
            assert server is not None
            assert parse(server.metrics.exposition()) == {}
    run(tmp_path / "off", off, options={"metrics": False})
