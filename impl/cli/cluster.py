"""``revivify cluster ...``: a local cluster of real processes on 127.0.0.1, for a person at a
terminal (the tests and benchmarks use the same code directly: impl/processes/masters.py
MasterProcesses).

  revivify cluster start --root DIR [--num-masters 3] [--num-tservers 3] [--watch]
                         [--master-arg ARG]... [--tserver-arg ARG]... [--timeout S] [--json]
  revivify cluster status --root DIR [--json]
  revivify cluster stop --root DIR [--timeout S] [--json]
  revivify cluster kill NAME --root DIR [--json]
  revivify cluster restart NAME --root DIR [--timeout S] [--json]

``start`` chooses a free port for every server, starts the masters (``DIR/m-<i>``) and the
tablet servers (``DIR/ts-<i>``) detached (a session of their own, output appended to
``DIR/m-<i>.log`` / ``DIR/ts-<i>.log``, traces in ``DIR/traces``), so they keep running
after the command exits; it records them in ``DIR/cluster.json`` (clusterfile.py) as soon
as they are spawned, so a Ctrl-C part way still leaves them stoppable, and then waits until
each has said its "listening" line, a master is the ready leader (``master status`` says
ready) and the leader hears from every tablet server (progress on stderr: a line per step,
and on a terminal a bar of the servers listening, then the ready leader: render.progress).
A second ``start`` on a directory with a live process refuses (exit 1); on one whose
processes are all dead it starts them again on the same directories and ports (their data
and UUIDs kept). A start that fails kills what it started and names the server and its log
(exit 2).

``start`` also gives every server a free port for its status pages (``--webserver-bind``),
kept across restarts. ``status`` lists every server: name (m0, m1, ... ts0, ts1, ...), UUID,
address, pid, alive, and ``web``, the URL of its pages;
exit 0 if all are alive, 1 if not. ``stop`` sends SIGTERM to every live server at once and
waits; a server still running after ``--timeout`` gets SIGKILL. ``kill NAME`` is SIGKILL (a
crash); ``restart NAME`` starts a stopped or killed server again on its directory and port
and waits for its "listening" line.

``start --watch`` (a new cluster only) also runs a trace follower beside it, ``revivify
trace follow DIR/traces --web 127.0.0.1:PORT`` (a free port, kept in cluster.json, its
output in ``DIR/follower.log``), and tells every master its address (``--trace-follower``,
one of the masters' flags, so a restart keeps it): their home pages show its verdict.
``status`` shows it as a row ``follower`` (``--json``: the key ``follower``, null without
one), ``stop`` stops it after the servers (so it reads their last lines; it then writes
its final verdict to its log) and a ``start`` of the stopped cluster starts it again.

Exit codes: 0 done; 1 refused (a cluster already running, a server already running or
already stopped) or, for status, a server not alive; 2 bad usage, a missing or malformed
cluster.json, or a server that did not start.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import sys
import time
from typing import TYPE_CHECKING, Any

from revivify.impl.processes.pids import pid_alive

from . import clusterfile, render

if TYPE_CHECKING:
    from revivify.impl.processes.control import ServerProcess
    from revivify.impl.processes.masters import MasterProcesses

# `cluster status` reads cluster.json and asks /proc whether each pid lives: it must start
# fast (issue 31; tests/cli/test_import_budget.py), so trio, the client library and the
# process supervisor (impl/processes/control.py: attrs, subprocess, selectors) are imported
# by the commands that start, signal or wait for servers only, inside them; the status needs
# impl/processes/pids.py, the standard library's os alone.
from .clusterfile import ClusterFileError, ClusterRecord, FollowerRecord, ServerRecord
from .common import (
    Outcome,
    Parser,
    fail,
    json_flag,
    parse_args,
    positive_float,
    positive_int,
    print_outcome,
)

PROG = "revivify cluster"
DEFAULT_START_TIMEOUT = 60.0
DEFAULT_STOP_TIMEOUT = 30.0
_POLL_SECONDS = 0.1
FOLLOWER_LINE = re.compile(r"revivify follower web on http://(\S+)")
FOLLOWER_LOG = "follower.log"


class _Refused(Exception):
    """The command will not go on: its one-line message and exit code."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


