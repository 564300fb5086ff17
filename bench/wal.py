"""WAL group-commit benchmark: raw fsync rate vs WAL appends/s with 1..64 writers.

Usage: python bench/wal.py [--dir DIR] [--seconds S] [--payload BYTES]

From one run on one disk (DIR, default a temp dir under the current directory) it prints:
the raw fsync rate (4 KiB write + fsync, one writer), then WAL appends/s and p50/p99 append
latency for 1, 4, 16 and 64 concurrent writers, with fsync on and with fsync off, and the
ratios the issue sets as targets:
    1 writer (fsync on)  >= 0.8 x raw fsync rate
    64 writers (fsync on) >= 20 x 1-writer throughput
Figures, not assertions: a missed target is printed as MISS and the exit status stays 0.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

import trio
from revivify.impl.storage.disk import OsDisk
from revivify.impl.storage.wal import LogEntry, LogOptions, open_log

WRITERS = (1, 4, 16, 64)


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


def wal_run(
    directory: str, writers: int, fsync: bool, seconds: float, payload: int
) -> tuple[float, float, float]:
    """(appends/s, p50 ms, p99 ms) for `writers` concurrent appenders."""
    wal_dir = os.path.join(directory, f"wal-{writers}-{'sync' if fsync else 'nosync'}")
    latencies: list[float] = []
    body = b"p" * payload
    options = LogOptions(segment_size=64 * 1024 * 1024, fsync=fsync)

    async def main() -> float:
        async with open_log(OsDisk(), wal_dir, "bench", options, create_if_missing=True) as log:
            next_index = [1]
            deadline = time.perf_counter() + seconds

            async def writer() -> None:
                while time.perf_counter() < deadline:
                    index = next_index[0]
                    next_index[0] += 1
                    began = time.perf_counter()
                    await log.reserve([LogEntry(1, index, body)]).wait()
                    latencies.append(time.perf_counter() - began)

            start = time.perf_counter()
            async with trio.open_nursery() as nursery:
                for _ in range(writers):
                    nursery.start_soon(writer)
            return time.perf_counter() - start

    elapsed = trio.run(main)
    shutil.rmtree(wal_dir)
    latencies.sort()
    p50 = statistics.median(latencies) * 1000
    p99 = latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] * 1000
    return len(latencies) / elapsed, p50, p99


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", default=None, help="directory on the disk to measure")
    parser.add_argument("--seconds", type=float, default=2.0, help="per measurement")
    parser.add_argument("--payload", type=int, default=128, help="bytes per entry")
    args = parser.parse_args()
    directory = tempfile.mkdtemp(prefix="revivify-bench-wal-", dir=args.dir or os.getcwd())
    try:
        raw = raw_fsync_rate(directory, args.seconds)
        results: dict[tuple[bool, int], tuple[float, float, float]] = {}
        for fsync in (True, False):
            for writers in WRITERS:
                results[(fsync, writers)] = wal_run(
                    directory, writers, fsync, args.seconds, args.payload
                )
    finally:
        shutil.rmtree(directory, ignore_errors=True)

    print(f"disk: {directory} (removed)   payload {args.payload} B/entry   {args.seconds}s each")
    print(f"raw fsync rate (4 KiB write + fsync, 1 writer): {raw:10.0f} /s")
    print()
    print(
        f"{'fsync':>5} {'writers':>7} {'appends/s':>11} {'p50 ms':>8} {'p99 ms':>8}"
        f" {'x raw fsync':>12} {'x 1 writer':>11}"
    )
    for fsync in (True, False):
        base = results[(fsync, 1)][0]
        for writers in WRITERS:
            rate, p50, p99 = results[(fsync, writers)]
            print(
                f"{'on' if fsync else 'off':>5} {writers:>7} {rate:>11.0f} {p50:>8.3f} {p99:>8.3f}"
                f" {rate / raw:>12.2f} {rate / base:>11.2f}"
            )
    one = results[(True, 1)][0]
    many = results[(True, 64)][0]
    print()
    checks = [
        ("1 writer >= 0.8 x raw fsync rate", one / raw, 0.8),
        ("64 writers >= 20 x 1 writer", many / one, 20.0),
    ]
    for label, ratio, target in checks:
        verdict = "ok" if ratio >= target else "MISS"
        print(f"target {label:<36} ratio {ratio:7.2f}  {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
