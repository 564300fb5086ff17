"""The RPC envelopes, their msgpack encoding, and errors on the wire.

No I/O here. A frame's payload is one msgpack map, a Request (client to server) or a
Response (server to client); each direction carries one kind, so neither needs a tag::

    Request   call_id     client-chosen, unique among the calls in flight on a connection
              method      the name a Service registered a handler under
              dest_uuid   the server this call is for: any other server refuses it
              src_uuid    the caller's UUID (handlers see it in CallContext)
              lamport     the caller's Lamport clock when it sent the call
              body        the method's request Struct, msgpack (kept raw until dispatch)
              oneway      true: a cast; the server answers only an error, never success
                          (omitted when false)

    Response  call_id     copied from the request
              lamport     the server's Lamport clock when it answered
              ok          true: `body` holds the method's response Struct;
                          false: `error_code`, `error_message`, `error_data` describe it

Decoding is two-stage and strict (msgspec's typed decoders, no coercion): the envelope
first, then the body, only once the method (hence the body type) is known and the
destination checked. A failure names the field, from msgspec's validation path: body fields
as ``"term"`` or ``"peers[0].uuid"``, envelope fields as ``"envelope.lamport"``.

Errors travel as (code, message, data); `error_from_response` rebuilds the type registered
under the code (this package's own errors, plus the AppError subclasses a client
registered) and falls back to RemoteError for a code it does not know or data that does not
fit the registered type.

Lamport clocks: both sides stamp every message they send with `LamportHooks.get()` and pass
the stamp of every message they receive to `LamportHooks.observe`. The hooks are injected
(a trace writer's `lamport` property and `observe` method, typically), so this package never
depends on the tracer.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final, TypeVar

import attrs
import msgspec

from .errors import (
    SYSTEM_ERRORS,
    AppError,
    MalformedRequest,
    MalformedResponse,
    RemoteError,
    RpcError,
    WireError,
)

logger = logging.getLogger(__name__)

T = TypeVar("T")


@attrs.frozen
class LamportHooks:
    """Read the local Lamport clock (`get`) and merge a remote one into it (`observe`)."""

    get: Callable[[], int]
    observe: Callable[[int], None]


def _zero() -> int:
    return 0


def _ignore(remote_lamport: int) -> None:
    return None


NO_LAMPORT: Final = LamportHooks(get=_zero, observe=_ignore)
"""Hooks for a node without a Lamport clock: stamps 0, observes nothing."""


class Request(msgspec.Struct, frozen=True, omit_defaults=True):
    call_id: int
    method: str
    dest_uuid: str
    src_uuid: str
    lamport: int
    body: msgspec.Raw
    # A cast (RpcClient.cast_nowait): no response on success, so a one-way message such as
    # a Raft message costs one frame, not two (the answer it would get says nothing).
    oneway: bool = False


NIL: Final = msgspec.Raw(b"\xc0")
"""msgpack nil: the body of an error response (msgspec cannot decode ``Raw | None``)."""


class Response(msgspec.Struct, frozen=True, omit_defaults=True):
    call_id: int
    lamport: int
    ok: bool
    body: msgspec.Raw = NIL
    error_code: str = ""
    error_message: str = ""
    error_data: dict[str, Any] = {}


class _CallIdOnly(msgspec.Struct):
    call_id: int


_encoder: Final = msgspec.msgpack.Encoder()
_request_decoder: Final = msgspec.msgpack.Decoder(Request)
_response_decoder: Final = msgspec.msgpack.Decoder(Response)
_call_id_decoder: Final = msgspec.msgpack.Decoder(_CallIdOnly)

# msgspec's messages: "Expected `int`, got `str` - at `$.peers[0].term`" and
# "Object missing required field `term` - at `$.peers[0]`" (no " - at" at the root).
_AT_PATH: Final = re.compile(r" - at `\$(?P<path>[^`]*)`$")
_MISSING_FIELD: Final = re.compile(r"missing required field `(?P<name>[^`]+)`")


def describe_decode_error(error: msgspec.MsgspecError) -> tuple[str, str | None]:
    """Split a msgspec decoding error into (reason, field path or None)."""
    text = str(error)
    if not isinstance(error, msgspec.ValidationError):
        return text, None
    path = ""
    at = _AT_PATH.search(text)
    if at is not None:
        path = at["path"]
        text = text[: at.start()]
    missing = _MISSING_FIELD.search(text)
    if missing is not None:
        path = f"{path}.{missing['name']}"
    path = path.removeprefix(".")
    return text, path or None


def _envelope_field(field: str | None) -> str:
    if field is None:
        return "envelope"
    return f"envelope{field}" if field.startswith("[") else f"envelope.{field}"


# ------------------------------------------------------------------------ bodies


def encode_body(value: object) -> msgspec.Raw:
    """Encode a request or response Struct for an envelope's `body`."""
    return msgspec.Raw(_encoder.encode(value))


