"""A tombstone answers a leader that joined after it was deleted.

Raft messages are pushed one way and answered by a push of their own, so a server must know
where the sender listens. A tombstone knows only the config it had when it was deleted, and
it appends nothing that would tell it of a later one: a leader that joined since (here
server 3) was unknown to it, its TOMBSTONED answers were dropped, the leader never learnt
that the replica needs a copy, and the replica added back as a NON_VOTER waited forever
(the master simulation's seed 5337: a tablet stuck with three voters and a NON_VOTER).
Every push now says where its sender listens (``RaftMessages.src_address``).
"""

from __future__ import annotations

import trio
import trio.testing

from revivify.checker.local import check_paths
from revivify.impl.consensus.messages import ChangeKind, ConfigChange, Peer
from revivify.impl.rpc import RpcError
from revivify.impl.testing.cluster import Cluster, open_cluster
from revivify.impl.tserver import api
from revivify.impl.tserver.server import TabletServer

TABLET = "t1"


async def _info(cluster: Cluster, i: int) -> api.ReplicaInfo | None:
    try:
        return await cluster.state(i, TABLET)
    except (RpcError, api.TabletNotFound, api.TabletNotRunning):
        return None


async def _change(cluster: Cluster, leader: int, kind: ChangeKind, peer: Peer) -> None:
    info = await cluster.state(leader, TABLET)
    await cluster.call(leader, api.ADMIN_CHANGE_CONFIG,
                       api.ChangeConfig(TABLET, ConfigChange(kind, peer), info.config_index),
                       api.ConfigChanged)


async def _until(cluster: Cluster, i: int, pred, seconds: float) -> bool:  # type: ignore[no-untyped-def]
    with trio.move_on_after(seconds):
        while True:
            info = await _info(cluster, i)
            if info is not None and pred(info):
                return True
            await trio.sleep(0.2)
    return False


def _scenario(tmp_path) -> tuple[bool, list[str]]:  # type: ignore[no-untyped-def]
    """Servers 0-2 host the tablet; server 2 is cut off from the other servers while
    server 3 joins, then removed and tombstoned (its config never named server 3); the cut
    heals, server 3 leads, and server 2 is added back as a NON_VOTER (promote). True when
    it became a VOTER; the trace check's findings."""
    became_voter = [False]

    async def main() -> None:
        async with open_cluster(str(tmp_path / "traces"), 4) as cluster:
            await cluster.start_all()
            hosts = [s.host for s in cluster.servers]
            await cluster.create_tablet(TABLET, [0, 1, 2])
            leader = await cluster.wait_for_leader(TABLET)
            if leader == 2:
                await cluster.call(2, api.ADMIN_STEP_DOWN,
                                   api.StepDown(TABLET, cluster.uuids[0]), api.Ack)
                assert await _until(cluster, 0, lambda i: i.role == "LEADER", 30.0)
                leader = 0
            cluster.net.partition([hosts[2]], [hosts[0], hosts[1], hosts[3]])
            p2, p3 = cluster.peers([2, 3])
            await _change(cluster, leader, "ADD", Peer(p3.uuid, p3.address, "NON_VOTER",
                                                        promote=True))
            assert await _until(cluster, 3, lambda i: i.member_type == "VOTER", 60.0)
            await _change(cluster, leader, "REMOVE", p2)
            info2 = await cluster.state(2, TABLET)
            assert cluster.uuids[3] not in [p.uuid for p in info2.peers]
            await cluster.call(2, api.ADMIN_DELETE_TABLET,
                               api.DeleteTablet(TABLET, "TOMBSTONE", info2.config_index),
                               api.Ack)
            cluster.net.heal()
            await cluster.call(leader, api.ADMIN_STEP_DOWN,
                               api.StepDown(TABLET, cluster.uuids[3]), api.Ack)
            assert await _until(cluster, 3, lambda i: i.role == "LEADER", 30.0)
            await _change(cluster, 3, "ADD", Peer(p2.uuid, p2.address, "NON_VOTER",
                                                  promote=True))
            became_voter[0] = await _until(cluster, 2, lambda i: i.member_type == "VOTER",
                                           60.0)

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    report = check_paths([str(tmp_path / "traces")])
    return became_voter[0], [v.kind for v in report.sorted() if v.severity != "warning"]


def test_a_tombstone_is_copied_back_by_a_leader_it_never_knew(tmp_path) -> None:  # type: ignore[no-untyped-def]
    voter, findings = _scenario(tmp_path)
    assert voter, "the NON_VOTER on the tombstone never caught up"
    assert findings == []


def test_without_the_senders_address_it_waits_forever(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The same with the senders' addresses ignored (as before the fix): stuck."""
    monkeypatch.setattr(TabletServer, "_heard_from", lambda self, uuid, address: None)
    voter, _ = _scenario(tmp_path)
    assert not voter


def test_a_bad_sender_address_is_refused_and_the_server_runs_on(tmp_path) -> None:  # type: ignore[no-untyped-def]
    async def main() -> None:
        async with open_cluster(str(tmp_path / "traces"), 1) as cluster:
            await cluster.start_all()
            await cluster.create_tablet(TABLET, [0])
            for bad in ("no-port", "host:99999", ":7050"):
                try:
                    await cluster.call(0, api.RAFT_MESSAGE,
                                       api.RaftMessages(TABLET, [], bad), api.Ack)
                except api.InvalidArgument as exc:
                    assert bad in str(exc) and "src_address" in str(exc)
                else:
                    raise AssertionError(f"{bad!r} accepted")
            # an empty address (an older sender) is fine, and the server still serves
            await cluster.call(0, api.RAFT_MESSAGE, api.RaftMessages(TABLET, []), api.Ack)
            assert (await cluster.state(0, TABLET)).state == "RUNNING"

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


def test_a_peer_named_another_way_gets_one_sender_the_old_one_stops(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A config and a push may name one peer's address differently (an operator's
    ``--peers`` against the address the server advertises): each change of address replaces
    the sender, and the one replaced stops (no task reconnecting forever to the old one)."""
    async def main() -> None:
        async with open_cluster(str(tmp_path / "traces"), 2) as cluster:
            await cluster.start_all()
            ts = cluster.servers[0].server
            assert ts is not None
            dest = cluster.uuids[1]
            senders = []
            for address in (cluster.address(1), "elsewhere:7050", cluster.address(1)):
                ts._heard_at[dest] = address
                ts.send(dest, "no-such-tablet", [])
                senders.append(ts.peers[dest])
                await trio.sleep(0.5)
            assert len({id(s) for s in senders}) == 3
            assert all(s.scope.cancelled_caught for s in senders[:2])
            assert not senders[2].scope.cancel_called

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
