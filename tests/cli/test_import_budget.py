"""The CLI's start-up budget, in imports rather than milliseconds (issue 31).

A timer in a unit test measures the machine, not the code; what makes a command slow to
start is what it imports, and that is exact. Each case runs one command in a fresh
interpreter under ``python -X importtime`` and reads stderr, where Python writes one line
per module imported, indented by nesting depth, a module's line *after* the lines of what
it imported. A forbidden module found there fails the test naming the chain that pulled it
in (``revivify.impl.cli.cluster -> revivify.impl.client -> ... -> trio``), which is what the
person who added the import needs to see. The speed itself is measured by bench/cli.py.

What each command may not import:

* every command here: the checker's extras (z3, Hypothesis, PySpark) and the web stack the
  servers serve their pages with (Hypercorn, Starlette, Jinja2, prometheus_client);
* ``--help`` and ``cluster status`` (a JSON file read and printed): trio and rich too (the
  output is piped, so plain text), the client library, and attrs and msgspec (about 20 and
  13 ms of a budget of 80: cluster.json is read by the standard library's json, a pid's
  liveness asked of /proc by impl/processes/pids.py, not the process supervisor);
* a one-shot call to one server (``tserver status``, ``master status``) and a read of the
  masters (``table list``, ``tserver list``, ``master list``: the leader found in one round
  of questions at once): trio and rich too; they go through the blocking caller
  (impl/cli/oneshot.py) on impl/rpc's codec. (``table describe`` takes the same path:
  tests/cluster_cli/test_fast_reads.py, on a cluster with a table.)
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from revivify.impl.cli import clusterfile
from revivify.impl.processes.control import free_port

EXTRAS_AND_WEB = ("z3", "hypothesis", "pyspark", "starlette", "hypercorn", "jinja2",
                  "prometheus_client")
NO_ASYNC = ("trio", "rich", *EXTRAS_AND_WEB)
OFFLINE = (*NO_ASYNC, "revivify.impl.client", "revivify.impl.processes.control", "attrs",
           "attr", "msgspec")


def imported(argv: list[str]) -> list[tuple[int, str]]:
    """(depth, module) for each module the command imported, in the order -X importtime
    reports them (post-order: what a module imports comes before it)."""
    env = {**os.environ, "TERM": "dumb"}
    env.pop("REVIVIFY_MASTERS", None)
    done = subprocess.run([sys.executable, "-X", "importtime", "-m",
                           "revivify.impl.cli.main", *argv],
                          capture_output=True, text=True, timeout=120, env=env, check=False)
    modules: list[tuple[int, str]] = []
    for line in done.stderr.splitlines():
        if not line.startswith("import time:") or "imported package" in line:
            continue
        name = line.rsplit("|", 1)[1]
        depth = (len(name) - len(name.lstrip(" "))) // 2
        modules.append((depth, name.strip()))
    assert modules, f"no -X importtime output from {argv}: {done.stderr[-500:]}"
    return modules


def chain(modules: list[tuple[int, str]], at: int) -> list[str]:
    """The modules from the top-level import down to ``modules[at]``: each one's importer
    is the first later line that is one level shallower."""
    depth, name = modules[at]
    found = [name]
    for d, n in modules[at + 1:]:
        if d < depth:
            found.append(n)
            depth = d
    return found[::-1]


def offenders(modules: list[tuple[int, str]], forbidden: tuple[str, ...]) -> list[str]:
    """One line per forbidden module imported: the chain that brought it in, cut at the
    first forbidden module on it (what it imported in turn is noise: the import to remove
    is the one that reached it)."""
    def bad(name: str) -> bool:
        return any(name == f or name.startswith(f + ".") for f in forbidden)

    lines = set()
    for i, (_, name) in enumerate(modules):
        if bad(name):
            found = chain(modules, i)
            cut = next(k for k, n in enumerate(found) if bad(n))
            lines.add(" -> ".join(found[:cut + 1]))
    return sorted(lines, key=lambda line: (line.count("->"), line))


def stopped_cluster(root: Path) -> str:
    servers = {kind: [clusterfile.ServerRecord(
        name=f"{prefix}0", address=f"127.0.0.1:{port}", port=port,
        fs_root=str(root / f"{prefix}-0"), log=str(root / f"{prefix}-0.log"))]
        for kind, prefix, port in (("masters", "m", 1), ("tservers", "ts", 2))}
    clusterfile.save(str(root), clusterfile.ClusterRecord(
        version=clusterfile.VERSION, masters=servers["masters"], tservers=servers["tservers"]))
    return str(root)


def check(argv: list[str], forbidden: tuple[str, ...]) -> None:
    found = offenders(imported(argv), forbidden)
    assert not found, (f"'revivify {' '.join(argv)}' imports what its start may not:\n"
                       + "\n".join(found[:10]))


def test_help_imports_nothing_heavy() -> None:
    check(["--help"], OFFLINE)


def test_cluster_status_reads_a_file_without_the_client(tmp_path: Path) -> None:
    check(["cluster", "status", "--root", stopped_cluster(tmp_path)], OFFLINE)


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """A tablet server and a master (alone, its own leader), real processes: the fast path
    is taken only when a server answers, so the budget is checked against live ones."""
    root = tmp_path_factory.mktemp("live")
    procs: list[subprocess.Popen[str]] = []
    addresses: dict[str, str] = {}
    try:
        for kind in ("tserver", "master"):
            proc = subprocess.Popen(
                [sys.executable, "-m", "revivify.impl.cli.main", kind, "run", "--fs-root",
                 str(root / kind), "--rpc-bind", f"127.0.0.1:{free_port()}"],
                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
            procs.append(proc)
            assert proc.stdout is not None
            for line in proc.stdout:  # until its "listening on HOST:PORT" line
                if "listening on" in line:
                    addresses[kind] = line.split("listening on", 1)[1].split()[0]
                    break
            assert kind in addresses, f"the {kind} exited before it listened"
        yield addresses
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


@pytest.mark.parametrize("kind", ["tserver", "master"])
def test_a_call_to_one_server_starts_without_trio(live: dict[str, str], kind: str) -> None:
    argv = [kind, "status", f"--{kind}", live[kind], "--json"]
    check(argv, NO_ASYNC)
    # And it did answer (exit 0, its document): the path checked is the one a call takes.
    done = subprocess.run([sys.executable, "-m", "revivify.impl.cli.main", *argv],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0 and '"uuid"' in done.stdout, done.stderr


@pytest.mark.parametrize("read", [["table", "list"], ["tserver", "list"], ["master", "list"]],
                         ids=lambda argv: " ".join(argv))
def test_a_read_of_the_masters_starts_without_trio(live: dict[str, str], read: list[str]
                                                   ) -> None:
    """Once the master is its own ready leader (before, a read is the trio path's to wait
    for: the fast path answers only the plain case)."""
    deadline = time.monotonic() + 60
    while '"ready":true' not in subprocess.run(
            [sys.executable, "-m", "revivify.impl.cli.main", "master", "status", "--master",
             live["master"], "--json"], capture_output=True, text=True, timeout=120,
            check=False).stdout:
        assert time.monotonic() < deadline, "the master was not ready within 60s"
        time.sleep(0.2)
    argv = [*read, "--masters", live["master"], "--json"]
    check(argv, NO_ASYNC)
    done = subprocess.run([sys.executable, "-m", "revivify.impl.cli.main", *argv],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr


def test_the_parsers_default_call_timeout_is_the_clients() -> None:
    """common.py repeats the client's default (so that building a parser imports no
    client); the two must agree."""
    from revivify.impl.cli import common
    from revivify.impl.client.options import DEFAULT_CALL_TIMEOUT

    assert common.DEFAULT_CALL_TIMEOUT == DEFAULT_CALL_TIMEOUT


def test_every_command_keeps_the_extras_and_the_web_stack_out(tmp_path: Path) -> None:
    check(["table", "list", "--masters", "127.0.0.1:1", "--deadline", "0.1"], EXTRAS_AND_WEB)


def test_the_probe_sees_an_import_and_names_its_chain() -> None:
    """The check can fail: a command that does import trio (``table list``, through the
    client library) is reported with the chain from the CLI down to trio."""
    modules = imported(["table", "list", "--masters", "127.0.0.1:1", "--deadline", "0.1"])
    found = offenders(modules, ("trio",))
    assert found and found[0].endswith(" -> trio"), found
    assert found[0].split(" -> ")[0].startswith("revivify"), found
