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

Data on the wire is a msgpack map of plain values (`to_data`), rebuilt by `from_data`. A
subclass of AppError with fields of its own overrides both; the default pair suits an error
that is only a message.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Self


class RpcError(Exception):
    """Base of every error raised by revivify.impl.rpc."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def to_data(self) -> dict[str, Any]:
        """The fields the error carries, as plain msgpack-encodable values."""
        return {}


# ------------------------------------------------------------------ errors that travel


class WrongServerUuid(RpcError):
    """The request named `got` as its destination, but this server is `expected`."""

    code: ClassVar[str] = "rpc.wrong_server_uuid"

    def __init__(self, expected: str, got: str) -> None:
        super().__init__(
            f"request addressed to server {got!r} reached server {expected!r}; refused"
        )
        self.expected = expected
        self.got = got

    def to_data(self) -> dict[str, Any]:
        return {"expected": self.expected, "got": self.got}

    @classmethod
    def from_data(cls, message: str, data: Mapping[str, Any]) -> Self:
        return cls(expected=str(data["expected"]), got=str(data["got"]))


class UnknownMethod(RpcError):
    code: ClassVar[str] = "rpc.unknown_method"

    def __init__(self, method: str) -> None:
        super().__init__(f"unknown method {method!r}")
        self.method = method

    def to_data(self) -> dict[str, Any]:
        return {"method": self.method}

    @classmethod
    def from_data(cls, message: str, data: Mapping[str, Any]) -> Self:
        return cls(str(data["method"]))


class MalformedRequest(RpcError):
    """The request did not decode; `field` is the path of the offending field, if any.

    `field` is relative to the request body (``"term"``, ``"peers[0].uuid"``), or starts
    with ``"envelope."`` when the RPC envelope itself was at fault.
    """

    code: ClassVar[str] = "rpc.malformed_request"

    def __init__(self, reason: str, field: str | None = None) -> None:
        where = f" (field {field!r})" if field else ""
        super().__init__(f"malformed request{where}: {reason}")
        self.reason = reason
        self.field = field

    def to_data(self) -> dict[str, Any]:
        return {"reason": self.reason, "field": self.field}

    @classmethod
    def from_data(cls, message: str, data: Mapping[str, Any]) -> Self:
        field = data.get("field")
        return cls(str(data["reason"]), None if field is None else str(field))


class InternalError(RpcError):
    """The handler of `method` raised `exception_type` (not an AppError): a server bug."""

    code: ClassVar[str] = "rpc.internal"

    def __init__(self, method: str, exception_type: str, detail: str) -> None:
        super().__init__(f"internal error in {method!r}: {exception_type}: {detail}")
        self.method = method
        self.exception_type = exception_type
        self.detail = detail

    def to_data(self) -> dict[str, Any]:
        return {"method": self.method, "exception_type": self.exception_type,
                "detail": self.detail}

    @classmethod
    def from_data(cls, message: str, data: Mapping[str, Any]) -> Self:
        return cls(str(data["method"]), str(data["exception_type"]), str(data["detail"]))


class ServerShuttingDown(RpcError):
    """The server is shutting down and did not run the call (safe to retry elsewhere)."""

    code: ClassVar[str] = "rpc.shutting_down"

    def __init__(self, server_uuid: str) -> None:
        super().__init__(f"server {server_uuid!r} is shutting down; call not run")
        self.server_uuid = server_uuid

    def to_data(self) -> dict[str, Any]:
        return {"server_uuid": self.server_uuid}

    @classmethod
    def from_data(cls, message: str, data: Mapping[str, Any]) -> Self:
        return cls(str(data["server_uuid"]))


class AppError(RpcError):
    """Base of the errors a handler raises on purpose; the client gets the same type back.

    A subclass names its wire `code` (unique, and not starting with ``"rpc."``, which is
    reserved for this package)::

        class NotLeader(AppError):
            code = "consensus.not_leader"

            def __init__(self, leader_hint: str | None) -> None:
                super().__init__(f"not the leader (leader hint: {leader_hint})")
                self.leader_hint = leader_hint

            def to_data(self) -> dict[str, Any]:
                return {"leader_hint": self.leader_hint}

            @classmethod
            def from_data(cls, message: str, data: Mapping[str, Any]) -> Self:
                return cls(data["leader_hint"])

    The client rebuilds it when the class is registered with it (`open_rpc_client(...,
    app_errors=[NotLeader])`), and raises RemoteError(code, message, data) otherwise.

    The common case needs neither method: name the constructor's parameters (kept as
    attributes of the same names, all strings or ints) in ``fields``, and the data is
    those attributes, rebuilt by calling the constructor with them::

        class TabletNotFound(AppError):
            code = "tserver.tablet_not_found"
            fields = ("tablet_id",)

            def __init__(self, tablet_id: str) -> None:
                super().__init__(f"tablet {tablet_id} is not hosted here")
                self.tablet_id = tablet_id
    """

    code: ClassVar[str] = "app.error"
    fields: ClassVar[tuple[str, ...]] = ()

    def to_data(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.fields}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if not isinstance(cls.code, str) or not cls.code or cls.code.startswith("rpc."):
            raise TypeError(
                f"{cls.__name__}.code must be a non-empty string outside 'rpc.*', "
                f"got {cls.code!r}"
            )

    @classmethod
    def from_data(cls, message: str, data: Mapping[str, Any]) -> Self:
        if not cls.fields:
            return cls(message)
        # A field the sender left out (or an older server) arrives as its "empty" value.
        return cls(*(data.get(name, "") for name in cls.fields))


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
