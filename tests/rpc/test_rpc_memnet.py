"""serve_rpc and open_rpc_client over a MemoryNetwork, under MockClock: the same round trips
as over TCP, then the faults (partitions, kills, drops, delays), each with what the caller
sees, what the server sees and what the network recorded."""

from __future__ import annotations

import errno
import functools
import logging

import pytest
import trio
from memnet_helpers import (
    CLIENT,
    CLIENT2,
    PORT,
    TS1,
    TS2,
    memory_server,
    network,
    run_mock,
)
from rpc_helpers import (
    CLIENT_UUID,
    SERVER_UUID,
    Echo,
    NotLeader,
    Probe,
    Wait,
    Waited,
    make_service,
    read_until_eof,
)

from revivify.impl.rpc import (
    ConnectFailed,
    ConnectionClosed,
    RpcServer,
    WrongServerUuid,
    encode_frame,
    open_rpc_client,
    serve_rpc,
)
from revivify.impl.testing import LinkFaults, MemoryNetwork, NetEvent

TS2_UUID = "ts-0002-cccc"


class TestRoundTrip:
    """Without faults, a MemoryNetwork serves calls exactly as TCP does."""

    def test_call_round_trip(self) -> None:
        probe = Probe()

        async def main() -> None:
            net = network()
            async with memory_server(net, TS1, probe) as server, open_rpc_client(
                    TS1, PORT, SERVER_UUID, CLIENT_UUID, network=net.host(CLIENT),
                    app_errors=[NotLeader]) as client:
                assert server.addresses == [(TS1, PORT)] and server.port == PORT
                assert await client.call("Echo", Echo("héllo"), Echo) == Echo("héllo")
                with pytest.raises(NotLeader) as info:  # typed errors travel as over TCP
                    await client.call("NotLeader", Echo(TS2), Echo)
                assert info.value.leader_hint == TS2
                assert net.connections == [((CLIENT, 49152), (TS1, PORT))]
            assert [(c.method, c.src_uuid) for c in probe.contexts] == [("Echo", CLIENT_UUID)]
            assert net.events == ()  # no fault, nothing recorded

        run_mock(main)

    def test_wrong_destination_refused(self) -> None:
        async def main() -> None:
            net = network()
            async with memory_server(net, TS1) as server, open_rpc_client(
                    TS1, server.port, TS2_UUID, CLIENT_UUID,
                    network=net.host(CLIENT)) as client:
                with pytest.raises(WrongServerUuid) as info:
                    await client.call("Echo", Echo("x"), Echo)
                assert (info.value.expected, info.value.got) == (SERVER_UUID, TS2_UUID)

        run_mock(main)

    def test_port_zero_is_picked_by_the_network(self) -> None:
        async def main() -> None:
            net = network()
            async with memory_server(net, TS1, port=0) as first, \
                    memory_server(net, TS1, port=0) as second, \
                    memory_server(net, TS2, port=0) as other_host:
                assert (first.port, second.port, other_host.port) == (49152, 49153, 49152)
                assert net.listening == [(TS1, 49152), (TS1, 49153), (TS2, 49152)]
                async with open_rpc_client(TS1, second.port, SERVER_UUID, CLIENT_UUID,
                                           network=net.host(CLIENT)) as client:
                    assert await client.call("Echo", Echo("2nd"), Echo) == Echo("2nd")
            assert net.listening == []  # serve_rpc closed its listeners when cancelled

        run_mock(main)

    def test_listen_errors(self) -> None:
        async def main() -> None:
            net = network()
            service = make_service(Probe())
            async with memory_server(net, TS1):
                with pytest.raises(OSError) as in_use:
                    await serve_rpc(service, SERVER_UUID, TS1, PORT, network=net.host(TS1))
                assert in_use.value.errno == errno.EADDRINUSE
                with pytest.raises(OSError) as foreign:  # ts-2's process cannot bind ts-1
                    await serve_rpc(service, SERVER_UUID, TS1, 7051, network=net.host(TS2))
                assert foreign.value.errno == errno.EADDRNOTAVAIL

        run_mock(main)

    def test_nothing_listening_is_connect_failed(self) -> None:
        async def main() -> None:
            net = network()
            with pytest.raises(ConnectFailed) as info:
                async with open_rpc_client(TS1, PORT, SERVER_UUID, CLIENT_UUID,
                                           network=net.host(CLIENT)):
                    pass
            assert info.value.address == f"{TS1}:{PORT}"
            assert "refused" in info.value.reason
            assert [(e.kind, e.src, e.dst) for e in net.events] == [
                ("refused", CLIENT, f"{TS1}:{PORT}")]

        run_mock(main)

    def test_garbage_closes_only_that_connection(self) -> None:
        async def main() -> None:
            net = network()
            attacker = net.host("attacker")
            async with memory_server(net, TS1) as server, open_rpc_client(
                    TS1, server.port, SERVER_UUID, CLIENT_UUID,
                    network=net.host(CLIENT)) as bystander:
                stream = await attacker.connect(TS1, server.port)
                async with stream:
                    await stream.send_all(encode_frame(b"\xc1\xc1 not msgpack"))
                    assert await read_until_eof(stream) == b""  # type: ignore[arg-type]
                assert await bystander.call("Echo", Echo("still"), Echo) == Echo("still")

        run_mock(main)


