"""The RPC server: the trio shell around framing, codec and Service.dispatch.

`serve_rpc` is a trio ``serve_*`` function: run it with ``await nursery.start(serve_rpc,
...)``, which returns an RpcServer (where it listens; a graceful shutdown); it serves until
cancelled, or until `RpcServer.shutdown()` has drained it. It takes no timeouts: callers
bound anything with cancel scopes. Its listeners come from a Network (transport.py): real
TCP by default, or one host of an in-memory MemoryNetwork (``network=net.host("ts-1")``,
from revivify.impl.testing); nothing below depends on which.

One task per connection reads frames and hands each request to a task of its own in the
connection's nursery, so calls on one connection run concurrently and finish in any order
(a cast, a one-way request, runs in the reader itself: casts on a connection run in order);
responses share the socket under a lock (one whole frame at a time). What goes wrong stays
as small as it can:

    problem                                     answer                     connection
    dest_uuid is another server's               WrongServerUuid            stays open
    method not in the Service                   UnknownMethod              stays open
    body (or envelope) does not decode,
      but the call_id can be read               MalformedRequest(field)    stays open
    envelope without a readable call_id         none (nobody to answer)    closed
    framing broken (oversized length prefix,
      stream ends inside a frame)               none                       closed
    handler raises AppError / ServerShuttingDown  that error               stays open
    handler raises anything else                InternalError(type)        stays open
    response too large for a frame              InternalError              stays open
    a bug in this shell                         logged with traceback      closed

The server itself never stops because of one connection: every per-connection failure is
caught and logged at the connection's boundary. Bad input is logged at WARNING, handler
failures at ERROR with their traceback (in Service.dispatch), peers going away at DEBUG.

When the client closes the connection (end of stream between frames) the calls in flight
still run to completion, because a handler stopped halfway is worse than an answer nobody
reads; their responses are sent if the client only half-closed, and dropped otherwise. After
a framing error the socket is closed at once, and the calls in flight likewise finish.

Back-pressure: at most `max_concurrent_calls` handlers run per connection; beyond that the
connection's reader stops reading, and the transport's flow control (TCP's window, or a
MemoryNetwork's) slows the client down.

Graceful shutdown (`RpcServer.shutdown()`): stop accepting connections, answer every new
request with ServerShuttingDown (the call did not run: safe to retry elsewhere), let the
calls in flight finish and send their responses, then close every connection and return.
Cancelling serve_rpc instead is abrupt: handlers are cancelled and connections closed.

Lamport clocks: the server observes the stamp of every request whose envelope decodes (before
its handler runs, so anything the handler records is after it) and stamps every response with
the clock's value when it answers.
"""

from __future__ import annotations

import functools
import logging
import time

import attrs
import msgspec
import trio

from revivify.impl import faultfile
from revivify.impl.observe.metrics import OFF, RpcMetrics

from .codec import (
    NO_LAMPORT,
    LamportHooks,
    Request,
    Response,
    decode_request,
    encode_response,
    error_response,
    recover_call_id,
)
from .errors import (
    MalformedFrame,
    MalformedRequest,
    RpcError,
    ServerShuttingDown,
)
from .faults import dropped
from .framing import DEFAULT_MAX_FRAME_SIZE, FrameDecoder, encode_frame
from .service import Service, internal_error
from .transport import TCP, Address, Network

logger = logging.getLogger(__name__)

RECEIVE_SIZE = 64 * 1024
DEFAULT_MAX_CONCURRENT_CALLS = 128


