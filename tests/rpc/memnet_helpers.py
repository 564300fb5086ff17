"""Helpers for the tests that run the RPC layer over a MemoryNetwork under MockClock.

Every test body runs under trio.testing.MockClock(autojump_threshold=0): whenever all tasks
are blocked the clock jumps to the next deadline, so delays cost no wall time and a hang
fails at once (the virtual deadline arrives immediately) instead of stalling the suite.
"""

from __future__ import annotations

import functools
import random
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import trio
import trio.testing
from rpc_helpers import SERVER_UUID, Probe, make_service

from revivify.impl.rpc import RpcServer, serve_rpc
from revivify.impl.testing import MemoryNetwork

TS1 = "ts-1"
TS2 = "ts-2"
CLIENT = "client-1"
CLIENT2 = "client-2"
PORT = 7050
VIRTUAL_DEADLINE = 600.0


def run_mock(test: Callable[[], Awaitable[None]], deadline: float = VIRTUAL_DEADLINE) -> None:
    """Run one async test body under a MockClock that jumps whenever everything waits."""

    async def main() -> None:
        with trio.fail_after(deadline):
            await test()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


def network(seed: int = 0, **options: Any) -> MemoryNetwork:
    return MemoryNetwork(random.Random(seed), **options)


@asynccontextmanager
async def memory_server(
    net: MemoryNetwork,
    host: str = TS1,
    probe: Probe | None = None,
    port: int = PORT,
    server_uuid: str = SERVER_UUID,
    **options: Any,
) -> AsyncIterator[RpcServer]:
    """serve_rpc on host:port of `net` (as the process on `host`), cancelled at the end."""
    service = make_service(probe if probe is not None else Probe())
    async with trio.open_nursery() as nursery:
        server: RpcServer = await nursery.start(functools.partial(
            serve_rpc, service, server_uuid, host, port, network=net.host(host), **options))
        yield server
        nursery.cancel_scope.cancel()
