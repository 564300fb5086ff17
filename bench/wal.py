"""WAL group-commit benchmark: raw fsync rate vs WAL appends/s with 1..64 writers.

Usage: python bench/wal.py [--dir DIR] [--seconds S] [--rounds R] [--payload BYTES]

From one run on one disk (DIR, default a temp dir under the current directory) it prints:
the raw fsync rate (4 KiB write + fsync, one writer), then WAL appends/s and p50/p99 append
latency for 1, 4, 16 and 64 concurrent writers, with fsync on and with fsync off, and the
ratios the issue sets as targets:
    1 writer (fsync on)  >= 0.8 x raw fsync rate
    64 writers (fsync on) >= 20 x 1-writer throughput
Figures, not assertions: a missed target is printed as MISS and the exit status stays 0.

Shared disks are noisy (the fsync rate can change several-fold within seconds), so the
measurements are interleaved: each of R rounds measures the raw fsync rate and then every
WAL configuration for S/R seconds each (every configuration keeps one open log across the
rounds). The table pools all rounds; a target's verdict uses the median over the rounds of
the ratio measured within a round, and each round's ratios are printed too.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from contextlib import AsyncExitStack

import attrs
import trio

from revivify.impl.storage.disk import OsDisk
from revivify.impl.storage.wal import Log, LogEntry, LogOptions, open_log

WRITERS = (1, 4, 16, 64)
Config = tuple[bool, int]  # (fsync, writers)
CONFIGS: tuple[Config, ...] = tuple((fsync, w) for fsync in (True, False) for w in WRITERS)


@attrs.define
class Measured:
    count: int = 0
    elapsed: float = 0.0
    latencies: list[float] = attrs.field(factory=list)
    rounds: list[float] = attrs.field(factory=list)  # appends/s of each round

    @property
    def rate(self) -> float:
        return self.count / self.elapsed

    def percentile(self, fraction: float) -> float:
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(len(ordered) * fraction))] * 1000


def raw_fsync_rate(directory: str, seconds: float) -> float:
    path = os.path.join(directory, "raw-fsync.bin")
    fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
    block = b"r" * 4096
    count = 0
    start = time.perf_counter()
    try:
        while time.perf_counter() - start < seconds:
            os.write(fd, block)
            os.fsync(fd)
            count += 1
    finally:
        os.close(fd)
        os.unlink(path)
    return count / (time.perf_counter() - start)


async def wal_slice(
    log: Log, next_index: list[int], writers: int, seconds: float, body: bytes, into: Measured
) -> None:
    """`writers` concurrent appenders on `log` for `seconds`; adds to `into`."""
    deadline = time.perf_counter() + seconds
    count = 0

    async def writer() -> None:
        nonlocal count
        while time.perf_counter() < deadline:
            index = next_index[0]
            next_index[0] += 1
            began = time.perf_counter()
            await log.reserve([LogEntry(1, index, body)]).wait()
            into.latencies.append(time.perf_counter() - began)
            count += 1

    start = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for _ in range(writers):
            nursery.start_soon(writer)
    elapsed = time.perf_counter() - start
    into.count += count
    into.elapsed += elapsed
    into.rounds.append(count / elapsed)


async def measure(
    directory: str, seconds: float, rounds: int, payload: int
) -> tuple[list[float], dict[Config, Measured]]:
    body = b"p" * payload
    step = seconds / rounds
    raw: list[float] = []
    results = {config: Measured() for config in CONFIGS}
    async with AsyncExitStack() as stack:
        logs: dict[Config, tuple[Log, list[int]]] = {}
        for fsync, writers in CONFIGS:
            wal_dir = os.path.join(directory, f"wal-{writers}-{'sync' if fsync else 'nosync'}")
            options = LogOptions(segment_size=64 * 1024 * 1024, fsync=fsync)
            log = await stack.enter_async_context(
                open_log(OsDisk(), wal_dir, "bench", options, create_if_missing=True)
            )
            logs[(fsync, writers)] = (log, [1])
        for _ in range(rounds):
            raw.append(raw_fsync_rate(directory, step))  # blocks the loop; nothing else runs
            for config in CONFIGS:
                log, next_index = logs[config]
                await wal_slice(log, next_index, config[1], step, body, results[config])
    return raw, results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", default=None, help="directory on the disk to measure")
    parser.add_argument("--seconds", type=float, default=2.0, help="per measurement, in total")
    parser.add_argument("--rounds", type=int, default=4, help="interleaved rounds")
    parser.add_argument("--payload", type=int, default=128, help="bytes per entry")
    args = parser.parse_args()
    directory = tempfile.mkdtemp(prefix="revivify-bench-wal-", dir=args.dir or os.getcwd())
    try:
        raws, results = trio.run(measure, directory, args.seconds, args.rounds, args.payload)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    raw = statistics.fmean(raws)

    print(
        f"disk: {directory} (removed)   payload {args.payload} B/entry   {args.seconds}s each"
        f" in {args.rounds} interleaved rounds"
    )
    print(f"raw fsync rate (4 KiB write + fsync, 1 writer): {raw:10.0f} /s (mean of rounds)")
    print()
    print(
        f"{'fsync':>5} {'writers':>7} {'appends/s':>11} {'p50 ms':>8} {'p99 ms':>8}"
        f" {'x raw fsync':>12} {'x 1 writer':>11}"
    )
    for fsync in (True, False):
        base = results[(fsync, 1)].rate
        for writers in WRITERS:
            m = results[(fsync, writers)]
            print(
                f"{'on' if fsync else 'off':>5} {writers:>7} {m.rate:>11.0f}"
                f" {m.percentile(0.5):>8.3f} {m.percentile(0.99):>8.3f}"
                f" {m.rate / raw:>12.2f} {m.rate / base:>11.2f}"
            )
    one = results[(True, 1)].rounds
    many = results[(True, 64)].rounds
    checks = [
        ("1 writer >= 0.8 x raw fsync rate", [w / r for w, r in zip(one, raws, strict=True)], 0.8),
        ("64 writers >= 20 x 1 writer", [m / w for m, w in zip(many, one, strict=True)], 20.0),
    ]
    print()
    print("per round:   raw fsync/s " + " ".join(f"{r:8.0f}" for r in raws))
    print("             1 writer/s  " + " ".join(f"{w:8.0f}" for w in one))
    print("             64 writers/s" + " ".join(f"{m:8.0f}" for m in many))
    for label, ratios, target in checks:
        median = statistics.median(ratios)
        verdict = "ok" if median >= target else "MISS"
        rounds = " ".join(f"{r:.2f}" for r in ratios)
        print(f"target {label:<36} median ratio {median:7.2f}  {verdict}   (rounds: {rounds})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