class TestConcurrency:
    """Calls from several hosts, many per connection, complete in the order released."""

    def test_concurrent_calls_from_two_hosts(self) -> None:
        probe = Probe()
        per_client = 8

        async def main() -> None:
            net = network()
            async with memory_server(net, TS1, probe) as server, \
                    open_rpc_client(TS1, server.port, SERVER_UUID, "c-1",
                                    network=net.host(CLIENT)) as first, \
                    open_rpc_client(TS1, server.port, SERVER_UUID, "c-2",
                                    network=net.host(CLIENT2)) as second:
                results: dict[str, Waited] = {}
                finished: list[str] = []

                async def one(client_name: str, key: str) -> None:
                    client = first if client_name == "c-1" else second
                    results[key] = await client.call("Wait", Wait(key), Waited)
                    finished.append(key)

                keys = [f"{name}/{i}" for name in ("c-1", "c-2") for i in range(per_client)]
                async with trio.open_nursery() as nursery:
                    for key in keys:
                        nursery.start_soon(one, key.split("/")[0], key)
                    await probe.until(lambda: len(probe.arrived) == len(keys))
                    assert server.active_calls == len(keys)
                    assert first.pending_calls == second.pending_calls == per_client
                    release_order = sorted(keys, reverse=True)
                    for key in release_order:
                        probe.gate(key).set()
                        await probe.until(functools.partial(finished.__contains__, key))
                assert finished == release_order
                assert all(results[key].key == key for key in keys)
                for name in ("c-1", "c-2"):  # each connection numbers its own calls
                    ids = sorted(results[k].call_id for k in keys if k.startswith(name))
                    assert ids == list(range(1, per_client + 1))
                assert probe.max_active == len(keys)
                assert sorted(client for client, _ in net.connections) == [
                    (CLIENT, 49152), (CLIENT2, 49152)]

        run_mock(main)


