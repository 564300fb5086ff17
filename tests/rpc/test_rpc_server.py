"""serve_rpc over real TCP on 127.0.0.1: answers, refusals, typed errors, bad input that
closes only its own connection, handler failures, graceful shutdown, Lamport hooks."""

from __future__ import annotations

import functools
import logging
import struct

import msgspec
import pytest
import trio
import trio.testing
from rpc_helpers import (
    CLIENT_UUID,
    HOST,
    SERVER_UUID,
    Blob,
    BlobRequest,
    Echo,
    NotLeader,
    Peer,
    Probe,
    Vote,
    VoteGranted,
    Wait,
    Waited,
    make_service,
    read_until_eof,
    run,
    running_server,
)

from revivify.impl.rpc import (
    ConnectFailed,
    ConnectionClosed,
    InternalError,
    LamportHooks,
    MalformedRequest,
    RemoteError,
    RpcServer,
    ServerShuttingDown,
    Service,
    UnknownMethod,
    WrongServerUuid,
    encode_frame,
    open_rpc_client,
    serve_rpc,
)
from revivify.impl.rpc.codec import Request as Envelope
from revivify.impl.rpc.codec import Response, decode_response, encode_body, encode_request
from revivify.impl.trace import TraceWriter


class BadVote(msgspec.Struct):
    """What a buggy or hostile client might send for Vote."""

    term: str
    candidate: str


class BadPeer(msgspec.Struct):
    uuid: int


class BadPeersVote(msgspec.Struct):
    term: int
    candidate: str
    peers: list[BadPeer]


async def still_answers(port: int) -> None:
    """A fresh client gets a correct answer: the server survived whatever came before."""
    async with open_rpc_client(HOST, port, SERVER_UUID, CLIENT_UUID) as client:
        assert await client.call("Echo", Echo("alive?"), Echo) == Echo("alive?")


def raw_request(call_id: int, method: str, body: object, dest: str = SERVER_UUID) -> bytes:
    envelope = Envelope(call_id=call_id, method=method, dest_uuid=dest, src_uuid="raw",
                        lamport=0, body=encode_body(body))
    return encode_frame(encode_request(envelope))


async def read_response(stream: trio.SocketStream) -> Response:
    """One response frame from a raw socket."""
    data = b""
    while len(data) < 4 or len(data) < 4 + struct.unpack(">I", data[:4])[0]:
        chunk = await stream.receive_some(65536)
        assert chunk, "server closed the connection instead of answering"
        data += chunk
    return decode_response(data[4:])


class TestCalls:
    """Round trips and the calls a server refuses, each on a connection that stays open."""

    def test_round_trip(self) -> None:
        probe = Probe()

        async def main() -> None:
            async with running_server(probe) as server, open_rpc_client(
                    HOST, server.port, SERVER_UUID, CLIENT_UUID) as client:
                assert await client.call("Echo", Echo("héllo"), Echo) == Echo("héllo")
                vote = Vote(5, "ts-1", [Peer("a", 1), Peer("b", 2)])
                assert await client.call("Vote", vote, VoteGranted) == VoteGranted(5, True)
            assert [(c.method, c.src_uuid) for c in probe.contexts] == [("Echo", CLIENT_UUID)]

        run(main)

    def test_wrong_destination_refused(self) -> None:
        probe = Probe()

        async def main() -> None:
            async with running_server(probe) as server, open_rpc_client(
                    HOST, server.port, "ts-9999-other", CLIENT_UUID) as client:
                for _ in range(2):  # refused twice: the connection stayed open
                    with pytest.raises(WrongServerUuid) as info:
                        await client.call("Echo", Echo("x"), Echo)
                    assert (info.value.expected, info.value.got) == (SERVER_UUID,
                                                                     "ts-9999-other")
                    assert SERVER_UUID in str(info.value)
                    assert "ts-9999-other" in str(info.value)
                assert not client.closed
            assert probe.contexts == []  # no handler ran

        run(main)

    def test_unknown_method(self) -> None:
        async def main() -> None:
            async with running_server() as server, open_rpc_client(
                    HOST, server.port, SERVER_UUID, CLIENT_UUID) as client:
                with pytest.raises(UnknownMethod) as info:
                    await client.call("DeleteEverything", Echo("x"), Echo)
                assert info.value.method == "DeleteEverything"
                assert await client.call("Echo", Echo("after"), Echo) == Echo("after")

        run(main)

    def test_malformed_body_names_the_field(self) -> None:
        async def main() -> None:
            async with running_server() as server, open_rpc_client(
                    HOST, server.port, SERVER_UUID, CLIENT_UUID) as client:
                with pytest.raises(MalformedRequest) as info:
                    await client.call("Vote", BadVote("five", "ts-1"), VoteGranted)
                assert info.value.field == "term"
                assert "Expected `int`, got `str`" in info.value.reason
                nested = BadPeersVote(1, "ts-1", [BadPeer(1), BadPeer(2)])
                with pytest.raises(MalformedRequest) as info:
                    await client.call("Vote", nested, VoteGranted)
                assert info.value.field == "peers[0].uuid"
                assert await client.call("Vote", Vote(1, "ts-1"), VoteGranted) == VoteGranted(
                    1, True)

        run(main)


