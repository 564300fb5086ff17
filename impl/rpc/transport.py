"""The transport seam: where the RPC shells get their byte streams from.

`serve_rpc` and `open_rpc_client` never touch sockets themselves: they ask a Network for
listeners and connections, and speak to whatever trio.abc.Stream comes back. Two networks
implement the protocol:

    TcpNetwork      real TCP (trio.open_tcp_stream / trio.open_tcp_listeners); the default,
                    and exactly the behaviour the shells had before the seam existed
    MemoryHost      one node's view of a MemoryNetwork (revivify.impl.testing, a test
                    double): in-memory streams with partitions, drops, delays and
                    crashes, deterministic under MockClock

This is the rule of injected nondeterminism (docs/sources.md): the network is a seam (TCP,
or in-memory with partitions and drops), so the same server code runs for real and inside
deterministic tests, and only the `network=` argument differs.

The contract every Network keeps (the shells rely on nothing else):

* Addresses are (host, port) pairs. What a host name means is the network's business (an
  IP address or DNS name for TCP, a node name for a MemoryNetwork); port 0 asks the network
  to pick a free port, which `listener_address` then reports.
* `connect` returns a connected stream, or raises OSError (ConnectionRefusedError when
  nothing listens there, another OSError when the host cannot be reached). The client turns
  every OSError into ConnectFailed: "nothing was sent".
* `open_listeners` returns one or more listeners whose `accept` yields streams, or raises
  OSError (address in use, address not on this host). The server runs them with
  trio.serve_listeners and closes them when it stops.
* Streams are trio.abc.Stream: a broken connection raises trio.BrokenResourceError, an end
  of stream reads as b"". Streams that are trio.abc.HalfCloseableStream let a client
  half-close; the server does not need that.
* `listener_address` and `peer_name` only describe things, for RpcServer.addresses and for
  log lines; they never fail on a stream or listener the network itself made.
"""

from __future__ import annotations

from typing import Protocol, TypeAlias

import trio

Address: TypeAlias = tuple[str, int]
"""(host, port): where a server listens, or where a client connects."""


class Network(Protocol):
    """Where streams come from: TcpNetwork, or one host of a MemoryNetwork."""

    async def connect(self, host: str, port: int) -> trio.abc.Stream:
        """A stream connected to host:port; OSError if there is none to be had."""
        ...

    async def open_listeners(
        self, host: str, port: int
    ) -> list[trio.abc.Listener[trio.abc.Stream]]:
        """Listeners on host:port (port 0: the network picks); OSError if impossible."""
        ...

    def listener_address(self, listener: trio.abc.Listener[trio.abc.Stream]) -> Address:
        """The (host, port) a listener this network opened is bound to."""
        ...

    def peer_name(self, stream: trio.abc.Stream) -> str:
        """The remote end of a stream, as "host:port", for log lines."""
        ...


class TcpNetwork:
    """Real TCP through trio's high-level networking: the default Network."""

    async def connect(self, host: str, port: int) -> trio.abc.Stream:
        return await trio.open_tcp_stream(host, port)

    async def open_listeners(
        self, host: str, port: int
    ) -> list[trio.abc.Listener[trio.abc.Stream]]:
        listeners: list[trio.abc.Listener[trio.abc.Stream]] = list(
            await trio.open_tcp_listeners(port, host=host))
        return listeners

    def listener_address(self, listener: trio.abc.Listener[trio.abc.Stream]) -> Address:
        if not isinstance(listener, trio.SocketListener):
            raise TypeError(f"TcpNetwork did not open {listener!r}")
        name = listener.socket.getsockname()
        return (str(name[0]), int(name[1]))

    def peer_name(self, stream: trio.abc.Stream) -> str:
        if not isinstance(stream, trio.SocketStream):
            return f"<{type(stream).__name__}>"
        try:
            host, port = stream.socket.getpeername()[:2]
        except OSError:
            return "<disconnected peer>"
        return f"{host}:{port}"

    def __repr__(self) -> str:
        return "TcpNetwork()"


TCP = TcpNetwork()
"""The network `serve_rpc` and `open_rpc_client` use when given none."""
