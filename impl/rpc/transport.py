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

Dead peers on TCP (issue 32). A TCP connection whose packets are being dropped (a cut
network, a partition healed later) is not closed by the kernel for about 15 minutes
(``tcp_retries2``), and its retransmissions back off up to 120 s: after the path heals,
nothing flows until the next retransmission. An idle connection to a vanished host is never
noticed at all. So every RPC socket, client and server side alike, gets (`tune_socket`):

    TCP_USER_TIMEOUT  10 s   data sent and not acknowledged for this long: the kernel
                             aborts the connection (the caller sees a broken stream)
    SO_KEEPALIVE      on     an idle connection is probed ...
    TCP_KEEPIDLE      5 s    ... after this long without traffic,
    TCP_KEEPINTVL     2 s    ... every this often,
    TCP_KEEPCNT       3      ... and dropped after this many unanswered probes (and, since
                             TCP_USER_TIMEOUT is set, once 10 s pass with a probe unanswered)

so a dead connection, busy or idle, is closed within about 11 s. These are backstops: they
bound what nobody above watches (a server's answer to a vanished client, a heartbeat
connection). The links that matter for availability watch themselves and are much
quicker: the Raft peer links (impl/tserver/server.py, PeerSender, "Link liveness") and the
clients' connections (impl/client/connections.py). Server-side sockets get them from their
listening socket: Linux copies a listener's socket options to every socket it accepts
(tests/rpc/test_socket_options.py checks that it does).
"""

from __future__ import annotations

import contextlib
import socket
from typing import Final, Protocol, TypeAlias

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


TCP_USER_TIMEOUT_MS: Final = 10_000
TCP_KEEPIDLE_S: Final = 5
TCP_KEEPINTVL_S: Final = 2
TCP_KEEPCNT: Final = 3


def socket_options() -> list[tuple[int, int, int]]:
    """(level, option, value) of every option `tune_socket` sets (module docstring); the
    ones this platform lacks are left out (TCP_USER_TIMEOUT and TCP_KEEP* are Linux's)."""
    wanted: list[tuple[int, str, int]] = [
        (socket.SOL_SOCKET, "SO_KEEPALIVE", 1),
        (socket.IPPROTO_TCP, "TCP_KEEPIDLE", TCP_KEEPIDLE_S),
        (socket.IPPROTO_TCP, "TCP_KEEPINTVL", TCP_KEEPINTVL_S),
        (socket.IPPROTO_TCP, "TCP_KEEPCNT", TCP_KEEPCNT),
        (socket.IPPROTO_TCP, "TCP_USER_TIMEOUT", TCP_USER_TIMEOUT_MS),
    ]
    return [(level, getattr(socket, name), value) for level, name, value in wanted
            if hasattr(socket, name)]


def tune_socket(sock: trio.socket.SocketType) -> None:
    """Bound how long a dead TCP peer goes unnoticed (module docstring). An option the
    socket refuses (not TCP: a Unix socket in a test) is skipped: best effort."""
    for level, option, value in socket_options():
        with contextlib.suppress(OSError):
            sock.setsockopt(level, option, value)


class TcpNetwork:
    """Real TCP through trio's high-level networking: the default Network."""

    async def connect(self, host: str, port: int) -> trio.abc.Stream:
        stream = await trio.open_tcp_stream(host, port)
        tune_socket(stream.socket)
        return stream

    async def open_listeners(
        self, host: str, port: int
    ) -> list[trio.abc.Listener[trio.abc.Stream]]:
        listeners: list[trio.abc.Listener[trio.abc.Stream]] = []
        for listener in await trio.open_tcp_listeners(port, host=host):
            tune_socket(listener.socket)  # every accepted socket inherits them (Linux)
            listeners.append(listener)
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
