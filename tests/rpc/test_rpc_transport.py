"""The transport seam: TCP through the Network protocol (the default, unchanged), and the
MemoryNetwork's streams and listeners against trio's own contracts."""

from __future__ import annotations

import errno
import functools
import random

import pytest
import trio
import trio.testing
from memnet_helpers import CLIENT, TS1, network, run_mock
from rpc_helpers import CLIENT_UUID, HOST, SERVER_UUID, Echo, Probe, make_service, run

from revivify.impl.rpc import (
    TCP,
    RpcServer,
    TcpNetwork,
    open_rpc_client,
    serve_rpc,
)
from revivify.impl.testing import LinkFaults, MemoryHost, MemoryNetwork, MemoryStream


class CountingTcp(TcpNetwork):
    """TCP that records what the shells asked of it: proof they go through the seam."""

    def __init__(self) -> None:
        self.connects: list[tuple[str, int]] = []
        self.listens: list[tuple[str, int]] = []

    async def connect(self, host: str, port: int) -> trio.abc.Stream:
        self.connects.append((host, port))
        return await super().connect(host, port)

    async def open_listeners(
        self, host: str, port: int
    ) -> list[trio.abc.Listener[trio.abc.Stream]]:
        self.listens.append((host, port))
        return await super().open_listeners(host, port)


class TestTcpThroughTheSeam:
    """network=None is TCP, as before; an explicit TcpNetwork is used for every stream."""

    def test_explicit_tcp_network(self) -> None:
        net = CountingTcp()

        async def main() -> None:
            service = make_service(Probe())
            async with trio.open_nursery() as nursery:
                server: RpcServer = await nursery.start(functools.partial(
                    serve_rpc, service, SERVER_UUID, HOST, 0, network=net))
                assert server.addresses == [(HOST, server.port)] and server.port > 0
                assert all(isinstance(listener, trio.SocketListener)
                           for listener in server.listeners)
                async with open_rpc_client(HOST, server.port, SERVER_UUID, CLIENT_UUID,
                                           network=net) as client:
                    assert await client.call("Echo", Echo("tcp"), Echo) == Echo("tcp")
                nursery.cancel_scope.cancel()
            assert net.listens == [(HOST, 0)]
            assert net.connects == [(HOST, server.port)]

        run(main)

    def test_default_is_tcp(self) -> None:
        async def main() -> None:
            service = make_service(Probe())
            async with trio.open_nursery() as nursery:
                server: RpcServer = await nursery.start(serve_rpc, service, SERVER_UUID)
                assert isinstance(server.listeners[0], trio.SocketListener)
                stream = await TCP.connect(HOST, server.port)  # a plain TCP client reaches it
                async with stream:
                    assert TCP.peer_name(stream) == f"{HOST}:{server.port}"
                nursery.cancel_scope.cancel()

        run(main)

    def test_networks_do_not_mix(self) -> None:
        async def main() -> None:
            memory_host = network().host(TS1)
            memory_listener = (await memory_host.open_listeners(TS1, 0))[0]
            with pytest.raises(TypeError, match="TcpNetwork did not open"):
                TCP.listener_address(memory_listener)
            tcp_listener = (await TCP.open_listeners(HOST, 0))[0]
            async with tcp_listener:
                with pytest.raises(TypeError, match="MemoryHost did not open"):
                    memory_host.listener_address(tcp_listener)

        run(main)


async def stream_pair(net: MemoryNetwork) -> tuple[MemoryStream, MemoryStream]:
    listener = (await net.host("b").open_listeners("b", 0))[0]
    client = await net.host("a").connect("b", net.host("b").listener_address(listener)[1])
    server = await listener.accept()
    await listener.aclose()  # accepted connections outlive their listener
    assert isinstance(client, MemoryStream) and isinstance(server, MemoryStream)
    return client, server