class TestHandlerErrors:
    """What a handler raises reaches the client as a typed error; the server lives on."""

    def test_app_error_rebuilt_as_registered_type(self) -> None:
        async def main() -> None:
            async with running_server() as server, open_rpc_client(
                    HOST, server.port, SERVER_UUID, CLIENT_UUID,
                    app_errors=[NotLeader]) as client:
                with pytest.raises(NotLeader) as info:
                    await client.call("NotLeader", Echo("ts-2"), Echo)
                assert info.value.leader_hint == "ts-2"
                assert info.value.code == "test.not_leader"
                assert info.value.message == "not the leader; leader hint ts-2"

        run(main)

    def test_unregistered_app_error_is_remote_error(self) -> None:
        async def main() -> None:
            async with running_server() as server, open_rpc_client(
                    HOST, server.port, SERVER_UUID, CLIENT_UUID) as client:
                with pytest.raises(RemoteError) as info:
                    await client.call("Overloaded", Echo("42 waiting"), Echo)
                assert info.value.code == "test.overloaded"
                assert info.value.remote_message == "queue full: 42 waiting"

        run(main)

    def test_crash_is_internal_error(self, caplog: pytest.LogCaptureFixture) -> None:
        async def main() -> None:
            async with running_server() as server:
                async with open_rpc_client(HOST, server.port, SERVER_UUID,
                                           CLIENT_UUID) as client:
                    with pytest.raises(InternalError) as info:
                        await client.call("Crash", Echo("missing"), Echo)
                    assert (info.value.method, info.value.exception_type) == ("Crash",
                                                                              "KeyError")
                    assert "missing" in info.value.detail
                    assert await client.call("Echo", Echo("same conn"), Echo) == Echo(
                        "same conn")
                await still_answers(server.port)

        with caplog.at_level(logging.ERROR):
            run(main)
        crash_logs = [r for r in caplog.records if "handler of 'Crash'" in r.getMessage()]
        assert len(crash_logs) == 1 and crash_logs[0].exc_info is not None

    def test_wrong_response_type_is_internal_error(self) -> None:
        async def main() -> None:
            async with running_server() as server, open_rpc_client(
                    HOST, server.port, SERVER_UUID, CLIENT_UUID) as client:
                with pytest.raises(InternalError) as info:
                    await client.call("WrongType", Echo("x"), Echo)
                assert info.value.exception_type == "TypeError"
                assert "returned VoteGranted, expected Echo" in info.value.detail

        run(main)

    def test_response_too_large_is_internal_error(self) -> None:
        async def main() -> None:
            async with running_server(max_frame_size=4096) as server, open_rpc_client(
                    HOST, server.port, SERVER_UUID, CLIENT_UUID) as client:
                assert len((await client.call("Blob", BlobRequest(1000), Blob)).data) == 1000
                with pytest.raises(InternalError) as info:
                    await client.call("Blob", BlobRequest(10_000), Blob)
                assert info.value.exception_type == "FrameTooLarge"
                assert await client.call("Echo", Echo("ok"), Echo) == Echo("ok")

        run(main)


class BuggyService(Service):
    """A dispatcher with a bug (dispatch itself must never raise; this one does)."""

    async def dispatch(self, request: Envelope, *, server_uuid: str,
                       lamport: LamportHooks) -> Response:
        if request.method == "Bug":
            raise RuntimeError("bug in the dispatcher")
        return await super().dispatch(request, server_uuid=server_uuid, lamport=lamport)


class TestShellBugs:
    """A bug below the handlers closes that connection, is logged, and the server lives on."""

    def test_dispatch_bug_closes_only_that_connection(
        self, caplog: pytest.LogCaptureFixture
    ) -> None:
        service = BuggyService("buggy")

        async def echo(request: Echo, context: object) -> Echo:
            return request

        service.register("Echo", Echo, Echo, echo)

        async def main() -> None:
            async with trio.open_nursery() as nursery:
                server: RpcServer = await nursery.start(
                    functools.partial(serve_rpc, service, SERVER_UUID, HOST, 0))
                async with open_rpc_client(HOST, server.port, SERVER_UUID,
                                           CLIENT_UUID) as client:
                    with pytest.raises(ConnectionClosed):
                        await client.call("Bug", Echo("x"), Echo)
                await still_answers(server.port)
                nursery.cancel_scope.cancel()

        with caplog.at_level(logging.ERROR):
            run(main)
        assert any("connection from" in r.getMessage() and r.exc_info for r in caplog.records)


