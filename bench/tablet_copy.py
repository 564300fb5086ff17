"""Benchmark: tablet copy rate vs cp + sync, and server startup with 1,000 tablets.

    python bench/tablet_copy.py [--size-mb 512] [--copy-rounds 2] [--tablets 1000] [--rounds 3]
                         [--parts copy,startup] [--quick] [--keep] [--dir DIR]

One run prints two tables (`make bench-copy`; `--quick` is a smoke run: 64 MB, 100 tablets,
2 starts each). What is measured, and how:

1. Tablet copy. A ProcessCluster of 2 real `revivify tserver run` processes on 127.0.0.1,
   fsync on. Server 0 gets a tablet with one replica (a one-peer CreateTablet), filled by 16
   concurrent writers with SIZE MB of values (128 KiB each, 4 per write), the server run with
   ``--flush-mb SIZE/8`` so nearly everything lands in data blocks (and
   ``--log-retain-entries 0`` where the server has that flag, so flushed WAL segments are
   collected); the bench then waits until the superblock and data/ stop changing (no flush
   or compaction running). An operator's StartTabletCopy (`admin.copy_replica`) has server 1
   copy it; `list_copies` is polled (progress on stderr) until server 1 reports the replica
   RUNNING with the source's last OpId. Measured: the bytes the copy session serves (WAL up
   to its last batch + blocks) over the wall time from the request until list_copies shows
   the copy done (every file downloaded, verified and fsync'd, the READY superblock
   written: the copy, which is what cp + sync does), and until the replica RUNS (its start
   decodes every block into memory and replays the WAL's tail: shown, with its ratio, but
   not the target, as cp starts nothing). Beside it,
   on the same filesystem: `cp -r` of the same files (server 0's live blocks from data/ and
   its wals/<tablet>) into a fresh directory, then `sync`. Each of COPY_ROUNDS copies (server
   1 wiped in between, so every copy starts from nothing) is bracketed by two cp + sync runs;
   a round's ratio uses their mean, the verdict the median over rounds. Target: the copy
   >= 0.6x the cp + sync rate.
2. Startup with many tablets. Three servers: one with N single-replica tablets of which half
   are then tombstoned (DeleteTablet TOMBSTONE), one with N READY tablets, and an empty one
   (the fixed cost: interpreter, imports, opening the directory). Tablets are created 8 calls
   at a time per server and get one small row each. After a clean stop each server is
   started ROUNDS times, the three interleaved in each round: the time from process start to
   its "listening" line (open_tserver starts every tablet, one after another, before main
   prints that line; RPC is already served meanwhile), to every replica RUNNING or
   TOMBSTONED in Admin.Status, and to every RUNNING replica leading (writable), then a clean
   stop (SIGTERM) is timed. Medians; the ratio compares half-tombstones with all-READY.

The machine is shared and has 2 cores, so absolute figures are noisy: the ratios, measured
side by side in one run, are the point. Figures, not assertions: a missed target prints
MISSED and the exit status stays 0 (1 if the benchmark itself failed). The default run takes
about 8 minutes here, most of it in part 2 (creating 2,000 tablets and 9 starts: every
CreateTablet and every start of a READY tablet writes an 8 MiB zero-filled WAL segment), and
needs about 19 GB free for it (checked first with shutil.disk_usage). Everything runs in a
temp dir under --dir (default: the current directory, i.e. the project's disk), removed at
the end unless --keep; server processes are killed even on error.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import msgspec
import trio

from revivify.impl.client import admin
from revivify.impl.client.errors import ClientError
from revivify.impl.consensus.messages import Peer
from revivify.impl.processes.control import ProcessError, ServerProcess
from revivify.impl.processes.tservers import ProcessCluster
from revivify.impl.rpc import ConnectionClosed, RpcClient, RpcError, open_rpc_client
from revivify.impl.rpc.address import parse_address
from revivify.impl.storage.disk import OsDisk, is_temp_name
from revivify.impl.storage.layout import ServerLayout
from revivify.impl.storage.metadata import MetadataStore
from revivify.impl.tablet.ops import RowOp
from revivify.impl.tserver import api

MB = 1 << 20
TABLET = "bench-copy"
WRITERS = 16
OPS_PER_WRITE = 4
# A clean stop (SIGTERM) of a server holding 1,000 tablets takes well under a second; one
# that takes this long is hung (the server logs what it waits for after 10 s).
STOP_TIMEOUT = 120.0
CLIENT = "bench-copy-client"
T = TypeVar("T", bound=msgspec.Struct)
R = TypeVar("R")


class BenchError(Exception):
    pass


def note(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def verdict(ok: bool) -> str:
    return "MET" if ok else "MISSED"


def server_flags() -> set[str]:
    """The flags this checkout's `tserver run` accepts (some are newer than others)."""
    out = subprocess.run([sys.executable, "-m", "revivify.impl.servers.tserver", "--help"],
                         capture_output=True, text=True, timeout=60).stdout
    return {word.strip("[],") for word in out.split() if word.startswith("--")}


