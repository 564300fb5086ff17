"""open_rpc_client over real TCP: calls multiplexed on one connection and completed out of
order, cancellation that leaves the connection healthy, and connection loss failing every
pending call with ConnectionClosed."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import msgspec
import pytest
import trio
from rpc_helpers import (
    CLIENT_UUID,
    HOST,
    SERVER_UUID,
    Echo,
    NotLeader,
    Probe,
    Wait,
    Waited,
    make_service,
    run,
    running_server,
)

from revivify.impl.rpc import (
    ConnectFailed,
    ConnectionClosed,
    FrameTooLarge,
    MalformedResponse,
    RpcClient,
    RpcServer,
    encode_frame,
    open_rpc_client,
    serve_rpc,
)
from revivify.impl.rpc.codec import (
    Request,
    decode_request,
    decode_response,
    encode_body,
    encode_request,
    encode_response,
    ok_response,
)
from revivify.impl.rpc.framing import FrameDecoder


class Number(msgspec.Struct):
    value: int


class TestMultiplexing:
    """Many calls share one connection; each gets its own answer, in any order."""

    def test_out_of_order_completion(self) -> None:
        probe = Probe()
        count = 20

        async def main() -> None:
            async with running_server(probe) as server, open_rpc_client(
                    HOST, server.port, SERVER_UUID, CLIENT_UUID) as client:
                results: dict[str, Waited] = {}
                finished: list[str] = []
                done = {f"k{i}": trio.Event() for i in range(count)}

                async def one(key: str) -> None:
                    results[key] = await client.call("Wait", Wait(key), Waited)
                    finished.append(key)
                    done[key].set()

                async with trio.open_nursery() as nursery:
                    for key in done:
                        nursery.start_soon(one, key)
                    await probe.until(lambda: len(probe.arrived) == count)
                    assert client.pending_calls == count
                    release_order = sorted(done, reverse=True)
                    for key in release_order:  # each answered before the next is released
                        probe.gate(key).set()
                        await done[key].wait()
                assert finished == release_order
                assert all(results[key].key == key for key in done)
                call_ids = sorted(result.call_id for result in results.values())
                assert call_ids == list(range(1, count + 1))  # one client, distinct ids
                assert client.pending_calls == 0

        run(main)

    def test_body_exceptions_are_not_wrapped(self) -> None:
        async def main() -> None:
            async with running_server() as server:
                with pytest.raises(KeyError):
                    async with open_rpc_client(HOST, server.port, SERVER_UUID, CLIENT_UUID):
                        raise KeyError("from the caller")

        run(main)


class TestCancellation:
    """A cancelled call stops waiting; the connection and other calls are unaffected."""

    def test_cancelled_call_leaves_connection_usable(self) -> None:
        probe = Probe()

        async def main() -> None:
            async with running_server(probe) as server, open_rpc_client(
                    HOST, server.port, SERVER_UUID, CLIENT_UUID) as client:
                with trio.move_on_after(0.05) as scope:
                    await client.call("Wait", Wait("slow"), Waited)
                assert scope.cancelled_caught
                assert client.pending_calls == 0
                probe.gate("slow").set()  # its late response arrives and is dropped
                assert await client.call("Echo", Echo("next"), Echo) == Echo("next")
                assert not client.closed

        run(main)

    def test_request_too_large_fails_locally(self) -> None:
        async def main() -> None:
            async with running_server() as server, open_rpc_client(
                    HOST, server.port, SERVER_UUID, CLIENT_UUID, max_frame_size=200) as client:
                with pytest.raises(FrameTooLarge) as info:
                    await client.call("Echo", Echo("x" * 500), Echo)
                assert info.value.limit == 200
                assert await client.call("Echo", Echo("small"), Echo) == Echo("small")

        run(main)


class TestConnectionLoss:
    """When the connection goes, every pending call (and every later one) fails."""

    def test_server_going_away_fails_pending_calls(self) -> None:
        probe = Probe()
        count = 5

        async def main() -> None:
            service = make_service(probe)
            async with trio.open_nursery() as outer:
                server_scope = trio.CancelScope()

                async def serve(task_status: trio.TaskStatus[RpcServer]) -> None:
                    with server_scope:
                        await serve_rpc(service, SERVER_UUID, HOST, 0, task_status=task_status)

                server: RpcServer = await outer.start(serve)
                async with open_rpc_client(HOST, server.port, SERVER_UUID,
                                           CLIENT_UUID) as client:
                    errors: list[BaseException] = []

                    async def one(i: int) -> None:
                        try:
                            await client.call("Hang", Wait(f"h{i}"), Waited)
                        except ConnectionClosed as exc:
                            errors.append(exc)

                    async with trio.open_nursery() as nursery:
                        for i in range(count):
                            nursery.start_soon(one, i)
                        await probe.until(lambda: len(probe.arrived) == count)
                        server_scope.cancel()
                    assert len(errors) == count
                    assert all(isinstance(e, ConnectionClosed) for e in errors)
                    assert client.closed and client.pending_calls == 0
                    with pytest.raises(ConnectionClosed):
                        await client.call("Echo", Echo("anyone?"), Echo)
            assert probe.cancelled == count

        run(main)

    def test_calls_after_close_fail(self) -> None:
        async def main() -> None:
            async with running_server() as server:
                async with open_rpc_client(HOST, server.port, SERVER_UUID,
                                           CLIENT_UUID) as client:
                    await client.call("Echo", Echo("one"), Echo)
                with pytest.raises(ConnectionClosed, match="client closed"):
                    await client.call("Echo", Echo("two"), Echo)

        run(main)

    def test_connect_failed(self) -> None:
        async def main() -> None:
            listeners = await trio.open_tcp_listeners(0, host=HOST)
            port = listeners[0].socket.getsockname()[1]
            for listener in listeners:
                await listener.aclose()  # nothing listens on `port` any more
            with pytest.raises(ConnectFailed) as info:
                async with open_rpc_client(HOST, port, SERVER_UUID, CLIENT_UUID):
                    pass
            assert info.value.address == f"{HOST}:{port}"

        run(main)


async def fake_server(
    respond: Callable[[trio.SocketStream, int], Awaitable[None]],
    task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
) -> None:
    """A misbehaving server: reads one request frame, then calls respond(stream, call_id)."""

    async def handle(stream: trio.SocketStream) -> None:
        data = b""
        while len(data) < 4 or len(data) < 4 + int.from_bytes(data[:4], "big"):
            data += await stream.receive_some(65536)
        await respond(stream, decode_request(data[4:]).call_id)
        await trio.sleep_forever()

    listeners = await trio.open_tcp_listeners(0, host=HOST)
    task_status.started(listeners[0].socket.getsockname()[1])
    await trio.serve_listeners(handle, listeners)


class TestMisbehavingServer:
    """A server that breaks the protocol closes the client; a bad body fails one call."""

    def test_garbage_response_closes_the_client(self) -> None:
        async def garbage(stream: trio.SocketStream, call_id: int) -> None:
            await stream.send_all(encode_frame(b"\xc1 not msgpack"))

        async def main() -> None:
            async with trio.open_nursery() as nursery:
                port = await nursery.start(fake_server, garbage)
                async with open_rpc_client(HOST, port, SERVER_UUID, CLIENT_UUID) as client:
                    with pytest.raises(ConnectionClosed, match="protocol error"):
                        await client.call("Echo", Echo("x"), Echo)
                    assert client.closed
                nursery.cancel_scope.cancel()

        run(main)

    def test_undecodable_body_fails_only_that_call(self) -> None:
        async def wrong_body(stream: trio.SocketStream, call_id: int) -> None:
            response = ok_response(call_id, 0, encode_body(Echo("not a number")))
            await stream.send_all(encode_frame(encode_response(response)))

        async def main() -> None:
            async with trio.open_nursery() as nursery:
                port = await nursery.start(fake_server, wrong_body)
                async with open_rpc_client(HOST, port, SERVER_UUID, CLIENT_UUID) as client:
                    with pytest.raises(MalformedResponse) as info:
                        await client.call("Number", Number(1), Number)
                    assert info.value.field == "value"
                    assert not client.closed
                nursery.cancel_scope.cancel()

        run(main)


class TestCasts:
    """One-way calls: the handler runs, success sends nothing back, a failure reaches
    on_cast_error rebuilt as its type, and calls on the same connection are unaffected."""

    def test_cast_runs_the_handler_and_gets_no_answer(self) -> None:
        probe = Probe()

        async def main() -> None:
            async with running_server(probe) as server, open_rpc_client(
                    HOST, server.port, SERVER_UUID, CLIENT_UUID) as client:
                client.cast_nowait("Echo", Echo("one"))
                await client.cast("Echo", Echo("two"))
                await probe.until(lambda: len(probe.contexts) == 2)
                assert [c.call_id for c in probe.contexts] == [-1, -2]
                # a call after the casts is answered, and nothing else arrives first
                assert await client.call("Echo", Echo("three"), Echo) == Echo("three")
                assert client.pending_calls == 0

        run(main)

    def test_cast_success_sends_no_frame(self) -> None:
        async def main() -> None:
            async with running_server() as server:
                stream = await trio.open_tcp_stream(HOST, server.port)
                cast = Request(call_id=-1, method="Echo", dest_uuid=SERVER_UUID,
                               src_uuid=CLIENT_UUID, lamport=0, body=encode_body(Echo("x")),
                               oneway=True)
                call = Request(call_id=7, method="Echo", dest_uuid=SERVER_UUID,
                               src_uuid=CLIENT_UUID, lamport=0, body=encode_body(Echo("y")))
                await stream.send_all(encode_frame(encode_request(cast))
                                      + encode_frame(encode_request(call)))
                decoder = FrameDecoder(1 << 20)
                payloads: list[bytes] = []
                while not payloads:
                    payloads = decoder.feed(await stream.receive_some(65536))
                assert [decode_response(p).call_id for p in payloads] == [7]
                await stream.aclose()

        run(main)

    def test_cast_failure_reaches_on_cast_error(self) -> None:
        errors: list[BaseException] = []

        async def main() -> None:
            async with running_server() as server, open_rpc_client(
                    HOST, server.port, SERVER_UUID, CLIENT_UUID, app_errors=[NotLeader],
                    on_cast_error=errors.append) as client:
                client.cast_nowait("NotLeader", Echo("ts-9"))
                client.cast_nowait("NoSuchMethod", Echo("x"))
                while len(errors) < 2:
                    await trio.sleep(0.001)
                assert isinstance(errors[0], NotLeader)
                assert errors[0].leader_hint == "ts-9"
                assert type(errors[1]).__name__ == "UnknownMethod"
                assert client.pending_calls == 0

        run(main)

    def test_cast_after_close_raises_connection_closed(self) -> None:
        async def main() -> None:
            async with running_server() as server, open_rpc_client(
                    HOST, server.port, SERVER_UUID, CLIENT_UUID) as client:
                client._close("test")
                with pytest.raises(ConnectionClosed):
                    client.cast_nowait("Echo", Echo("x"))
                with pytest.raises(ConnectionClosed):
                    await client.cast("Echo", Echo("x"))

        run(main)

    def test_casts_are_handled_in_the_order_sent(self) -> None:
        probe = Probe()

        async def main() -> None:
            async with running_server(probe) as server, open_rpc_client(
                    HOST, server.port, SERVER_UUID, CLIENT_UUID) as client:
                for i in range(50):
                    client.cast_nowait("Echo", Echo(str(i)))
                await probe.until(lambda: len(probe.contexts) == 50)
                assert [c.call_id for c in probe.contexts] == list(range(-1, -51, -1))

        run(main)


class TestDirectWrite:
    """A frame handed over while the writer holds nothing is written by the caller at once
    (client.py, "The direct write"); otherwise it queues behind what the writer holds, and
    frames always reach the peer in the order they were handed over."""

    @staticmethod
    @asynccontextmanager
    async def _linked() -> AsyncIterator[tuple[RpcClient, trio.SocketStream]]:
        """A client connected to a bare listener here: the peer's end, read by hand."""
        listeners = await trio.open_tcp_listeners(0, host=HOST)
        port = listeners[0].socket.getsockname()[1]
        async with open_rpc_client(HOST, port, SERVER_UUID, CLIENT_UUID) as client:
            peer = await listeners[0].accept()
            try:
                yield client, peer
            finally:
                await peer.aclose()
        await listeners[0].aclose()

    @staticmethod
    async def _frames(stream: trio.SocketStream, count: int) -> list[Request]:
        decoder = FrameDecoder(1 << 24)
        out: list[Request] = []
        while len(out) < count:
            data = await stream.receive_some(1 << 20)
            assert data, "the client closed early"
            out.extend(decode_request(p) for p in decoder.feed(data))
        return out

    def test_a_cast_on_a_quiet_link_leaves_without_the_writer(self) -> None:
        async def main() -> None:
            async with self._linked() as (client, peer):
                client.cast_nowait("Echo", Echo("now"))
                # no checkpoint since: the writer task cannot have run, and nothing waits
                # for it (before, the frame sat in its queue until it was scheduled)
                assert client._outgoing.statistics().current_buffer_used == 0
                assert client._unsent == 0
                [request] = await self._frames(peer, 1)
                assert (request.call_id, request.method, request.oneway) == (-1, "Echo", True)

        run(main)

    def test_a_full_socket_keeps_the_order(self) -> None:
        """The peer reads nothing at first: direct writes fill the socket, one is cut short
        and its rest queued, and every later frame queues behind it."""
        count, size = 200, 48 * 1024

        async def main() -> None:
            async with self._linked() as (client, peer):
                queued_at_some_point = False
                for i in range(count):
                    await client.cast("Echo", Echo(f"{i:04d}" + "x" * size))
                    queued_at_some_point |= client._unsent > 0
                assert queued_at_some_point, "the socket never filled: nothing was queued"
                requests = await self._frames(peer, count)
                assert [r.call_id for r in requests] == list(range(-1, -count - 1, -1))
                bodies = [msgspec.msgpack.decode(r.body, type=Echo).text[:4] for r in requests]
                assert bodies == [f"{i:04d}" for i in range(count)]

        run(main)

    def test_no_direct_write_once_closed(self) -> None:
        async def main() -> None:
            async with self._linked() as (client, peer):
                client.abort("test")
                with pytest.raises(ConnectionClosed):
                    client.cast_nowait("Echo", Echo("late"))
                with trio.move_on_after(0.2):
                    data = await peer.receive_some(1 << 16)
                    assert data == b"", f"bytes after the close: {data!r}"

        run(main)
