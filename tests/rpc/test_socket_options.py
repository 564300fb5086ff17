"""Every RPC socket, client and server side, carries the dead-peer bounds (issue 32):
TCP_USER_TIMEOUT and keepalive (impl/rpc/transport.py, "Dead peers on TCP")."""

from __future__ import annotations

import socket

import pytest
import trio

from revivify.impl.rpc import transport
from revivify.impl.rpc.transport import TCP, socket_options

pytestmark = pytest.mark.skipif(not hasattr(socket, "TCP_USER_TIMEOUT"),
                                reason="TCP_USER_TIMEOUT is Linux's")

EXPECTED = {
    (socket.SOL_SOCKET, socket.SO_KEEPALIVE): 1,
    (socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT): transport.TCP_USER_TIMEOUT_MS,
    (socket.IPPROTO_TCP, socket.TCP_KEEPIDLE): transport.TCP_KEEPIDLE_S,
    (socket.IPPROTO_TCP, socket.TCP_KEEPINTVL): transport.TCP_KEEPINTVL_S,
    (socket.IPPROTO_TCP, socket.TCP_KEEPCNT): transport.TCP_KEEPCNT,
}


def _options(sock: trio.socket.SocketType) -> dict[tuple[int, int], int]:
    return {(level, option): sock.getsockopt(level, option) for level, option in EXPECTED}


def test_the_options_are_the_documented_ones() -> None:
    assert {(level, option): value for level, option, value in socket_options()} == EXPECTED
    # a dead connection, busy or idle, is closed within about 11 s (the docstring's claim)
    assert transport.TCP_USER_TIMEOUT_MS <= 10_000
    assert transport.TCP_KEEPIDLE_S + transport.TCP_KEEPINTVL_S * transport.TCP_KEEPCNT <= 11


def test_client_and_accepted_sockets_are_tuned() -> None:
    async def main() -> None:
        listeners = await TCP.open_listeners("127.0.0.1", 0)
        listener = listeners[0]
        assert isinstance(listener, trio.SocketListener)
        _, port = TCP.listener_address(listener)
        accepted: list[trio.SocketStream] = []
        async with trio.open_nursery() as nursery:
            async def accept() -> None:
                stream = await listener.accept()
                assert isinstance(stream, trio.SocketStream)
                accepted.append(stream)

            nursery.start_soon(accept)
            client = await TCP.connect("127.0.0.1", port)
        assert isinstance(client, trio.SocketStream)
        assert _options(client.socket) == EXPECTED
        assert _options(accepted[0].socket) == EXPECTED  # inherited from the listener
        # (a plain socket has none of them: the assertions above can fail)
        with trio.socket.socket() as plain:
            assert _options(plain) != EXPECTED
        await client.aclose()
        await accepted[0].aclose()
        await listener.aclose()

    trio.run(main)