class TestDelay:
    """Link delay is latency, exact in virtual time: it does not serialise calls."""

    def test_round_trips_cost_exactly_the_link_delays(self) -> None:
        async def main() -> None:
            net = network()
            net.set_link_faults(CLIENT, TS1, LinkFaults(delay=0.030))
            net.set_link_faults(TS1, CLIENT, LinkFaults(delay=0.020))
            async with memory_server(net, TS1) as server:
                start = trio.current_time()
                async with open_rpc_client(TS1, server.port, SERVER_UUID, CLIENT_UUID,
                                           network=net.host(CLIENT)) as client:
                    assert trio.current_time() - start == pytest.approx(0.050)  # handshake
                    start = trio.current_time()
                    await client.call("Echo", Echo("one"), Echo)
                    assert trio.current_time() - start == pytest.approx(0.050)
                    start = trio.current_time()
                    async with trio.open_nursery() as nursery:
                        for i in range(10):
                            nursery.start_soon(client.call, "Echo", Echo(str(i)), Echo)
                    assert trio.current_time() - start == pytest.approx(0.050)

        run_mock(main)

    def test_delay_applies_per_direction_and_link(self) -> None:
        async def main() -> None:
            net = network()
            net.set_link_faults(CLIENT, TS1, LinkFaults(delay=1.0), both_ways=True)
            assert net.faults_for(TS1, CLIENT).delay == 1.0
            assert net.faults_for(CLIENT2, TS1).delay == 0.0
            async with memory_server(net, TS1) as server:
                for host, expected in ((CLIENT2, 0.0), (CLIENT, 4.0)):  # connect + call
                    start = trio.current_time()
                    async with open_rpc_client(TS1, server.port, SERVER_UUID, CLIENT_UUID,
                                               network=net.host(host)) as client:
                        await client.call("Echo", Echo(host), Echo)
                    assert trio.current_time() - start == pytest.approx(expected)

        run_mock(main)


class TestPartition:
    """A partition breaks the connections across it and refuses new ones; heal restores."""

    def test_partition_breaks_calls_in_flight_refuses_connects_and_heals(
        self, caplog: pytest.LogCaptureFixture
    ) -> None:
        probe = Probe()
        in_flight = 3

        async def main() -> None:
            net = network()
            client_host = net.host(CLIENT)
            async with memory_server(net, TS1, probe) as server, \
                    open_rpc_client(TS1, server.port, SERVER_UUID, CLIENT_UUID,
                                    network=client_host) as client, \
                    open_rpc_client(TS1, server.port, SERVER_UUID, "bystander",
                                    network=net.host(CLIENT2)) as bystander:
                errors: list[ConnectionClosed] = []

                async def one(key: str) -> None:
                    with pytest.raises(ConnectionClosed) as info:
                        await client.call("Wait", Wait(key), Waited)
                    errors.append(info.value)

                async with trio.open_nursery() as nursery:
                    for i in range(in_flight):
                        nursery.start_soon(one, f"w{i}")
                    await probe.until(lambda: len(probe.arrived) == in_flight)
                    net.partition([CLIENT], [TS1])
                assert len(errors) == in_flight
                assert all("partition" in error.reason for error in errors)
                assert client.closed and client.pending_calls == 0
                assert not net.reachable(CLIENT, TS1) and not net.reachable(TS1, CLIENT)

                # The handlers still run to the end; their answers go nowhere.
                assert server.active_calls == in_flight
                for key in probe.arrived:
                    probe.gate(key).set()
                await probe.until(lambda: server.active_calls == 0)

                with pytest.raises(ConnectFailed) as refused:
                    async with open_rpc_client(TS1, server.port, SERVER_UUID, CLIENT_UUID,
                                               network=client_host):
                        pass
                assert "partitioned" in refused.value.reason
                assert str(errno.EHOSTUNREACH) in refused.value.reason
                # Hosts outside the cut are untouched.
                assert await bystander.call("Echo", Echo("fine"), Echo) == Echo("fine")

                net.heal()
                async with open_rpc_client(TS1, server.port, SERVER_UUID, CLIENT_UUID,
                                           network=client_host) as again:
                    assert await again.call("Echo", Echo("back"), Echo) == Echo("back")

            kinds = [event.kind for event in net.events]
            assert kinds == ["partition", "cut", "unreachable", "heal"]
            cut = net.events_of("cut")[0]
            assert (cut.src, cut.dst) == (f"{CLIENT}:49152", f"{TS1}:{PORT}")
            assert all(event.at is not None for event in net.events)

        with caplog.at_level(logging.INFO, logger="revivify.impl.testing.memnet"):
            run_mock(main)
        messages = [record.getMessage() for record in caplog.records]
        assert any("partition ['client-1'] | ['ts-1']" in m for m in messages), messages
        assert any("healed" in m for m in messages), messages

    def test_partition_cuts_both_ways_between_groups_only(self) -> None:
        async def main() -> None:
            net = network()
            async with memory_server(net, TS1) as ts1, \
                    memory_server(net, TS2, server_uuid=TS2_UUID) as ts2:
                net.partition([TS1], [TS2, "ts-3"])
                for src, dst, port, uuid in ((TS1, TS2, ts2.port, TS2_UUID),
                                             (TS2, TS1, ts1.port, SERVER_UUID)):
                    with pytest.raises(ConnectFailed):
                        async with open_rpc_client(dst, port, uuid, src,
                                                   network=net.host(src)):
                            pass
                for port, uuid, host in ((ts1.port, SERVER_UUID, TS1),
                                         (ts2.port, TS2_UUID, TS2)):
                    async with open_rpc_client(host, port, uuid, CLIENT_UUID,
                                               network=net.host(CLIENT)) as client:
                        assert await client.call("Echo", Echo(host), Echo) == Echo(host)
                # A host can always reach itself.
                async with open_rpc_client(TS1, ts1.port, SERVER_UUID, "self",
                                           network=net.host(TS1)) as itself:
                    assert await itself.call("Echo", Echo("me"), Echo) == Echo("me")
                with pytest.raises(ValueError, match="both sides"):
                    net.partition([TS1, TS2], [TS2])
            assert [e.kind for e in net.events] == ["partition", "unreachable", "unreachable"]

        run_mock(main)


