"""The RPC client: one connection to one server, many concurrent calls on it.

``async with open_rpc_client(host, port, dest_uuid, src_uuid) as client:`` connects, and
``await client.call(method, request, ResponseType)`` returns the decoded response or raises
the error the server answered with (rebuilt as its registered type). There are no timeout
parameters: bound a call with ``trio.move_on_after`` / ``trio.fail_after`` around it. The
connection comes from a Network (transport.py): TCP by default, or a MemoryNetwork host
(``network=net.host("client-1")``, revivify.impl.testing) in deterministic tests.

Theory of operation. Each call takes the next call_id, registers a waiter under it and hands
its frame to the connection's writer task through a bounded channel; the reader task
decodes each response, merges its Lamport stamp, and wakes the waiter registered under its
call_id. Calls therefore complete in whatever order the server answers them.

Casts (``cast_nowait``, ``cast``): a one-way call for messages whose success answer would
say nothing (Raft messages: the reply is a message of its own). The request carries
``oneway``; the server answers it only when it fails, so a cast costs one frame and one
wake-up of each side instead of two. A cast takes its call_id from a separate, negative
sequence, so an error answering one is told apart from a late answer to a cancelled call:
it goes to the client's ``on_cast_error`` (the error rebuilt as for a call). A cast does not
wait for the writer: its frame joins a bounded queue (``MAX_QUEUED_FRAMES``; beyond it
``cast_nowait`` raises trio.WouldBlock and ``cast`` waits), and the writer sends every frame
queued by then in one ``send_all``.

The direct write: on a TCP connection, a frame handed over while the writer holds nothing
(no frame queued, none being sent: ``_unsent`` counts frames from their queueing to the end
of their ``send_all``) is written to the socket at once, without blocking, by the caller;
only what the socket did not take is queued, and it goes first, so frames leave in the
order they were handed over. That saves the writer task's scheduling round on every frame
of a quiet link (a Raft append or its answer, one per write at one client), and the
caller's own task needs no checkpoint for it.

Why a writer task rather than a lock around ``send_all``: trio leaves a stream in an unknown
state when ``send_all`` is cancelled halfway, so a caller's timeout during a send would
corrupt the framing for every other call. Here a frame is either handed to the writer whole
(and the writer, which is never cancelled on its own, sends all of it) or not at all.
A call cancelled after its frame left only stops waiting: the server may still run it, and
its late response is dropped on arrival.

Connection loss (end of stream, reset, or a server that breaks the protocol) closes the
client: every pending call and every later call raises ConnectionClosed(reason), which means
"may or may not have run". Connecting raises ConnectFailed ("not sent"). A response whose
body does not decode into the caller's type raises MalformedResponse to that caller only.
Leaving the ``async with`` block closes the connection; calls still pending then raise
ConnectionClosed.
"""

from __future__ import annotations

import itertools
import logging
import os
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from typing import TypeVar

import msgspec
import trio

from revivify.impl import faultfile

from .codec import (
    NO_LAMPORT,
    ErrorRegistry,
    LamportHooks,
    Request,
    Response,
    decode_response,
    decode_response_body,
    encode_body,
    encode_request,
    error_from_response,
    error_registry,
)
from .errors import AppError, ConnectFailed, ConnectionClosed, MalformedFrame, MalformedResponse
from .faults import dropped
from .framing import DEFAULT_MAX_FRAME_SIZE, FrameDecoder, encode_frame
from .transport import TCP, Network

logger = logging.getLogger(__name__)

ResponseT = TypeVar("ResponseT")

RECEIVE_SIZE = 64 * 1024
# Frames queued for the writer at most (calls and casts): beyond, a caller waits (``call``,
# ``cast``) or is told to (``cast_nowait`` raises trio.WouldBlock).
MAX_QUEUED_FRAMES = 1024

CastErrorHandler = Callable[[BaseException], None]


def _log_cast_error(error: BaseException) -> None:
    logger.debug("rpc client: a cast failed: %r", error)


class _Waiter:
    """One call in flight: resolved with a Response, or failed with ConnectionClosed."""

    def __init__(self) -> None:
        self.done = trio.Event()
        self.response: Response | None = None
        self.error: ConnectionClosed | None = None


