"""One RPC connection per server, opened on first use, reopened after it breaks.

The RPC layer addresses every request to a server UUID and refuses a request naming another
(WrongServerUuid, before any handler runs), so a client needs a server's UUID before it can
call it, while users only know addresses. The UUID handshake gets it:

1. connect to HOST:PORT and call ``Admin.Status`` with dest_uuid ``""``;
2. the server refuses with WrongServerUuid(expected=<its UUID>, got=""): the refusal itself
   carries the UUID (no handler ran, nothing changed);
3. from then on, connect to HOST:PORT with dest_uuid = that UUID.

A UUID also arrives without a handshake: from a Raft configuration (Peer(uuid, address))
or a NotLeader hint; `learn` records it. If a server at a known address refuses with
WrongServerUuid later (it was wiped and came back with a new identity), the address's UUID
is replaced by the one in the refusal, the connection is dropped, and the error goes to the
caller (who may retry: the next call uses the new UUID).

Connections live in tasks of a nursery the pool is given (an RPC client is an async context
manager with its own background tasks, so it needs a task to hold it open). A connection
that closed (ConnectionClosed: the server went away or broke the protocol) is replaced on the
next call to that address; a failed connect raises ConnectFailed to the caller and leaves
nothing behind. At most one connect per address runs at a time.

A connection that went silent is dropped too (issue 32). TCP does not notice a path that
drops packets for a long time (after a network partition heals, a connection waits for
its next retransmission, which backs off up to 120 s), so a call that gets no answer within
the call timeout (`bounded_call`'s NoAnswer) while NOTHING at all arrived on its connection
since the call was sent drops that connection: the next call to the address dials afresh,
and a healed path serves it at once. A connection that did receive something meanwhile
(other calls' answers: the server is alive, this call is just slow) is kept. A stalled
server costs the same either way (a new connection to it is as silent as the old one).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from typing import TypeVar

import attrs
import msgspec
import trio

from revivify.impl.rpc import AppError, Network, RpcClient, WrongServerUuid, open_rpc_client
from revivify.impl.tserver.api import ADMIN_STATUS, APP_ERRORS, Empty, ServerStatus

from .errors import NoAnswer
from .options import parse_address

ResponseT = TypeVar("ResponseT")

HANDSHAKE_UUID = ""
"""The dest_uuid of the handshake call: no server has it, so every server refuses it."""


@attrs.define(eq=False)
class _Held:
    client: RpcClient
    release: trio.Event


class ServerConnections:
    """The pool: a connection per address, and what is known of each address's UUID."""

    def __init__(self, nursery: trio.Nursery, src_uuid: str, *,
                 network: Network | None = None,
                 app_errors: Iterable[type[AppError]] = APP_ERRORS) -> None:
        self._nursery = nursery
        self.src_uuid = src_uuid
        self._network = network
        self._app_errors = tuple(app_errors)
        self._uuids: dict[str, str] = {}
        self._held: dict[str, _Held] = {}
        self._locks: dict[str, trio.Lock] = {}
        self._closed = False

    # ------------------------------------------------------------------ UUIDs

    def learn(self, address: str, uuid: str) -> None:
        """Record that `uuid` serves at `address` (a config, a hint); drops a stale link."""
        if not uuid or self._uuids.get(address) == uuid:
            return
        self._uuids[address] = uuid
        self._drop(address)

    def known_uuid(self, address: str) -> str | None:
        return self._uuids.get(address)

    async def uuid_of(self, address: str) -> str:
        """The UUID of the server at `address`, by the handshake if not yet known.

        Raises InvalidAddress, ConnectFailed / ConnectionClosed (unreachable), or another
        RpcError if the server answers the handshake strangely.
        """
        known = self._uuids.get(address)
        if known is not None:
            return known
        uuid = await handshake(address, self.src_uuid, network=self._network,
                               app_errors=self._app_errors)
        self._uuids[address] = uuid
        return uuid

    # ------------------------------------------------------------------ calls

    async def call(self, address: str, method: str, request: msgspec.Struct,
                   response_type: type[ResponseT]) -> ResponseT:
        """`method` on the server at `address` (connecting, handshaking as needed).

        Raises what the call raised; on WrongServerUuid the address's UUID is updated first.
        """
        client = await self._client(address)
        try:
            return await client.call(method, request, response_type)
        except WrongServerUuid as refusal:
            if refusal.expected:
                self.learn(address, refusal.expected)
            else:
                self._uuids.pop(address, None)
                self._drop(address)
            raise

    def connected(self, address: str) -> bool:
        """Whether a connection to `address` is open (a request may have gone out on it)."""
        current = self._held.get(address)
        return current is not None and not current.client.closed

    async def bounded_call(self, seconds: float, address: str, method: str,
                           request: msgspec.Struct, response_type: type[ResponseT]
                           ) -> ResponseT:
        """`call`, given up after `seconds` with NoAnswer (the client's call timeout).

        NoAnswer.maybe_sent is True when a connection to the server was open at that moment:
        the request may have left (a request is only sent on an open connection, after the
        handshake), so it may still run there. The connection stays if anything arrived
        on it since the call was sent (a late answer to the abandoned call is dropped by
        the RPC client, and other calls share it); if nothing did, it is dropped and the
        next call redials (module docstring: a silent connection).
        """
        before = self._held.get(address)
        receipts = before.client.receipts if before is not None else 0
        with trio.move_on_after(seconds):
            return await self.call(address, method, request, response_type)
        maybe_sent = self.connected(address)
        held = self._held.get(address)
        if held is not None and held is before and held.client.receipts == receipts:
            self._drop(address)  # silent since the call left: redial (module docstring)
        raise NoAnswer(address, seconds, maybe_sent=maybe_sent)

    async def _client(self, address: str) -> RpcClient:
        if self._closed:
            raise RuntimeError("the connection pool is closed")
        lock = self._locks.setdefault(address, trio.Lock())
        async with lock:
            current = self._held.get(address)
            if current is not None and not current.client.closed:
                return current.client
            self._drop(address)
            uuid = await self.uuid_of(address)
            host, port = parse_address(address)
            held: _Held = await self._nursery.start(self._hold, host, port, uuid)
            self._held[address] = held
            return held.client

    async def _hold(self, host: str, port: int, uuid: str,
                    task_status: trio.TaskStatus[_Held] = trio.TASK_STATUS_IGNORED) -> None:
        async with open_rpc_client(host, port, uuid, self.src_uuid,
                                   app_errors=self._app_errors,
                                   network=self._network) as client:
            held = _Held(client, trio.Event())
            task_status.started(held)
            await held.release.wait()

    def _drop(self, address: str) -> None:
        held = self._held.pop(address, None)
        if held is not None:
            held.release.set()

    def close(self) -> None:
        """Close every connection (their tasks end); later calls raise RuntimeError."""
        self._closed = True
        for address in list(self._held):
            self._drop(address)


