"""One call to one server on a blocking socket: the fast path of ``tserver status`` and
``master status`` (issue 31: a call to one server answers in well under 150 ms).

The trio client (impl/client) is the general machine: pools of connections, leader
discovery, retries, deadlines threaded through everything. A command that asks one server
one question needs none of it, and importing trio and the client library costs several
times what the call itself does. This caller speaks the same wire with the same code: the
frames of impl/rpc/framing.py, the envelopes, bodies and error registry of
impl/rpc/codec.py (nothing of the protocol is written twice), on a plain socket.

It is a fast path, not a second client: it answers only the plain case, a server that
takes the connection, refuses the UUID handshake naming its UUID (the call to UUID ``""``,
impl/client/connections.py) and answers the call. On anything else (a refused connect, an
error answer, a reset) `call` returns None and the command runs its usual trio path, whose
errors and messages stay the one source of truth; on silence until the deadline it raises
`OutOfTime`, so that a stalled server costs the deadline once, not twice. With a fault
file active (impl/faultfile.py, tests only) it always defers: the injected faults are the
trio client's to apply.
"""

from __future__ import annotations

import os
import socket
import time
from typing import TypeVar

from revivify.impl.rpc.address import parse_address
from revivify.impl.rpc.codec import (
    Request,
    decode_response,
    decode_response_body,
    encode_body,
    encode_request,
    error_from_response,
    error_registry,
)
from revivify.impl.rpc.errors import RpcError, WrongServerUuid
from revivify.impl.rpc.framing import FrameDecoder, encode_frame

T = TypeVar("T")

FAULT_FILE_ENV = "REVIVIFY_FAULT_FILE"  # impl/faultfile.py ENV (not imported: attrs, json)
HANDSHAKE_UUID = ""  # impl/client/connections.py: no server has it, every server refuses it
RECEIVE_SIZE = 64 * 1024


class OutOfTime(Exception):
    """No answer before the deadline."""


class _Deferred(Exception):
    """This call is not for the fast path (the command takes the trio path)."""


class _Connection:
    """One blocking connection: send a request, read frames until its response."""

    def __init__(self, sock: socket.socket, src_uuid: str, deadline: float) -> None:
        self.sock = sock
        self.src_uuid = src_uuid
        self.deadline = deadline
        self.decoder = FrameDecoder()
        self.next_call_id = 1
        self.errors = error_registry()

    def call(self, dest_uuid: str, method: str, request: object, response_type: type[T]) -> T:
        call_id, self.next_call_id = self.next_call_id, self.next_call_id + 1
        envelope = Request(call_id=call_id, method=method, dest_uuid=dest_uuid,
                           src_uuid=self.src_uuid, lamport=0, body=encode_body(request))
        self.sock.sendall(encode_frame(encode_request(envelope)))
        while True:
            for payload in self._frames():
                response = decode_response(payload)
                if response.call_id != call_id:
                    continue  # not ours (no other call is in flight: never in practice)
                if not response.ok:
                    raise error_from_response(response, self.errors)
                return decode_response_body(response, response_type, method)

    def _frames(self) -> list[bytes]:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise OutOfTime
        self.sock.settimeout(left)
        try:
            data = self.sock.recv(RECEIVE_SIZE)
        except TimeoutError:
            raise OutOfTime from None
        if not data:
            raise _Deferred("connection closed")
        return self.decoder.feed(data)


def call(address: str, src_uuid: str, method: str, request: object, response_type: type[T],
         deadline_seconds: float) -> T | None:
    """`method`'s typed answer from the server at `address`, its UUID learnt first by the
    handshake; None when the fast path does not apply (the caller takes the trio path);
    OutOfTime when the server stays silent for `deadline_seconds`."""
    if os.environ.get(FAULT_FILE_ENV):
        return None
    deadline = time.monotonic() + deadline_seconds
    try:
        host, port = parse_address(address)
        with socket.create_connection((host, port), timeout=deadline_seconds) as sock:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            connection = _Connection(sock, src_uuid, deadline)
            try:
                connection.call(HANDSHAKE_UUID, method, request, response_type)
            except WrongServerUuid as refusal:
                uuid = refusal.expected
            else:
                return None  # a server whose UUID is "": the trio path says what it is
            return connection.call(uuid, method, request, response_type)
    except TimeoutError:
        raise OutOfTime from None
    except (OSError, RpcError, _Deferred, ValueError):
        return None


__all__ = ["OutOfTime", "call"]
