"""Benchmark: leader-master failover time and CreateTable latency, in real processes.

    python bench/master.py [--trials 10] [--sizes 1,10,100] [--rounds 3] [--replicas 3]
                           [--quick] [--keep] [--dir DIR]

(`make bench-master` runs it.) 3 masters and 3 tablet servers on 127.0.0.1
(impl/processes/masters.py), fsync on, default timers (tick 50 ms x 10 election ticks: an
election timeout of 0.5 s, randomised to 0.5-1 s).

1. Failover (issue 18: "kill -9 of the leader to the first successful CreateTable on the new
   one: median at most 2x the election timeout"). Per trial: the ready leader master is
   killed with SIGKILL; the clock starts; a client (impl/client/master.py, hints followed,
   a 20 ms backoff) retries a CreateTable of a 1-tablet, 1-replica table until it is
   answered; the clock stops. The killed master is restarted and followed before the next
   trial. What the time holds: the followers' election timeout, the election, the new
   leader's leader-ready gate (its no-op committed, the catalog rebuilt from its rows) and
   the CreateTable's one catalog write.
2. CreateTable latency: a table of N tablets x R replicas, from the call to every tablet
   RUNNING in the catalog (a leader reported by its replicas' server; GetTableLocations
   polled every 50 ms), median over --rounds; also the time to the reply alone. Each table
   is deleted after its measurement, so every one is made on the same (empty) servers.

Figures, not assertions: the exit status is 0 whatever they are (2 if the cluster could not
be run). The machine has 2 cores and is shared; the 6 processes and the client share them.
Every process runs in its own process group and is killed at the end; the temp dir is
removed unless --keep.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import trio

from revivify.impl.client import ClientOptions
from revivify.impl.client.master import master_call, master_status
from revivify.impl.master import api
from revivify.impl.processes.masters import MasterProcesses
from revivify.impl.rpc.backoff import Backoff

R = TypeVar("R")

TICK_MS = 50
ELECTION_TICKS = 10
ELECTION_TIMEOUT = TICK_MS * ELECTION_TICKS / 1000
FAST = ClientOptions(deadline=60.0, backoff=Backoff(initial=0.02, max=0.1, jitter=0.5))


def run(fn: Callable[[], Awaitable[R]], seconds: float = 120.0) -> R:
    async def main() -> R:
        with trio.fail_after(seconds):
            return await fn()
    return trio.run(main)


def ready_leader(cluster: MasterProcesses, seconds: float = 60.0) -> int:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for m in cluster.masters:
            if not m.running:
                continue
            try:
                status = run(lambda m=m: master_status(m.address), 5)  # type: ignore[misc]
            except Exception:  # a master starting or gone: the next one
                continue
            if status.ready:
                return m.index
        time.sleep(0.05)
    raise RuntimeError("no ready leader master")


def wait_following(cluster: MasterProcesses, i: int, seconds: float = 60.0) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            status = run(lambda: master_status(cluster.masters[i].address), 5)
            if status.role == "FOLLOWER" and status.leader is not None:
                return
        except Exception:  # not serving yet
            pass
        time.sleep(0.1)
    raise RuntimeError(f"master {i} did not follow")


def wait_live_tservers(cluster: MasterProcesses, n: int, seconds: float = 60.0) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        reply = run(lambda: master_call(cluster.master_addresses, api.MASTER_LIST_TSERVERS,
                                        api.Empty(), api.TabletServerList, FAST))
        if sum(t.live for t in reply.tservers) >= n:
            return
        time.sleep(0.1)
    raise RuntimeError(f"fewer than {n} live tablet servers")


async def create(masters: list[str], name: str, tablets: int, replicas: int
                 ) -> api.TableCreatedReply:
    request = api.CreateTableRequest(name, [], tablets, replicas, request_id=f"req-{name}")
    return await master_call(masters, api.MASTER_CREATE_TABLE, request,
                             api.TableCreatedReply, FAST)


def failover_trials(cluster: MasterProcesses, trials: int) -> list[float]:
    times: list[float] = []
    masters = cluster.master_addresses
    for trial in range(trials):
        leader = ready_leader(cluster)
        cluster.kill_master(leader)
        started = time.monotonic()
        run(lambda trial=trial: create(masters, f"failover-{trial}", 1, 1))  # type: ignore[misc]
        times.append(time.monotonic() - started)
        print(f"  trial {trial + 1}: {times[-1]:.3f} s", file=sys.stderr, flush=True)
        cluster.start_master(leader)
        wait_following(cluster, leader)
    return times


def create_latency(cluster: MasterProcesses, tablets: int, replicas: int, label: str
                   ) -> tuple[float, float]:
    """(seconds to the reply, seconds to every tablet RUNNING)."""
    masters = cluster.master_addresses

    async def measure() -> tuple[float, float]:
        started = trio.current_time()
        await create(masters, label, tablets, replicas)
        replied = trio.current_time() - started
        while True:
            locs = await master_call(masters, api.MASTER_TABLE_LOCATIONS, api.TableName(label),
                                     api.TableLocationsReply, FAST)
            if len(locs.tablets) == tablets and all(t.state == "RUNNING"
                                                    for t in locs.tablets):
                return replied, trio.current_time() - started
            await trio.sleep(0.05)
    result = run(measure, 300)
    # Deleted before the next table, so that every measurement sees the same load (a
    # replica ticks every 50 ms whether or not it is written).
    run(lambda: master_call(masters, api.MASTER_DELETE_TABLE, api.TableName(label),
                            api.TableDeletedReply, FAST))
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--trials", type=int, default=10, help="failover trials (default 10)")
    p.add_argument("--sizes", default="1,10,100", help="tablets per table (default 1,10,100)")
    p.add_argument("--rounds", type=int, default=3, help="tables per size (default 3)")
    p.add_argument("--replicas", type=int, default=3)
    p.add_argument("--quick", action="store_true", help="3 trials, sizes 1,10, 1 round")
    p.add_argument("--keep", action="store_true", help="keep the temp dir")
    p.add_argument("--dir", default=None, help="where to run (default: a temp dir)")
    args = p.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",") if s]
    trials, rounds = args.trials, args.rounds
    if args.quick:
        trials, rounds, sizes = 3, 1, [1, 10]
    root = args.dir or tempfile.mkdtemp(prefix="revivify-bench-master-")
    try:
        with MasterProcesses(root, masters=3, tservers=3,
                           master_args=["--tick-ms", str(TICK_MS),
                                        "--election-ticks", str(ELECTION_TICKS)]) as cluster:
            cluster.start_all()
            ready_leader(cluster)
            wait_live_tservers(cluster, 3)
            print(f"failover: {trials} trials (kill -9 of the leader master to the first "
                  "CreateTable answered)", file=sys.stderr, flush=True)
            times = failover_trials(cluster, trials)
            latencies: dict[int, list[tuple[float, float]]] = {}
            for size in sizes:
                for r in range(rounds):
                    label = f"t{size}x{args.replicas}-{r}"
                    latencies.setdefault(size, []).append(
                        create_latency(cluster, size, args.replicas, label))
                    print(f"  CreateTable {size} x {args.replicas}: reply "
                          f"{latencies[size][-1][0]:.3f} s, RUNNING "
                          f"{latencies[size][-1][1]:.3f} s", file=sys.stderr, flush=True)
            cluster.stop_all()
    except Exception as exc:  # a benchmark that cannot run says why, in one line
        print(f"bench/master.py: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    finally:
        if not args.keep and args.dir is None:
            shutil.rmtree(root, ignore_errors=True)

    median = statistics.median(times)
    target = 2 * ELECTION_TIMEOUT
    print()
    print(f"leader-master failover, {len(times)} trials (election timeout "
          f"{ELECTION_TIMEOUT:.2f} s = {TICK_MS} ms x {ELECTION_TICKS} ticks)")
    print(f"  {'median':>8} {'min':>8} {'max':>8} {'target':>8}")
    print(f"  {median:8.3f} {min(times):8.3f} {max(times):8.3f} {target:8.3f}  "
          f"{'MET' if median <= target else 'MISSED'} (median <= 2 x election timeout)")
    print()
    print(f"CreateTable latency, median of {rounds} (x {args.replicas} replicas, 3 tablet "
          "servers)")
    print(f"  {'tablets':>8} {'reply s':>9} {'RUNNING s':>10}")
    for size, points in latencies.items():
        print(f"  {size:8d} {statistics.median(p[0] for p in points):9.3f} "
              f"{statistics.median(p[1] for p in points):10.3f}"
              + (f"  {'MET' if statistics.median(p[1] for p in points) <= 10 else 'MISSED'}"
                 " (100 tablets RUNNING within 10 s)" if size == 100 else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