class RpcClient:
    """A connection to server `dest_uuid`; use `open_rpc_client` to make one."""

    def __init__(
        self,
        stream: trio.abc.Stream,
        dest_uuid: str,
        src_uuid: str,
        *,
        lamport: LamportHooks,
        errors: ErrorRegistry,
        max_frame_size: int,
        on_cast_error: CastErrorHandler = _log_cast_error,
    ) -> None:
        self.dest_uuid = dest_uuid
        self.src_uuid = src_uuid
        self._stream = stream
        self._lamport = lamport
        self._errors = errors
        self._max_frame_size = max_frame_size
        self._call_ids = itertools.count(1)
        self._cast_ids = itertools.count(-1, -1)  # negative: see "Casts" above
        self._on_cast_error = on_cast_error
        self._pending: dict[int, _Waiter] = {}
        self._outgoing, self._to_write = trio.open_memory_channel[bytes](MAX_QUEUED_FRAMES)
        self._unsent = 0  # frames queued for the writer and not yet sent ("direct write")
        # (the socket itself, asked for its descriptor at each write: -1 once closed, so a
        # number the kernel gave to another file since is never written to)
        self._socket = stream.socket if isinstance(stream, trio.SocketStream) else None
        self._background = trio.CancelScope()
        self._close_reason: str | None = None
        # How many reads brought bytes from the server: a caller watching the link's
        # liveness compares it before and after a call (impl/client/connections.py).
        self.receipts = 0

    @property
    def closed(self) -> bool:
        return self._close_reason is not None

    @property
    def pending_calls(self) -> int:
        return len(self._pending)

    def abort(self, reason: str) -> None:
        """Close the connection now: a caller judged it dead (no answer in time). Every
        pending and later call raises ConnectionClosed(reason), as on a lost connection."""
        self._close(reason)

    async def call(
        self, method: str, request: msgspec.Struct, response_type: type[ResponseT]
    ) -> ResponseT:
        """Call `method` with `request`; the response decoded as `response_type`."""
        if self._close_reason is not None:
            raise ConnectionClosed(self._close_reason)
        call_id = next(self._call_ids)
        envelope = Request(
            call_id=call_id,
            method=method,
            dest_uuid=self.dest_uuid,
            src_uuid=self.src_uuid,
            lamport=self._lamport.get(),
            body=encode_body(request),
        )
        frame = encode_frame(encode_request(envelope), self._max_frame_size)
        waiter = _Waiter()
        self._pending[call_id] = waiter
        try:
            if faultfile.ACTIVE is None or not dropped(self.src_uuid, self.dest_uuid):
                try:
                    try:  # queued without a checkpoint while there is room (the usual case)
                        self._hand_over(frame)
                    except trio.WouldBlock:
                        await self._hand_over_waiting(frame)
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    raise ConnectionClosed(self._close_reason or "writer stopped") from None
            # else an injected partition (faults.py) lost the frame: the call waits for an
            # answer that never comes, until its caller gives up (or the connection closes).
            await waiter.done.wait()
        finally:
            self._pending.pop(call_id, None)
        if waiter.error is not None:
            raise waiter.error
        response = waiter.response
        assert response is not None  # done is set only after one of the two
        if not response.ok:
            raise error_from_response(response, self._errors)
        return decode_response_body(response, response_type, method)

    def cast_nowait(self, method: str, request: msgspec.Struct) -> None:
        """Queue a one-way call of `method` now (no response unless it fails: see "Casts").
        Raises trio.WouldBlock when MAX_QUEUED_FRAMES frames wait already, ConnectionClosed
        once the connection is lost (the frame may or may not have been delivered)."""
        if self._close_reason is not None:
            raise ConnectionClosed(self._close_reason)
        frame = self._cast_frame(method, request)
        if faultfile.ACTIVE is not None and dropped(self.src_uuid, self.dest_uuid):
            return  # lost to an injected partition (faults.py)
        try:
            self._hand_over(frame)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            raise ConnectionClosed(self._close_reason or "writer stopped") from None

    def _hand_over(self, frame: bytes) -> None:
        """Write ``frame`` to the socket now if the writer holds nothing (the module's
        "direct write"), queueing what the socket did not take; else queue it. Raises
        trio.WouldBlock when the queue is full (nothing was written then)."""
        fd = self._socket.fileno() if self._socket is not None else -1
        if self._unsent == 0 and fd >= 0 and self._close_reason is None:
            try:
                written = os.write(fd, frame)
            except OSError:
                written = 0  # full (EAGAIN), or broken: the writer's send_all finds out
            if written == len(frame):
                return
            frame = frame[written:]
        self._outgoing.send_nowait(frame)
        self._unsent += 1

    async def _hand_over_waiting(self, frame: bytes) -> None:
        """Queue ``frame``, waiting for room. Counted before the wait: a frame delivered
        to the channel is never overtaken by a direct write; one not delivered (the wait
        cancelled, the channel closed) is not counted."""
        self._unsent += 1
        try:
            await self._outgoing.send(frame)
        except BaseException:
            self._unsent -= 1
            raise

    async def cast(self, method: str, request: msgspec.Struct) -> None:
        """`cast_nowait`, waiting for room in the queue instead of raising WouldBlock."""
        if self._close_reason is not None:
            raise ConnectionClosed(self._close_reason)
        frame = self._cast_frame(method, request)
        if faultfile.ACTIVE is not None and dropped(self.src_uuid, self.dest_uuid):
            await trio.lowlevel.checkpoint()
            return  # lost to an injected partition (faults.py)
        try:
            await self._hand_over_waiting(frame)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            raise ConnectionClosed(self._close_reason or "writer stopped") from None

    def _cast_frame(self, method: str, request: msgspec.Struct) -> bytes:
        # Stamped now: whatever the caller recorded before casting is before this frame.
        envelope = Request(call_id=next(self._cast_ids), method=method,
                           dest_uuid=self.dest_uuid, src_uuid=self.src_uuid,
                           lamport=self._lamport.get(), body=encode_body(request), oneway=True)
        return encode_frame(encode_request(envelope), self._max_frame_size)

    # ------------------------------------------------------------------ background tasks

    async def _run(self) -> None:
        with self._background:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._read_responses)
                nursery.start_soon(self._write_requests)

    async def _write_requests(self) -> None:
        try:
            async for frame in self._to_write:
                # Coalesce: every frame queued meanwhile goes out in the same send (one
                # syscall and one wake-up of the peer instead of one per call).
                frames = [frame]
                while True:
                    try:
                        frames.append(self._to_write.receive_nowait())
                    except (trio.WouldBlock, trio.EndOfChannel):
                        break
                try:
                    await self._stream.send_all(frames[0] if len(frames) == 1
                                                else b"".join(frames))
                except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                    self._close(f"send failed: {exc!r}")
                    return
                self._unsent -= len(frames)
        except trio.ClosedResourceError:
            return  # _close closed the channel under us: the client is closing

    async def _read_responses(self) -> None:
        decoder = FrameDecoder(self._max_frame_size)
        while True:
            try:
                data = await self._stream.receive_some(RECEIVE_SIZE)
            except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                self._close(f"receive failed: {exc!r}")
                return
            self.receipts += 1
            try:
                if not data:
                    decoder.feed_eof()
                    self._close("server closed the connection")
                    return
                for payload in decoder.feed(data):
                    self._deliver(decode_response(payload))
            except (MalformedFrame, MalformedResponse) as exc:
                logger.warning("rpc client to %s: protocol error from server: %s",
                               self.dest_uuid, exc)
                self._close(f"protocol error from server: {exc}")
                return

    def _deliver(self, response: Response) -> None:
        if faultfile.ACTIVE is not None and dropped(self.src_uuid, self.dest_uuid):
            return  # lost to an injected partition (faults.py)
        self._lamport.observe(response.lamport)
        if response.call_id < 0:  # a cast failed (a cast that succeeds is not answered)
            error: BaseException = (error_from_response(response, self._errors)
                                    if not response.ok else MalformedResponse(
                                        f"success answer to cast {response.call_id}",
                                        "envelope.ok"))
            self._on_cast_error(error)
            return
        waiter = self._pending.pop(response.call_id, None)
        if waiter is None:  # its caller was cancelled (or the id is bogus): nobody waits
            logger.debug("rpc client to %s: response to call %d has no waiter; dropped",
                         self.dest_uuid, response.call_id)
            return
        waiter.response = response
        waiter.done.set()

    def _close(self, reason: str) -> None:
        """Fail every pending call and stop the background tasks (idempotent)."""
        if self._close_reason is not None:
            return
        self._close_reason = reason
        logger.debug("rpc client to %s: closed: %s", self.dest_uuid, reason)
        error = ConnectionClosed(reason)
        for waiter in self._pending.values():
            if not waiter.done.is_set():
                waiter.error = error
                waiter.done.set()
        self._pending.clear()
        self._to_write.close()  # callers blocked handing over a frame get BrokenResourceError
        self._background.cancel()


