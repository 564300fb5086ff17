"""``make demo``: the whole checking pipeline, end to end, on an embedded default.

The demo shows what checks the system, then runs the real thing (masters come later):

1. ``revivify prove``: z3 proves the spec's invariants inductive for every term;
2. ``revivify prove --mutant stc_seed_order``: the seed's StartTabletCopy order (delete
   first, check the caller's term after) fails, with a counterexample from Init;
3. ``revivify explore``: every reachable state within the default bounds, all invariants;
4. traces: fresh random walks of the spec written as trace files (one per incarnation,
   crashes included), checked by ``revivify trace check`` and by ``revivify trace validate
   --engine spark`` on a local Spark session;
5. a known-bad trace (a tombstone that votes twice in one term after a restart) rejected
   with its evidence, by the local checker and by Spark's dataframe plan;
6. a real cluster: three ``revivify tserver run`` processes on 127.0.0.1, a 3-replica tablet
   created with ``revivify tablet create``, a workload of concurrent writes, the leader killed
   with SIGKILL mid-workload (a new leader takes over; no acknowledged write is lost), the
   killed server restarted, every acknowledged row read back;
7. the replica lifecycle on that cluster: a follower's server is killed and its disk wiped
   (``revivify tserver wipe``); it restarts with a new UUID, the operator swaps the UUIDs in
   the config (``tablet change-config``) and the leader re-creates the replica by tablet
   copy (progress shown as ``revivify copy list`` reports it); another replica is tombstoned
   (``replica delete``) and copied back by the leader; every server restarts; every
   acknowledged row is read back; a clean stop; and the traces the servers wrote are
   checked against the spec locally and on Spark.

Each step runs the real ``revivify`` command in its own process; the demo stops at the
first step whose exit code is not the expected one.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

OUT = Path(os.environ.get("REVIVIFY_DEMO_OUT", "demo-out"))


def banner(text: str) -> None:
    print(f"\n{'=' * 78}\n== {text}\n{'=' * 78}", flush=True)


def run(args: list[str], expect: int = 0) -> None:
    cmd = [sys.executable, "-m", "revivify.impl.cli.main", *args]
    print(f"$ revivify {' '.join(args)}", flush=True)
    start = time.perf_counter()
    code = subprocess.call(cmd)
    print(f"[exit {code}, {time.perf_counter() - start:.1f} s]", flush=True)
    if code != expect:
        print(f"demo: expected exit {expect}, got {code}", file=sys.stderr)
        raise SystemExit(1)


def write_walks(root: Path, seeds: range, steps: int) -> None:
    from revivify.checker.walks import random_walk

    shutil.rmtree(root, ignore_errors=True)
    for seed in seeds:
        random_walk(seed, steps=steps).write(str(root / f"walk-{seed:03d}"))
    files = sum(1 for _ in root.rglob("*.jsonl"))
    print(f"wrote {files} trace files ({len(seeds)} walks of {steps} steps) under {root}")


def capture(args: list[str]) -> str:
    cmd = [sys.executable, "-m", "revivify.impl.cli.main", *args]
    print(f"$ revivify {' '.join(args)}", flush=True)
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    print(out.stdout, end="", flush=True)
    if out.returncode != 0:
        print(out.stderr, end="", file=sys.stderr)
        raise SystemExit(f"demo: revivify {args[0]} exited {out.returncode}")
    return out.stdout


def real_cluster(root: Path) -> None:
    import json

    import trio

    from revivify.impl.cli.localcluster import ProcessCluster

    shutil.rmtree(root, ignore_errors=True)
    with ProcessCluster(str(root), 3) as cluster:
        cluster.start_all()
        for s in cluster.servers:
            print(f"tablet server {s.index}: uuid {s.uuid} on {s.address} "
                  f"(directory {s.fs_root})")
        servers = ",".join(cluster.addresses)
        tablet = json.loads(capture(["tablet", "create", "--tservers", servers, "--replicas",
                                     "3", "--json"]))["tablet_id"]
        capture(["tablet", "status", "--tservers", servers, "--tablet", tablet])
        acked = trio.run(workload, cluster, servers, tablet)
        capture(["row", "get", "--tservers", servers, "--tablet", tablet, "row-00042"])
        killed = next(s for s in cluster.servers if s.proc is None)
        print(f"restarting tablet server {killed.index} (it rejoins as a follower)")
        cluster.start(killed.index)
        capture(["tablet", "status", "--tservers", servers, "--tablet", tablet])
        rows = trio.run(read_back, servers, tablet)
        lost = [k for k, v in acked.items() if rows.get(k) != v]
        print(f"{len(acked)} acknowledged rows, {len(rows)} rows read back, {len(lost)} lost")
        if lost:
            raise SystemExit(f"demo: acknowledged rows lost: {lost[:5]}")
        lifecycle(cluster, tablet, acked)
        for s in cluster.servers:
            cluster.stop(s.index)
        print("all tablet servers stopped cleanly (SIGTERM)")
    run(["trace", "check", cluster.trace_dir])
    run(["trace", "validate", cluster.trace_dir, "--engine", "spark", "--master", "local[2]"])


def lifecycle(cluster: object, tablet: str, acked: dict[bytes, bytes]) -> None:
    """Part 7: a server's disk is lost and it is re-replicated by tablet copy; a replica is
    tombstoned and the leader copies it back; every server restarts; nothing is lost."""
    import json

    import trio

    from revivify.impl.cli.localcluster import ProcessCluster
    from revivify.impl.client import list_copies

    assert isinstance(cluster, ProcessCluster)
    servers = ",".join(cluster.addresses)
    acked.update(trio.run(big_rows, servers, tablet))
    info = json.loads(capture(["tablet", "status", "--tservers", servers, "--tablet", tablet,
                               "--json"]))
    leader_uuid = info["leader"]
    victim = next(s for s in cluster.servers if s.uuid != leader_uuid)
    old = victim.uuid
    print(f"\n-- tablet server {victim.index} loses its disk: SIGKILL, then wipe")
    cluster.kill(victim.index)
    run(["tserver", "wipe", "--fs-root", victim.fs_root, "--yes"])
    cluster.start(victim.index)
    print(f"tablet server {victim.index} restarted empty with a new uuid {victim.uuid} "
          f"(was {old})")
    # The config without the lost server commits once every remaining voter holds it: a
    # follower that fell behind during the faults must catch up first (seconds), so the
    # changes get a longer deadline than the default.
    capture(["tablet", "change-config", "--tservers", servers, "--tablet", tablet,
             "--deadline", "60", "remove", old])
    capture(["tablet", "change-config", "--tservers", servers, "--tablet", tablet,
             "--deadline", "60", "add", victim.uuid, victim.address])
    print("the leader finds the new member has no replica and copies the tablet to it:")
    watch_copy(cluster, victim.index, tablet, list_copies)
    capture(["replica", "list", "--tserver", victim.address])

    other = next(s for s in cluster.servers if s.uuid not in (leader_uuid, victim.uuid))
    print(f"\n-- tombstone the replica on tablet server {other.index}; the leader copies "
          "it back (it is still a member)")
    capture(["replica", "delete", "--tserver", other.address, "--tablet", tablet])
    capture(["replica", "list", "--tserver", other.address])
    watch_copy(cluster, other.index, tablet, list_copies)
    capture(["replica", "list", "--tserver", other.address])

    print("\n-- restart every tablet server")
    for s in cluster.servers:
        cluster.stop(s.index)
    for s in cluster.servers:
        cluster.start(s.index)
    capture(["tablet", "status", "--tservers", servers, "--tablet", tablet])
    rows = trio.run(read_back, servers, tablet)
    lost = [k for k, v in acked.items() if rows.get(k) != v]
    print(f"{len(acked)} acknowledged rows, {len(rows)} rows read back, {len(lost)} lost")
    if lost:
        raise SystemExit(f"demo: acknowledged rows lost: {lost[:5]}")


def watch_copy(cluster: object, index: int, tablet: str, list_copies: object) -> None:
    """Poll the destination's copies (what `revivify copy list` shows) until the replica
    runs there; print each progress change."""
    import trio

    from revivify.impl.cli.localcluster import ProcessCluster
    from revivify.impl.client import server_status

    assert isinstance(cluster, ProcessCluster)
    address = cluster.servers[index].address

    async def watch() -> str:
        seen = ""
        with trio.fail_after(120):
            while True:
                for c in (await list_copies(address)).copies:  # type: ignore[operator]
                    line = (f"  copy {c.tablet_id[:8]}: {c.phase:<8} {c.bytes_done:>10,} of "
                            f"{c.total_bytes:,} bytes, {c.files_done}/{c.files_total} files, "
                            f"{c.rate_bytes_per_second / (1 << 20):.1f} MB/s")
                    if line != seen:
                        print(line, flush=True)
                        seen = line
                status = await server_status(address)
                state = next((r.state for r in status.replicas if r.tablet_id == tablet), "")
                if state == "RUNNING":
                    return state
                await trio.sleep(0.05)
    print(f"  replica on tablet server {index}: {trio.run(watch)}")


async def big_rows(servers: str, tablet: str) -> dict[bytes, bytes]:
    """24 MB of 64 KiB rows, so that the copies below take long enough to watch."""
    import trio

    from revivify.impl.client import open_tablet_client

    acked: dict[bytes, bytes] = {}

    async def client(c: int) -> None:
        async with open_tablet_client(servers.split(","), tablet) as tc:
            for i in range(c, 384, 4):
                key, value = b"big-%05d" % i, (b"%05d" % i) * ((64 << 10) // 5)
                await tc.put(key, value)
                acked[key] = value
    async with trio.open_nursery() as nursery:
        for c in range(4):
            nursery.start_soon(client, c)
    print(f"{len(acked)} rows of 64 KiB acknowledged")
    return acked


async def workload(cluster: object, servers: str, tablet: str) -> dict[bytes, bytes]:
    """8 concurrent clients write 400 rows; after 150 the leader is killed (SIGKILL)."""
    import trio

    from revivify.impl.cli.localcluster import ProcessCluster
    from revivify.impl.client import open_tablet_client

    assert isinstance(cluster, ProcessCluster)
    acked: dict[bytes, bytes] = {}
    done = 0
    killed = trio.Event()

    async def client(c: int) -> None:
        nonlocal done
        async with open_tablet_client(servers.split(","), tablet) as tc:
            for i in range(c, 400, 8):
                key, value = b"row-%05d" % i, b"value-%d" % i
                await tc.put(key, value)
                acked[key] = value
                done += 1
                if done == 150 and not killed.is_set():
                    info = await tc.leader_info()
                    victim = next(s for s in cluster.servers if s.uuid == info.leader)
                    print(f"{done} rows acknowledged; killing the leader, tablet server "
                          f"{victim.index} (SIGKILL)", flush=True)
                    cluster.kill(victim.index)
                    killed.set()
                if done % 100 == 0:
                    print(f"  {done} rows acknowledged", flush=True)

    start = trio.current_time()
    async with trio.open_nursery() as nursery:
        for c in range(8):
            nursery.start_soon(client, c)
    print(f"{len(acked)} rows acknowledged in {trio.current_time() - start:.1f} s "
          "(a new leader was elected after the kill)")
    return acked


async def read_back(servers: str, tablet: str) -> dict[bytes, bytes]:
    from revivify.impl.client import open_tablet_client

    async with open_tablet_client(servers.split(","), tablet) as tc:
        return dict(await tc.scan())


def missing_extras() -> list[str]:
    """The optional extras the demo needs and this installation lacks (none is imported)."""
    import importlib.util

    from revivify.impl.cli.main import EXTRA_OF_MODULE

    return sorted({extra for module, extra in EXTRA_OF_MODULE.items()
                   if importlib.util.find_spec(module) is None})


def main() -> int:
    missing = missing_extras()
    if missing:  # every step but the cluster's runs the checker, on z3 and on Spark
        print(f"demo: needs the {' and '.join(repr(m) for m in missing)} extra"
              f"{'s' if len(missing) > 1 else ''}: pip install "
              f"'revivify[{','.join(missing)}]'", file=sys.stderr)
        return 2
    OUT.mkdir(parents=True, exist_ok=True)
    banner("1. z3: every invariant of the spec is inductive (3 servers, any term)")
    run(["prove"])

    banner("2. the seed's StartTabletCopy order is unsafe: the mutant fails its proof")
    run(["prove", "--mutant", "stc_seed_order", "--bmc-depth", "8", "--timeout", "5"],
        expect=1)

    banner("3. exhaustive exploration of the spec within the default bounds")
    run(["explore"])

    banner("4. traces of spec walks with crashes, checked locally and on Spark")
    walks = OUT / "traces"
    write_walks(walks, range(100, 112), steps=160)
    run(["trace", "check", str(walks)])
    run(["trace", "validate", str(walks), "--engine", "spark", "--master", "local[2]",
         "--out", str(OUT / "spark-report")])

    banner("5. a known-bad trace: a tombstone votes twice in a term after restart")
    run(["trace", "check", "traces/bad/vote-twice-after-restart"], expect=1)
    # The same on Spark's dataframe plan (Spark reads and shuffles the lines by node).
    run(["trace", "validate", "traces/bad/vote-twice-after-restart", "--engine", "spark",
         "--plan", "dataframe", "--master", "local[2]"], expect=1)

    banner("6-7. a real cluster: a workload, a leader killed, a disk wiped and re-copied, a "
           "tombstone copied back, every server restarted, traces checked")
    real_cluster(OUT / "cluster")

    banner("demo complete")
    print(f"outputs under {OUT}/")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