class TestMemoryStreamContract:
    """trio's own conformance checks for HalfCloseableStream, and reset semantics."""

    def test_trio_half_closeable_stream_checks(self) -> None:
        async def maker() -> tuple[trio.abc.HalfCloseableStream, trio.abc.HalfCloseableStream]:
            return await stream_pair(network())

        async def clogged() -> tuple[trio.abc.HalfCloseableStream,
                                     trio.abc.HalfCloseableStream]:
            net = network()
            client, server = await stream_pair(net)
            await client.send_all(b"x")
            await server.send_all(b"y")
            net.window = 0  # both directions now hold more than the window
            return client, server

        async def main() -> None:
            await trio.testing.check_half_closeable_stream(maker, clogged)

        run(main)

    def test_reset_discards_queued_data_on_both_ends(self) -> None:
        async def main() -> None:
            net = network()
            client, server = await stream_pair(net)
            await client.send_all(b"queued")
            net.kill("a")
            for end in (client, server):
                assert end.broken
                with pytest.raises(trio.BrokenResourceError, match="host a killed"):
                    await end.receive_some()
                with pytest.raises(trio.BrokenResourceError):
                    await end.send_all(b"more")
                await end.aclose()  # closing a broken stream is fine
            assert net.connections == []

        run_mock(main)

    def test_window_blocks_a_sender_until_the_receiver_reads(self) -> None:
        async def main() -> None:
            net = network(window=10)
            client, server = await stream_pair(net)
            with trio.move_on_after(5) as blocked:
                await client.send_all(b"x" * 11)  # over the window: waits for the reader
            assert blocked.cancelled_caught
            assert await server.receive_some(100) == b"x" * 11  # the data was queued
            await client.send_all(b"y" * 10)  # at the window: returns at once
            assert await server.receive_some(4) == b"yyyy"

        run_mock(main)


class TestMemoryListener:
    """Listeners: addresses, closing, and what a kill leaves behind."""

    def test_closing_a_listener_resets_connections_not_yet_accepted(self) -> None:
        async def main() -> None:
            net = network()
            server_host = net.host(TS1)
            listener = (await server_host.open_listeners(TS1, 7050))[0]
            client = await net.host(CLIENT).connect(TS1, 7050)  # queued, never accepted
            await listener.aclose()
            with pytest.raises(trio.BrokenResourceError, match="listener closed"):
                await client.receive_some()
            with pytest.raises(trio.ClosedResourceError):
                await listener.accept()
            with pytest.raises(ConnectionRefusedError):
                await net.host(CLIENT).connect(TS1, 7050)
            again = (await server_host.open_listeners(TS1, 7050))[0]  # the port is free
            assert server_host.listener_address(again) == (TS1, 7050)

        run_mock(main)

    def test_killed_listener_accepts_nothing_and_frees_its_address(self) -> None:
        async def main() -> None:
            net = network()
            old: MemoryHost = net.host(TS1)
            listener = (await old.open_listeners(TS1, 7050))[0]
            net.kill(TS1)
            with trio.move_on_after(60) as scope:
                await listener.accept()
            assert scope.cancelled_caught
            with pytest.raises(OSError) as dead:
                await old.open_listeners(TS1, 7051)
            assert dead.value.errno == errno.ENETDOWN
            successor = net.host(TS1)
            assert successor.alive and successor.incarnation == old.incarnation + 1
            await successor.open_listeners(TS1, 7050)
            await listener.aclose()  # the dead one's close does not unbind its successor
            assert net.listening == [(TS1, 7050)]

        run_mock(main)


class TestConfiguration:
    """Bad configuration is refused at once, with a message naming it."""

    def test_link_faults_validated(self) -> None:
        with pytest.raises(ValueError, match="drop_probability"):
            LinkFaults(drop_probability=1.5)
        with pytest.raises(ValueError, match="delay"):
            LinkFaults(delay=-1)
        with pytest.raises(ValueError, match="delay"):
            LinkFaults(delay=float("inf"))
        assert LinkFaults(drop_probability=1, delay=0) == LinkFaults(1.0, 0.0)

    def test_network_needs_an_injected_rng(self) -> None:
        with pytest.raises(TypeError, match=r"random\.Random"):
            MemoryNetwork(7)  # type: ignore[arg-type]
        with pytest.raises(ValueError):
            network().host("bad:name")
        assert isinstance(MemoryNetwork(random.Random(1)).host(TS1), MemoryHost)