@attrs.define(eq=False)
class RpcServer:
    """A running server: what `nursery.start(serve_rpc, ...)` returns."""

    server_uuid: str
    listeners: list[trio.abc.Listener[trio.abc.Stream]]
    _addresses: list[Address]
    _stop_requested: trio.Event = attrs.field(factory=trio.Event, init=False)
    _drained: trio.Event = attrs.field(factory=trio.Event, init=False)
    _active_calls: int = attrs.field(default=0, init=False)

    @property
    def port(self) -> int:
        """The port of the first listener (the only one for a numeric host)."""
        return self._addresses[0][1]

    @property
    def addresses(self) -> list[Address]:
        """(host, port) of every listener."""
        return list(self._addresses)

    @property
    def shutting_down(self) -> bool:
        return self._stop_requested.is_set()

    @property
    def active_calls(self) -> int:
        """Handlers running now, over every connection."""
        return self._active_calls

    def shutdown(self) -> None:
        """Begin a graceful shutdown (see the module docstring); serve_rpc returns when done."""
        if not self._stop_requested.is_set():
            logger.info("rpc server %s: shutting down (%d calls in flight)",
                        self.server_uuid, self._active_calls)
            self._stop_requested.set()
            self._check_drained()

    def _call_started(self) -> None:
        self._active_calls += 1

    def _call_finished(self) -> None:
        self._active_calls -= 1
        self._check_drained()

    def _check_drained(self) -> None:
        if self._stop_requested.is_set() and self._active_calls == 0:
            self._drained.set()


