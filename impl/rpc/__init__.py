"""RPC: length-prefixed msgpack frames over a stream transport (TCP, or an in-memory network
for deterministic tests), addressed by server UUID, with typed errors.

The in-memory network (MemoryNetwork, MemoryHost, LinkFaults, ...) is a test double and
lives in revivify.impl.testing; this package never imports it (production code never imports
test support; an import-linter contract in `make lint` enforces it). It builds only on
the transport seam below (Network, Address).

Theory of operation
-------------------
Layers, bottom up; only the shells and the transports import trio (the h11 "sans-I/O"
shape):

    framing   bytes <-> frames: 4-byte big-endian length + payload, bounded size    no I/O
    codec     frames <-> Request / Response envelopes (msgspec msgpack), errors    no I/O
    service   the method table, and dispatch: destination, method, body, handler   no I/O
    transport the Network seam: connect / open_listeners; TcpNetwork (default)    trio
    server    serve_rpc: accept, read frames, a task per call, write responses     trio
    client    open_rpc_client: one connection, calls multiplexed by call_id        trio

Beside them, two small helpers every caller of RPC shares: `address` (the one "HOST:PORT"
parser, BadAddress naming what is wrong) and `backoff` (the one retry delay schedule,
capped exponential with jitter from an injected random.Random). Neither imports trio.

Both shells take ``network=``: None means real TCP; ``net.host("ts-1")`` of a
MemoryNetwork(random.Random(seed)) (revivify.impl.testing) runs the same code without
sockets, under trio.testing.MockClock, with faults the test injects (see
revivify.impl.testing.memnet).

A call: the client wraps the method's request Struct in a Request envelope (call_id,
method, dest_uuid, src_uuid, Lamport stamp) and sends it as one frame. The server refuses
it unless dest_uuid is its own UUID (WrongServerUuid), looks up the method (UnknownMethod),
decodes the body strictly into the method's request type (MalformedRequest naming the
field), and runs the handler; the Response carries the same call_id and either the response
Struct or an error (code, message, data), which the client raises as the registered error
type. Calls on one connection run concurrently and complete in any order.

Invariants:

* No handler ever sees a request addressed to another server, or a body of the wrong type.
* Bad input never stops a server: a bad call gets an error response and its connection
  stays open; a broken byte stream closes that connection only; a handler bug becomes an
  InternalError response naming the exception type.
* No unbounded memory from the peer: frames are capped (16 MiB by default) before any payload
  is buffered, and a connection runs at most `max_concurrent_calls` handlers at once.
* No timeouts in any signature: callers bound calls, servers and connections with trio
  cancel scopes.
* Every message carries its sender's Lamport clock; both sides merge what they receive
  through injected LamportHooks (for example ``LamportHooks(get=lambda: writer.lamport,
  observe=writer.observe)`` for a trace writer).

Example::

    class Ping(msgspec.Struct):
        n: int

    service = Service("example")
    async def ping(request: Ping, context: CallContext) -> Ping:
        return Ping(request.n + 1)
    service.register("Ping", Ping, Ping, ping)

    async with trio.open_nursery() as nursery:
        server = await nursery.start(serve_rpc, service, "server-uuid")
        async with open_rpc_client("127.0.0.1", server.port, "server-uuid", "me") as client:
            assert (await client.call("Ping", Ping(1), Ping)).n == 2
        nursery.cancel_scope.cancel()

The same, without sockets, deterministic under ``trio.run(main,
clock=trio.testing.MockClock(autojump_threshold=0))``, with a partition::

    from revivify.impl.testing import MemoryNetwork

    net = MemoryNetwork(random.Random(seed))
    async with trio.open_nursery() as nursery:
        await nursery.start(functools.partial(
            serve_rpc, service, "server-uuid", "ts-1", 7050, network=net.host("ts-1")))
        async with open_rpc_client("ts-1", 7050, "server-uuid", "me",
                                   network=net.host("client")) as client:
            assert (await client.call("Ping", Ping(1), Ping)).n == 2
            net.partition(["client"], ["ts-1"])  # the connection breaks: ConnectionClosed
        nursery.cancel_scope.cancel()
"""

from typing import TYPE_CHECKING

from revivify.impl.lazy import lazy_exports

if TYPE_CHECKING:
    from .address import BadAddress, format_address, parse_address
    from .backoff import Backoff
    from .client import RpcClient, open_rpc_client
    from .codec import NO_LAMPORT, LamportHooks, Request, Response
    from .errors import (
        AppError,
        ConnectFailed,
        ConnectionClosed,
        FrameTooLarge,
        InternalError,
        MalformedFrame,
        MalformedRequest,
        MalformedResponse,
        RemoteError,
        RpcError,
        ServerShuttingDown,
        UnknownMethod,
        WrongServerUuid,
    )
    from .framing import DEFAULT_MAX_FRAME_SIZE, FrameDecoder, encode_frame
    from .server import RpcServer, serve_rpc
    from .service import CallContext, MethodSpec, Service
    from .transport import TCP, Address, Network, TcpNetwork

# Re-exports are lazy: importing one light submodule (framing, codec, address: no trio) must
# not load the trio shells, so that the CLI's one-shot caller (impl/cli/oneshot.py) starts
# without trio.
_SUBMODULE_OF: dict[str, str] = {
    "Address": "transport",
    "AppError": "errors",
    "Backoff": "backoff",
    "BadAddress": "address",
    "CallContext": "service",
    "ConnectFailed": "errors",
    "ConnectionClosed": "errors",
    "DEFAULT_MAX_FRAME_SIZE": "framing",
    "FrameDecoder": "framing",
    "FrameTooLarge": "errors",
    "InternalError": "errors",
    "LamportHooks": "codec",
    "MalformedFrame": "errors",
    "MalformedRequest": "errors",
    "MalformedResponse": "errors",
    "MethodSpec": "service",
    "NO_LAMPORT": "codec",
    "Network": "transport",
    "RemoteError": "errors",
    "Request": "codec",
    "Response": "codec",
    "RpcClient": "client",
    "RpcError": "errors",
    "RpcServer": "server",
    "ServerShuttingDown": "errors",
    "Service": "service",
    "TCP": "transport",
    "TcpNetwork": "transport",
    "UnknownMethod": "errors",
    "WrongServerUuid": "errors",
    "encode_frame": "framing",
    "format_address": "address",
    "open_rpc_client": "client",
    "parse_address": "address",
    "serve_rpc": "server",
}


__getattr__ = lazy_exports(__name__, _SUBMODULE_OF, globals())

__all__ = [
    "DEFAULT_MAX_FRAME_SIZE",
    "NO_LAMPORT",
    "TCP",
    "Address",
    "AppError",
    "Backoff",
    "BadAddress",
    "CallContext",
    "ConnectFailed",
    "ConnectionClosed",
    "FrameDecoder",
    "FrameTooLarge",
    "InternalError",
    "LamportHooks",
    "MalformedFrame",
    "MalformedRequest",
    "MalformedResponse",
    "MethodSpec",
    "Network",
    "RemoteError",
    "Request",
    "Response",
    "RpcClient",
    "RpcError",
    "RpcServer",
    "ServerShuttingDown",
    "Service",
    "TcpNetwork",
    "UnknownMethod",
    "WrongServerUuid",
    "encode_frame",
    "format_address",
    "open_rpc_client",
    "parse_address",
    "serve_rpc",
]
