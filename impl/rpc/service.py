"""A Service: the table of methods a server answers, and the dispatch of one request.

No trio here: `dispatch` awaits the handler and nothing else, so it runs under any event
loop (and in tests without sockets). The server shell decodes the envelope, observes the
Lamport clock and writes the response; everything between is this module's:

1. Destination: a request whose `dest_uuid` is not this server's is refused with
   WrongServerUuid(expected, got) before anything else is looked at. A message that outlived
   a server's identity (a restarted process with a new UUID, a reused port) never reaches a
   handler.
2. Method: a name the table lacks is UnknownMethod(method).
3. Body: decoded strictly into the method's request type; a mismatch is MalformedRequest
   naming the field. Handlers only ever see well-typed requests.
4. Handler: `await handler(request, context)`. Its return value must be an instance of the
   method's response type. An AppError or ServerShuttingDown it raises is the answer (also
   when a nursery in the handler wrapped it, alone, in an ExceptionGroup); any other
   exception is logged with its traceback and answered with InternalError naming the
   exception type (the server keeps serving). Cancellation is not an exception here: it
   propagates, and the connection closes without an answer.

Every outcome is a Response: dispatch never raises for a bad request, whatever its bytes.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from types import MappingProxyType
from typing import Any, TypeVar

import attrs
import msgspec

from .codec import (
    LamportHooks,
    Request,
    Response,
    decode_request_body,
    encode_body,
    error_response,
    ok_response,
)
from .errors import (
    AppError,
    InternalError,
    MalformedRequest,
    ServerShuttingDown,
    UnknownMethod,
    WrongServerUuid,
)

logger = logging.getLogger(__name__)

RequestT = TypeVar("RequestT", bound=msgspec.Struct)
ResponseT = TypeVar("ResponseT", bound=msgspec.Struct)


@attrs.frozen
class CallContext:
    """What a handler may know about the call besides its request body."""

    method: str
    call_id: int
    src_uuid: str  # the caller, as it named itself
    remote_lamport: int  # the caller's Lamport clock when it sent the call (already observed)


Handler = Callable[[RequestT, CallContext], Awaitable[ResponseT]]


@attrs.frozen
class MethodSpec:
    """One row of the table: a method's request and response types and its handler."""

    name: str
    request_type: type[msgspec.Struct]
    response_type: type[msgspec.Struct]
    handler: Callable[[Any, CallContext], Awaitable[msgspec.Struct]]


class Service:
    """The methods one kind of server answers: name -> (request, response, handler)."""

    def __init__(self, name: str = "rpc") -> None:
        self.name = name
        self._methods: dict[str, MethodSpec] = {}

    @property
    def methods(self) -> Mapping[str, MethodSpec]:
        return MappingProxyType(self._methods)

    def register(
        self,
        method: str,
        request_type: type[RequestT],
        response_type: type[ResponseT],
        handler: Handler[RequestT, ResponseT],
    ) -> None:
        """Answer `method` with `handler`; ValueError if the name is taken."""
        if not method:
            raise ValueError("a method needs a non-empty name")
        if method in self._methods:
            raise ValueError(f"method {method!r} is already registered in {self.name}")
        for kind in (request_type, response_type):
            if not (isinstance(kind, type) and issubclass(kind, msgspec.Struct)):
                raise TypeError(f"{method}: {kind!r} is not a msgspec.Struct type")
        self._methods[method] = MethodSpec(method, request_type, response_type, handler)

    async def dispatch(
        self, request: Request, *, server_uuid: str, lamport: LamportHooks
    ) -> Response:
        """Run one decoded request to its Response (see the module docstring)."""
        if request.dest_uuid != server_uuid:
            refusal = WrongServerUuid(expected=server_uuid, got=request.dest_uuid)
            return error_response(request.call_id, lamport.get(), refusal)
        spec = self._methods.get(request.method)
        if spec is None:
            return error_response(request.call_id, lamport.get(),
                                  UnknownMethod(request.method))
        try:
            body = decode_request_body(request, spec.request_type)
        except MalformedRequest as exc:
            return error_response(request.call_id, lamport.get(), exc)
        context = CallContext(request.method, request.call_id, request.src_uuid,
                              request.lamport)
        try:
            result = await spec.handler(body, context)
            if not isinstance(result, spec.response_type):
                raise TypeError(
                    f"handler returned {type(result).__name__}, "
                    f"expected {spec.response_type.__name__}"
                )
            encoded = encode_body(result)
        except Exception as exc:
            cause = _sole_exception(exc)
            if isinstance(cause, (AppError, ServerShuttingDown)):
                return error_response(request.call_id, lamport.get(), cause)
            logger.exception("%s: handler of %r (call %d from %s) failed", self.name,
                             request.method, request.call_id, request.src_uuid)
            return error_response(request.call_id, lamport.get(),
                                  internal_error(request.method, exc))
        return ok_response(request.call_id, lamport.get(), encoded)


def _sole_exception(exc: BaseException) -> BaseException:
    """`exc`, or the one exception inside (nested) single-member ExceptionGroups.

    A handler that runs a nursery gets its AppError wrapped in an ExceptionGroup by trio;
    the caller should still get the AppError.
    """
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


def internal_error(method: str, exc: BaseException) -> InternalError:
    """The InternalError that answers a call whose handling raised `exc`."""
    return InternalError(method, type(exc).__qualname__, str(exc))
