"""Shared helpers for the RPC tests: message types, a test service, a server fixture.

Imported as a top-level module: pytest's default import mode puts tests/rpc on sys.path.
No pytest-trio: every test body is an async function run by `run`, under a deadline so a
hang fails the test instead of stalling the suite.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from typing import Any, Self

import attrs
import msgspec
import trio

from revivify.impl.rpc import AppError, CallContext, RpcServer, Service, serve_rpc

SERVER_UUID = "ts-0000-aaaa"
CLIENT_UUID = "client-0000-bbbb"
HOST = "127.0.0.1"
DEADLINE = 10.0


def run(test: Callable[[], Awaitable[None]], deadline: float = DEADLINE) -> None:
    """Run one async test body under trio with a deadline."""

    async def main() -> None:
        with trio.fail_after(deadline):
            await test()

    trio.run(main)


class Echo(msgspec.Struct):
    text: str


class Wait(msgspec.Struct):
    key: str


class Waited(msgspec.Struct):
    key: str
    call_id: int


class Peer(msgspec.Struct):
    uuid: str
    port: int = 0


class Vote(msgspec.Struct):
    term: int
    candidate: str
    peers: list[Peer] = []


class VoteGranted(msgspec.Struct):
    term: int
    granted: bool


class BlobRequest(msgspec.Struct):
    size: int


class Blob(msgspec.Struct):
    data: bytes


class NotLeader(AppError):
    code = "test.not_leader"

    def __init__(self, leader_hint: str | None) -> None:
        super().__init__(f"not the leader; leader hint {leader_hint}")
        self.leader_hint = leader_hint

    def to_data(self) -> dict[str, Any]:
        return {"leader_hint": self.leader_hint}

    @classmethod
    def from_data(cls, message: str, data: Mapping[str, Any]) -> Self:
        return cls(data["leader_hint"])


class Overloaded(AppError):
    code = "test.overloaded"


@attrs.define
class Probe:
    """What the test service's handlers saw, and gates the test opens to let them finish."""

    gates: dict[str, trio.Event] = attrs.field(factory=dict)
    arrived: list[str] = attrs.field(factory=list)
    contexts: list[CallContext] = attrs.field(factory=list)
    active: int = 0
    max_active: int = 0
    cancelled: int = 0

    def gate(self, key: str) -> trio.Event:
        return self.gates.setdefault(key, trio.Event())

    async def until(self, predicate: Callable[[], bool]) -> None:
        while not predicate():
            await trio.sleep(0.001)


def make_service(probe: Probe) -> Service:
    """Echo, Wait (until its gate opens), Hang, Vote, and handlers that fail on purpose."""
    service = Service("test")

    async def echo(request: Echo, context: CallContext) -> Echo:
        probe.contexts.append(context)
        return Echo(request.text)

    async def wait(request: Wait, context: CallContext) -> Waited:
        probe.arrived.append(request.key)
        probe.active += 1
        probe.max_active = max(probe.max_active, probe.active)
        try:
            await probe.gate(request.key).wait()
        finally:
            probe.active -= 1
        return Waited(request.key, context.call_id)

    async def hang(request: Wait, context: CallContext) -> Waited:
        probe.arrived.append(request.key)
        try:
            await trio.sleep_forever()
        except trio.Cancelled:
            probe.cancelled += 1
            raise

    async def vote(request: Vote, context: CallContext) -> VoteGranted:
        return VoteGranted(request.term, granted=len(request.peers) % 2 == 0)

    async def not_leader(request: Echo, context: CallContext) -> Echo:
        raise NotLeader(leader_hint=request.text)

    async def overloaded(request: Echo, context: CallContext) -> Echo:
        raise Overloaded(f"queue full: {request.text}")

    async def crash(request: Echo, context: CallContext) -> Echo:
        known: dict[str, str] = {}
        return Echo(known[request.text])  # a handler bug: KeyError

    async def wrong_type(request: Echo, context: CallContext) -> Echo:
        return VoteGranted(1, True)  # type: ignore[return-value]

    async def blob(request: BlobRequest, context: CallContext) -> Blob:
        return Blob(b"x" * request.size)

    service.register("Echo", Echo, Echo, echo)
    service.register("Wait", Wait, Waited, wait)
    service.register("Hang", Wait, Waited, hang)
    service.register("Vote", Vote, VoteGranted, vote)
    service.register("NotLeader", Echo, Echo, not_leader)
    service.register("Overloaded", Echo, Echo, overloaded)
    service.register("Crash", Echo, Echo, crash)
    service.register("WrongType", Echo, Echo, wrong_type)
    service.register("Blob", BlobRequest, Blob, blob)
    return service


@asynccontextmanager
async def running_server(
    probe: Probe | None = None, server_uuid: str = SERVER_UUID, **options: Any
) -> AsyncIterator[RpcServer]:
    """serve_rpc on 127.0.0.1:<any port>, cancelled when the block ends."""
    service = make_service(probe if probe is not None else Probe())
    async with trio.open_nursery() as nursery:
        server: RpcServer = await nursery.start(
            functools.partial(serve_rpc, service, server_uuid, HOST, 0, **options))
        yield server
        nursery.cancel_scope.cancel()


async def read_until_eof(stream: trio.SocketStream) -> bytes:
    """Everything the peer sends until it closes the connection."""
    received = bytearray()
    while chunk := await stream.receive_some(65536):
        received += chunk
    return bytes(received)
