"""Benchmark: RPC calls/s over loopback TCP and over the in-memory network, side by side.

    python bench/rpc.py [--seconds 1.0] [--rounds 3]

One server, a 64-byte echo method. Shapes: one caller making calls one after another (the
round-trip latency bound), 64 concurrent callers on one connection (multiplexing by
call_id), and 8 connections with 8 callers each. Each shape runs on TCP (127.0.0.1) and on
MemoryNetwork in the same round; the table gives the median calls/s over the rounds, the
median per-call latency of the sequential shape, and each shape's ratio to the sequential one
on the same transport. Client and server share one process (one trio thread, one core), so
the rates measure the Python cost of a call at both ends together (about 70-100 us here):
concurrency on one core adds little. No targets yet: these are the baseline the servers'
issues start from.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

import msgspec
import trio

from revivify.impl.rpc import CallContext, RpcClient, Service, open_rpc_client, serve_rpc
from revivify.impl.rpc.transport import Network
from revivify.impl.testing import MemoryNetwork

SERVER = "bench-server"
CLIENT = "bench-client"


class Blob(msgspec.Struct):
    data: bytes


def service() -> Service:
    s = Service("bench")

    async def echo(request: Blob, context: CallContext) -> Blob:
        return request

    s.register("Echo", Blob, Blob, echo)
    return s


async def measure(network: Network | None, client_network: Network | None, host: str,
                  connections: int, callers: int, seconds: float) -> float:
    """Calls per second with `connections` x `callers` concurrent callers for `seconds`."""
    calls = 0
    payload = Blob(b"x" * 64)
    async with trio.open_nursery() as nursery:
        server = await nursery.start(
            lambda task_status: serve_rpc(service(), SERVER, host, 0, network=network,
                                          task_status=task_status))
        deadline = trio.current_time() + seconds

        async def caller(client: RpcClient) -> None:
            nonlocal calls
            while trio.current_time() < deadline:
                await client.call("Echo", payload, Blob)
                calls += 1

        async def connection() -> None:
            async with open_rpc_client(host, server.port, SERVER, CLIENT,
                                       network=client_network) as client, \
                    trio.open_nursery() as callers_nursery:
                for _ in range(callers):
                    callers_nursery.start_soon(caller, client)

        t0 = time.perf_counter()
        async with trio.open_nursery() as clients:
            for _ in range(connections):
                clients.start_soon(connection)
        elapsed = time.perf_counter() - t0
        nursery.cancel_scope.cancel()
    return calls / elapsed


SHAPES = (("1 caller, sequential", 1, 1), ("64 callers, 1 connection", 1, 64),
          ("8 connections x 8 callers", 8, 8))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=1.0)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    results: dict[tuple[str, str], list[float]] = {}
    for _ in range(a.rounds):
        for transport in ("tcp", "memory"):
            for name, conns, callers in SHAPES:
                if transport == "tcp":
                    rate = trio.run(measure, None, None, "127.0.0.1", conns, callers,
                                    a.seconds)
                else:
                    net = MemoryNetwork(random.Random(1))
                    rate = trio.run(measure, net.host("server"), net.host("client"),
                                    "server", conns, callers, a.seconds)
                results.setdefault((transport, name), []).append(rate)
    print(f"RPC echo, 64-byte body, median of {a.rounds} rounds of {a.seconds:.1f} s")
    print("| transport | shape | calls/s | x sequential | latency (sequential) |")
    print("|---|---|---:|---:|---:|")
    for transport in ("tcp", "memory"):
        base = statistics.median(results[(transport, SHAPES[0][0])])
        for name, _, _ in SHAPES:
            rate = statistics.median(results[(transport, name)])
            latency = f"{1e6 / base:,.0f} us" if name == SHAPES[0][0] else ""
            print(f"| {transport} | {name} | {rate:,.0f} | {rate / base:.2f} | {latency} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