@asynccontextmanager
async def open_rpc_client(
    host: str,
    port: int,
    dest_uuid: str,
    src_uuid: str,
    *,
    lamport: LamportHooks | None = None,
    app_errors: Iterable[type[AppError]] = (),
    max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
    network: Network | None = None,
    on_cast_error: CastErrorHandler = _log_cast_error,
) -> AsyncIterator[RpcClient]:
    """Connect to server `dest_uuid` at host:port, as `src_uuid` (see the module docstring).

    `app_errors`: the AppError subclasses to rebuild from error responses (others arrive as
    RemoteError). `lamport`: hooks to the caller's Lamport clock. `network`: where the
    connection comes from; TCP when None (see transport.py). `on_cast_error`: called with
    the error that answers a failed cast (see "Casts" in the module docstring).
    """
    registry = error_registry(app_errors)
    address = f"{host}:{port}"
    net = TCP if network is None else network
    try:
        stream = await net.connect(host, port)
    except OSError as exc:
        raise ConnectFailed(address, str(exc) or repr(exc)) from exc
    client = RpcClient(
        stream,
        dest_uuid,
        src_uuid,
        lamport=NO_LAMPORT if lamport is None else lamport,
        errors=registry,
        max_frame_size=max_frame_size,
        on_cast_error=on_cast_error,
    )
    body_error: BaseException | None = None
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(client._run)
            try:
                yield client
            except BaseException as exc:
                body_error = exc
                raise
            finally:
                client._close("client closed")
    except BaseExceptionGroup as group:
        # The caller's exception, not a failure of ours: give it back unwrapped rather
        # than inside the ExceptionGroup our nursery put around it.
        if body_error is not None and len(group.exceptions) == 1:
            only: BaseException = group.exceptions[0]
            if only is body_error:
                raise only from None
        raise
    finally:
        await trio.aclose_forcefully(stream)
