"""The client library against fake tablet servers (fake_tserver.py).

Most tests run over a MemoryNetwork under trio.testing.MockClock(autojump_threshold=0):
deterministic, and a backoff of seconds costs no wall time, so elapsed virtual time is an
exact measure of how long the client waited. One test runs over real TCP on 127.0.0.1.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable

import pytest
import trio
import trio.testing
from fake_tserver import FakeCluster, memory_cluster, serve_tcp_cluster

from revivify.impl.client import (
    ChangeRefused,
    ClientOptions,
    DeadlineExceeded,
    InvalidAddress,
    InvalidRequest,
    NoLeader,
    OutcomeUnknown,
    Rejected,
    RetriesExhausted,
    ServerUnreachable,
    TabletNotFoundError,
    change_config,
    create_tablet,
    handshake,
    leader_info,
    open_connections,
    open_tablet_client,
    parse_address,
    server_status,
    step_down,
    tablet_status,
)
from revivify.impl.consensus.messages import ConfigChange, Peer
from revivify.impl.rpc import Backoff, ConnectFailed, WrongServerUuid
from revivify.impl.testing import LinkFaults, MemoryNetwork
from revivify.impl.tserver import api

CLIENT = "client"
TABLET = "tablet-a"
FAST = ClientOptions(max_attempts=8, deadline=30.0, backoff=Backoff(initial=0.1, max=0.4))


def run_mock(test: Callable[[], Awaitable[None]], deadline: float = 600.0) -> None:
    async def main() -> None:
        with trio.fail_after(deadline):
            await test()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


def network(seed: int = 0) -> MemoryNetwork:
    return MemoryNetwork(random.Random(seed))


def writes(cluster: FakeCluster) -> list[tuple[str, str, int]]:
    """(server uuid, client_id, seq) of every Write that reached a handler, in order."""
    return [(uuid, r.client_id, r.seq) for uuid, r in cluster.calls(api.DATA_WRITE)]


# ---------------------------------------------------------------------------- addresses


@pytest.mark.parametrize("address, expected", [
    ("127.0.0.1:7050", ("127.0.0.1", 7050)),
    ("ts-1:1", ("ts-1", 1)),
    ("[::1]:65535", ("::1", 65535)),
])
def test_parse_address(address: str, expected: tuple[str, int]) -> None:
    assert parse_address(address) == expected


@pytest.mark.parametrize("address, needle", [
    ("", "empty"), ("host", "no port"), (":7050", "no host"), ("h:x", "not a number"),
    ("h:0", "outside"), ("h:70000", "outside"), ("::1:7050", "brackets"), ("h :1", "space"),
    ("[::1]7050", "[IPV6]:PORT"),
])
def test_parse_address_refuses(address: str, needle: str) -> None:
    with pytest.raises(InvalidAddress, match=needle.replace("[", r"\[").replace("]", r"\]")):
        parse_address(address)


def test_backoff_within_half_base_and_base_and_capped() -> None:
    backoff = ClientOptions(backoff=Backoff(initial=0.1, max=0.4, multiplier=2.0)).backoff
    rng = random.Random(7)
    assert [backoff.base(n) for n in range(1, 6)] == [0.1, 0.2, 0.4, 0.4, 0.4]
    for attempt in range(1, 200):
        base = backoff.base(attempt)
        assert base / 2 <= backoff.delay(attempt, rng) <= base
    assert backoff.base(10_000) == 0.4  # no overflow for absurd attempt counts


def test_default_backoff_is_equal_jitter_from_50ms_to_1s() -> None:
    backoff = ClientOptions().backoff
    assert (backoff.initial, backoff.max, backoff.multiplier, backoff.jitter) == (
        0.05, 1.0, 2.0, 0.5)


def test_options_refuse_nonsense() -> None:
    with pytest.raises(ValueError, match="max_attempts"):
        ClientOptions(max_attempts=0)
    with pytest.raises(ValueError, match="deadline"):
        ClientOptions(deadline=0)


# ---------------------------------------------------------------------------- handshake


def test_handshake_learns_uuid_from_wrong_server_uuid_refusal() -> None:
    async def body() -> None:
        net = network()
        async with memory_cluster(net) as cluster:
            assert await handshake("ts-2:7050", "me", network=net.host(CLIENT)) == "uuid-2"
            assert cluster.log == []  # the handshake call never reached a handler
            status = await server_status("ts-2:7050", network=net.host(CLIENT))
            assert (status.uuid, status.address) == ("uuid-2", "ts-2:7050")
            assert [m for _, m, _ in cluster.log] == [api.ADMIN_STATUS]

    run_mock(body)


def test_server_status_lists_replicas() -> None:
    async def body() -> None:
        net = network()
        async with memory_cluster(net) as cluster:
            cluster.add_tablet(TABLET)
            status = await server_status("ts-1:7050", network=net.host(CLIENT))
            assert [(r.tablet_id, r.role) for r in status.replicas] == [(TABLET, "LEADER")]

    run_mock(body)


def test_stale_uuid_is_replaced_from_the_refusal() -> None:
    async def body() -> None:
        net = network()
        async with memory_cluster(net), open_connections("me", network=net.host(CLIENT)) as pool:
            pool.learn("ts-1:7050", "uuid-before-wipe")
            with pytest.raises(WrongServerUuid):
                await pool.call("ts-1:7050", api.ADMIN_STATUS, api.Empty(), api.ServerStatus)
            assert pool.known_uuid("ts-1:7050") == "uuid-1"
            status = await pool.call("ts-1:7050", api.ADMIN_STATUS, api.Empty(),
                                     api.ServerStatus)
            assert status.uuid == "uuid-1"

    run_mock(body)


def test_tablet_client_recovers_from_a_stale_uuid() -> None:
    async def body() -> None:
        net = network()
        async with memory_cluster(net) as cluster:
            cluster.add_tablet(TABLET)
            async with open_tablet_client(cluster.addresses, TABLET, network=net.host(CLIENT),
                                          options=FAST) as tablet:
                tablet._connections.learn("ts-1:7050", "stale")
                await tablet.put(b"k", b"v")
                assert await tablet.get(b"k") == b"v"

    run_mock(body)


def test_unreachable_server() -> None:
    async def body() -> None:
        net = network()
        async with memory_cluster(net, n=1):
            with pytest.raises(ServerUnreachable, match="ts-9:7050"):
                await server_status("ts-9:7050", network=net.host(CLIENT))
            with pytest.raises(ServerUnreachable, match="ts-1:7999"):
                await server_status("ts-1:7999", network=net.host(CLIENT))

    run_mock(body)


# ---------------------------------------------------------------------------- leader


def test_leader_found_by_asking_every_server_at_once() -> None:
    async def body() -> None:
        net = network()
        async with memory_cluster(net) as cluster:
            cluster.add_tablet(TABLET, leader=2)
            async with open_tablet_client(cluster.addresses, TABLET, network=net.host(CLIENT),
                                          options=FAST) as tablet:
                await tablet.put(b"k", b"v")
                assert tablet.leader_address == "ts-3:7050"
            asked = [uuid for uuid, _ in cluster.calls(api.ADMIN_CONSENSUS_STATE)]
            assert sorted(asked) == ["uuid-1", "uuid-2", "uuid-3"]  # one round, all at once
            assert writes(cluster)[0][0] == "uuid-3"

    run_mock(body)


def test_not_leader_hint_followed_at_once() -> None:
    async def body() -> None:
        net = network()
        async with memory_cluster(net) as cluster:
            tablet_state = cluster.add_tablet(TABLET)
            async with open_tablet_client(cluster.addresses, TABLET, network=net.host(CLIENT),
                                          options=FAST) as tablet:
                await tablet.put(b"a", b"1")
                tablet_state.leader = "uuid-2"
                tablet_state.term += 1
                cluster.log.clear()
                before = trio.current_time()
                written = await tablet.put(b"b", b"2")
                assert trio.current_time() == before  # no backoff: the hint was followed
                assert not written.duplicate
                assert [(u, m) for u, m, _ in cluster.log] == [
                    ("uuid-1", api.DATA_WRITE), ("uuid-2", api.DATA_WRITE)]
                assert tablet.leader_address == "ts-2:7050"

    run_mock(body)


def test_without_hints_the_client_backs_off_and_rediscovers() -> None:
    async def body() -> None:
        net = network()
        async with memory_cluster(net) as cluster:
            tablet_state = cluster.add_tablet(TABLET)
            async with open_tablet_client(cluster.addresses, TABLET, network=net.host(CLIENT),
                                          options=FAST, rng=random.Random(1)) as tablet:
                await tablet.put(b"a", b"1")
                tablet_state.leader = "uuid-3"
                tablet_state.hide_hints = True
                before = trio.current_time()
                await tablet.put(b"b", b"2")
                waited = trio.current_time() - before
                assert 0.05 <= waited <= 0.1  # one backoff (attempt 1: base 0.1)
                assert tablet.leader_address == "ts-3:7050"

    run_mock(body)


def test_no_leader_anywhere_retries_then_gives_up_naming_it() -> None:
    async def body() -> None:
        net = network()
        async with memory_cluster(net) as cluster:
            cluster.add_tablet(TABLET, leader=None)
            async with open_tablet_client(cluster.addresses, TABLET, network=net.host(CLIENT),
                                          options=FAST) as tablet:
                with pytest.raises(RetriesExhausted) as caught:
                    await tablet.get(b"k")
            assert isinstance(caught.value.last_error, NoLeader)
            assert caught.value.attempts == FAST.max_attempts
            assert "no leader found" in str(caught.value)

    run_mock(body)


def test_tablet_nobody_hosts_is_not_retried() -> None:
    async def body() -> None:
        net = network()
        async with memory_cluster(net) as cluster, open_tablet_client(
                cluster.addresses, "nope", network=net.host(CLIENT), options=FAST) as tablet:
            with pytest.raises(TabletNotFoundError, match="nope"):
                await tablet.get(b"k")
            assert trio.current_time() == 0

    run_mock(body)


# ---------------------------------------------------------------------------- exactly once


def test_retry_resends_the_same_client_id_and_seq() -> None:
    async def body() -> None:
        net = network()
        async with memory_cluster(net) as cluster:
            state = cluster.add_tablet(TABLET)
            leader = cluster.server("uuid-1")
            leader.fail_next[api.DATA_WRITE] = [("apply", api.OperationAborted("lost"))]
            async with open_tablet_client(cluster.addresses, TABLET, client_id="c1",
                                          network=net.host(CLIENT), options=FAST) as tablet:
                first = await tablet.put(b"k", b"v")
                second = await tablet.put(b"k2", b"v2")
            assert first.duplicate and first.ops_applied == 1
            assert not second.duplicate
            assert writes(cluster) == [("uuid-1", "c1", 1), ("uuid-1", "c1", 1),
                                       ("uuid-1", "c1", 2)]
            assert state.rows == {b"k": b"v", b"k2": b"v2"}
            assert state.index == 3  # two writes applied, once each

    run_mock(body)


def test_lost_answer_reconnects_and_is_applied_once() -> None:
    async def body() -> None:
        net = network()
        async with memory_cluster(net) as cluster, trio.open_nursery() as nursery:
            state = cluster.add_tablet(TABLET)

            def cut() -> None:  # the write is applied; its answer never arrives
                net.partition([CLIENT], ["ts-1"])

                async def heal_later() -> None:
                    await trio.sleep(0.3)
                    net.heal()

                nursery.start_soon(heal_later)

            cluster.server("uuid-1").after_next[api.DATA_WRITE] = [cut]
            async with open_tablet_client(cluster.addresses, TABLET, client_id="c1",
                                          network=net.host(CLIENT), options=FAST) as tablet:
                written = await tablet.put(b"k", b"v")
            assert written.duplicate
            assert [w[1:] for w in writes(cluster)] == [("c1", 1), ("c1", 1)]
            assert state.index == 2 and state.rows == {b"k": b"v"}

    run_mock(body)


def test_writes_of_one_client_are_serialized_in_seq_order() -> None:
    async def body() -> None:
        net = network()
        async with memory_cluster(net) as cluster:
            cluster.add_tablet(TABLET)
            async with open_tablet_client(cluster.addresses, TABLET, client_id="c1",
                                          network=net.host(CLIENT), options=FAST
                                          ) as tablet, trio.open_nursery() as nursery:
                for i in range(5):
                    nursery.start_soon(tablet.put, f"k{i}".encode(), b"v")
            assert [seq for _, _, seq in writes(cluster)] == [1, 2, 3, 4, 5]

    run_mock(body)


def test_client_id_is_random_per_client() -> None:
    async def body() -> None:
        net = network()
        async with memory_cluster(net) as cluster:
            cluster.add_tablet(TABLET)
            ids = []
            for _ in range(2):
                async with open_tablet_client(cluster.addresses, TABLET,
                                              network=net.host(CLIENT)) as tablet:
                    await tablet.put(b"k", b"v")
                    ids.append(tablet.client_id)
            assert ids[0] != ids[1] and all(len(i) == 32 for i in ids)

    run_mock(body)


def test_invalid_write_refused_before_sending() -> None:
    async def body() -> None:
        net = network()
        async with memory_cluster(net) as cluster:
            cluster.add_tablet(TABLET)
            async with open_tablet_client(cluster.addresses, TABLET,
                                          network=net.host(CLIENT)) as tablet:
                with pytest.raises(InvalidRequest, match="key"):
                    await tablet.put(b"", b"v")
            assert writes(cluster) == []

    run_mock(body)


def test_final_server_error_is_rejected_not_retried() -> None:
    async def body() -> None:
        net = network()
        async with memory_cluster(net) as cluster:
            cluster.add_tablet(TABLET)
            cluster.server("uuid-1").fail_next[api.DATA_WRITE] = [
                api.InvalidArgument("no such thing")]
            async with open_tablet_client(cluster.addresses, TABLET,
                                          network=net.host(CLIENT)) as tablet:
                with pytest.raises(Rejected, match="no such thing"):
                    await tablet.put(b"k", b"v")
            assert len(writes(cluster)) == 1

    run_mock(body)


# ---------------------------------------------------------------------------- backoff


def test_backoff_bounded_and_attempts_bounded() -> None:
    elapsed: list[float] = []

    async def body() -> None:
        net = network()
        async with memory_cluster(net) as cluster:
            cluster.add_tablet(TABLET)
            cluster.server("uuid-1").fail_next[api.DATA_WRITE] = [
                api.TabletNotRunning(TABLET, "BOOTSTRAPPING", "")] * 100
            options = ClientOptions(max_attempts=5, backoff=Backoff(initial=0.1, max=0.4))
            async with open_tablet_client(cluster.addresses, TABLET, client_id="c1",
                                          network=net.host(CLIENT), options=options,
                                          rng=random.Random(3)) as tablet:
                start = trio.current_time()
                with pytest.raises(RetriesExhausted) as caught:
                    await tablet.put(b"k", b"v")
                elapsed.append(trio.current_time() - start)
            error = caught.value
            assert error.attempts == 5
            assert isinstance(error.last_error, api.TabletNotRunning)
            assert "BOOTSTRAPPING" in str(error)
            # four sleeps between five attempts: bases 0.1, 0.2, 0.4, 0.4 (capped)
            assert 0.55 <= elapsed[-1] <= 1.1
            assert {w[1:] for w in writes(cluster)} == {("c1", 1)}
            assert len(writes(cluster)) == 5

    run_mock(body)
    run_mock(body)
    assert elapsed[0] == elapsed[1]  # the jitter comes from the injected rng only


def test_deadline_stops_retrying() -> None:
    async def body() -> None:
        net = network()
        async with memory_cluster(net) as cluster:
            cluster.add_tablet(TABLET, leader=None)
            options = ClientOptions(max_attempts=10_000, deadline=2.0, backoff=Backoff(max=0.5))
            async with open_tablet_client(cluster.addresses, TABLET, network=net.host(CLIENT),
                                          options=options) as tablet:
                with pytest.raises(DeadlineExceeded) as caught:
                    await tablet.get(b"k")
                assert trio.current_time() <= 2.0
            assert isinstance(caught.value.last_error, NoLeader)
            assert not caught.value.outcome_unknown

    run_mock(body)


def test_deadline_bounds_a_hanging_call() -> None:
    async def body() -> None:
        net = network()
        async with memory_cluster(net) as cluster:
            cluster.add_tablet(TABLET)
            cluster.server("uuid-1").after_next[api.DATA_WRITE] = [
                lambda: net.set_link_faults("ts-1", CLIENT, _never_deliver())]
            options = ClientOptions(deadline=5.0)
            async with open_tablet_client(cluster.addresses, TABLET, network=net.host(CLIENT),
                                          options=options) as tablet:
                with pytest.raises(DeadlineExceeded) as caught:
                    await tablet.put(b"k", b"v")
                assert trio.current_time() == pytest.approx(5.0)
            assert caught.value.outcome_unknown  # cut off in flight: maybe applied

    run_mock(body)


def _never_deliver() -> LinkFaults:
    return LinkFaults(delay=10_000.0)  # the answer is held back far beyond any deadline


def test_all_servers_down_gives_up_naming_connect_failures() -> None:
    async def body() -> None:
        net = network()
        async with memory_cluster(net) as cluster:
            cluster.add_tablet(TABLET)
            for i in (1, 2, 3):
                net.kill(f"ts-{i}")
            async with open_tablet_client(cluster.addresses, TABLET, network=net.host(CLIENT),
                                          options=FAST) as tablet:
                with pytest.raises(RetriesExhausted) as caught:
                    await tablet.get(b"k")
            assert isinstance(caught.value.last_error, NoLeader)
            assert "cannot connect to ts-1:7050" in str(caught.value)

    run_mock(body)


def test_reconnects_after_a_server_comes_back() -> None:
    async def body() -> None:
        net = network()
        async with memory_cluster(net, n=1) as cluster:
            cluster.add_tablet(TABLET)
            async with open_tablet_client(cluster.addresses, TABLET, network=net.host(CLIENT),
                                          options=FAST) as tablet:
                await tablet.put(b"k", b"v")
                net.partition([CLIENT], ["ts-1"])
                async with trio.open_nursery() as nursery:
                    async def heal() -> None:
                        await trio.sleep(0.5)
                        net.heal()
                    nursery.start_soon(heal)
                    assert await tablet.get(b"k") == b"v"

    run_mock(body)


def test_step_down_cut_off_in_flight_is_not_repeated() -> None:
    async def body() -> None:
        net = network()
        async with memory_cluster(net) as cluster:
            cluster.add_tablet(TABLET)
            cluster.server("uuid-1").after_next[api.ADMIN_STEP_DOWN] = [
                lambda: net.partition([CLIENT], ["ts-1"])]
            with pytest.raises(OutcomeUnknown):
                await step_down(cluster.addresses, TABLET, network=net.host(CLIENT),
                                options=FAST)
            assert len(cluster.calls(api.ADMIN_STEP_DOWN)) == 1

    run_mock(body)


# ---------------------------------------------------------------------------- reads


def test_get_and_scan_pages() -> None:
    async def body() -> None:
        net = network()
        async with memory_cluster(net) as cluster:
            state = cluster.add_tablet(TABLET)
            state.rows = {f"k{i:02}".encode(): f"v{i}".encode() for i in range(25)}
            options = ClientOptions(scan_page_size=10)
            async with open_tablet_client(cluster.addresses, TABLET, network=net.host(CLIENT),
                                          options=options) as tablet:
                assert await tablet.get(b"k03") == b"v3"
                assert await tablet.get(b"missing") is None
                rows = await tablet.scan()
                assert rows == sorted(state.rows.items())
                assert [r.limit for _, r in cluster.calls(api.DATA_SCAN)] == [10, 10, 10]
                cluster.log.clear()
                rows = await tablet.scan(b"k05", b"k30", limit=12)
                assert [k for k, _ in rows] == [f"k{i:02}".encode() for i in range(5, 17)]
                starts = [(r.start, r.limit) for _, r in cluster.calls(api.DATA_SCAN)]
                assert starts == [(b"k05", 10), (b"k14\0", 2)]
                assert await tablet.scan(limit=0) == []

    run_mock(body)


# ---------------------------------------------------------------------------- admin


def test_create_tablet_and_status() -> None:
    async def body() -> None:
        net = network()
        client = net.host(CLIENT)
        async with memory_cluster(net, n=4) as cluster:
            created = await create_tablet(cluster.addresses, 3, network=client)
            assert len(created.tablet_id) == 32
            assert created.peers == [Peer(f"uuid-{i}", f"ts-{i}:7050", "VOTER")
                                     for i in (1, 2, 3)]
            creates = cluster.calls(api.ADMIN_CREATE_TABLET)
            assert [u for u, _ in creates] == ["uuid-1", "uuid-2", "uuid-3"]
            assert all(r.peers == created.peers for _, r in creates)
            net.kill("ts-2")
            status = await tablet_status(cluster.addresses, created.tablet_id, network=client)
            rows = {r.address: r for r in status.replicas}
            assert rows["ts-1:7050"].info is not None
            assert rows["ts-1:7050"].info.role == "LEADER"
            assert not rows["ts-2:7050"].reachable
            assert rows["ts-2:7050"].error is not None
            assert rows["ts-2:7050"].error.startswith("unreachable")
            assert rows["ts-4:7050"].error == "tablet not hosted"
            assert status.leader is not None and status.leader.uuid == "uuid-1"
            with pytest.raises(InvalidRequest, match="5 replicas"):
                await create_tablet(cluster.addresses, 5, network=client)
            with pytest.raises(Rejected, match="already exists"):
                await create_tablet(cluster.addresses, 1, created.tablet_id, network=client)

    run_mock(body)


def test_change_config_reads_the_cas_index_and_refusal_is_typed() -> None:
    async def body() -> None:
        net = network()
        client = net.host(CLIENT)
        async with memory_cluster(net) as cluster:
            state = cluster.add_tablet(TABLET, hosts=cluster.servers[:2])
            add = ConfigChange("ADD", Peer("uuid-3", "ts-3:7050", "NON_VOTER", True))
            changed = await change_config(cluster.addresses, TABLET, add, network=client)
            assert changed.config_index == state.config_index == 2
            assert [r.cas_config_index for _, r in cluster.calls(api.ADMIN_CHANGE_CONFIG)] == [0]
            with pytest.raises(ChangeRefused) as caught:
                await change_config(cluster.addresses, TABLET,
                                    ConfigChange("REMOVE", Peer("uuid-3", "")), 0,
                                    network=client)
            assert caught.value.reason == "cas_mismatch"
            assert caught.value.committed_index == 2
            info = await leader_info(cluster.addresses, TABLET, network=client)
            assert info.config_index == 2 and len(info.peers) == 3

    run_mock(body)


def test_step_down_asks_the_leader() -> None:
    async def body() -> None:
        net = network()
        client = net.host(CLIENT)
        async with memory_cluster(net) as cluster:
            state = cluster.add_tablet(TABLET, leader=1)
            former = await step_down(cluster.addresses, TABLET, "uuid-3", network=client)
            assert former == "uuid-2"
            assert state.leader == "uuid-3"
            assert [u for u, _ in cluster.calls(api.ADMIN_STEP_DOWN)] == ["uuid-2"]

    run_mock(body)


# ---------------------------------------------------------------------------- real TCP


def test_over_tcp() -> None:
    async def body() -> None:
        cluster = FakeCluster()
        async with trio.open_nursery() as nursery:
            await nursery.start(serve_tcp_cluster, cluster, 3)
            created = await create_tablet(cluster.addresses, 3)
            async with open_tablet_client(cluster.addresses, created.tablet_id) as tablet:
                await tablet.put(b"k", "välue".encode())
                assert await tablet.get(b"k") == "välue".encode()
                assert await tablet.scan() == [(b"k", "välue".encode())]
            status = await server_status(cluster.addresses[1])
            assert status.uuid == "uuid-2"
            with pytest.raises(ServerUnreachable) as caught:
                await server_status("127.0.0.1:1")
            assert isinstance(caught.value.last_error, ConnectFailed)
            nursery.cancel_scope.cancel()

    async def main() -> None:
        with trio.fail_after(30):
            await body()

    trio.run(main)