async def handshake(address: str, src_uuid: str, *, network: Network | None = None,
                    app_errors: Iterable[type[AppError]] = APP_ERRORS) -> str:
    """The UUID of the server at `address`, from its refusal of a call to UUID ``""``."""
    host, port = parse_address(address)
    async with open_rpc_client(host, port, HANDSHAKE_UUID, src_uuid, app_errors=app_errors,
                               network=network) as probe:
        try:
            status = await probe.call(ADMIN_STATUS, Empty(), ServerStatus)
        except WrongServerUuid as refusal:
            return refusal.expected
    return status.uuid  # a server whose UUID is "" answered (never in practice)


@asynccontextmanager
async def open_connections(src_uuid: str, *, network: Network | None = None,
                           app_errors: Iterable[type[AppError]] = APP_ERRORS
                           ) -> AsyncIterator[ServerConnections]:
    """A ServerConnections whose connections all close when the block ends (`app_errors`:
    the errors its servers may answer with: the tablet server's by default, the master's
    for a MasterClient)."""
    body_error: BaseException | None = None
    try:
        async with trio.open_nursery() as nursery:
            pool = ServerConnections(nursery, src_uuid, network=network,
                                     app_errors=app_errors)
            try:
                yield pool
            except BaseException as exc:
                body_error = exc
                raise
            finally:
                pool.close()
    except BaseExceptionGroup as group:
        # The caller's own exception, not a failure of the pool: give it back unwrapped
        # rather than inside the ExceptionGroup the nursery put around it.
        if body_error is not None and len(group.exceptions) == 1:
            only: BaseException = group.exceptions[0]
            if only is body_error:
                raise only from None
        raise


__all__ = ["HANDSHAKE_UUID", "ServerConnections", "handshake", "open_connections"]
