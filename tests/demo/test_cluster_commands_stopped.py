"""Every command that talks to a local cluster, against a stopped one and with wrong
arguments: a clear one-line error and exit 2 (issue 19's "every cluster command with wrong
arguments and against a stopped cluster"), what tests/cluster_cli/ did not cover yet.

The stopped cluster is a real one (1 master, 1 tablet server) started and stopped with
``revivify cluster start|stop``. The commands run in this process (revivify.impl.cli.main,
output captured): they only talk to servers, and none of them can start one.

The documented exceptions (README, "A local cluster"): ``cluster status`` of a stopped
cluster exits 1 (a server not alive), ``cluster kill`` of a stopped server 1 (refused: "not
running"), ``cluster stop`` 0 (none was running).
"""

from __future__ import annotations

import contextlib
import io
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from revivify.impl.cli import clusterfile
from revivify.impl.processes.control import pid_alive

DEADLINE = ("--deadline", "2")  # nothing answers: how soon a command says so


def here(*argv: str) -> tuple[int, str, str]:
    from revivify.impl.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


def cli(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "revivify.impl.cli.main", *argv],
                          capture_output=True, text=True, timeout=180, check=False,
                          stdin=subprocess.DEVNULL)


def assert_one_line_error(code: int, err: str, argv: tuple[str, ...], want: int = 2) -> None:
    assert code == want, (argv, code, err)
    assert err.strip(), (argv, "no error on stderr")
    assert err.strip().count("\n") == 0, (argv, err)
    assert err.startswith("revivify") and "Traceback" not in err, (argv, err)


@pytest.fixture(scope="module")
def stopped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = str(tmp_path_factory.mktemp("stopped") / "c")
    try:
        started = cli("cluster", "start", "--root", root, "--num-masters", "1",
                      "--num-tservers", "1")
        assert started.returncode == 0, started.stderr
        stopped = cli("cluster", "stop", "--root", root)
        assert stopped.returncode == 0, stopped.stderr
        yield root
    finally:
        with contextlib.suppress(clusterfile.ClusterFileError):
            record = clusterfile.load(root)
            for r in record.masters + record.tservers:  # a failed stop: leave nothing
                if pid_alive(r.pid, r.start_ticks):
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(r.pid, signal.SIGKILL)


TALKING = [
    ("table", "list"),
    ("table", "create", "t", "--tablets", "1"),
    ("table", "describe", "t"),
    ("table", "delete", "t"),
    ("table", "alter", "t", "--add-column", "c"),
    ("row", "put", "--table", "t", "k", "v"),
    ("row", "get", "--table", "t", "k"),
    ("row", "delete", "--table", "t", "k"),
    ("row", "scan", "--table", "t"),
    ("tserver", "list"),
    ("tserver", "retire", "0" * 32),
    ("master", "add", "127.0.0.1:1"),
    ("master", "remove", "0" * 32),
    ("ksck",),
]


@pytest.mark.parametrize("argv", TALKING, ids=" ".join)
def test_a_command_against_a_stopped_cluster_is_one_line_exit_2(stopped: str,
                                                                argv: tuple[str, ...]) -> None:
    code, _, err = here(*argv, "--root", stopped, *DEADLINE)
    assert_one_line_error(code, err, argv)


def test_master_list_against_a_stopped_cluster_says_why(stopped: str) -> None:
    code, _, err = here("master", "list", "--root", stopped, *DEADLINE)
    assert_one_line_error(code, err, ("master", "list"))


def test_cluster_subcommands_against_a_stopped_cluster(stopped: str) -> None:
    code, out, _ = here("cluster", "status", "--root", stopped)
    assert code == 1 and "NO" in out
    code, _, err = here("cluster", "kill", "ts0", "--root", stopped)
    assert_one_line_error(code, err, ("cluster", "kill"), want=1)
    assert "not running" in err
    code, out, _ = here("cluster", "stop", "--root", stopped)
    assert code == 0 and "none was running" in out
    code, _, err = here("cluster", "restart", "ts9", "--root", stopped)
    assert_one_line_error(code, err, ("cluster", "restart"))
    assert "ts0" in err and "m0" in err
    # A restart of the stopped cluster keeps its shape and flags: a new count or flag is
    # bad usage, refused before anything starts.
    for argv in (("--num-tservers", "5"), ("--num-masters", "3"),
                 ("--master-arg=--no-heal",)):
        code, _, err = here("cluster", "start", "--root", stopped, *argv)
        assert_one_line_error(code, err, argv)
    record = clusterfile.load(stopped)
    assert not any(pid_alive(r.pid, r.start_ticks) for r in record.masters + record.tservers)


def test_cluster_commands_with_wrong_arguments(tmp_path: Path) -> None:
    root = str(tmp_path / "c")
    a_file = tmp_path / "file"
    a_file.write_text("not a directory")
    cases = [
        ("cluster",),
        ("cluster", "bogus", "--root", root),
        ("cluster", "start"),
        ("cluster", "start", "--root", root, "--num-masters", "0"),
        ("cluster", "start", "--root", root, "--num-masters", "2"),
        ("cluster", "start", "--root", root, "--num-tservers", "x"),
        ("cluster", "start", "--root", root, "--timeout", "-1"),
        ("cluster", "start", "--root", str(a_file)),
        ("cluster", "status", "--root", root),  # no cluster.json there
        ("cluster", "status", "--root", root, "extra"),
        ("cluster", "stop", "--root", root),
        ("cluster", "stop", "--root", root, "--timeout", "0"),
        ("cluster", "kill", "--root", root),
        ("cluster", "kill", "ts0", "--root", root),
        ("cluster", "restart", "--root", root),
        ("cluster", "restart", "ts0", "--root", root, "--timeout", "abc"),
    ]
    for argv in cases:
        code, _, err = here(*argv)
        assert_one_line_error(code, err, argv)
    assert not (tmp_path / "c" / "cluster.json").exists()
