"""Raft peer links watch their own liveness (issue 32; impl/tserver/server.py, "Link
liveness"), checked deterministically: three in-process tablet servers on a MemoryNetwork
under MockClock.

Every link between two servers is stalled both ways (each chunk delivered 100 000 s after
it was sent: the packets of a cut network, and, as on one TCP stream, everything queued
behind them waits too) for 30 s, then restored. Nothing resets a connection, so before the
fix the servers' links stayed stuck behind the lost chunks for good and no leader was ever
elected again (the test's 20 s bound ran out). Now a link whose ping goes unanswered for
the liveness bound is dropped and redialled, and a new leader is elected within two
election timeouts of the heal.

The test's own calls come from another host whose links are never stalled.
"""

from __future__ import annotations

import itertools
from collections import Counter

import pytest
import trio
import trio.testing

from revivify.impl.rpc import CallContext
from revivify.impl.testing import LinkFaults
from revivify.impl.testing.cluster import open_cluster
from revivify.impl.tserver import api
from revivify.impl.tserver.server import LIVENESS_FLOOR, TabletServer, link_liveness

TABLET = "t-live"
STALLED = LinkFaults(delay=100_000.0)
HOSTS = ["ts-0", "ts-1", "ts-2"]
ELECTION_MAX = 2 * 10 * 0.05  # ServerOptions' defaults: the randomised timeout's upper end


def test_the_liveness_bound_is_three_heartbeats_or_the_floor() -> None:
    assert link_liveness(0.1) == LIVENESS_FLOOR == 0.5
    assert link_liveness(0.5) == pytest.approx(1.5)


def test_stalled_links_are_redialled_and_a_leader_elected_after_the_heal(
        tmp_path: pytest.TempPathFactory) -> None:
    async def body() -> float:
        async with open_cluster(str(tmp_path), 3, seed=3) as cluster:
            await cluster.start_all()
            await cluster.create_tablet(TABLET)
            await cluster.wait_for_leader(TABLET)
            before = max([(await cluster.state(i, TABLET)).term for i in range(3)])
            for a, b in itertools.combinations(HOSTS, 2):
                cluster.net.set_link_faults(a, b, STALLED, both_ways=True)
            await trio.sleep(30)
            for a, b in itertools.combinations(HOSTS, 2):
                cluster.net.set_link_faults(a, b, LinkFaults(), both_ways=True)
            healed = trio.current_time()
            with trio.move_on_after(20):
                while True:
                    leader = await cluster.wait_for_leader(TABLET)
                    if (await cluster.state(leader, TABLET)).term > before:
                        return trio.current_time() - healed
                    await trio.sleep(0.05)
            drops = [getattr(s.server.peers[p], "drops", None) for s in cluster.servers
                     if s.server is not None for p in s.server.peers]
            raise AssertionError(f"no new leader 20 s after the heal (links dropped: {drops})")

    async def main() -> float:
        with trio.fail_after(3600):
            return await body()

    after = trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    print(f"\na leader {after:.2f}s (simulated) after the heal")
    assert after <= 2 * ELECTION_MAX


def test_only_links_without_answers_are_pinged(tmp_path: pytest.TempPathFactory,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """A leader's links to followers that keep up carry AppendRequests answered by
    AppendResponses: proof enough, no ping. A follower's link to its leader carries only
    responses, which nobody answers: pinged (every liveness / 3 s, so about 6 times a
    second at the default 0.5 s bound)."""
    pings: Counter[tuple[str, str]] = Counter()  # (from, to) server UUIDs
    original = TabletServer.on_raft_ping

    async def counting(self: TabletServer, req: api.Empty, ctx: CallContext) -> api.Ack:
        pings[(ctx.src_uuid, self.uuid)] += 1
        return await original(self, req, ctx)

    monkeypatch.setattr(TabletServer, "on_raft_ping", counting)

    async def body() -> tuple[str, list[str]]:
        async with open_cluster(str(tmp_path), 3, seed=5) as cluster:
            await cluster.start_all()
            await cluster.create_tablet(TABLET)
            leader = await cluster.wait_for_leader(TABLET)
            await trio.sleep(2)
            pings.clear()
            await trio.sleep(10)
            uuids = [cluster.uuids[i] for i in range(3)]
            return uuids[leader], [u for u in uuids if u != uuids[leader]]

    async def main() -> tuple[str, list[str]]:
        with trio.fail_after(3600):
            return await body()

    leader, followers = trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert all(pings[(leader, f)] == 0 for f in followers), pings
    for f in followers:
        assert 40 <= pings[(f, leader)] <= 70, pings  # ~6 a second for 10 s
