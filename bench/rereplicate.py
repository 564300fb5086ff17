"""Benchmark: re-replication by the masters after a tablet server's kill -9, in real processes.

    python bench/rereplicate.py [--sizes 10,100] [--trials 3] [--big-trials 2]
                                [--rows-per-tablet 5] [--failed-after-ms 3000]
                                [--quick] [--keep] [--dir DIR]

(`make bench` runs it.) One master and 4 tablet servers on 127.0.0.1
(impl/processes/masters.py), fsync on, default timers; the master's policy declares a server
failed after ``--tserver-failed-after-ms`` (3000, the default) without a heartbeat.

Per trial: a table of N tablets x 3 replicas is created, a few rows written to each tablet
(``--rows-per-tablet``, through the masters), and every tablet awaited RUNNING with its 3
voters; then the tablet server holding the most replicas is killed with SIGKILL and the clock
starts. It stops when every tablet is fully replicated again: 3 live VOTERs in the catalog
(GetTableLocations, polled every 100 ms), none on the dead server, no move in progress, and
each of them RUNNING on its server (``Admin.Status``). Meanwhile every live server's running
copies (``Admin.ListCopies``, what ``revivify copy list`` shows) are polled every 50 ms; the
largest ``bytes_done`` seen per (destination, tablet) is the bytes that copy moved (a copy
that started and finished between two polls is missed: the table says how many were seen).
The copy rate is those bytes, and the rows of the re-created replicas, over the time from
the kill to healed. The killed server is restarted and the table deleted before the next
trial, so each trial starts from 4 live servers.

What the time holds: the failure timeout (``--failed-after-ms``; the kill is detected only
after it), the master's next background round, the catalog write recording the moves, one
ChangeConfig per tablet adding a NON_VOTER, the leader's tablet copy to it, its promotion,
and the removal of the dead replica. "after timeout" in the table is the time minus the
failure timeout: what the machinery itself took.

Figures, not assertions: the exit status is 0 whatever they are (2 if the cluster could not
be run). The machine has 2 cores and is shared. Every process is killed at the end; the
temporary directory is removed unless --keep.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
from collections.abc import Awaitable, Callable
from typing import TypeVar

import trio

from revivify.impl.client import ClientOptions, list_copies, open_table_client, server_status
from revivify.impl.client.master import master_call
from revivify.impl.master import api
from revivify.impl.processes.masters import MasterProcesses
from revivify.impl.rpc.backoff import Backoff

R = TypeVar("R")
REPLICAS = 3
TSERVERS = 4
FAST = ClientOptions(deadline=60.0, backoff=Backoff(initial=0.02, max=0.1, jitter=0.5))
HEAL_BOUND = 300.0  # seconds: a hang, not a measurement


def run(fn: Callable[[], Awaitable[R]], seconds: float = 120.0) -> R:
    async def main() -> R:
        with trio.fail_after(seconds):
            return await fn()
    return trio.run(main)


async def locations(masters: list[str], name: str) -> api.TableLocationsReply:
    return await master_call(masters, api.MASTER_TABLE_LOCATIONS, api.TableName(name),
                             api.TableLocationsReply, FAST)


async def hosted(cluster: MasterProcesses) -> dict[str, dict[str, str]]:
    """server uuid -> tablet id -> replica state, for every live tablet server."""
    out: dict[str, dict[str, str]] = {}
    for s in cluster.tservers.servers:
        if not s.running:
            continue
        try:
            with trio.fail_after(5):
                status = await server_status(s.address)
        except Exception:  # a server busy or starting: not healed as far as we can tell
            continue
        out[s.uuid] = {r.tablet_id: r.state for r in status.replicas}
    return out


async def fully_replicated(cluster: MasterProcesses, name: str, tablets: int,
                           dead: str | None) -> bool:
    locs = await locations(cluster.master_addresses, name)
    if len(locs.tablets) != tablets:
        return False
    for t in locs.tablets:
        if t.state != "RUNNING" or t.moving_from is not None or len(t.replicas) != REPLICAS:
            return False
        if not all(r.member_type == "VOTER" and r.live and r.uuid != dead
                   for r in t.replicas):
            return False
    seen = await hosted(cluster)
    return all(seen.get(r.uuid, {}).get(t.tablet_id) == "RUNNING"
               for t in locs.tablets for r in t.replicas)


async def setup_table(cluster: MasterProcesses, name: str, tablets: int, rows: int) -> int:
    """Create the table, write `rows` rows per tablet (on average), wait until healthy;
    the number of rows written."""
    masters = cluster.master_addresses
    await master_call(masters, api.MASTER_CREATE_TABLE,
                      api.CreateTableRequest(name, [], tablets, REPLICAS,
                                             request_id=f"req-{name}"),
                      api.TableCreatedReply, FAST)
    while not await fully_replicated(cluster, name, tablets, None):
        await trio.sleep(0.1)
    total = tablets * rows

    async def writer(c: int) -> None:
        async with open_table_client(masters, name, options=FAST) as table:
            for i in range(c, total, 8):
                await table.put(b"row-%06d" % i, b"value-%06d-" % i + b"x" * 100)

    async with trio.open_nursery() as nursery:
        for c in range(8):
            nursery.start_soon(writer, c)
    return total


async def heal(cluster: MasterProcesses, name: str, tablets: int, victim: int
               ) -> tuple[float, dict[tuple[str, str], tuple[int, int]]]:
    """Kill `victim`, then (seconds to fully replicated, the copies seen: (dest, tablet) ->
    (bytes done, total bytes))."""
    dead = cluster.tservers.servers[victim].uuid
    live = [s.address for i, s in enumerate(cluster.tservers.servers) if i != victim]
    copies: dict[tuple[str, str], tuple[int, int]] = {}
    healed = trio.Event()

    async def watch_copies() -> None:
        while not healed.is_set():
            for address in live:
                try:
                    with trio.fail_after(2):
                        reply = await list_copies(address)
                except Exception:  # a busy server: the next poll
                    continue
                for c in reply.copies:
                    done, total = copies.get((address, c.tablet_id), (0, 0))
                    copies[(address, c.tablet_id)] = (max(done, c.bytes_done),
                                                      max(total, c.total_bytes))
            await trio.sleep(0.05)

    cluster.tservers.kill(victim)
    started = trio.current_time()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(watch_copies)
        with trio.fail_after(HEAL_BOUND):
            while not await fully_replicated(cluster, name, tablets, dead):
                await trio.sleep(0.1)
        seconds = trio.current_time() - started
        healed.set()
    return seconds, copies


def busiest(cluster: MasterProcesses, name: str) -> int:
    """The index of the tablet server holding the most replicas of the table."""
    locs = run(lambda: locations(cluster.master_addresses, name))
    counts = {s.uuid: 0 for s in cluster.tservers.servers}
    for t in locs.tablets:
        for r in t.replicas:
            counts[r.uuid] = counts.get(r.uuid, 0) + 1
    uuid = max(counts, key=lambda u: counts[u])
    return next(s.index for s in cluster.tservers.servers if s.uuid == uuid)


def trial(cluster: MasterProcesses, tablets: int, rows: int, number: int, failed_after: float
          ) -> dict[str, float]:
    name = f"t{tablets}-{number}"
    written = run(lambda: setup_table(cluster, name, tablets, rows), 300)
    victim = busiest(cluster, name)
    held = sum(any(r.uuid == cluster.tservers.servers[victim].uuid for r in t.replicas)
               for t in run(lambda: locations(cluster.master_addresses, name)).tablets)
    seconds, copies = run(lambda: heal(cluster, name, tablets, victim), HEAL_BOUND + 30)
    copied = sum(done for done, _ in copies.values())
    rows_copied = written * held / tablets  # the rows of the re-created replicas, about
    print(f"  {tablets} tablets, trial {number}: ts{victim} held {held} replicas; healed in "
          f"{seconds:.2f} s; {len(copies)} copies seen, {copied:,} bytes",
          file=sys.stderr, flush=True)
    cluster.tservers.start(victim)
    run(lambda: master_call(cluster.master_addresses, api.MASTER_DELETE_TABLE,
                            api.TableName(name), api.TableDeletedReply, FAST))
    return {"seconds": seconds, "replicas": held, "copies_seen": len(copies),
            "bytes": copied, "rows": rows_copied,
            "machinery": seconds - failed_after}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="10,100")
    parser.add_argument("--trials", type=int, default=3, help="trials per size under 100")
    parser.add_argument("--big-trials", type=int, default=2, help="trials for 100+ tablets")
    parser.add_argument("--rows-per-tablet", type=int, default=5)
    parser.add_argument("--failed-after-ms", type=int, default=3000)
    parser.add_argument("--quick", action="store_true", help="10 tablets, one trial")
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--dir", default=None)
    args = parser.parse_args()
    sizes = [10] if args.quick else [int(s) for s in args.sizes.split(",")]
    root = args.dir or tempfile.mkdtemp(prefix="revivify-bench-rereplicate-")
    failed_after = args.failed_after_ms / 1000
    results: dict[int, list[dict[str, float]]] = {}
    try:
        with MasterProcesses(root, masters=1, tservers=TSERVERS,
                           master_args=["--tserver-failed-after-ms",
                                        str(args.failed_after_ms)]) as cluster:
            cluster.start_all()
            for tablets in sizes:
                n = 1 if args.quick else (args.big_trials if tablets >= 100 else args.trials)
                results[tablets] = [trial(cluster, tablets, args.rows_per_tablet, i + 1,
                                          failed_after) for i in range(n)]
    except Exception as exc:  # the cluster could not be run: say so, exit 2
        print(f"bench/rereplicate.py: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    print(f"\nre-replication after a tablet server's kill -9: 1 master, {TSERVERS} tablet "
          f"servers, {REPLICAS} replicas, {args.rows_per_tablet} rows (~110 B) per tablet, "
          f"failure timeout {failed_after:g} s; medians over the trials")
    header = (f"{'tablets':>7} {'trials':>6} {'replicas lost':>13} {'to healed s':>11} "
              f"{'after timeout s':>15} {'min-max s':>11} {'copies seen':>11} "
              f"{'KB copied':>9} {'KB/s':>7} {'rows/s':>7} {'replicas/s':>10}")
    print(header)
    print("-" * len(header))
    for tablets, rs in results.items():
        secs = [r["seconds"] for r in rs]
        med = statistics.median(secs)
        replicas = statistics.median(r["replicas"] for r in rs)
        kb = statistics.median(r["bytes"] for r in rs) / 1024
        rows = statistics.median(r["rows"] for r in rs)
        print(f"{tablets:>7} {len(rs):>6} {replicas:>13.0f} {med:>11.2f} "
              f"{statistics.median(r['machinery'] for r in rs):>15.2f} "
              f"{f'{min(secs):.1f}-{max(secs):.1f}':>11} "
              f"{statistics.median(r['copies_seen'] for r in rs):>11.0f} {kb:>9.0f} "
              f"{kb / med:>7.1f} {rows / med:>7.0f} {replicas / med:>10.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