def tree_bytes(path: str) -> int:
    total = 0
    for parent, _, names in os.walk(path):
        for name in names:
            with contextlib.suppress(FileNotFoundError):
                total += os.lstat(os.path.join(parent, name)).st_blocks * 512
    return total


def check_room(directory: str, need: int, what: str) -> None:
    free = shutil.disk_usage(directory).free
    if free < need:
        raise BenchError(f"not enough disk for {what}: it needs about {need / MB:,.0f} MB in "
                         f"{directory}, the filesystem has {free / MB:,.0f} MB free "
                         "(try a smaller --size-mb / --tablets, or --dir elsewhere)")
    note(f"disk: {free / MB:,.0f} MB free in {directory}, {what} needs about "
         f"{need / MB:,.0f} MB: ok")


async def poll(predicate: Callable[[], Awaitable[R | None]], seconds: float, what: str,
               interval: float = 0.05) -> R:
    """The first truthy value of `predicate` (RPC errors count as "not yet")."""
    deadline = time.monotonic() + seconds
    last: BaseException | None = None
    while time.monotonic() < deadline:
        try:
            value = await predicate()
            if value:
                return value
        except (RpcError, OSError, ClientError) as exc:
            last = exc
        await trio.sleep(interval)
    raise BenchError(f"timed out after {seconds:.0f}s waiting for {what} (last error: {last})")


class Conn:
    """One RPC connection to one server, opened lazily, reopened after a failure."""

    def __init__(self, server: ServerProcess, name: str) -> None:
        self.server = server
        self.name = name
        self.client: RpcClient | None = None
        self._scope: trio.CancelScope | None = None

    async def call(self, nursery: trio.Nursery, method: str, body: msgspec.Struct,
                   response: type[T]) -> T:
        if self.client is None or self.client.closed:
            self.client = await nursery.start(self._hold)
        assert self.client is not None
        try:
            return await self.client.call(method, body, response)
        except ConnectionClosed:
            self.client = None
            raise

    async def _hold(self, task_status: trio.TaskStatus[RpcClient]) -> None:
        host, port = parse_address(self.server.address)
        async with open_rpc_client(host, port, self.server.uuid, self.name,
                                   app_errors=api.APP_ERRORS) as client:
            with trio.CancelScope() as self._scope:
                task_status.started(client)
                await trio.sleep_forever()

    def close(self) -> None:
        if self._scope is not None:
            self._scope.cancel()


async def call(server: ServerProcess, method: str, body: msgspec.Struct,
               response: type[T]) -> T:
    host, port = parse_address(server.address)
    async with open_rpc_client(host, port, server.uuid, CLIENT,
                               app_errors=api.APP_ERRORS) as client:
        return await client.call(method, body, response)


async def wait_leader(server: ServerProcess, tablet: str, seconds: float = 30.0) -> None:
    async def leads() -> bool:
        info = await call(server, api.ADMIN_CONSENSUS_STATE, api.TabletRef(tablet),
                          api.ReplicaInfo)
        return info.role == "LEADER"
    await poll(leads, seconds, f"{tablet} to elect its leader")


# ================================================================= part 1: tablet copy


