"""Startup before serving: a restarting server registers every tablet it finds on disk
before it answers a tablet call, so a leader's heartbeat for a tablet that is only starting
gets the retryable TabletNotRunning(STARTING), never "not hosted" (which made the leader ask
for a tablet copy of a READY replica: a copy refused as "is READY here", and a trace the
checker rejected as a broken restart: MissingStartup, GuardFailed on copy_abort).

The in-process cluster holds one tablet's startup back (``startup_gate``) for several
election timeouts of simulated time while the other servers' leader keeps heartbeating it.
On the code before the tablet manager registered tablets first, the held tablet answered
TabletNotFound and the leader asked for a copy (an ``stc_accept`` in the restarted server's
trace)."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio
import trio.testing
from test_sim_cluster import write

from revivify.checker.local import check_paths
from revivify.impl.consensus.messages import AppendRequest
from revivify.impl.rpc import RpcError
from revivify.impl.testing.cluster import Cluster, open_cluster
from revivify.impl.tserver import api


def _events(trace_dir: Path, node: str) -> list[str]:
    import json

    out: list[str] = []
    for path in sorted(trace_dir.glob(f"{node}.*.jsonl")):
        for line in path.read_text().splitlines():
            out.append(json.loads(line)["event"])
    return out


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_tablet_held_in_startup_is_not_copied(tmp_path: Path, seed: int) -> None:
    trace_dir = tmp_path / "traces"

    async def main() -> None:
        async with open_cluster(str(trace_dir), 3, seed=seed) as cluster:
            await cluster.start_all()
            await scenario(cluster)

    async def scenario(cluster: Cluster) -> None:
        for t in ("t1", "t2"):
            await cluster.create_tablet(t)
        for seq in range(5):
            await write(cluster, "t1", "c", seq, b"k%d" % seq, b"v")
        lead = await cluster.wait_for_leader("t1")
        f = (lead + 1) % 3
        node = cluster.uuids[f]
        await cluster.stop(f)
        release = trio.Event()
        held = trio.Event()

        async def gate(tablet_id: str) -> None:
            if tablet_id == "t1":
                held.set()
                await release.wait()

        # (start() returns once the server's startup is over: run it aside.)
        cluster.nursery.start_soon(lambda: cluster.start(f, startup_gate=gate))
        await held.wait()
        # While t1 is held, the server serves: t1 is STARTING (retryable), not unknown.
        info = await cluster.state(f, "t1")
        assert info.state == "STARTING", info
        with pytest.raises(api.TabletNotRunning) as caught:
            await cluster.call(f, api.RAFT_MESSAGE, api.RaftMessages("t1", [AppendRequest(
                "cluster-client", node, 0, 0, 0, (), 0)]), api.Ack)
        assert caught.value.state == "STARTING"
        # The leader heartbeats it for many election timeouts, and keeps writing.
        for seq in range(5, 10):
            await write(cluster, "t1", "c", seq, b"k%d" % seq, b"v")
        await trio.sleep(5)
        release.set()
        for _ in range(200):
            try:
                if (await cluster.state(f, "t1")).state == "RUNNING":
                    break
            except RpcError:
                pass
            await trio.sleep(0.05)
        else:
            raise AssertionError("t1 never ran again")
        assert "stc_accept" not in _events(trace_dir, node), "the leader asked for a copy"

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    report = check_paths([str(trace_dir)])
    bad = [v for v in report.sorted() if v.severity != "warning"]
    assert report.events > 0
    assert not bad, "\n".join(f"{v.kind} {v.file}:{v.line} {v.message}" for v in bad[:10])
