"""``revivify master run``: one master process.

    revivify master run --fs-root DIR --rpc-bind HOST:PORT [--masters A,B,C]
                        [--rpc-advertised-address HOST:PORT]
                        [--trace-dir DIR] [--tick-ms 50] [--election-ticks 10]
                        [--heartbeat-ticks 2] [--no-fsync] [--seed N]
                        [--tserver-dead-after-ms 3000] [--creation-timeout-s 60]
                        [--tserver-failed-after-ms 3000] [--no-heal] [--join]
                        [--webserver-bind HOST:PORT|off] [--trace-follower URL]
                        [--log-level INFO] [--log-format text|json] [--log-file PATH]
                        [--log-max-mb 64] [--log-files 5] [--no-metrics] [--metrics-per-tablet]

``--masters`` lists every master (this one included, by its advertised address:
``--rpc-advertised-address``, else ``--rpc-bind``), 1 or 2N+1 of them; without it the
master runs alone. The first start formats DIR (a new UUID) and, once every master answers,
creates the catalog tablet with all of them as voters (membership.py). The process prints one
line ``revivify master <uuid> listening on HOST:PORT`` on stdout once it serves RPC (it is
then a follower, or a leader not ready yet: ``revivify master status`` says when it is), then
``revivify master <uuid> web on http://HOST:PORT`` once its status pages serve (impl/web),
logs to FS_ROOT/logs/master.log (WARNING and above to stderr too: impl/observe/logs.py),
and stops cleanly on SIGTERM or SIGINT; exit 0. ``--trace-follower http://HOST:PORT``: a
trace follower's pages (``trace follow --web``; ``cluster start --watch`` passes it), whose
verdict the home page shows and links to. Bad arguments or an
unusable directory: a one-line error, exit 2.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time

import trio

from revivify.impl.flagfile import add_flagfile_flag, apply_flagfiles
from revivify.impl.master.server import MasterOptions, MasterServer, normalize, open_master
from revivify.impl.observe.logs import add_log_flags, setup_logging
from revivify.impl.observe.metrics import add_metrics_flags
from revivify.impl.rpc.address import parse_address
from revivify.impl.tserver.server import TabletServer
from revivify.impl.web.apps import master_app

from .process import (
    MASTER_WEB_PORT,
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

DEFAULT_DEAD_AFTER_MS = 3000


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="revivify master run",
        description="Run one master: hosts the Raft-replicated catalog, serves tables.")
    p.add_argument("--fs-root", required=True,
                   help="the master's directory (formatted with a new UUID on first start)")
    p.add_argument("--rpc-bind", required=True, help="HOST:PORT to serve RPC on")
    add_advertised_flag(p)
    p.add_argument("--masters", default="", metavar="HOST:PORT,...",
                   help="every master of the cluster, this one included (1 or 2N+1); "
                        "default: this one alone")
    p.add_argument("--trace-dir", default=None,
                   help="where to write this process's trace (default FS_ROOT/traces)")
    p.add_argument("--tick-ms", type=int, default=50, help="Raft tick (default 50)")
    p.add_argument("--election-ticks", type=int, default=10,
                   help="minimum election timeout in ticks (default 10)")
    p.add_argument("--heartbeat-ticks", type=int, default=2,
                   help="Raft heartbeat interval in ticks (default 2)")
    p.add_argument("--no-fsync", action="store_true", help="benchmarks only")
    p.add_argument("--seed", type=int, default=None, help="randomness seed")
    p.add_argument("--tserver-dead-after-ms", type=int, default=None,
                   help="a tablet server without a heartbeat this long is dead: "
                        "'tserver list', ksck, placement (default 3000, or "
                        "--tserver-failed-after-ms if lower; never above it)")
    p.add_argument("--tserver-failed-after-ms", type=int, default=3000,
                   help="the healing policy: a tablet server silent this long has failed and "
                        "its replicas are re-replicated elsewhere (default 3000; minutes in "
                        "production)")
    p.add_argument("--no-heal", action="store_true",
                   help="do not run the healing policy (no automatic replica moves)")
    p.add_argument("--join", action="store_true",
                   help="join a running cluster (then 'revivify master add HOST:PORT'): never "
                        "create the catalog, wait for the leader to copy it here; --masters "
                        "may then list any number of masters")
    p.add_argument("--creation-timeout-s", type=float, default=60.0,
                   help="a tablet still CREATING after this long is replaced (default 60)")
    p.add_argument("--write-timeout-s", type=float, default=10.0,
                   help="a catalog write not committed after this long fails its operation "
                        "(retryable; default 10)")
    p.add_argument("--flush-mb", type=float, default=8.0,
                   help="flush the catalog tablet's rows to a data block once this many MiB "
                        "are unflushed; its WAL is then garbage-collected (default 8)")
    p.add_argument("--log-retain-entries", type=int, default=50_000,
                   help="catalog WAL entries kept behind the flushed index for lagging "
                        "masters; one further behind (or a new one) gets a copy of the "
                        "catalog (default 50000)")
    add_log_flags(p, "master")
    add_metrics_flags(p)
    add_flagfile_flag(p)
    add_web_flag(p, MASTER_WEB_PORT)
    p.add_argument("--trace-follower", default=None, metavar="URL",
                   help="http://HOST:PORT of a trace follower's pages ('trace follow "
                        "--web'): the home page shows its verdict and links to it")
    return p


def parse(argv: list[str]) -> Launch:
    p = build_parser()
    args = p.parse_args(apply_flagfiles(argv, p))
    try:
        host, port = parse_address(args.rpc_bind)
    except ValueError as exc:
        raise UsageError(f"--rpc-bind: {exc}") from None
    advertised = advertised_address(args.rpc_advertised_address, host, port)
    me = advertised or normalize(args.rpc_bind)
    masters: list[str] = []
    for item in (m.strip() for m in args.masters.split(",")):
        if item:
            try:
                masters.append(normalize(item))
            except ValueError as exc:
                raise UsageError(f"--masters: {exc}") from None
    if masters:
        if len(set(masters)) != len(masters):
            raise UsageError("--masters lists an address twice")
        if len(masters) % 2 == 0 and not args.join:
            raise UsageError(f"--masters: {len(masters)} masters; use 1 or 2N+1")
        if me not in masters:
            flag = "--rpc-advertised-address" if advertised else "--rpc-bind"
            raise UsageError(f"--masters must include this master's {flag} {me}")
    if args.tick_ms < 1 or args.heartbeat_ticks < 1 \
            or args.election_ticks <= args.heartbeat_ticks:
        raise UsageError("need --tick-ms >= 1 and 1 <= --heartbeat-ticks < --election-ticks")
    if args.tserver_dead_after_ms is None:  # never above the policy's timeout (below)
        args.tserver_dead_after_ms = min(DEFAULT_DEAD_AFTER_MS, args.tserver_failed_after_ms)
    if args.tserver_dead_after_ms < 1 or args.creation_timeout_s <= 0 \
            or args.write_timeout_s <= 0 or args.tserver_failed_after_ms < 1:
        raise UsageError("--tserver-dead-after-ms, --tserver-failed-after-ms, "
                         "--creation-timeout-s and --write-timeout-s must be positive")
    if args.tserver_failed_after_ms < args.tserver_dead_after_ms:
        # One notion of a dead server (README "The cluster heals itself"): replicas move off
        # a server only once 'tserver list' and ksck already say it is DEAD.
        raise UsageError(f"--tserver-failed-after-ms {args.tserver_failed_after_ms} is below "
                         f"--tserver-dead-after-ms {args.tserver_dead_after_ms}: replicas "
                         f"would move off a server before it is listed DEAD; give "
                         f"failed-after >= dead-after")
    if args.flush_mb <= 0 or args.log_retain_entries < 0:
        raise UsageError("--flush-mb must be positive and --log-retain-entries >= 0")
    web = parse_web_bind(args.webserver_bind, host, MASTER_WEB_PORT)
    follower: str | None = None
    if args.trace_follower is not None:
        try:
            follower = normalize(args.trace_follower.removeprefix("http://").rstrip("/"))
        except ValueError as exc:
            raise UsageError(f"--trace-follower: {exc} (expected http://HOST:PORT)") from None
    try:
        setup_logging(args, args.fs_root, "master")
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    return Launch(MasterOptions(fs_root=args.fs_root, rpc_host=host, rpc_port=port,
                         advertised_address=advertised, masters=tuple(masters),
                         trace_dir=args.trace_dir,
                         tick_seconds=args.tick_ms / 1000, election_ticks=args.election_ticks,
                         heartbeat_ticks=args.heartbeat_ticks, fsync=not args.no_fsync,
                         seed=args.seed, dead_after=args.tserver_dead_after_ms / 1000,
                         creation_timeout=args.creation_timeout_s,
                         write_timeout=args.write_timeout_s,
                         failed_after=args.tserver_failed_after_ms / 1000,
                         heal=not args.no_heal, join=args.join,
                         flush_threshold=int(args.flush_mb * (1 << 20)),
                         log_retain_entries=args.log_retain_entries,
                         metrics=not args.no_metrics,
                         metrics_per_tablet=args.metrics_per_tablet), web,
                  trace_follower=follower)


async def serve(launch: Launch) -> None:
    started = time.time()
    web = Web()

    async def pages(master: MasterServer, ts: TabletServer, nursery: trio.Nursery) -> None:
        nonlocal web
        app = master_app(master, ts, started_at=started, follower=launch.trace_follower)
        web = await start_web(nursery, launch.web, app, "master", ts.uuid, ts.address)
        master.web_address = web.address  # heartbeat answers and Master.Status carry it

    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async with open_master(launch.options, on_bound=pages) as master:
            print(listening_line("master", master.uuid, master.address,
                                 master.embedded.server.bound_address), flush=True)
            if web.line is not None:
                print(web.line, flush=True)
            async for _ in signals:
                break


def run_main(argv: list[str]) -> int:
    return run_server_process("revivify master run", argv, parse, serve)


__all__ = ["build_parser", "run_main"]


if __name__ == "__main__":
    raise SystemExit(run_main(sys.argv[1:]))
