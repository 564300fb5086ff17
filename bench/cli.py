"""Benchmark: what one ``revivify`` call costs, wall and CPU, beside the interpreter's floor.

    python bench/cli.py [--runs 15] [--against OTHER_PYTHON]

Each row is one command line run `--runs` times as a fresh process (as a person or a script
runs it); the table gives the median wall time and the median CPU time (user + system, of
the child, from ``getrusage(RUSAGE_CHILDREN)``: interpreter start, imports, the work), then
the target and whether the median wall time meets it. ``python -c pass`` is the floor no
command can go below; ``python -c "import trio"`` is for reference (what one heavy import
costs). The servers the calls talk to are started here (a tablet server, a master alone:
its own leader), and a stopped cluster's directory is written here (``cluster.json`` naming
servers that are not running), so nothing but this script is needed.

Targets (issue 31): ``--help`` and ``cluster status`` under 80 ms; a call that talks to one
server under 150 ms (``table list``, ``tserver list``, ``master list``: the leader master
found, then asked). Measured on a quiet machine; under load the medians grow, the ranking
stays.

``--against OTHER_PYTHON``: the interpreter of another checkout's venv (the code before a
change, say), whose ``revivify`` is measured beside this one's, run for run in turn (this,
then the other, then this...), so that the load of a shared machine falls on both alike; the
table then gives both medians and their ratio. The servers are this checkout's.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

PY = sys.executable
REVIVIFY = [PY, "-m", "revivify.impl.cli.main"]
LISTENING = re.compile(r"listening on (\S+)")
READY_DEADLINE = 60.0


# The runs' environment: bytecode cached, as an installed package has it (pip compiles it
# at install). With PYTHONDONTWRITEBYTECODE (set in some shells and CI images) a source
# tree never gets its __pycache__, and every run would compile every module it imports
# from source: a cost no installed revivify pays, and one that grows with the size of the
# modules rather than with what they do. The unmeasured first run writes the cache.
ENV = {name: value for name, value in os.environ.items() if name != "PYTHONDONTWRITEBYTECODE"}


def run_once(argv: Sequence[str]) -> tuple[float, float, int]:
    """Wall seconds, CPU seconds and exit code of one run of `argv`."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                          check=False, env=ENV)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, done.returncode


Measured = tuple[float, float, set[int]]


def measure(commands: Sequence[Sequence[str]], runs: int) -> list[Measured]:
    """For each command: median wall, median CPU (seconds) and the exit codes seen, over
    `runs` runs, the commands run in turn (one unmeasured run of each first: the file
    cache)."""
    for argv in commands:
        run_once(argv)
    results: list[list[tuple[float, float, int]]] = [[] for _ in commands]
    for _ in range(runs):
        for i, argv in enumerate(commands):
            results[i].append(run_once(argv))
    return [(statistics.median(r[0] for r in rs), statistics.median(r[1] for r in rs),
             {r[2] for r in rs}) for rs in results]


