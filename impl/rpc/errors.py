"""The one error hierarchy of revivify.impl.rpc.

Every error carries the data a caller (or an operator reading a log line) needs to act on it,
and its message says it in words. Some errors travel: the server puts a *code*, the message
and the error's data into a response, and the client rebuilds the same error type from them.
The rest are raised locally, on the side that saw the problem.

    RpcError
    ├── WrongServerUuid(expected, got)        travels  rpc.wrong_server_uuid
    ├── UnknownMethod(method)                 travels  rpc.unknown_method
    ├── MalformedRequest(reason, field)       travels  rpc.malformed_request
    ├── InternalError(method, exception_type, detail)
    │                                         travels  rpc.internal (a handler bug)
    ├── ServerShuttingDown(server_uuid)       travels  rpc.shutting_down
    ├── AppError(message)                     travels  its class's `code`
    │   └── (one subclass per domain error: NotLeader(leader_hint), TabletNotFound(...))
    ├── RemoteError(code, message, data)      client side: an error code it has not registered
    ├── MalformedResponse(reason, field)      client side: the server's answer did not decode
    ├── MalformedFrame(reason)                either side: the byte stream broke the framing
    │   └── FrameTooLarge(size, limit)
    └── ConnectionClosed(reason)              client side: the connection is gone
        └── ConnectFailed(address, reason)    ... or never existed (nothing was sent)

Which errors travel, and why only those: a handler may raise an AppError subclass (its
domain's refusal, e.g. "not the leader") or ServerShuttingDown; the server sends those
by code. Any other exception a handler lets escape, including an RpcError from an RPC the
handler itself made to a third server, becomes an InternalError naming its type:
forwarding, say, that third server's WrongServerUuid would tell our caller that *it*
addressed the wrong server.

What a caller may conclude about execution: a call that raised a travelling error was
refused or failed on the server (the handler ran only for AppError and InternalError);
ConnectFailed means the request was never sent; ConnectionClosed means it may or may not
have run (the connection died with the call in flight).

Data on the wire: one mechanism for every travelling error. A class names its data in
``fields``: constructor parameters, in order, each kept as an attribute of the same name and
holding a plain msgpack value. `to_data` is the map of those attributes in that order (the
order is part of the bytes: tests/rpc/test_error_wire.py pins them), and `from_data` calls
the constructor with the received values in the same order. An error with no fields is its
message alone. A field missing from received data takes the constructor's default when it
has one; otherwise the two families differ: this package's own errors never changed shape,
so their data then does not fit (the client raises RemoteError), while an AppError's fields
may grow over time, so one an older server left out arrives as ``""``.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any, ClassVar, Self


class RpcError(Exception):
    """Base of every error raised by revivify.impl.rpc."""

    # The error's data (module docstring "Data on the wire"): constructor parameters, in
    # order, each kept as an attribute of the same name.
    fields: ClassVar[tuple[str, ...]] = ()
    # Whether a field missing from received data, without a default in the constructor,
    # arrives as "" (else the data does not fit).
    missing_fields_are_empty: ClassVar[bool] = False
    # The constructor's defaults of `fields` (computed once per class).
    _field_defaults: ClassVar[dict[str, Any]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        parameters = inspect.signature(cls.__init__).parameters
        cls._field_defaults = {
            name: parameters[name].default for name in cls.fields
            if name in parameters and parameters[name].default is not inspect.Parameter.empty}

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def to_data(self) -> dict[str, Any]:
        """The fields the error carries, as plain msgpack-encodable values, in order."""
        return {name: getattr(self, name) for name in self.fields}

    @classmethod
    def from_data(cls, message: str, data: Mapping[str, Any]) -> Self:
        """The error `to_data` described: its constructor called with the fields' values.
        Raises KeyError for a missing field without a default unless
        `missing_fields_are_empty`; the caller (rpc/codec.py) treats any exception here as
        data that does not fit."""
        if not cls.fields:
            return cls(message)
        return cls(*(cls._received(data, name) for name in cls.fields))

    @classmethod
    def _received(cls, data: Mapping[str, Any], name: str) -> Any:
        if name in data:
            return data[name]
        if name in cls._field_defaults:
            return cls._field_defaults[name]
        if cls.missing_fields_are_empty:
            return ""
        raise KeyError(name)


# ------------------------------------------------------------------ errors that travel


class WrongServerUuid(RpcError):
    """The request named `got` as its destination, but this server is `expected`."""

    code: ClassVar[str] = "rpc.wrong_server_uuid"
    fields = ("expected", "got")

    def __init__(self, expected: str, got: str) -> None:
        super().__init__(
            f"request addressed to server {got!r} reached server {expected!r}; refused"
        )
        self.expected = expected
        self.got = got


class UnknownMethod(RpcError):
    code: ClassVar[str] = "rpc.unknown_method"
    fields = ("method",)

    def __init__(self, method: str) -> None:
        super().__init__(f"unknown method {method!r}")
        self.method = method


class MalformedRequest(RpcError):
    """The request did not decode; `field` is the path of the offending field, if any.

    `field` is relative to the request body (``"term"``, ``"peers[0].uuid"``), or starts
    with ``"envelope."`` when the RPC envelope itself was at fault.
    """

    code: ClassVar[str] = "rpc.malformed_request"
    fields = ("reason", "field")

    def __init__(self, reason: str, field: str | None = None) -> None:
        where = f" (field {field!r})" if field else ""
        super().__init__(f"malformed request{where}: {reason}")
        self.reason = reason
        self.field = field


class InternalError(RpcError):
    """The handler of `method` raised `exception_type` (not an AppError): a server bug."""

    code: ClassVar[str] = "rpc.internal"
    fields = ("method", "exception_type", "detail")

    def __init__(self, method: str, exception_type: str, detail: str) -> None:
        super().__init__(f"internal error in {method!r}: {exception_type}: {detail}")
        self.method = method
        self.exception_type = exception_type
        self.detail = detail


class ServerShuttingDown(RpcError):
    """The server is shutting down and did not run the call (safe to retry elsewhere)."""

    code: ClassVar[str] = "rpc.shutting_down"
    fields = ("server_uuid",)

    def __init__(self, server_uuid: str) -> None:
        super().__init__(f"server {server_uuid!r} is shutting down; call not run")
        self.server_uuid = server_uuid


class AppError(RpcError):
    """Base of the errors a handler raises on purpose; the client gets the same type back.

    A subclass names its wire `code` (unique, and not starting with ``"rpc."``, which is
    reserved for this package) and its data in ``fields`` (module docstring "Data on the
    wire": constructor parameters, in order, kept as attributes of the same names, each a
    plain value)::

        class TabletNotFound(AppError):
            code = "tserver.tablet_not_found"
            fields = ("tablet_id",)

            def __init__(self, tablet_id: str) -> None:
                super().__init__(f"tablet {tablet_id} is not hosted here")
                self.tablet_id = tablet_id

    The client rebuilds it when the class is registered with it (`open_rpc_client(...,
    app_errors=[TabletNotFound])`), and raises RemoteError(code, message, data) otherwise.
    """

    code: ClassVar[str] = "app.error"
    # Fields are added to an AppError over time (TabletNotRunning's reason): an older
    # server's error without one still decodes.
    missing_fields_are_empty: ClassVar[bool] = True

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if not isinstance(cls.code, str) or not cls.code or cls.code.startswith("rpc."):
            raise TypeError(
                f"{cls.__name__}.code must be a non-empty string outside 'rpc.*', "
                f"got {cls.code!r}"
            )


# ------------------------------------------------------------------ client-side errors


class RemoteError(RpcError):
    """The server answered with an error `code` this client has no registered type for."""

    def __init__(self, code: str, message: str, data: Mapping[str, Any] | None = None) -> None:
        super().__init__(f"remote error {code}: {message}")
        self.code = code
        self.remote_message = message
        self.data: dict[str, Any] = dict(data or {})

    def to_data(self) -> dict[str, Any]:
        return dict(self.data)


class MalformedResponse(RpcError):
    """A response did not decode (into the caller's response type, or as an envelope)."""

    def __init__(self, reason: str, field: str | None = None) -> None:
        where = f" (field {field!r})" if field else ""
        super().__init__(f"malformed response{where}: {reason}")
        self.reason = reason
        self.field = field


class MalformedFrame(RpcError):
    """The byte stream broke the framing rules; the connection it came from is unusable."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"malformed frame: {reason}")
        self.reason = reason


class FrameTooLarge(MalformedFrame):
    """A frame of `size` bytes (announced or about to be sent) exceeds `limit`."""

    def __init__(self, size: int, limit: int) -> None:
        reason = f"frame of {size} bytes exceeds the limit of {limit} bytes"
        RpcError.__init__(self, reason)
        self.reason = reason
        self.size = size
        self.limit = limit


class ConnectionClosed(RpcError):
    """The connection is gone; a call in flight on it may or may not have run."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"connection closed: {reason}")
        self.reason = reason


class ConnectFailed(ConnectionClosed):
    """No connection to `address` could be made; nothing was sent."""

    def __init__(self, address: str, reason: str) -> None:
        RpcError.__init__(self, f"cannot connect to {address}: {reason}")
        self.address = address
        self.reason = reason


WireError = (
    WrongServerUuid | UnknownMethod | MalformedRequest | InternalError | ServerShuttingDown
    | AppError
)
"""An error that can be put into a response."""

SYSTEM_ERRORS: tuple[type[WireError], ...] = (
    WrongServerUuid, UnknownMethod, MalformedRequest, InternalError, ServerShuttingDown,
)
"""The travelling errors this package defines (their codes start with ``rpc.``)."""