class TestKill:
    """kill(host): its listeners and connections vanish; a restarted process serves again."""

    def test_killed_server_fails_calls_refuses_connects_and_restarts(self) -> None:
        probe = Probe()

        async def main() -> None:
            net = network()
            service = make_service(probe)
            old_process = net.host(TS1)
            async with trio.open_nursery() as nursery, \
                    memory_server(net, TS2, server_uuid=TS2_UUID) as ts2:
                crashed = trio.CancelScope()

                async def ts1_process(task_status: trio.TaskStatus[RpcServer]) -> None:
                    with crashed:
                        await serve_rpc(service, SERVER_UUID, TS1, PORT,
                                        network=old_process, task_status=task_status)

                await nursery.start(ts1_process)
                async with open_rpc_client(TS1, PORT, SERVER_UUID, CLIENT_UUID,
                                           network=net.host(CLIENT)) as client, \
                        open_rpc_client(TS2, ts2.port, TS2_UUID, CLIENT_UUID,
                                        network=net.host(CLIENT)) as to_ts2:
                    async def doomed() -> None:
                        with pytest.raises(ConnectionClosed, match="ts-1 killed"):
                            await client.call("Wait", Wait("doomed"), Waited)

                    async with trio.open_nursery() as calls:
                        calls.start_soon(doomed)
                        await probe.until(lambda: probe.arrived == ["doomed"])
                        net.kill(TS1)
                        crashed.cancel()  # the process's own tasks die with it
                    assert client.closed
                    assert await to_ts2.call("Echo", Echo("alive"), Echo) == Echo("alive")

                assert not old_process.alive
                with pytest.raises(OSError) as dead:
                    await old_process.connect(TS2, ts2.port)
                assert dead.value.errno == errno.ENETDOWN
                with pytest.raises(ConnectFailed, match="refused"):
                    async with open_rpc_client(TS1, PORT, SERVER_UUID, CLIENT_UUID,
                                               network=net.host(CLIENT)):
                        pass

                # The restarted process listens on the same address again.
                async with memory_server(net, TS1, probe) as restarted, open_rpc_client(
                        TS1, restarted.port, SERVER_UUID, CLIENT_UUID,
                        network=net.host(CLIENT)) as client:
                    assert await client.call("Echo", Echo("reborn"), Echo) == Echo("reborn")
            assert [e.kind for e in net.events] == ["kill", "cut", "refused"]
            assert net.events_of("kill")[0].src == TS1

        run_mock(main)

    def test_killed_client_host_breaks_its_connections_only(self) -> None:
        probe = Probe()

        async def main() -> None:
            net = network()
            async with memory_server(net, TS1, probe) as server, \
                    open_rpc_client(TS1, server.port, SERVER_UUID, "doomed",
                                    network=net.host(CLIENT)) as doomed, \
                    open_rpc_client(TS1, server.port, SERVER_UUID, "survivor",
                                    network=net.host(CLIENT2)) as survivor:
                assert len(net.connections) == 2
                net.kill(CLIENT)
                with pytest.raises(ConnectionClosed):
                    await doomed.call("Echo", Echo("x"), Echo)
                assert await survivor.call("Echo", Echo("y"), Echo) == Echo("y")
                assert [client for client, _ in net.connections] == [(CLIENT2, 49152)]
            assert [e.kind for e in net.events] == ["kill", "cut"]

        run_mock(main)