class TestBadInput:
    """Raw sockets sending garbage: only that connection closes; the server keeps serving."""

    @pytest.mark.parametrize(("garbage", "logged"), [
        (b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", "exceeds the limit"),  # prefix 'GET ' = 1.2 GB
        (struct.pack(">I", 2**32 - 1) + b"\x00" * 16, "exceeds the limit"),
        (encode_frame(b"\xc1\xc1 not msgpack"), "no call_id to answer"),
        (encode_frame(msgspec.msgpack.encode([1, 2, 3])), "no call_id to answer"),
        (struct.pack(">I", 100) + b"only ten b", "stream ended inside a frame"),
        (b"\x00\x00", "stream ended inside a length prefix"),
    ])
    def test_garbage_closes_only_that_connection(
        self, garbage: bytes, logged: str, caplog: pytest.LogCaptureFixture
    ) -> None:
        async def main() -> None:
            async with running_server() as server, open_rpc_client(
                    HOST, server.port, SERVER_UUID, CLIENT_UUID) as bystander:
                stream = await trio.open_tcp_stream(HOST, server.port)
                async with stream:
                    await stream.send_all(garbage)
                    await stream.send_eof()  # "then EOF" (matters for the truncated cases)
                    assert await read_until_eof(stream) == b""  # closed, nothing answered
                assert await bystander.call("Echo", Echo("bystander"), Echo) == Echo(
                    "bystander")
                await still_answers(server.port)

        with caplog.at_level(logging.WARNING):
            run(main)
        assert any(logged in r.getMessage() for r in caplog.records), [
            r.getMessage() for r in caplog.records]

    def test_oversized_prefix_refused_without_waiting_for_payload(self) -> None:
        async def main() -> None:
            async with running_server(max_frame_size=1024) as server:
                stream = await trio.open_tcp_stream(HOST, server.port)
                async with stream:
                    await stream.send_all(struct.pack(">I", 1025))  # and no EOF
                    assert await read_until_eof(stream) == b""

        run(main)

    def test_framing_error_closes_at_once_despite_calls_in_flight(self) -> None:
        probe = Probe()

        async def main() -> None:
            async with running_server(probe) as server:
                stream = await trio.open_tcp_stream(HOST, server.port)
                async with stream:
                    await stream.send_all(raw_request(1, "Wait", Wait("pending")))
                    await probe.until(lambda: probe.arrived == ["pending"])
                    await stream.send_all(struct.pack(">I", 2**31))
                    assert await read_until_eof(stream) == b""  # while the call still runs
                    assert server.active_calls == 1
                    probe.gate("pending").set()  # it finishes; its answer is dropped
                    await probe.until(lambda: server.active_calls == 0)
                await still_answers(server.port)

        run(main)

    def test_bad_envelope_with_call_id_is_answered(self) -> None:
        async def main() -> None:
            async with running_server() as server:
                stream = await trio.open_tcp_stream(HOST, server.port)
                async with stream:
                    bad = msgspec.msgpack.encode({"call_id": 77, "method": "Echo",
                                                  "dest_uuid": SERVER_UUID, "src_uuid": 1,
                                                  "lamport": 0, "body": {"text": "x"}})
                    await stream.send_all(encode_frame(bad))
                    response = await read_response(stream)
                    assert (response.call_id, response.ok) == (77, False)
                    assert response.error_code == MalformedRequest.code
                    assert response.error_data["field"] == "envelope.src_uuid"
                    # The same connection still works.
                    await stream.send_all(raw_request(78, "Echo", Echo("fine")))
                    response = await read_response(stream)
                    assert (response.call_id, response.ok) == (78, True)
                    assert msgspec.msgpack.decode(response.body, type=Echo) == Echo("fine")

        run(main)

    def test_half_closed_client_still_gets_its_answers(self) -> None:
        probe = Probe()

        async def main() -> None:
            async with running_server(probe) as server:
                stream = await trio.open_tcp_stream(HOST, server.port)
                async with stream:
                    await stream.send_all(raw_request(1, "Wait", Wait("late")))
                    await stream.send_eof()
                    await probe.until(lambda: probe.arrived == ["late"])
                    probe.gate("late").set()
                    data = await read_until_eof(stream)
                    response = decode_response(data[4:])
                    assert response.ok and response.call_id == 1
                    assert msgspec.msgpack.decode(response.body, type=Waited) == Waited("late", 1)

        run(main)


def arrived_more_than(probe: Probe, count: int) -> bool:
    return len(probe.arrived) > count


class TestConcurrencyLimit:
    """At most max_concurrent_calls handlers run per connection; the rest wait their turn."""

    def test_limit(self) -> None:
        probe = Probe()
        keys = [f"k{i}" for i in range(5)]

        async def main() -> None:
            async with running_server(probe, max_concurrent_calls=2) as server, \
                    open_rpc_client(HOST, server.port, SERVER_UUID, CLIENT_UUID) as client:
                results: dict[str, Waited] = {}

                async def one(key: str) -> None:
                    results[key] = await client.call("Wait", Wait(key), Waited)

                async with trio.open_nursery() as nursery:
                    for key in keys:
                        nursery.start_soon(one, key)
                    await probe.until(lambda: len(probe.arrived) >= 2)
                    await trio.testing.wait_all_tasks_blocked(cushion=0.05)
                    assert len(probe.arrived) == 2
                    for released in range(len(keys)):  # in arrival order (trio shuffles)
                        await probe.until(functools.partial(arrived_more_than, probe, released))
                        probe.gate(probe.arrived[released]).set()
                assert sorted(results) == keys
                assert probe.max_active == 2

        run(main)


class TestShutdown:
    """RpcServer.shutdown(): refuse new calls, finish those in flight, then return."""

    def test_graceful_shutdown(self) -> None:
        probe = Probe()

        async def main() -> None:
            service = make_service(probe)
            async with trio.open_nursery() as nursery:
                server: RpcServer = await nursery.start(
                    functools.partial(serve_rpc, service, SERVER_UUID, HOST, 0))
                port = server.port
                async with open_rpc_client(HOST, port, SERVER_UUID, CLIENT_UUID) as client:
                    in_flight: list[Waited] = []

                    async def wait_call() -> None:
                        in_flight.append(await client.call("Wait", Wait("inflight"), Waited))

                    nursery.start_soon(wait_call)
                    await probe.until(lambda: probe.arrived == ["inflight"])
                    server.shutdown()
                    assert server.shutting_down and server.active_calls == 1
                    with pytest.raises(ServerShuttingDown) as info:
                        await client.call("Echo", Echo("too late"), Echo)
                    assert info.value.server_uuid == SERVER_UUID
                    probe.gate("inflight").set()
                    await probe.until(lambda: bool(in_flight))
                    assert in_flight == [Waited("inflight", 1)]
                # serve_rpc returns by itself once drained: the nursery ends uncancelled.
            assert server.active_calls == 0
            with pytest.raises(ConnectFailed):
                async with open_rpc_client(HOST, port, SERVER_UUID, CLIENT_UUID):
                    pass

        run(main)


class TestLamport:
    """Both sides stamp what they send and observe what they receive."""

    def test_hooks_see_remote_values(self) -> None:
        server_seen: list[int] = []
        client_seen: list[int] = []

        async def main() -> None:
            server_clock = LamportHooks(get=lambda: 99, observe=server_seen.append)
            client_clock = LamportHooks(get=lambda: 41, observe=client_seen.append)
            async with running_server(lamport=server_clock) as server, open_rpc_client(
                    HOST, server.port, SERVER_UUID, CLIENT_UUID,
                    lamport=client_clock) as client:
                await client.call("Echo", Echo("tick"), Echo)
                with pytest.raises(UnknownMethod):  # error responses are stamped too
                    await client.call("Nope", Echo("tick"), Echo)

        run(main)
        assert server_seen == [41, 41]
        assert client_seen == [99, 99]

    def test_trace_writers_merge_clocks(self, tmp_path: object) -> None:
        async def main() -> None:
            server_trace = TraceWriter(str(tmp_path), SERVER_UUID, 1)
            client_trace = TraceWriter(str(tmp_path), CLIENT_UUID, 1)
            # Contract events (the writer refuses others): any server event ticks the clock.
            for _ in range(7):
                server_trace.event("server_start")
            client_trace.event("server_start")  # client at 1, server at 7

            def hooks(writer: TraceWriter) -> LamportHooks:
                return LamportHooks(get=lambda: writer.lamport, observe=writer.observe)

            async with running_server(lamport=hooks(server_trace)) as server, \
                    open_rpc_client(HOST, server.port, SERVER_UUID, CLIENT_UUID,
                                    lamport=hooks(client_trace)) as client:
                await client.call("Echo", Echo("x"), Echo)
            assert client_trace.lamport == 7  # merged the server's clock
            assert client_trace.event("server_stop") == 8  # the next event is after the reply
            server_trace.close()
            client_trace.close()

        run(main)
