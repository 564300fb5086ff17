"""``revivify tserver run``: one tablet server process.

    revivify tserver run --fs-root DIR --rpc-bind 127.0.0.1:PORT [--trace-dir DIR]
                         [--rpc-advertised-address HOST:PORT]
                         [--tick-ms 50] [--election-ticks 10] [--heartbeat-ticks 2]
                         [--no-fsync] [--flush-mb 8] [--seed N]
                         [--masters HOST:PORT,... [--heartbeat-ms 500]]
                         [--webserver-bind HOST:PORT|off]
                         [--log-level INFO] [--log-format text|json] [--log-file PATH]
                         [--log-max-mb 64] [--log-files 5] [--no-metrics] [--metrics-per-tablet]

The first start formats DIR (a new server UUID). The process prints one line
``revivify tserver <uuid> listening on HOST:PORT`` on stdout once it serves (scripts wait for
it; HOST:PORT is the advertised address, followed by `` (bound HOST:PORT)`` when the socket's
own differs: process.py), then ``revivify tserver <uuid> web on http://HOST:PORT`` once its
status pages serve (impl/web; servers/process.py), logs to FS_ROOT/logs/tserver.log
(WARNING and above to stderr too; the log flags are impl/observe/logs.py's), and stops
cleanly on SIGTERM or SIGINT (Ctrl-C): it stops serving, drains and closes every WAL and
traces ``server_stop``; exit 0. Bad arguments, or a directory it cannot use (unreadable,
corrupt instance file): a one-line error, exit 2.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time

import trio

from revivify.impl.flagfile import add_flagfile_flag, apply_flagfiles
from revivify.impl.observe.logs import add_log_flags, setup_logging
from revivify.impl.observe.metrics import add_metrics_flags
from revivify.impl.rpc.address import parse_address
from revivify.impl.tserver.manager.shell import FAULT_POINTS
from revivify.impl.tserver.server import ServerOptions, TabletServer, open_tserver
from revivify.impl.web.apps import tserver_app

from .process import (
    TSERVER_WEB_PORT,
    Launch,
    UsageError,
    Web,
    add_advertised_flag,
    add_web_flag,
    advertised_address,
    listening_line,
    parse_web_bind,
    run_server_process,
    start_web,
)

DESCRIPTION = __doc__.split("\n\n")[0] if __doc__ else ""


TEST_FLAGS_ENV = "REVIVIFY_TEST_FLAGS"


def _test_only(text: str) -> str:
    """A test-only flag's help: hidden from operators (the flag is still accepted), shown
    with ``REVIVIFY_TEST_FLAGS=1`` in the environment."""
    return text if os.environ.get(TEST_FLAGS_ENV) == "1" else argparse.SUPPRESS


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="revivify tserver run",
        description="Run one tablet server: hosts Raft-replicated tablet replicas, serves RPC.")
    p.add_argument("--fs-root", required=True,
                   help="the server's directory (formatted with a new UUID on first start)")
    p.add_argument("--rpc-bind", default="127.0.0.1:0",
                   help="HOST:PORT to serve RPC on, also the address peers use unless "
                        "--rpc-advertised-address says (default 127.0.0.1:0, any free port)")
    add_advertised_flag(p)
    p.add_argument("--trace-dir", default=None,
                   help="where to write this process's trace (default FS_ROOT/traces)")
    p.add_argument("--tick-ms", type=int, default=50,
                   help="Raft tick length in milliseconds (default 50)")
    p.add_argument("--election-ticks", type=int, default=10,
                   help="minimum election timeout in ticks; randomised up to twice this "
                        "(default 10)")
    p.add_argument("--heartbeat-ticks", type=int, default=2,
                   help="leader heartbeat interval in ticks (default 2)")
    p.add_argument("--no-fsync", action="store_true",
                   help="acknowledge WAL appends without fsync (benchmarks only: a machine "
                        "crash may then lose acknowledged writes)")
    p.add_argument("--fsync-poll-us", type=int, default=50, metavar="US",
                   help="while a sync is in flight, wake a thread every US microseconds (for "
                        "at most 2 ms) so an idle CPU hears of the disk's answer at once "
                        "rather than a timer tick later; 0: plain blocking syncs (default 50)")
    p.add_argument("--flush-mb", type=float, default=8.0,
                   help="flush a tablet's memory store to a data block past this size "
                        "(default 8 MB)")
    p.add_argument("--seed", type=int, default=None,
                   help="seed of the election-timeout randomness (default: random)")
    p.add_argument("--max-concurrent-copies", type=int, default=4,
                   help="tablet copies this server runs at once as a destination; more "
                        "requests are answered THROTTLED (default 4)")
    p.add_argument("--no-auto-copy", action="store_true",
                   help="as a leader, never ask a peer to copy a tablet on its own (an "
                        "operator's 'replica copy' still works)")
    p.add_argument("--copy-chunk-kb", type=int, default=4096,
                   help="tablet copy FetchData chunk size in KiB (1..4096, default 4096)")
    p.add_argument("--log-retain-entries", type=int, default=50_000,
                   help="WAL entries kept behind the flushed index for lagging peers; a "
                        "peer further behind is re-created by a tablet copy (default 50000)")
    p.add_argument("--fault-corrupt-copy-chunks", type=int, default=0, metavar="N",
                   help=_test_only("TEST ONLY: as a copy source, corrupt the first N chunks served "
                        "(the destination must refuse and fetch them again)"))
    p.add_argument("--fault-slow-copy-ms", type=int, default=0, metavar="MS",
                   help=_test_only("TEST ONLY: as a copy source, wait MS milliseconds before "
                                   "serving each chunk (so tests can act in the middle of a "
                                   "copy)"))
    p.add_argument("--fault-crash-after", default=None, choices=FAULT_POINTS, metavar="STEP",
                   help=_test_only("TEST ONLY: exit abruptly right after the named durable step is "
                        "traced (one of: " + ", ".join(FAULT_POINTS) + "), like Kudu's "
                        "--fault_crash_after_* flags"))
    p.add_argument("--masters", default="", metavar="HOST:PORT,...",
                   help="the masters to heartbeat, comma-separated (every one of them: "
                        "seed 004); without it the server runs alone")
    p.add_argument("--heartbeat-ms", type=int, default=500,
                   help="heartbeat interval to each master in milliseconds (default 500)")
    add_log_flags(p, "tserver")
    add_metrics_flags(p)
    add_flagfile_flag(p)
    add_web_flag(p, TSERVER_WEB_PORT)
    return p


def parse(argv: list[str]) -> Launch:
    p = build_parser()
    args = p.parse_args(apply_flagfiles(argv, p))  # SystemExit: 0 --help, 2 bad usage
    try:
        host, port = parse_address(args.rpc_bind, allow_any_port=True)
    except ValueError as exc:
        raise UsageError(f"--rpc-bind: {exc}") from None
    advertised = advertised_address(args.rpc_advertised_address, host, port)
    if args.tick_ms < 1:
        raise UsageError("--tick-ms must be at least 1")
    if args.heartbeat_ticks < 1 or args.election_ticks <= args.heartbeat_ticks:
        raise UsageError("need 1 <= --heartbeat-ticks < --election-ticks")
    if args.fsync_poll_us < 0:
        raise UsageError("--fsync-poll-us must be >= 0")
    if args.flush_mb <= 0:
        raise UsageError("--flush-mb must be positive")
    if args.max_concurrent_copies < 1:
        raise UsageError("--max-concurrent-copies must be at least 1")
    if args.log_retain_entries < 0 or args.fault_corrupt_copy_chunks < 0:
        raise UsageError("--log-retain-entries and --fault-corrupt-copy-chunks must be >= 0")
    if not 1 <= args.copy_chunk_kb <= 4096:
        raise UsageError("--copy-chunk-kb must be in 1..4096")
    masters: list[str] = []
    for item in (m.strip() for m in args.masters.split(",")):
        if item:
            try:
                parse_address(item)
            except ValueError as exc:
                raise UsageError(f"--masters: {exc}") from None
            masters.append(item)
    if args.heartbeat_ms < 1:
        raise UsageError("--heartbeat-ms must be at least 1")
    web = parse_web_bind(args.webserver_bind, host, TSERVER_WEB_PORT)
    try:
        setup_logging(args, args.fs_root, "tserver")
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    return Launch(ServerOptions(fs_root=args.fs_root, rpc_host=host, rpc_port=port,
                         advertised_address=advertised, trace_dir=args.trace_dir,
                         tick_seconds=args.tick_ms / 1000,
                         election_ticks=args.election_ticks,
                         heartbeat_ticks=args.heartbeat_ticks, fsync=not args.no_fsync,
                         fsync_poll_us=args.fsync_poll_us,
                         flush_threshold=int(args.flush_mb * (1 << 20)), seed=args.seed,
                         fault_crash_after=args.fault_crash_after,
                         max_concurrent_copies=args.max_concurrent_copies,
                         auto_copy=not args.no_auto_copy,
                         copy_chunk_bytes=args.copy_chunk_kb << 10,
                         log_retain_entries=args.log_retain_entries,
                         fault_corrupt_copy_chunks=args.fault_corrupt_copy_chunks,
                         fault_slow_copy_ms=max(0, args.fault_slow_copy_ms),
                         masters=tuple(masters), heartbeat_seconds=args.heartbeat_ms / 1000,
                         metrics=not args.no_metrics,
                         metrics_per_tablet=args.metrics_per_tablet), web)


async def serve(launch: Launch) -> None:
    started = time.time()
    web = Web()

    async def pages(server: TabletServer, nursery: trio.Nursery) -> None:
        nonlocal web
        app = tserver_app(server, started_at=started)
        web = await start_web(nursery, launch.web, app, "tserver", server.uuid,
                              server.address)
        server.web_address = web.address  # heartbeats carry it to the masters

    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async with open_tserver(launch.options, on_bound=pages) as server:
            print(listening_line("tserver", server.uuid, server.address,
                                 server.bound_address), flush=True)
            if web.line is not None:
                print(web.line, flush=True)
            async for _ in signals:
                break


def run_main(argv: list[str]) -> int:
    return run_server_process("revivify tserver run", argv, parse, serve)


__all__ = ["build_parser", "run_main"]


if __name__ == "__main__":
    raise SystemExit(run_main(sys.argv[1:]))