# ---------------------------------------------------------------------------- drops

DROP_PROBABILITY = 0.2
DROP_CALLS = 40


def drop_workload(seed: int) -> tuple[list[str], list[NetEvent]]:
    """DROP_CALLS sequential calls over lossy links, reconnecting after each reset."""
    outcomes: list[str] = []
    net: MemoryNetwork = network(seed)

    async def main() -> None:
        faults = LinkFaults(drop_probability=DROP_PROBABILITY)
        net.set_link_faults(CLIENT, TS1, faults, both_ways=True)
        client_host = net.host(CLIENT)
        async with memory_server(net, TS1) as server:
            call = 0
            while call < DROP_CALLS:
                async with open_rpc_client(TS1, server.port, SERVER_UUID, CLIENT_UUID,
                                           network=client_host) as client:
                    while call < DROP_CALLS:
                        call += 1
                        try:
                            await client.call("Echo", Echo(str(call)), Echo)
                        except ConnectionClosed:
                            outcomes.append("reset")
                            break
                        outcomes.append("ok")

    run_mock(main)
    return outcomes, list(net.events)


class TestDrops:
    """A dropped chunk resets its connection; which chunks drop depends on the seed only."""

    def test_same_seed_same_failures(self) -> None:
        outcomes, events = drop_workload(seed=7)
        assert (outcomes, events) == drop_workload(seed=7)
        assert len(outcomes) == DROP_CALLS
        assert 0 < outcomes.count("reset") < DROP_CALLS  # neither degenerate case
        assert {event.kind for event in events} == {"drop"}
        assert len(events) == outcomes.count("reset")  # each reset is one recorded drop
        assert {event.src for event in events} >= {f"{TS1}:{PORT}"}  # responses dropped too

    def test_other_seed_other_failures(self) -> None:
        assert drop_workload(seed=7)[0] != drop_workload(seed=8)[0]

    def test_dropped_request_never_ran_dropped_response_did(self) -> None:
        probe = Probe()

        async def main() -> None:
            net = network()
            client_host = net.host(CLIENT)
            async with memory_server(net, TS1, probe) as server:
                net.set_link_faults(CLIENT, TS1, LinkFaults(drop_probability=1.0))
                async with open_rpc_client(TS1, server.port, SERVER_UUID, CLIENT_UUID,
                                           network=client_host) as client:
                    with pytest.raises(ConnectionClosed, match="dropped"):
                        await client.call("Echo", Echo("request lost"), Echo)
                assert probe.contexts == []  # the handler never saw it

                net.clear_link_faults()
                net.set_link_faults(TS1, CLIENT, LinkFaults(drop_probability=1.0))
                async with open_rpc_client(TS1, server.port, SERVER_UUID, CLIENT_UUID,
                                           network=client_host) as client:
                    with pytest.raises(ConnectionClosed, match="dropped"):
                        await client.call("Echo", Echo("response lost"), Echo)
                assert [c.method for c in probe.contexts] == ["Echo"]  # it ran
            drops = net.events_of("drop")
            assert [(e.src, e.dst) for e in drops] == [
                (f"{CLIENT}:49152", f"{TS1}:{PORT}"), (f"{TS1}:{PORT}", f"{CLIENT}:49153")]
            assert [e.connection for e in drops] == [1, 2]

        run_mock(main)
