"""Codec and Service.dispatch without sockets: envelopes, field paths, errors on the wire,
and dispatch answering any bytes with a Response."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import msgspec
import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st
from rpc_helpers import SERVER_UUID, Echo, NotLeader, Overloaded, Probe, Vote, make_service

from revivify.impl import rpc
from revivify.impl.rpc import (
    NO_LAMPORT,
    AppError,
    InternalError,
    LamportHooks,
    MalformedRequest,
    MalformedResponse,
    RemoteError,
    Request,
    Response,
    ServerShuttingDown,
    Service,
    UnknownMethod,
    WrongServerUuid,
)
from revivify.impl.rpc.codec import (
    decode_request,
    decode_response,
    encode_body,
    encode_request,
    encode_response,
    error_from_response,
    error_registry,
    error_response,
    recover_call_id,
)


def request(method: str = "Echo", body: object = None, **fields: Any) -> Request:
    envelope: dict[str, Any] = {
        "call_id": 7, "method": method, "dest_uuid": SERVER_UUID, "src_uuid": "c",
        "lamport": 3, "body": encode_body(Echo("hi") if body is None else body),
    }
    envelope.update(fields)
    return Request(**envelope)


def dispatch(req: Request, lamport: LamportHooks = NO_LAMPORT) -> Response:
    service = make_service(Probe())

    async def main() -> Response:
        return await service.dispatch(req, server_uuid=SERVER_UUID, lamport=lamport)

    return trio.run(main)


def wire(response: Response) -> Response:
    """The response as the client would see it after the trip."""
    return decode_response(encode_response(response))


class TestEnvelopes:
    """Request and Response survive encoding; bad envelopes name the field."""

    def test_request_round_trip(self) -> None:
        req = request()
        back = decode_request(encode_request(req))
        assert (back.call_id, back.method, back.dest_uuid, back.src_uuid, back.lamport) == (
            7, "Echo", SERVER_UUID, "c", 3)
        assert msgspec.msgpack.decode(back.body, type=Echo) == Echo("hi")

    def test_envelope_field_named(self) -> None:
        bad = msgspec.msgpack.encode({"call_id": 9, "method": "Echo", "dest_uuid": 5,
                                      "src_uuid": "c", "lamport": 0, "body": None})
        with pytest.raises(MalformedRequest) as info:
            decode_request(bad)
        assert info.value.field == "envelope.dest_uuid"
        assert recover_call_id(bad) == 9

    def test_missing_envelope_field_named(self) -> None:
        bad = msgspec.msgpack.encode({"call_id": 9, "method": "Echo"})
        with pytest.raises(MalformedRequest) as info:
            decode_request(bad)
        assert info.value.field == "envelope.dest_uuid"

    def test_no_call_id_to_recover(self) -> None:
        assert recover_call_id(b"\xc1") is None
        assert recover_call_id(msgspec.msgpack.encode({"call_id": "7"})) is None
        assert recover_call_id(msgspec.msgpack.encode([7])) is None

    def test_response_invariants(self) -> None:
        no_body = encode_response(Response(call_id=1, lamport=0, ok=True))
        with pytest.raises(MalformedResponse, match="without a body"):
            decode_response(no_body)
        no_code = encode_response(Response(call_id=1, lamport=0, ok=False))
        with pytest.raises(MalformedResponse, match="without an error code"):
            decode_response(no_code)

    @given(st.binary(max_size=200))
    def test_random_payloads_raise_only_malformed(self, payload: bytes) -> None:
        try:
            decode_request(payload)
        except MalformedRequest as exc:
            assert exc.field is None or exc.field.startswith("envelope")
        try:
            decode_response(payload)
        except MalformedResponse as exc:
            assert exc.field is None or exc.field.startswith("envelope")


class TestErrorsOnTheWire:
    """Every travelling error comes back as its own type with its own data."""

    @pytest.mark.parametrize("error", [
        WrongServerUuid(expected="a", got="b"),
        UnknownMethod("Nope"),
        MalformedRequest("Expected `int`, got `str`", "peers[0].term"),
        MalformedRequest("not msgpack", None),
        InternalError("Echo", "KeyError", "'x'"),
        ServerShuttingDown("ts-1"),
        NotLeader("ts-2"),
        Overloaded("queue full"),
    ])
    def test_round_trip(self, error: Any) -> None:
        registry = error_registry([NotLeader, Overloaded])
        back = error_from_response(wire(error_response(1, 0, error)), registry)
        assert type(back) is type(error)
        assert back.to_data() == error.to_data()
        assert str(back) == str(error)

    def test_unregistered_code_is_remote_error(self) -> None:
        back = error_from_response(wire(error_response(1, 0, NotLeader("ts-2"))),
                                   error_registry())
        assert isinstance(back, RemoteError)
        assert (back.code, back.remote_message, back.data) == (
            "test.not_leader", "not the leader; leader hint ts-2", {"leader_hint": "ts-2"})

    def test_data_that_does_not_fit_is_remote_error(self) -> None:
        response = Response(call_id=1, lamport=0, ok=False, error_code="rpc.wrong_server_uuid",
                            error_message="?", error_data={"expected": "a"})
        back = error_from_response(wire(response), error_registry())
        assert isinstance(back, RemoteError) and back.code == "rpc.wrong_server_uuid"

    def test_app_error_codes_validated(self) -> None:
        with pytest.raises(TypeError, match="outside 'rpc"):
            type("Bad", (AppError,), {"code": "rpc.mine"})
        with pytest.raises(ValueError, match="registered twice"):
            error_registry([NotLeader, type("Other", (AppError,), {"code": NotLeader.code})])
        with pytest.raises(TypeError):
            error_registry([ValueError])  # type: ignore[list-item]


class TestDispatch:
    """Service.dispatch: destination, method, body, handler, in that order."""

    def test_ok(self) -> None:
        response = wire(dispatch(request(body=Echo("hello"))))
        assert response.ok and response.call_id == 7
        assert response.body is not None
        assert msgspec.msgpack.decode(response.body, type=Echo) == Echo("hello")

    def test_destination_checked_first(self) -> None:
        response = wire(dispatch(request(method="Nope", dest_uuid="someone-else")))
        assert response.error_code == WrongServerUuid.code
        assert response.error_data == {"expected": SERVER_UUID, "got": "someone-else"}

    def test_unknown_method(self) -> None:
        response = wire(dispatch(request(method="Nope")))
        assert (response.error_code, response.error_data) == (UnknownMethod.code,
                                                              {"method": "Nope"})

    @pytest.mark.parametrize(("body", "field"), [
        ({"term": "one", "candidate": "c"}, "term"),
        ({"candidate": "c"}, "term"),
        ({"term": 1, "candidate": "c", "peers": [{"uuid": 5}]}, "peers[0].uuid"),
        ({"term": 1, "candidate": "c", "peers": [{}]}, "peers[0].uuid"),
        ([1, "c"], None),
    ])
    def test_body_field_named(self, body: object, field: str | None) -> None:
        response = wire(dispatch(request(method="Vote", body=body)))
        assert response.error_code == MalformedRequest.code
        assert response.error_data["field"] == field
        assert "Vote request body" in response.error_data["reason"]

    def test_lamport_stamped_after_handler(self) -> None:
        ticks = iter(range(100, 200))
        hooks = LamportHooks(get=lambda: next(ticks), observe=lambda _: None)
        assert dispatch(request(), hooks).lamport == 100

    def test_app_error_from_a_handler_nursery_is_unwrapped(self) -> None:
        service = Service()

        async def fan_out(req: Echo, ctx: object) -> Echo:
            async def ask_peer() -> None:
                raise NotLeader(req.text)

            async with trio.open_nursery() as nursery:  # wraps NotLeader in an ExceptionGroup
                nursery.start_soon(ask_peer)
            return req

        service.register("Echo", Echo, Echo, fan_out)

        async def main() -> Response:
            return await service.dispatch(request(body=Echo("ts-3")), server_uuid=SERVER_UUID,
                                          lamport=NO_LAMPORT)

        response = wire(trio.run(main))
        assert (response.error_code, response.error_data) == (NotLeader.code,
                                                              {"leader_hint": "ts-3"})

    def test_register_refuses_duplicates_and_non_structs(self) -> None:
        service = Service()

        async def handler(req: Echo, ctx: object) -> Echo:
            return req

        service.register("Echo", Echo, Echo, handler)
        with pytest.raises(ValueError, match="already registered"):
            service.register("Echo", Echo, Echo, handler)
        with pytest.raises(TypeError, match=r"not a msgspec\.Struct"):
            service.register("Dict", dict, Echo, handler)  # type: ignore[type-var, arg-type]
        assert list(service.methods) == ["Echo"]

    @given(st.binary(max_size=100), st.sampled_from(["Echo", "Vote", "Nope"]))
    def test_any_body_bytes_get_a_response(self, body: bytes, method: str) -> None:
        req = request(method=method, body=None)
        req = msgspec.structs.replace(req, body=msgspec.Raw(body))
        response = wire(dispatch(req))
        assert response.call_id == 7
        assert response.ok or response.error_code in {MalformedRequest.code,
                                                      UnknownMethod.code}


def test_vote_struct_is_what_the_service_expects() -> None:
    """Guard for the parametrized cases above: a well-formed Vote is accepted."""
    response = wire(dispatch(request(method="Vote", body=Vote(1, "c"))))
    assert response.ok


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def test_protocol_modules_stay_free_of_io() -> None:
    """framing, codec, service and errors never import trio; nothing imports spec/checker."""
    package = Path(rpc.__file__).parent
    for module in ("framing", "codec", "service", "errors"):
        imports = imported_modules(package / f"{module}.py")
        assert not {name for name in imports if name.split(".")[0] == "trio"}, module
    for path in package.glob("*.py"):
        assert not {name for name in imported_modules(path)
                    if name.startswith(("revivify.spec", "revivify.checker"))}, path
