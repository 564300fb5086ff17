"""The client with one tablet server stalled: real servers in one process, MockClock.

A stall is what SIGSTOP does to a server, as the network sees it: connections to it still
open, but nothing it is sent is answered and nothing it sends arrives (every link to and
from its host delays each chunk far beyond any deadline; memnet.LinkFaults). The other two
servers stop hearing from it and elect a new leader. The bugs these tests pin (issue 20):
the client looked for the leader by asking the listed servers one by one and had no call
timeout, so a stalled server listed first blocked every new operation for its whole
deadline, and an in-process client waited on a stalled leader for as long as it stalled.

No timing is asserted beyond "succeeds before the deadline": virtual time is exact, but a
margin tied to it would test the scheduler, not the client.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

import trio
import trio.testing

from revivify.checker.local import check_paths
from revivify.impl.client import ClientOptions, TabletClient, open_tablet_client
from revivify.impl.rpc import Backoff, RpcError
from revivify.impl.testing import LinkFaults
from revivify.impl.testing.cluster import Cluster, open_cluster
from revivify.impl.tserver import api

TABLET = "t-avail"
CLIENT = "client"
STALLED = LinkFaults(delay=100_000.0)  # nothing arrives within any test
OPTIONS = ClientOptions(deadline=10.0, call_timeout=1.0,
                        backoff=Backoff(initial=0.05, max=0.5))


def run_sim(tmp_path: Path, scenario: Callable[[Cluster], Awaitable[None]],
            seed: int = 0) -> None:
    async def main() -> None:
        with trio.fail_after(3600):  # virtual seconds: a hang fails, it does not block
            async with open_cluster(str(tmp_path / "traces"), 3, seed=seed) as cluster:
                await cluster.start_all()
                await cluster.create_tablet(TABLET)
                await cluster.wait_for_leader(TABLET)
                await scenario(cluster)
    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    report = check_paths([str(tmp_path / "traces")])
    bad = [v for v in report.sorted() if v.severity != "warning"]
    assert not bad, "\n".join(f"{v.kind} {v.file}:{v.line} {v.message}" for v in bad[:10])


def stall(cluster: Cluster, i: int) -> None:
    """Server i stops answering anyone (the other servers and every client)."""
    host = cluster.servers[i].host
    for other in [s.host for s in cluster.servers if s.host != host] + [CLIENT]:
        cluster.net.set_link_faults(host, other, STALLED, both_ways=True)


async def leader_among(cluster: Cluster, among: list[int]) -> int:
    """The running leader among `among` (polled; never asks a stalled server)."""
    while True:
        for i in among:
            try:
                info = await cluster.state(i, TABLET)
            except RpcError:
                continue
            if info.role == "LEADER":
                return i
        await trio.sleep(0.05)


def addresses_first(cluster: Cluster, first: int) -> list[str]:
    return [cluster.address(first)] + [cluster.address(i) for i in range(3) if i != first]


async def put_and_get(tablet: TabletClient, key: bytes) -> None:
    """One write and one read, both before the deadline."""
    started = trio.current_time()
    written = await tablet.put(key, b"v-" + key)
    assert written.ops_applied == 1
    assert await tablet.get(key) == b"v-" + key
    assert trio.current_time() - started < 2 * OPTIONS.deadline


def test_stalled_first_listed_leader_does_not_block_a_new_client(tmp_path: Path) -> None:
    """A fresh client, the stalled leader listed first: it finds the new leader."""
    async def scenario(cluster: Cluster) -> None:
        old = await leader_among(cluster, [0, 1, 2])
        stall(cluster, old)
        others = [i for i in range(3) if i != old]
        new = await leader_among(cluster, others)
        async with open_tablet_client(addresses_first(cluster, old), TABLET,
                                      network=cluster.net.host(CLIENT),
                                      options=OPTIONS) as tablet:
            await put_and_get(tablet, b"k1")
            assert tablet.leader_address == cluster.address(new)
            assert tablet.discoveries == 1  # one round, all servers at once

    run_sim(tmp_path, scenario)


def test_stalled_first_listed_follower_does_not_block_a_new_client(tmp_path: Path) -> None:
    """A fresh client, a stalled follower listed first: the leader answers, nothing waits
    for the follower."""
    async def scenario(cluster: Cluster) -> None:
        leader = await leader_among(cluster, [0, 1, 2])
        follower = (leader + 1) % 3
        stall(cluster, follower)
        async with open_tablet_client(addresses_first(cluster, follower), TABLET,
                                      network=cluster.net.host(CLIENT),
                                      options=OPTIONS) as tablet:
            await put_and_get(tablet, b"k1")
            assert tablet.discoveries == 1

    run_sim(tmp_path, scenario)


def test_leader_is_remembered_and_a_stalled_one_is_replaced(tmp_path: Path) -> None:
    """Discovery once per leader: many calls on one leader ask nobody else; when that
    leader stalls, one call times out, one round finds the new leader, which is then
    remembered in turn. Operations go on while the old leader is still stalled."""
    async def scenario(cluster: Cluster) -> None:
        old = await leader_among(cluster, [0, 1, 2])
        async with open_tablet_client(addresses_first(cluster, (old + 1) % 3), TABLET,
                                      network=cluster.net.host(CLIENT),
                                      options=OPTIONS) as tablet:
            for n in range(10):
                await put_and_get(tablet, b"a%d" % n)
            assert tablet.discoveries == 1
            assert tablet.leader_address == cluster.address(old)

            stall(cluster, old)  # the client still has it cached
            await put_and_get(tablet, b"b0")
            new = tablet.leader_address
            assert new is not None and new != cluster.address(old)
            rounds = tablet.discoveries
            for n in range(1, 10):
                await put_and_get(tablet, b"b%d" % n)
            assert tablet.discoveries == rounds  # the new leader is remembered
            assert tablet.leader_address == new
            # Everything written is there, each once (exactly once across the timeouts).
            rows = await tablet.scan()
            assert [k for k, _ in rows] == sorted(
                [b"a%d" % n for n in range(10)] + [b"b%d" % n for n in range(10)])

    run_sim(tmp_path, scenario)


def test_workload_continues_through_a_long_leader_stall(tmp_path: Path) -> None:
    """An in-process client keeps completing operations while the leader stalls for a
    long time (the old client waited for the whole stall)."""
    async def scenario(cluster: Cluster) -> None:
        old = await leader_among(cluster, [0, 1, 2])
        done_during_stall = 0
        async with open_tablet_client(addresses_first(cluster, old), TABLET,
                                      network=cluster.net.host(CLIENT),
                                      options=OPTIONS) as tablet:
            await put_and_get(tablet, b"before")
            stall(cluster, old)
            stall_ends = trio.current_time() + 60.0
            n = 0
            while trio.current_time() < stall_ends:
                await put_and_get(tablet, b"during-%d" % n)
                n += 1
                if trio.current_time() < stall_ends:
                    done_during_stall += 1
                await trio.sleep(1.0)
        assert done_during_stall >= 10, done_during_stall

    run_sim(tmp_path, scenario)


def test_writes_from_two_clients_interleave_exactly_once_during_a_stall(tmp_path: Path
                                                                         ) -> None:
    """Two clients, the leader stalled mid-run: each acknowledged write is applied once,
    a write cut off in flight included (its retry re-sends the same client id and seq)."""
    async def scenario(cluster: Cluster) -> None:
        old = await leader_among(cluster, [0, 1, 2])
        acked: dict[bytes, bytes] = {}

        async def lane(name: str) -> None:
            async with open_tablet_client(addresses_first(cluster, old), TABLET,
                                          network=cluster.net.host(CLIENT),
                                          options=OPTIONS) as tablet:
                for n in range(20):
                    key = f"{name}-{n:02d}".encode()
                    written = await tablet.put(key, b"v")
                    assert written.ops_applied == 1 or written.duplicate
                    acked[key] = b"v"
                    await trio.sleep(0.2)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(lane, "x")
            nursery.start_soon(lane, "y")
            await trio.sleep(1.0)
            stall(cluster, old)
        others = [i for i in range(3) if i != old]
        new = await leader_among(cluster, others)
        rows = await cluster.call(new, api.DATA_SCAN, api.Scan(TABLET, None, None, 1000),
                                  api.ScanResult)
        assert {bytes(k): bytes(v) for k, v in rows.rows} == acked

    run_sim(tmp_path, scenario)