async def fill(server: ServerProcess, tablet: str, total: int, value_bytes: int) -> int:
    """WRITERS concurrent writers put rows of `value_bytes` values until `total` bytes of
    values are acknowledged; returns the bytes written."""
    pool = random.Random(7).randbytes(4 * MB)
    per_write = OPS_PER_WRITE * value_bytes
    writes = -(-total // per_write)
    next_write = [0]
    done = [0]
    start = time.monotonic()

    async def writer(w: int) -> None:
        host, port = parse_address(server.address)
        rng = random.Random(w)
        async with open_rpc_client(host, port, server.uuid, f"{CLIENT}-w{w}",
                                   app_errors=api.APP_ERRORS) as client:
            seq = 0
            while next_write[0] < writes:
                n = next_write[0]
                next_write[0] += 1
                ops = []
                for k in range(OPS_PER_WRITE):
                    offset = rng.randrange(len(pool) - value_bytes)
                    ops.append(RowOp("put", b"row-%08d-%d" % (n, k),
                                     pool[offset:offset + value_bytes]))
                request = api.Write(tablet, f"{CLIENT}-w{w}", seq, ops)
                for attempt in range(50):
                    try:
                        await client.call(api.DATA_WRITE, request, api.Written)
                        break
                    except (api.NotLeader, api.OperationAborted, api.TabletNotRunning):
                        if attempt == 49:
                            raise
                        await trio.sleep(0.1)
                seq += 1
                done[0] += per_write

    async def report() -> None:
        while True:
            await trio.sleep(3)
            elapsed = time.monotonic() - start
            note(f"  writing: {done[0] / MB:7.0f} of {writes * per_write / MB:.0f} MB "
                 f"({done[0] / MB / elapsed:5.1f} MB/s)")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(report)
        async with trio.open_nursery() as writers:
            for w in range(WRITERS):
                writers.start_soon(writer, w)
        nursery.cancel_scope.cancel()
    elapsed = time.monotonic() - start
    note(f"  wrote {done[0] / MB:.0f} MB in {elapsed:.1f}s ({done[0] / MB / elapsed:.1f} MB/s)")
    return done[0]


def source_files(fs_root: str, tablet: str) -> tuple[list[str], list[str], Any]:
    """(live block files, WAL segment files, superblock) of `tablet` on disk."""
    layout = ServerLayout(fs_root, OsDisk())
    sb = MetadataStore(layout).load_superblock(tablet)
    if sb is None:
        raise BenchError(f"no superblock for {tablet} under {fs_root}")
    blocks = [os.path.join(layout.data_dir, b) for b in sb.live_blocks]
    wal_dir = layout.wal_dir(tablet)
    segments = sorted(os.path.join(wal_dir, n) for n in os.listdir(wal_dir)
                      if not is_temp_name(n))
    return blocks, segments, sb


async def wait_flushed(fs_root: str, tablet: str, seconds: float = 600.0) -> None:
    """Until the superblock and data/ stay the same for 3 s: no flush or compaction runs
    (the memory store left below the flush threshold stays in the WAL)."""
    data_dir = os.path.join(fs_root, "data")

    def snapshot() -> tuple[Any, ...]:
        _, segments, sb = source_files(fs_root, tablet)
        return (sb.flushed_opid, sb.live_blocks, tuple(sorted(os.listdir(data_dir))),
                tuple(segments))

    deadline = time.monotonic() + seconds
    last, since = snapshot(), time.monotonic()
    while time.monotonic() - since < 3.0:
        if time.monotonic() > deadline:
            raise BenchError(f"flushes of {tablet} did not settle in {seconds:.0f}s")
        await trio.sleep(0.25)
        now = snapshot()
        if now != last:
            last, since = now, time.monotonic()


def cp_sync(files: list[str], wal_dir: str, into: str) -> float:
    """`cp -r` the block files and the WAL directory into a fresh `into`, then `sync`."""
    os.makedirs(into)
    start = time.perf_counter()
    subprocess.run(["cp", "-r", *files, wal_dir, into + "/"], check=True, timeout=1200)
    subprocess.run(["sync"], check=True, timeout=1200)
    return time.perf_counter() - start


async def one_copy(src: ServerProcess, dst: ServerProcess, source_last: tuple[int, int]
                   ) -> dict[str, Any]:
    """StartTabletCopy on `dst` from `src`; poll list_copies until the replica RUNS."""
    start = time.monotonic()
    await admin.copy_replica(src.address, dst.address, TABLET)
    accepted = time.monotonic() - start
    seen: dict[str, Any] = {}
    last_print = 0.0

    async def running() -> api.ReplicaInfo | None:
        nonlocal last_print
        copies = (await admin.list_copies(dst.address)).copies
        job = next((c for c in copies if c.tablet_id == TABLET), None)
        if job is not None:
            if job.error:
                raise BenchError(f"the copy failed: {job.error}")
            if job.bytes_done >= seen.get("bytes_done", -1):
                seen.update(bytes_done=job.bytes_done, total=job.total_bytes,
                            rate=job.rate_bytes_per_second, elapsed=job.elapsed_seconds,
                            phase=job.phase)
            if job.bytes_done > 0 and "first_bytes" not in seen:
                seen["first_bytes"] = time.monotonic() - start
            if job.phase == "done" and "done" not in seen:
                seen["done"] = time.monotonic() - start
            now = time.monotonic()
            if now - last_print >= 1.0:
                last_print = now
                note(f"  copy {job.phase:>8}: {job.bytes_done / MB:7.0f} of "
                     f"{job.total_bytes / MB:.0f} MB, files {job.files_done}/"
                     f"{job.files_total}, {job.rate_bytes_per_second / MB:6.1f} MB/s, "
                     f"{now - start:5.1f}s")
            return None
        try:
            info = await call(dst, api.ADMIN_CONSENSUS_STATE, api.TabletRef(TABLET),
                              api.ReplicaInfo)
        except api.TabletNotFound:
            return None
        if info.state in ("TOMBSTONED", "FAILED"):
            raise BenchError(f"the copy ended {info.state}: {info.reason}; server "
                             f"{dst.index} log:\n{dst.stderr_tail()}")
        return info if info.state == "RUNNING" else None

    # Polled every 20 ms: the copy's end is read to within that (0.4% of 5 s).
    info = await poll(running, 1800, "the copied replica to be RUNNING", interval=0.02)
    elapsed = time.monotonic() - start
    if tuple(info.last_opid) != source_last:
        raise BenchError(f"the copy's last OpId {info.last_opid} is not the source's "
                         f"{source_last}")
    if not seen.get("total"):
        raise BenchError("list_copies never showed the copy's size")
    note(f"  RUNNING on server {dst.index} after {elapsed:.2f}s (last OpId "
         f"{tuple(info.last_opid)} = the source's)")
    on_disk = tree_bytes(os.path.join(dst.fs_root, "data")) + tree_bytes(
        os.path.join(dst.fs_root, "wals", TABLET))
    return {"seconds": elapsed, "accepted": accepted, "on_disk": on_disk,
            "first_bytes": seen.get("first_bytes", float("nan")),
            "done": seen.get("done", float("nan")), **seen}


async def copy_part(args: argparse.Namespace, directory: str) -> dict[str, Any]:
    size = args.size_mb * MB
    # The source: blocks, plus WAL and compaction output before they are collected; one
    # revivify copy and one cp copy at a time; slack.
    check_room(directory, 5 * size + 512 * MB, f"a {args.size_mb} MB tablet copy")
    flush_mb = max(1, args.size_mb // 8)
    flags = ["--flush-mb", str(flush_mb)]
    if "--log-retain-entries" in server_flags():
        flags += ["--log-retain-entries", "0"]
    root = os.path.join(directory, "copy")
    out: dict[str, Any] = {"flush_mb": flush_mb, "flags": flags}
    with ProcessCluster(root, 2, args=flags, start_timeout=120) as cluster:
        cluster.start_all()
        src, dst = cluster.servers
        note(f"copy: 2 servers up ({' '.join(flags)}); creating {TABLET} on server 0")
        await admin.create_tablet([src.address], 1, TABLET)
        await wait_leader(src, TABLET)
        out["written"] = await fill(src, TABLET, size, args.value_kb * 1024)
        note("  waiting for flushes and compactions to settle")
        await wait_flushed(src.fs_root, TABLET)
        blocks, segments, _ = source_files(src.fs_root, TABLET)
        out["blocks"] = len(blocks)
        out["block_bytes"] = sum(os.path.getsize(p) for p in blocks)
        out["segments"] = len(segments)
        out["wal_bytes"] = sum(os.path.getsize(p) for p in segments)
        files_bytes = out["files_bytes"] = out["block_bytes"] + out["wal_bytes"]
        note(f"  source: {len(blocks)} blocks ({out['block_bytes'] / MB:.0f} MB), "
             f"{len(segments)} WAL segments ({out['wal_bytes'] / MB:.0f} MB on disk)")
        wal_dir = os.path.join(src.fs_root, "wals", TABLET)
        source_state = await call(src, api.ADMIN_CONSENSUS_STATE, api.TabletRef(TABLET),
                                  api.ReplicaInfo)

        def timed_cp(k: int) -> float:
            target = os.path.join(directory, f"cp-{k}")
            try:
                seconds = cp_sync(blocks, wal_dir, target)
            finally:
                shutil.rmtree(target, ignore_errors=True)
            note(f"  cp -r + sync: {seconds:.2f}s ({files_bytes / MB / seconds:.0f} MB/s)")
            return seconds

        cp_times = [timed_cp(0)]
        copies: list[dict[str, Any]] = []
        for r in range(args.copy_rounds):
            if r:  # a fresh destination: wipe server 1 (it comes back with a new UUID)
                cluster.stop(1)
                shutil.rmtree(dst.fs_root)
                cluster.start(1)
            subprocess.run(["sync"], check=True, timeout=1200)
            note(f"copy round {r + 1} of {args.copy_rounds}: StartTabletCopy "
                 "(server 1 copies from server 0)")
            copies.append(await one_copy(src, dst, tuple(source_state.last_opid)))
            cp_times.append(timed_cp(r + 1))
        out.update(cp_times=cp_times, copies=copies)
        for i in range(2):
            cluster.stop(i)
    return out


def copy_report(args: argparse.Namespace, r: dict[str, Any]) -> None:
    copies, cp_times, files = r["copies"], r["cp_times"], r["files_bytes"]
    total = copies[0]["total"]
    print(f"1. Tablet copy: one tablet, one replica on server 0, {r['written'] / MB:,.0f} MB of "
          f"values written by {WRITERS} writers ({args.value_kb} KiB values, {OPS_PER_WRITE} "
          f"per write); server flags {' '.join(r['flags'])}. Server 1 copies it "
          "(an operator's StartTabletCopy) over TCP on 127.0.0.1, fsync on; "
          f"{len(copies)} round(s), server 1 wiped between rounds, each copy bracketed by "
          "two cp + sync runs.")
    print(f"   source on disk: {r['blocks']} data blocks ({r['block_bytes'] / MB:,.1f} MB) + "
          f"{r['segments']} WAL segment(s) ({r['wal_bytes'] / MB:,.1f} MB, preallocated tail "
          f"included) = {files / MB:,.1f} MB; the copy session serves {total / MB:,.1f} MB "
          "(the WAL up to its last batch).")
    print()
    print("| round | copy: request -> READY | MB/s | cp + sync before / after | MB/s (mean) | "
          "ratio | request -> RUNNING | MB/s | ratio |")
    print("|---:|---:|---:|---|---:|---:|---:|---:|---:|")
    copy_ratios: list[float] = []
    end_ratios: list[float] = []
    for k, c in enumerate(copies):
        rate = c["total"] / c["done"]
        end_rate = c["total"] / c["seconds"]
        cp_rate = files / statistics.fmean(cp_times[k:k + 2])
        copy_ratios.append(rate / cp_rate)
        end_ratios.append(end_rate / cp_rate)
        print(f"| {k + 1} | {c['done']:.2f} s | {rate / MB:,.1f} | {cp_times[k]:.2f} s / "
              f"{cp_times[k + 1]:.2f} s | {cp_rate / MB:,.1f} | {copy_ratios[-1]:.2f} | "
              f"{c['seconds']:.2f} s | {end_rate / MB:,.1f} | {end_ratios[-1]:.2f} |")
    print()
    for k, c in enumerate(copies):
        print(f"   round {k + 1}: StartTabletCopy answered in {c['accepted']:.2f} s, first "
              f"bytes at {c['first_bytes']:.2f} s, every file durable and the READY "
              f"superblock written by {c['done']:.2f} s (the server's own count: "
              f"{c['elapsed']:.2f} s at {c['rate'] / MB:,.1f} MB/s), RUNNING at "
              f"{c['seconds']:.2f} s (the replica's start: {c['seconds'] - c['done']:.2f} s); "
              f"server 1 holds {c['on_disk'] / MB:,.1f} MB of copied files")
    ratio = statistics.median(copy_ratios)
    print(f"   target: the copy (request -> every file durable, READY) >= 0.6x cp + sync: "
          f"median ratio {ratio:.2f} {verdict(ratio >= 0.6)}")
    print(f"   request -> RUNNING also starts the replica (decodes every block into memory and "
          f"replays the WAL's tail; cp starts nothing): median ratio "
          f"{statistics.median(end_ratios):.2f}, no target")


# ================================================================= part 2: startup


KINDS = ("half tombstones", "all READY", "empty")


async def populate(server: ServerProcess, tablets: list[str], tombstones: set[str],
                   rows: int, concurrency: int, into: dict[str, float] | None = None) -> None:
    """Create `tablets` (one-peer configs), write `rows` small rows to each, tombstone
    `tombstones`; each phase `concurrency` calls at a time; its seconds go into `into`."""
    into = {} if into is None else into
    peers = [Peer(server.uuid, server.address)]
    label = f"server {server.index}"

    async def each(work: Callable[[Conn, trio.Nursery, str], Awaitable[None]],
                   what: str) -> None:
        queue = list(reversed(tablets if what != "tombstone" else sorted(tombstones)))
        count = len(queue)
        start = time.monotonic()

        async def worker(w: int) -> None:
            async with trio.open_nursery() as nursery:
                conn = Conn(server, f"{CLIENT}-{what}-{w}")
                while queue:
                    await work(conn, nursery, queue.pop())
                conn.close()

        async with trio.open_nursery() as nursery:
            for w in range(concurrency):
                nursery.start_soon(worker, w)
        into[what] = time.monotonic() - start
        note(f"  {label}: {what} x{count} in {into[what]:.1f}s")

    async def create(conn: Conn, nursery: trio.Nursery, tablet: str) -> None:
        await conn.call(nursery, api.ADMIN_CREATE_TABLET, api.CreateTablet(tablet, peers),
                        api.TabletCreated)

    async def write(conn: Conn, nursery: trio.Nursery, tablet: str) -> None:
        ops = [RowOp("put", b"key-%d" % k, b"value-%d" % k) for k in range(rows)]
        for _ in range(600):
            try:
                await conn.call(nursery, api.DATA_WRITE, api.Write(tablet, CLIENT, 0, ops),
                                api.Written)
                return
            except (api.NotLeader, api.TabletNotRunning, api.OperationAborted):
                await trio.sleep(0.05)
        raise BenchError(f"{label}: {tablet} never took a write")

    async def tombstone(conn: Conn, nursery: trio.Nursery, tablet: str) -> None:
        await conn.call(nursery, api.ADMIN_DELETE_TABLET, api.DeleteTablet(tablet), api.Ack)

    await each(create, "create")
    if rows:
        await each(write, "write")
    if tombstones:
        await each(tombstone, "tombstone")


async def status_counts(server: ServerProcess) -> dict[str, int]:
    status = await call(server, api.ADMIN_STATUS, api.Empty(), api.ServerStatus)
    counts: dict[str, int] = {"total": len(status.replicas)}
    for r in status.replicas:
        counts[r.state] = counts.get(r.state, 0) + 1
        if r.role == "LEADER":
            counts["LEADER"] = counts.get("LEADER", 0) + 1
    return counts


async def timed_start(cluster: ProcessCluster, i: int, expect_running: int,
                      expect_tombstoned: int) -> tuple[float, float, float, float]:
    """(to "listening", to all RUNNING/TOMBSTONED, to all RUNNING leaders, clean stop)."""
    server = cluster.servers[i]
    start = time.monotonic()
    cluster.start(i)
    listening = time.monotonic() - start

    async def settled() -> dict[str, int] | None:
        c = await status_counts(server)
        ok = (c.get("RUNNING", 0) == expect_running
              and c.get("TOMBSTONED", 0) == expect_tombstoned
              and c["total"] == expect_running + expect_tombstoned)
        return c if ok else None

    await poll(settled, 600, f"server {i}'s replicas to be RUNNING/TOMBSTONED", 0.02)
    ready = time.monotonic() - start

    async def leaders() -> bool:
        return (await status_counts(server)).get("LEADER", 0) == expect_running

    await poll(leaders, 600, f"server {i}'s replicas to elect themselves", 0.02)
    led = time.monotonic() - start
    stop_start = time.monotonic()
    code = cluster.stop(i, timeout=STOP_TIMEOUT)
    stopped = time.monotonic() - stop_start
    if code != 0:
        raise BenchError(f"server {i} exited {code} on SIGTERM:\n{server.stderr_tail()}")
    return listening, ready, led, stopped


async def startup_part(args: argparse.Namespace, directory: str) -> dict[str, Any]:
    n = args.tablets
    # Each tablet's WAL starts with one zero-filled 8 MiB segment (two servers of n).
    check_room(directory, 2 * n * 9 * MB + 512 * MB, f"{2 * n} tablets")
    root = os.path.join(directory, "startup")
    tablets = [f"t{k:05d}" for k in range(n)]
    tombstones = set(tablets[1::2])
    expect = {0: (n - len(tombstones), len(tombstones)), 1: (n, 0), 2: (0, 0)}
    out: dict[str, Any] = {"n": n, "tombstones": len(tombstones), "times": {},
                           "populate": ({}, {})}
    with ProcessCluster(root, 3, start_timeout=900) as cluster:
        cluster.start_all()
        note(f"startup: creating {n} tablets on server 0 and on server 1 "
             f"({args.create_concurrency} at a time each), {args.rows} row(s) each, then "
             f"tombstoning {len(tombstones)} on server 0")
        async with trio.open_nursery() as nursery:
            nursery.start_soon(populate, cluster.servers[0], tablets, tombstones, args.rows,
                               args.create_concurrency, out["populate"][0])
            nursery.start_soon(populate, cluster.servers[1], tablets, set(), args.rows,
                               args.create_concurrency, out["populate"][1])
        for i in range(3):
            cluster.stop(i, timeout=STOP_TIMEOUT)
        out["disk"] = [tree_bytes(s.fs_root) for s in cluster.servers]
        times: dict[int, list[tuple[float, float, float, float]]] = {0: [], 1: [], 2: []}
        for r in range(args.rounds):
            order = [(r + k) % 3 for k in range(3)]
            for i in order:
                t = await timed_start(cluster, i, *expect[i])
                times[i].append(t)
                note(f"  round {r + 1}: {KINDS[i]:<15} listening {t[0]:6.2f}s, all "
                     f"RUNNING/TOMBSTONED {t[1]:6.2f}s, all leaders {t[2]:6.2f}s, "
                     f"clean stop {t[3]:5.2f}s")
        out["times"] = times
    return out


def startup_report(args: argparse.Namespace, r: dict[str, Any]) -> None:
    n, k = r["n"], r["tombstones"]
    times = r["times"]

    def med(i: int, field: int) -> float:
        return statistics.median(t[field] for t in times[i])

    print(f"2. Startup of one server (`revivify tserver run`, fsync on) holding {n} "
          f"single-replica tablets ({args.rows} row(s) each), median of {args.rounds} "
          "starts, the three servers interleaved; times from process start.")
    print()
    print("| server | tablets | listening (s) | all RUNNING/TOMBSTONED (s) | "
          "all leaders (s) | clean stop (s) | per round: listening | on disk, stopped |")
    print("|---|---|---:|---:|---:|---:|---|---:|")
    rows = [(0, f"{n - k} READY + {k} tombstones"), (1, f"{n} READY"), (2, "0")]
    for i, label in rows:
        per = " ".join(f"{t[0]:.2f}" for t in times[i])
        print(f"| {KINDS[i]} | {label} | {med(i, 0):.2f} | {med(i, 1):.2f} | "
              f"{med(i, 2):.2f} | {med(i, 3):.2f} | {per} | {r['disk'][i] / MB:,.0f} MB |")
    print()
    made = r["populate"]
    print("   set-up: " + "; ".join(
        f"{KINDS[i]}: " + ", ".join(f"{what} {seconds:.1f}s" for what, seconds in made[i].items())
        for i in (0, 1)) + f" ({args.create_concurrency} calls in flight per server)")
    base = med(2, 0)
    mixed, ready = med(0, 0) - base, med(1, 0) - base
    print(f"   startup work beyond an empty server (listening): half tombstones {mixed:.2f}s "
          f"({mixed / n * 1000:.1f} ms/tablet), all READY {ready:.2f}s "
          f"({ready / n * 1000:.1f} ms/tablet); ratio half-tombstones / all-READY = "
          f"{med(0, 0) / med(1, 0):.2f} (listening), "
          f"{(mixed / ready) if ready > 0 else float('nan'):.2f} (beyond the empty server)")


# ================================================================= main


async def run(args: argparse.Namespace, directory: str) -> tuple[Any, Any]:
    copy = await copy_part(args, directory) if "copy" in args.parts else None
    startup = await startup_part(args, directory) if "startup" in args.parts else None
    return copy, startup


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--size-mb", type=int, default=512, help="tablet size to copy (MB)")
    ap.add_argument("--value-kb", type=int, default=128, help="value size of the rows (KiB)")
    ap.add_argument("--tablets", type=int, default=1000, help="tablets of the startup servers")
    ap.add_argument("--copy-rounds", type=int, default=2,
                    help="tablet copies, each to a freshly wiped server 1")
    ap.add_argument("--rows", type=int, default=1, help="rows written to each tablet")
    ap.add_argument("--rounds", type=int, default=3, help="starts of each startup server")
    ap.add_argument("--create-concurrency", type=int, default=8,
                    help="CreateTablet calls in flight per server")
    ap.add_argument("--parts", default="copy,startup", help="copy, startup or both")
    ap.add_argument("--quick", action="store_true",
                    help="smoke run: 64 MB, 100 tablets, 2 rounds")
    ap.add_argument("--keep", action="store_true", help="keep the temp dir (data, logs)")
    ap.add_argument("--dir", default=None,
                    help="parent of the temp dir (default: the current directory)")
    args = ap.parse_args()
    if args.quick:
        args.size_mb, args.tablets, args.rounds = 64, 100, 2
    args.parts = set(args.parts.split(","))
    if not 1 <= args.value_kb <= 1024:
        ap.error("--value-kb must be in 1..1024")
    directory = tempfile.mkdtemp(prefix="revivify-bench-copy-", dir=args.dir or os.getcwd())
    try:
        copy, startup = trio.run(run, args, directory)
    except (BenchError, trio.TooSlowError, RpcError, OSError, ClientError, ProcessError,
            subprocess.SubprocessError) as exc:
        print(f"bench/tablet_copy.py: failed: {exc}", file=sys.stderr)
        kept = ")" if args.keep else ", removed; --keep keeps them)"
        print(f"(server logs: {directory}{kept}", file=sys.stderr)
        return 1
    finally:
        if not args.keep:
            shutil.rmtree(directory, ignore_errors=True)
    print(f"bench/tablet_copy.py on {os.cpu_count()} cores (shared), temp dir {directory} "
          f"({'kept' if args.keep else 'removed'})")
    print()
    if copy is not None:
        copy_report(args, copy)
        print()
    if startup is not None:
        startup_report(args, startup)
    return 0


if __name__ == "__main__":
    sys.exit(main())