def _say(line: str) -> None:
    """Progress on stderr (a start takes seconds)."""
    print(line, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------- the record


def _names(record: ClusterRecord) -> list[str]:
    return [s.name for s in record.masters + record.tservers]


def _cluster_of(root: str, record: ClusterRecord) -> MasterProcesses:
    """The MasterProcesses the record describes (same directories, ports and flags), each
    server knowing the process last started for it."""
    from revivify.impl.processes.masters import MasterProcesses

    cluster = MasterProcesses(root, len(record.masters), len(record.tservers),
                            master_args=record.master_args,
                            tserver_args=record.tserver_args, detached=True,
                            master_ports=[m.port for m in record.masters],
                            tserver_ports=[t.port for t in record.tservers],
                            master_web_ports=[m.web_port for m in record.masters],
                            tserver_web_ports=[t.web_port for t in record.tservers],
                            start_timeout=DEFAULT_START_TIMEOUT)
    for s, r in zip(_servers(cluster), record.masters + record.tservers, strict=True):
        s.uuid, s.pid, s.start_ticks, s.web = r.uuid, r.pid, r.start_ticks, r.web
    return cluster


def _servers(cluster: MasterProcesses) -> list[ServerProcess]:
    return cluster.masters + cluster.tservers.servers


def _follower_of(root: str, record: ClusterRecord) -> ServerProcess | None:
    """The trace follower the record names, as a process to start or signal (index 0,
    its "directory" the root: it keeps nothing on disk but its log)."""
    from revivify.impl.processes.control import ServerProcess

    f = record.follower
    if f is None:
        return None
    s = ServerProcess(0, root, os.path.join(root, "traces"), f.log, port=f.web_port,
                      web_port=f.web_port)
    s.pid, s.start_ticks, s.web = f.pid, f.start_ticks, f.web
    return s


def _follower_record(s: ServerProcess | None) -> FollowerRecord | None:
    if s is None:
        return None
    return FollowerRecord(web_port=s.web_port, log=s.log_path, web=s.web, pid=s.pid,
                          start_ticks=s.start_ticks)


def _spawn_follower(s: ServerProcess) -> None:
    """``trace follow`` of the cluster's traces with its pages on its port, detached as
    the servers are. By module name: the CLI's cluster commands never import the checker
    (the follower process does)."""
    from revivify.impl.processes.control import spawn

    spawn(s, [sys.executable, "-m", "revivify.impl.cli.main", "trace", "follow",
              s.trace_dir, "--web", f"{s.host}:{s.web_port}", "--quiet"], detached=True)


def _await_follower(s: ServerProcess, timeout: float) -> None:
    from revivify.impl.processes.control import await_listening

    found = await_listening(s, FOLLOWER_LINE, "the trace follower", timeout)
    s.web = found.group(1)


def _record_of(cluster: MasterProcesses,
               follower: ServerProcess | None = None) -> ClusterRecord:

    def one(prefix: str, s: ServerProcess) -> ServerRecord:
        return ServerRecord(name=f"{prefix}{s.index}", address=s.address, port=s.port,
                            fs_root=s.fs_root, log=s.log_path, uuid=s.uuid, pid=s.pid,
                            start_ticks=s.start_ticks, web_port=s.web_port, web=s.web)
    return ClusterRecord(version=clusterfile.VERSION,
                         masters=[one("m", m) for m in cluster.masters],
                         tservers=[one("ts", t) for t in cluster.tservers.servers],
                         master_args=cluster.master_args, tserver_args=cluster.tserver_args,
                         follower=_follower_record(follower))


def _find(cluster: MasterProcesses, record: ClusterRecord, name: str) -> ServerProcess:
    names = _names(record)
    if name not in names:
        raise _Refused(f"no server {name!r} in {clusterfile.path_of(cluster.root)} (it has "
                       f"{', '.join(names)})", 2)
    return _servers(cluster)[names.index(name)]


def _alive(r: ServerRecord) -> bool:
    return pid_alive(r.pid, r.start_ticks)


def _status_rows(record: ClusterRecord) -> list[dict[str, Any]]:
    """One row per server. ``log``: its stdout and stderr (the "listening" line, WARNING
    and above, a crash's traceback); ``server_log``: the log it writes itself, every line
    at --log-level (impl/observe/logs.py: FS_ROOT/logs/<kind>.log unless --log-file)."""
    kinds = [("master", record.master_args)] * len(record.masters) + \
        [("tserver", record.tserver_args)] * len(record.tservers)
    return [{"name": r.name, "uuid": r.uuid or None, "address": r.address,
             "pid": r.pid or None, "alive": _alive(r), "log": r.log,
             "server_log": _server_log(r, kind, args),
             "web": f"http://{r.web}" if r.web else None}
            for r, (kind, args) in zip(record.masters + record.tservers, kinds, strict=True)]


def _server_log(r: ServerRecord, kind: str, args: list[str]) -> str | None:
    """Where the server writes its own log (None: --log-file -, stderr only)."""
    path: str | None = os.path.join(r.fs_root, "logs", f"{kind}.log")
    for i, arg in enumerate(args):
        if arg == "--log-file" and i + 1 < len(args):
            path = args[i + 1]
        elif arg.startswith("--log-file="):
            path = arg.split("=", 1)[1]
    return None if path == "-" else path


def _follower_row(record: ClusterRecord) -> dict[str, Any] | None:
    f = record.follower
    if f is None:
        return None
    return {"pid": f.pid or None, "alive": pid_alive(f.pid, f.start_ticks), "log": f.log,
            "web": f"http://{f.web}" if f.web else None,
            "page": f"http://{f.web}/follower" if f.web else None}


def _status_doc(record: ClusterRecord) -> dict[str, Any]:
    rows = _status_rows(record)
    return {"masters": rows[:len(record.masters)], "tservers": rows[len(record.masters):],
            "follower": _follower_row(record)}


def _status_text(record: ClusterRecord, root: str) -> str:
    rows = _status_rows(record)
    logs = [r.log for r in record.masters + record.tservers]
    table = [[r["name"], r["uuid"], r["address"], r["pid"], "yes" if r["alive"] else "NO",
              r["web"], os.path.relpath(log, root)] for r, log in zip(rows, logs, strict=True)]
    f = _follower_row(record)
    if f is not None:
        table.append(["follower", "", "", f["pid"], "yes" if f["alive"] else "NO",
                      f["page"], os.path.relpath(f["log"], root)])
    return render.table(["NAME", "UUID", "ADDRESS", "PID", "ALIVE", "WEB", "LOG"], table)


# ---------------------------------------------------------------------------- readiness


async def _await_ready(cluster: MasterProcesses, timeout: float) -> None:
    """A ready leader master that hears from every tablet server, within `timeout`."""
    import trio

    from revivify.impl.client import ClientOptions
    from revivify.impl.client.master import master_call, master_status
    from revivify.impl.master import api
    from revivify.impl.processes.control import ProcessError

    masters = cluster.master_addresses
    want = {s.uuid for s in cluster.tservers.servers}
    with trio.move_on_after(timeout) as scope:
        leader: str | None = None
        while leader is None:
            for address in masters:
                try:
                    if (await master_status(address)).ready:
                        leader = address
                        break
                except Exception:  # not answering yet: ask the next, then again
                    continue
            else:
                await trio.sleep(_POLL_SECONDS)
        options = ClientOptions(deadline=timeout)
        while want:
            reply = await master_call([leader, *masters], api.MASTER_LIST_TSERVERS,
                                      api.Empty(), api.TabletServerList, options)
            want -= {t.uuid for t in reply.tservers if t.live}
            if want:
                await trio.sleep(_POLL_SECONDS)
    if scope.cancelled_caught:
        what = ("no master became the ready leader" if leader is None else
                f"the leader master did not hear from tablet server(s) {', '.join(want)}")
        raise ProcessError(f"{what} within {timeout:g}s; see the logs in {cluster.root}")


def _check_dead(cluster: MasterProcesses) -> None:
    """A ProcessError if a server has exited since it started (a port taken, ...)."""
    from revivify.impl.processes.control import ProcessError

    for s in _servers(cluster):
        if not s.running:
            raise ProcessError(f"{os.path.basename(s.fs_root)} exited; log "
                               f"{s.log_path}:\n{s.stderr_tail()}")


# ---------------------------------------------------------------------------- start


def _start(args: argparse.Namespace) -> Outcome:
    import trio

    from revivify.impl.client import ClientError
    from revivify.impl.processes.control import (
        ProcessError,
        ServerProcess,
        free_ports,
        kill_process,
    )
    from revivify.impl.processes.masters import MasterProcesses

    root = os.path.abspath(args.root)
    if os.path.exists(root) and not os.path.isdir(root):
        raise _Refused(f"{root} is not a directory", 2)
    os.makedirs(root, exist_ok=True)
    with clusterfile.locked(root):
        if os.path.exists(clusterfile.path_of(root)):
            record = clusterfile.load(root)
            live = [f"{r.name} (pid {r.pid})" for r in record.masters + record.tservers
                    if _alive(r)]
            if record.follower is not None and \
                    pid_alive(record.follower.pid, record.follower.start_ticks):
                live.append(f"follower (pid {record.follower.pid})")
            if live:
                raise _Refused(f"a cluster is already running in {root}: {', '.join(live)} "
                               f"('revivify cluster stop --root {args.root}' first, or "
                               "'cluster restart NAME' for a server that is down)", 1)
            for flag, asked, has in (("--num-masters", args.num_masters, len(record.masters)),
                                     ("--num-tservers", args.num_tservers,
                                      len(record.tservers))):
                if asked is not None and asked != has:
                    raise _Refused(f"{flag} {asked}: the cluster in {root} has {has} (a "
                                   "restart keeps its servers; use another --root for a new "
                                   "cluster)", 2)
            if args.master_arg or args.tserver_arg:
                raise _Refused("--master-arg and --tserver-arg apply to a new cluster only "
                               f"(the one in {root} keeps the flags it was started with)", 2)
            if args.watch and record.follower is None:
                raise _Refused(f"--watch applies to a new cluster only (the masters of the one "
                               f"in {root} were not told of a follower); 'revivify trace "
                               f"follow {os.path.join(root, 'traces')} --web HOST:PORT' "
                               "follows it without their link", 2)
            cluster = _cluster_of(root, record)
            follower = _follower_of(root, record)
            _say(f"restarting the cluster in {root} ({len(record.masters)} masters, "
                 f"{len(record.tservers)} tablet servers, same directories and ports)")
        else:
            masters = 3 if args.num_masters is None else args.num_masters
            tservers = 3 if args.num_tservers is None else args.num_tservers
            master_args = list(args.master_arg)
            follower = None
            # every port of the cluster picked together, so no two are the same
            ports = free_ports(1 + 2 * masters + 2 * tservers)
            web = 1 + masters + tservers  # ports: follower, masters, tservers, their pages
            if args.watch:
                port = ports[0]
                follower = ServerProcess(0, root, os.path.join(root, "traces"),
                                         os.path.join(root, FOLLOWER_LOG), port=port,
                                         web_port=port)
                master_args.append(f"--trace-follower=http://{follower.host}:{port}")
            cluster = MasterProcesses(root, masters, tservers, master_args=master_args,
                                    tserver_args=args.tserver_arg, detached=True,
                                    master_ports=ports[1:1 + masters],
                                    tserver_ports=ports[1 + masters:web],
                                    master_web_ports=ports[web:web + masters],
                                    tserver_web_ports=ports[web + masters:],
                                    start_timeout=args.timeout)
            _say(f"starting {masters} master{'s' if masters != 1 else ''} and {tservers} "
                 f"tablet server{'s' if tservers != 1 else ''} in {root}")
        cluster.start_timeout = args.timeout
        deadline = time.monotonic() + args.timeout
        servers = _servers(cluster)
        try:
            # Progress: a step per server listening, one for the ready leader hearing
            # every tablet server (a bar on a terminal; the notes alone otherwise).
            with render.progress("starting the cluster", len(servers) + 1,
                                 enabled=not args.json) as shown:
                cluster.spawn_all()
                if follower is not None:  # beside the servers: it starts as slowly
                    _spawn_follower(follower)
                clusterfile.save(root, _record_of(cluster, follower))  # stoppable from here on
                for i in range(len(cluster.masters)):
                    cluster.await_master(i)
                    shown.advance()
                for i in range(len(cluster.tservers.servers)):
                    cluster.tservers.await_started(i)
                    shown.advance()
                clusterfile.save(root, _record_of(cluster, follower))  # with the UUIDs
                shown.note("waiting for the leader master to be ready and to hear from "
                           "every tablet server")
                trio.run(_await_ready, cluster, max(1.0, deadline - time.monotonic()))
                _check_dead(cluster)
                if follower is not None:
                    shown.note("waiting for the trace follower's pages")
                    _await_follower(follower, max(1.0, deadline - time.monotonic()))
                shown.advance()
        except (ProcessError, ClientError, OSError) as exc:
            for s in [*_servers(cluster), *([follower] if follower else [])]:
                kill_process(s)
            clusterfile.save(root, _record_of(cluster, follower))
            raise _Refused(f"the cluster did not start (every server it started is "
                           f"killed): {exc}", 2) from None
        for s in [*_servers(cluster), *([follower] if follower else [])]:
            # Forget the Popen objects without waiting on them: the processes outlive us.
            s.proc = None
        record = _record_of(cluster, follower)
        clusterfile.save(root, record)  # with the follower's address
    watched = f"\ntrace follower: http://{follower.web}/follower" if follower else ""
    return Outcome(0, _status_doc(record),
                   _status_text(record, root) + f"\nmasters: {cluster.master_list}" + watched)


# ---------------------------------------------------------------------------- stop, kill


def _stop(args: argparse.Namespace) -> Outcome:
    from revivify.impl.processes.control import kill_process, reap, signal_process

    root = os.path.abspath(args.root)
    with clusterfile.locked(root):
        record = clusterfile.load(root)
        cluster = _cluster_of(root, record)
        live = [s for s in _servers(cluster) if s.running]
        names = dict(zip(map(id, _servers(cluster)), _names(record), strict=True))
        if live:
            _say(f"stopping {', '.join(names[id(s)] for s in live)}")
        for s in live:  # every SIGTERM first, then one wait for them all
            signal_process(s, signal.SIGTERM)
        deadline = time.monotonic() + args.timeout
        while any(s.running for s in live) and time.monotonic() < deadline:
            for s in live:
                reap(s)
            time.sleep(_POLL_SECONDS)
        killed = [s for s in live if s.running]
        for s in killed:
            kill_process(s)
        follower = _follower_of(root, record)
        follower_stopped = follower is not None and _stop_follower(follower, args.timeout)
        record = clusterfile.load(root)
    text = (f"stopped {len(live) - len(killed)} server(s)"
            + (f"; killed {', '.join(names[id(s)] for s in killed)} after "
               f"{args.timeout:g}s" if killed else "")
            + ("" if live else " (none was running)")
            + ("; the trace follower stopped (its verdict: "
               f"{os.path.relpath(follower.log_path, root)})"
               if follower is not None and follower_stopped else ""))
    return Outcome(0, _status_doc(record), text)


def _stop_follower(s: ServerProcess, timeout: float) -> bool:
    """SIGTERM to the follower once the servers are gone: it reads their last lines,
    judges the files as they are (trace check's verdict) and exits. Whether it ran."""
    from revivify.impl.processes.control import kill_process, reap, signal_process

    if not signal_process(s, signal.SIGTERM):
        return False
    deadline = time.monotonic() + timeout
    while s.running and time.monotonic() < deadline:
        reap(s)
        time.sleep(_POLL_SECONDS)
    if s.running:
        kill_process(s)
    return True


def _kill(args: argparse.Namespace) -> Outcome:
    from revivify.impl.processes.control import kill_process

    root = os.path.abspath(args.root)
    with clusterfile.locked(root):
        record = clusterfile.load(root)
        cluster = _cluster_of(root, record)
        s = _find(cluster, record, args.name)
        if not s.running:
            raise _Refused(f"{args.name} is not running", 1)
        kill_process(s)
    return Outcome(0, _status_doc(record), f"{args.name} (pid {s.pid}) killed")


def _restart(args: argparse.Namespace) -> Outcome:
    from revivify.impl.processes.control import ProcessError, kill_process

    root = os.path.abspath(args.root)
    with clusterfile.locked(root):
        record = clusterfile.load(root)
        cluster = _cluster_of(root, record)
        cluster.start_timeout = args.timeout
        s = _find(cluster, record, args.name)
        if s.running:
            raise _Refused(f"{args.name} is running (pid {s.pid}); 'revivify cluster kill "
                           f"{args.name}' or stop it first", 1)
        _say(f"starting {args.name} on {s.address}")
        try:
            if s in cluster.masters:
                cluster.start_master(cluster.masters.index(s))
            else:
                cluster.tservers.start(s.index)
        except ProcessError as exc:
            kill_process(s)
            clusterfile.save(root, _record_of(cluster, _follower_of(root, record)))
            raise _Refused(f"{args.name} did not start: {exc}", 2) from None
        s.proc = None  # it outlives us
        record = _record_of(cluster, _follower_of(root, record))
        clusterfile.save(root, record)
    return Outcome(0, _status_doc(record), f"{args.name} (pid {s.pid}) listening on "
                                           f"{s.address}")


def _status(args: argparse.Namespace) -> Outcome:
    root = os.path.abspath(args.root)
    record = clusterfile.load(root)
    doc = _status_doc(record)
    dead = [r["name"] for r in doc["masters"] + doc["tservers"] if not r["alive"]]
    if doc["follower"] is not None and not doc["follower"]["alive"]:
        dead.append("follower")
    return Outcome(1 if dead else 0, doc, _status_text(record, root))


# ---------------------------------------------------------------------------- parsing


def cluster_main(argv: list[str]) -> int:
    parser = Parser(prog=PROG, description="a local cluster of masters and tablet servers")
    sub = parser.add_subparsers(dest="cmd", required=True,
                                metavar="{start,status,stop,kill,restart}")
    root = Parser(add_help=False)
    root.add_argument("--root", required=True, metavar="DIR",
                      help="the cluster's directory (servers' directories, logs, traces, "
                           "cluster.json)")
    start = sub.add_parser(
        "start", parents=[root, json_flag()], help="start a cluster (or restart a stopped one)",
        description="Start masters and tablet servers on 127.0.0.1, detached, and wait until "
                    "they are ready; or start a stopped cluster again on its directories and "
                    "ports.")
    start.add_argument("--num-masters", type=positive_int, default=None, metavar="N",
                       help="masters: 1 or 2N+1 (default 3)")
    start.add_argument("--num-tservers", type=positive_int, default=None, metavar="N",
                       help="tablet servers (default 3)")
    start.add_argument("--watch", action="store_true",
                       help="also run a trace follower on the cluster's traces, with pages "
                            "of its own that the masters' home pages link to (a new "
                            "cluster only; kept across restarts)")
    start.add_argument("--master-arg", action="append", default=[], metavar="ARG",
                       help="pass ARG to every 'master run' (repeatable; use --master-arg=ARG "
                            "for an ARG starting with '-')")
    start.add_argument("--tserver-arg", action="append", default=[], metavar="ARG",
                       help="pass ARG to every 'tserver run' (repeatable)")
    start.add_argument("--timeout", type=positive_float, default=DEFAULT_START_TIMEOUT,
                       metavar="SECONDS",
                       help=f"give up (and kill what started) after this long (default "
                            f"{DEFAULT_START_TIMEOUT:g})")
    sub.add_parser("status", parents=[root, json_flag()],
                   help="every server: name, UUID, address, pid, alive")
    stop = sub.add_parser("stop", parents=[root, json_flag()],
                          help="SIGTERM every server; SIGKILL after --timeout")
    stop.add_argument("--timeout", type=positive_float, default=DEFAULT_STOP_TIMEOUT,
                      metavar="SECONDS",
                      help=f"SIGKILL what still runs after this long (default "
                           f"{DEFAULT_STOP_TIMEOUT:g})")
    kill = sub.add_parser("kill", parents=[root, json_flag()], help="SIGKILL one server")
    kill.add_argument("name", metavar="NAME", help="m0, m1, ..., ts0, ts1, ...")
    restart = sub.add_parser("restart", parents=[root, json_flag()],
                             help="start a stopped or killed server again")
    restart.add_argument("name", metavar="NAME", help="m0, m1, ..., ts0, ts1, ...")
    restart.add_argument("--timeout", type=positive_float, default=DEFAULT_START_TIMEOUT,
                         metavar="SECONDS", help="give up after this long")
    args = parse_args(parser, argv)
    if isinstance(args, int):
        return args
    prog = f"{PROG} {args.cmd}"
    if args.cmd == "start":
        masters = args.num_masters
        if masters is not None and masters % 2 == 0:
            return fail(prog, f"--num-masters {masters}: use 1 or 2N+1", 2)
    work = {"start": _start, "status": _status, "stop": _stop, "kill": _kill,
            "restart": _restart}[args.cmd]
    try:
        outcome = work(args)
    except _Refused as exc:
        return fail(prog, exc.message, exc.code)
    except (ClusterFileError, OSError) as exc:
        return fail(prog, str(exc), 2)
    except Exception as exc:
        # A ProcessError (a server that did not start or stop) is raised by the commands that
        # run processes, which imported control.py already; status never loads it.
        from revivify.impl.processes.control import ProcessError

        if not isinstance(exc, ProcessError):
            raise
        return fail(prog, str(exc), 2)
    return print_outcome(prog, args, outcome)


__all__ = ["cluster_main"]