@contextmanager
def server(kind: str, root: str) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """A `kind` ("tserver" or "master") server on a free port, its address once it said its
    listening line; killed on exit."""
    from revivify.impl.processes.control import free_port

    # A master takes no port 0 (its address is its identity in the catalog's config).
    proc = subprocess.Popen([*REVIVIFY, kind, "run", "--fs-root", os.path.join(root, kind),
                             "--rpc-bind", f"127.0.0.1:{free_port()}"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            env=ENV)
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + READY_DEADLINE
        address = ""
        while not address and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                raise SystemExit(f"bench/cli.py: the {kind} exited before it listened")
            found = LISTENING.search(line)
            address = found.group(1) if found else ""
        if not address:
            raise SystemExit(f"bench/cli.py: the {kind} did not listen within "
                             f"{READY_DEADLINE:g}s")
        yield proc, address
    finally:
        proc.kill()
        proc.wait()


def wait_ready_master(address: str) -> None:
    """Until ``master status`` says the master alone is the ready leader."""
    deadline = time.monotonic() + READY_DEADLINE
    while time.monotonic() < deadline:
        done = subprocess.run([*REVIVIFY, "master", "status", "--master", address, "--json"],
                              capture_output=True, text=True, check=False)
        if '"ready":true' in done.stdout.replace(" ", ""):
            return
        time.sleep(0.2)
    raise SystemExit(f"bench/cli.py: master {address} not ready within {READY_DEADLINE:g}s")


def stopped_cluster(root: str) -> str:
    """A cluster directory whose cluster.json names one master and one tablet server, both
    stopped (pid 0): what ``cluster status`` reads after ``cluster stop``."""
    from revivify.impl.cli import clusterfile

    os.makedirs(root, exist_ok=True)
    servers = {kind: [clusterfile.ServerRecord(
        name=f"{prefix}0", address=f"127.0.0.1:{port}", port=port,
        fs_root=os.path.join(root, f"{prefix}-0"), log=os.path.join(root, f"{prefix}-0.log"))]
        for kind, prefix, port in (("masters", "m", 1), ("tservers", "ts", 2))}
    clusterfile.save(root, clusterfile.ClusterRecord(
        version=clusterfile.VERSION, masters=servers["masters"], tservers=servers["tservers"]))
    return root


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=15, help="runs per command (median)")
    parser.add_argument("--against", metavar="PYTHON", default=None,
                        help="another checkout's interpreter, measured beside this one")
    args = parser.parse_args(argv)
    tmp = tempfile.mkdtemp(prefix="bench-cli-")
    try:
        cluster = stopped_cluster(os.path.join(tmp, "cluster"))
        with server("tserver", tmp) as (_, ts), server("master", tmp) as (_, m):
            wait_ready_master(m)
            rows: list[tuple[str, list[str], float | None]] = [
                ("python -c pass (floor)", [PY, "-c", "pass"], None),
                ('python -c "import trio"', [PY, "-c", "import trio"], None),
                ("revivify --help", [*REVIVIFY, "--help"], 0.080),
                ("revivify cluster status --root DIR", [*REVIVIFY, "cluster", "status",
                                                        "--root", cluster], 0.080),
                ("revivify tserver status --tserver", [*REVIVIFY, "tserver", "status",
                                                       "--tserver", ts], 0.150),
                ("revivify master status --master", [*REVIVIFY, "master", "status",
                                                     "--master", m], 0.150),
                ("revivify table list --masters", [*REVIVIFY, "table", "list",
                                                   "--masters", m], 0.150),
                ("revivify tserver list --masters", [*REVIVIFY, "tserver", "list",
                                                     "--masters", m], 0.150),
                ("revivify master list --masters", [*REVIVIFY, "master", "list",
                                                    "--masters", m], 0.150),
            ]
            other = args.against
            if other is None:
                print(f"{'command':<38} {'wall ms':>8} {'cpu ms':>8} {'target':>8}  verdict"
                      "  exit")
            else:
                print(f"{'command':<38} {'wall ms':>8} {'cpu ms':>8} {'other ms':>8} "
                      f"{'o cpu ms':>8} {'ratio':>6} {'target':>8}  verdict  exit")
            for name, command, target in rows:
                commands = [command] if other is None else [command, [other, *command[1:]]]
                (wall, cpu, codes), *theirs = measure(commands, args.runs)
                verdict = "-" if target is None else ("met" if wall < target else "MISSED")
                shown = "-" if target is None else f"{target * 1000:.0f}"
                beside = ""
                if theirs:
                    their_wall, their_cpu, their_codes = theirs[0]
                    codes |= their_codes
                    beside = (f"{their_wall * 1000:8.1f} {their_cpu * 1000:8.1f} "
                              f"{wall / their_wall:6.2f} ")
                print(f"{name:<38} {wall * 1000:8.1f} {cpu * 1000:8.1f} {beside}{shown:>8}  "
                      f"{verdict:<7}  {','.join(map(str, sorted(codes)))}", flush=True)
        print(f"\nmedian of {args.runs} runs each; python: {PY}"
              + (f"; other: {args.against} (ratio: this / other)" if args.against else ""))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