def decode_request_body(request: Request, request_type: type[T]) -> T:
    """The typed request body; MalformedRequest naming the field otherwise."""
    try:
        return msgspec.msgpack.decode(request.body, type=request_type)
    except msgspec.MsgspecError as exc:
        reason, field = describe_decode_error(exc)
        raise MalformedRequest(f"{request.method} request body: {reason}", field) from None


def decode_response_body(response: Response, response_type: type[T], method: str) -> T:
    """The typed response body; MalformedResponse naming the field otherwise."""
    if response.body == NIL:  # decode_response already refuses this for ok responses
        raise MalformedResponse(f"{method} response has no body", "envelope.body")
    try:
        return msgspec.msgpack.decode(response.body, type=response_type)
    except msgspec.MsgspecError as exc:
        reason, field = describe_decode_error(exc)
        raise MalformedResponse(f"{method} response body: {reason}", field) from None


# ------------------------------------------------------------------------ requests


def encode_request(request: Request) -> bytes:
    return _encoder.encode(request)


def decode_request(payload: bytes) -> Request:
    """The request envelope of a frame's payload; MalformedRequest otherwise."""
    try:
        return _request_decoder.decode(payload)
    except msgspec.MsgspecError as exc:
        reason, field = describe_decode_error(exc)
        raise MalformedRequest(f"request envelope: {reason}", _envelope_field(field)) from None


def recover_call_id(payload: bytes) -> int | None:
    """The call_id of an envelope that did not decode, if it is there to answer to."""
    try:
        return _call_id_decoder.decode(payload).call_id
    except msgspec.MsgspecError:
        return None


# ------------------------------------------------------------------------ responses


def ok_response(call_id: int, lamport: int, body: msgspec.Raw) -> Response:
    return Response(call_id=call_id, lamport=lamport, ok=True, body=body)


def error_response(call_id: int, lamport: int, error: WireError) -> Response:
    return Response(
        call_id=call_id,
        lamport=lamport,
        ok=False,
        error_code=type(error).code,
        error_message=error.message,
        error_data=error.to_data(),
    )


def encode_response(response: Response) -> bytes:
    return _encoder.encode(response)


def decode_response(payload: bytes) -> Response:
    """The response envelope of a frame's payload; MalformedResponse otherwise."""
    try:
        response = _response_decoder.decode(payload)
    except msgspec.MsgspecError as exc:
        reason, field = describe_decode_error(exc)
        raise MalformedResponse(f"response envelope: {reason}", _envelope_field(field)) from None
    if response.ok and response.body == NIL:
        raise MalformedResponse("ok response without a body", "envelope.body")
    if not response.ok and not response.error_code:
        raise MalformedResponse("error response without an error code", "envelope.error_code")
    return response


# ------------------------------------------------------------------------ errors


ErrorRegistry = Mapping[str, type[WireError]]


def error_registry(app_errors: Iterable[type[AppError]] = ()) -> dict[str, type[WireError]]:
    """Code -> error type: this package's errors plus `app_errors` (codes must be unique)."""
    registry: dict[str, type[WireError]] = {cls.code: cls for cls in SYSTEM_ERRORS}
    for cls in app_errors:
        if not (isinstance(cls, type) and issubclass(cls, AppError)):
            raise TypeError(f"{cls!r} is not a subclass of AppError")
        known = registry.get(cls.code)
        if known is not None and known is not cls:
            raise ValueError(
                f"error code {cls.code!r} registered twice: {known.__name__} and {cls.__name__}"
            )
        registry[cls.code] = cls
    return registry


def error_from_response(response: Response, registry: ErrorRegistry) -> RpcError:
    """The error an error response describes, as its registered type when possible."""
    code, message, data = response.error_code, response.error_message, response.error_data
    cls = registry.get(code)
    if cls is not None:
        try:
            return cls.from_data(message, data)
        except Exception as exc:  # a registered type's from_data on data from the network
            logger.warning("error %s does not fit %s (%r); raising RemoteError",
                           code, cls.__name__, exc)
    return RemoteError(code, message, data)
