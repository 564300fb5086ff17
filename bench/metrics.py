"""Benchmark: what Prometheus metrics cost a replicated write, in CPU time, in one process.

    python bench/metrics.py [--rounds 7] [--writes 1600] [--clients 64]

bench/tserver.py ``--metrics both`` measures the cost on real processes, but on a shared
2-core machine the rest of the load moves throughput (and even CPU time per write) by tens
of percent between rounds, far more than the 3% sought. This one removes the scheduler
from the measurement: an in-process cluster (impl/testing/cluster.py: 3 tablet servers,
SimDisk, MemoryNetwork, trio's MockClock, disk calls inline) runs ``--clients`` concurrent
writers of ``--writes`` puts (8-byte key, 256-byte value) through the leader, and the
process's CPU time (``time.process_time``) per acknowledged write is compared between
servers with metrics and servers with ``metrics=False`` (every family a no-op). Every path
of a write runs in this one thread: the client's calls, the three servers' RPC, Raft, WAL
(in memory) and the trace writer (real files), so the denominator is the whole CPU cost of
a write in Python, and the numerator what the metrics add to it. Rounds alternate on/off
(the order flips every round); the cost is the median over rounds of on/off - 1.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import trio
import trio.testing

from revivify.impl.rpc import open_rpc_client
from revivify.impl.tablet.ops import RowOp
from revivify.impl.testing.cluster import PORT, open_cluster
from revivify.impl.tserver import api


async def one_run(trace_dir: str, metrics: bool, writes: int, clients: int) -> float:
    """CPU microseconds per acknowledged write, after a warm-up of one write per client."""
    async with open_cluster(trace_dir, 3, seed=7, options={"metrics": metrics}) as c:
        await c.start_all()
        await c.create_tablet("t1")
        leader = await c.wait_for_leader("t1")
        value = b"v" * 256

        host, uuid = c.servers[leader].host, c.uuids[leader]

        async def client(k: int, first: int, count: int) -> None:
            # One connection per client for the whole run (as bench/tserver.py's clients).
            async with open_rpc_client(host, PORT, uuid, f"bench-{k}",
                                       app_errors=api.APP_ERRORS,
                                       network=c.net.host("client")) as rpc:
                for seq in range(first, first + count):
                    req = api.Write("t1", f"c{k}", seq,
                                    [RowOp("put", b"%04d%04d" % (k, seq), value)])
                    await rpc.call(api.DATA_WRITE, req, api.Written)

        async def load(first: int, count: int) -> None:
            async with trio.open_nursery() as nursery:
                for k in range(clients):
                    nursery.start_soon(client, k, first, count)

        await load(0, 1)
        started = time.process_time()
        await load(1, writes // clients)
        return (time.process_time() - started) / (writes // clients * clients) * 1e6


def measure(metrics: bool, writes: int, clients: int) -> float:
    with tempfile.TemporaryDirectory(prefix="revivify-bench-metrics-") as d:
        return trio.run(one_run, d, metrics, writes, clients,
                        clock=trio.testing.MockClock(autojump_threshold=0))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--writes", type=int, default=1600, help="writes per run (all clients)")
    ap.add_argument("--clients", type=int, default=64)
    args = ap.parse_args()
    on: list[float] = []
    off: list[float] = []
    for r in range(args.rounds):
        order = (True, False) if r % 2 == 0 else (False, True)
        for metrics in order:
            us = measure(metrics, args.writes, args.clients)
            (on if metrics else off).append(us)
            print(f"  round {r + 1}: metrics {'on ' if metrics else 'off'} {us:7.1f} us/write",
                  flush=True)
    costs = [a / b - 1 for a, b in zip(on, off, strict=True)]
    cost = statistics.median(costs)
    added = statistics.median(a - b for a, b in zip(on, off, strict=True))
    print(f"\nCPU time per write, {args.clients} clients, {args.writes} writes per run, "
          "3 servers and the client in one process (in-memory disk and network):")
    # The runs are deterministic (seeded, MockClock): on and off do the same work but the
    # metrics, so the least CPU time of each side (noise only adds) is compared too.
    by_min = min(on) / min(off) - 1
    print("| rounds | us/write metrics on (median) | off (median) | added us/write (median) "
          "| cost per round | cost (median) | on / off (least) | cost (least) | target |")
    print("|---:|---:|---:|---:|---|---:|---:|---:|---:|")
    print(f"| {args.rounds} | {statistics.median(on):.1f} | {statistics.median(off):.1f} | "
          f"{added:+.1f} | {' '.join(f'{x:+.1%}' for x in costs)} | {cost:+.1%} | "
          f"{min(on):.1f} / {min(off):.1f} | {by_min:+.1%} | < 3% "
          f"({'MET' if max(cost, by_min) < 0.03 else 'MISSED'}) |")
    print("(The in-process cluster costs more CPU per write than the real processes (SimDisk, "
          "the in-memory network, MockClock): the added microseconds are the figure to set "
          "against a real server's CPU time per write, bench/tserver.py's.)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