async def serve_rpc(
    service: Service,
    server_uuid: str,
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    lamport: LamportHooks | None = None,
    max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
    max_concurrent_calls: int = DEFAULT_MAX_CONCURRENT_CALLS,
    network: Network | None = None,
    metrics: RpcMetrics | None = None,
    task_status: trio.TaskStatus[RpcServer] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve `service` as server `server_uuid` on host:port (port 0: the network picks one).

    `network`: where the listeners come from; TCP when None (see transport.py).
    `metrics`: where calls are counted (impl/observe); a throwaway set when None.
    """
    if max_concurrent_calls < 1:
        raise ValueError(f"max_concurrent_calls must be at least 1, got {max_concurrent_calls}")
    hooks = NO_LAMPORT if lamport is None else lamport
    net = TCP if network is None else network
    counts = OFF.rpc if metrics is None else metrics
    listeners = await net.open_listeners(host, port)
    server = RpcServer(server_uuid, listeners,
                       [net.listener_address(listener) for listener in listeners])

    async def handle_connection(stream: trio.abc.Stream) -> None:
        connection = _Connection(server, service, stream, net.peer_name(stream), hooks,
                                 max_frame_size, max_concurrent_calls, counts)
        try:
            await connection.run()
        except Exception:
            logger.exception("rpc server %s: connection from %s failed; closed", server_uuid,
                             connection.peer)

    async with trio.open_nursery() as connections:
        async with trio.open_nursery() as accepting:
            await accepting.start(functools.partial(
                trio.serve_listeners, handle_connection, listeners,
                handler_nursery=connections))
            logger.info("rpc server %s (%s) listening on %s", server_uuid, service.name,
                        server.addresses)
            task_status.started(server)
            await server._stop_requested.wait()
            accepting.cancel_scope.cancel()  # closes the listeners
        await server._drained.wait()
        connections.cancel_scope.cancel()
    logger.info("rpc server %s: shut down", server_uuid)


class _Connection:
    """One accepted connection: a reader, and a task per call in flight."""

    def __init__(
        self,
        server: RpcServer,
        service: Service,
        stream: trio.abc.Stream,
        peer: str,
        lamport: LamportHooks,
        max_frame_size: int,
        max_concurrent_calls: int,
        metrics: RpcMetrics,
    ) -> None:
        self._server = server
        self._metrics = metrics
        self._known = service.methods  # a live view: a method registered later counts too
        self._service = service
        self._stream = stream
        self._lamport = lamport
        self._max_frame_size = max_frame_size
        self._slots = trio.Semaphore(max_concurrent_calls)
        self._outbox: list[bytes] = []  # encoded responses waiting for the sender
        self._sending = False
        self.peer = peer

    async def run(self) -> None:
        async with trio.open_nursery() as calls:
            if not await self._read_requests(calls):
                await trio.aclose_forcefully(self._stream)
        # Every call of this connection has finished; serve_listeners closes the stream.

    async def _read_requests(self, calls: trio.Nursery) -> bool:
        """Read until the stream ends (True) or must be closed at once (False)."""
        decoder = FrameDecoder(self._max_frame_size)
        while True:
            try:
                data = await self._stream.receive_some(RECEIVE_SIZE)
            except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                logger.debug("rpc connection from %s: receive failed: %r", self.peer, exc)
                return False
            try:
                if not data:
                    decoder.feed_eof()
                    return True
                payloads = decoder.feed(data)
            except MalformedFrame as exc:
                logger.warning("rpc connection from %s: %s; closing it", self.peer, exc)
                return False
            for payload in payloads:
                if not await self._accept(payload, calls):
                    return False

    async def _accept(self, payload: bytes, calls: trio.Nursery) -> bool:
        """Start (or answer at once) the request in `payload`; False: close the connection."""
        try:
            request = decode_request(payload)
        except MalformedRequest as exc:
            call_id = recover_call_id(payload)
            if call_id is None:
                logger.warning("rpc connection from %s: %s, and no call_id to answer; "
                               "closing it", self.peer, exc)
                return False
            logger.warning("rpc connection from %s: call %d: %s", self.peer, call_id, exc)
            await self._send(error_response(call_id, self._lamport.get(), exc), "?")
            return True
        if faultfile.ACTIVE is not None and dropped(self._server.server_uuid,
                                                   request.src_uuid):
            return True  # an injected partition (faults.py): this request never arrived
        self._lamport.observe(request.lamport)
        if self._server.shutting_down:
            refusal = ServerShuttingDown(self._server.server_uuid)
            await self._send(error_response(request.call_id, self._lamport.get(), refusal),
                             request.method)
            return True
        try:  # no checkpoint while a slot is free: the call starts in this same round
            self._slots.acquire_nowait()
        except trio.WouldBlock:
            await self._slots.acquire()  # back-pressure: stop reading until one frees
        self._server._call_started()
        if request.oneway:
            # A cast runs in the reader, before the next frame is read: casts on one
            # connection are handled one at a time, in the order they were sent (a Raft
            # link stays FIFO), and cost no task. A cast that blocks holds up its
            # connection's reading: back-pressure, as for a full set of slots.
            await self._run_call(request)
        else:
            calls.start_soon(self._run_call, request)
        return True

    async def _run_call(self, request: Request) -> None:
        started = time.perf_counter()
        try:
            response = await self._service.dispatch(
                request, server_uuid=self._server.server_uuid, lamport=self._lamport)
            self._count(request, response, time.perf_counter() - started)
            if request.oneway and response.ok:
                return  # a cast: only its failure is answered
            if faultfile.ACTIVE is not None and dropped(self._server.server_uuid,
                                                       request.src_uuid):
                return  # cut while it ran (faults.py): the answer is lost
            await self._send(response, request.method)
        finally:
            self._slots.release()
            self._server._call_finished()

    def _count(self, request: Request, response: Response, seconds: float) -> None:
        """One call served: its method's children (bound once per method) move. A method
        the service does not know is counted as "?" (refused as unknown, or for another
        server), so a client naming garbage cannot grow the series without bound."""
        m = self._metrics.method(request.method if request.method in self._known else "?")
        m.latency.observe(seconds)
        (m.ok if response.ok else m.status(response.error_code)).inc()

    async def _send(self, response: Response, method: str) -> None:
        """Queue the response; the first sender drains the queue, so responses that finish
        while a send is in progress go out together in the next one (coalescing)."""
        self._outbox.append(self._encode(response, method))
        if self._sending:
            return  # the task sending now picks it up before it stops
        self._sending = True
        try:
            while self._outbox:
                data = b"".join(self._outbox)
                self._outbox.clear()
                try:
                    await self._stream.send_all(data)
                except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                    logger.debug("rpc connection from %s: responses dropped (last: call %d): "
                                 "%r", self.peer, response.call_id, exc)
                    self._outbox.clear()
        finally:
            self._sending = False

    def _encode(self, response: Response, method: str) -> bytes:
        try:
            return encode_frame(encode_response(response), self._max_frame_size)
        except (RpcError, msgspec.MsgspecError, TypeError, ValueError, OverflowError) as exc:
            # A response that cannot be sent (too large, or error data that does not
            # encode) is the server's fault: the caller gets InternalError instead.
            logger.error("rpc connection from %s: response to call %d of %r unsendable: %r",
                         self.peer, response.call_id, method, exc)
            fallback = error_response(response.call_id, response.lamport,
                                      internal_error(method, exc))
            return encode_frame(encode_response(fallback), self._max_frame_size)
