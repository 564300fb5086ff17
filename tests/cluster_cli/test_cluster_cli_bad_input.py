"""Every command that talks to a cluster, given wrong arguments, an unknown name, or a
cluster whose processes are all dead (issue 19): one line on stderr naming what is wrong,
``revivify <command>: ...``, never a traceback; exit 2, or 1 for a definite "no" from a
live cluster (an unknown table or tablet server).

The commands run in this process (clusterproc.here), so a case costs no Python start-up.
Wrong arguments need no cluster at all. The unknown names need a live one: ONE small
cluster (1 master, 1 tablet server) for the module, which the last test SIGKILLs whole
(what a crash of the machine leaves: a cluster.json naming dead processes) before asking
every command again. The same commands against a cluster stopped with ``cluster stop``,
and ``cluster start|status|stop|kill|restart`` with wrong arguments, are in
tests/demo/test_cluster_commands_stopped.py.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from clusterproc import cleaned_up, here, kill_recorded, ok, revivify

from revivify.impl.cli import clusterfile
from revivify.impl.processes.control import pid_alive

UUID = "0" * 32
# Each command with its required positional arguments (and --table where it needs one);
# the target (--root DIR or --masters ...) is added by each test.
COMMANDS: dict[str, tuple[str, ...]] = {
    "ksck": ("ksck",),
    "table list": ("table", "list"),
    "table describe": ("table", "describe", "t"),
    "table create": ("table", "create", "t"),
    "table delete": ("table", "delete", "t"),
    "row get": ("row", "get", "--table", "t", "k"),
    "row put": ("row", "put", "--table", "t", "k", "v"),
    "tserver list": ("tserver", "list"),
    "tserver retire": ("tserver", "retire", UUID),
    "master list": ("master", "list"),
    "master add": ("master", "add", "127.0.0.1:1"),
    "master remove": ("master", "remove", UUID),
}


def one_line(out: subprocess.CompletedProcess[str], command: str, code: int = 2) -> str:
    """The one error line of `out`, after checking the exit code and its form."""
    assert out.returncode == code, (out.args, out.returncode, out.stdout, out.stderr)
    assert "Traceback" not in out.stderr, out.stderr
    lines = out.stderr.splitlines()
    assert len(lines) == 1, (out.args, out.stderr)
    assert lines[0].startswith(f"revivify {command}"), (command, lines[0])
    return lines[0]


# ---------------------------------------------------------------------------- no cluster


@pytest.mark.parametrize("command", COMMANDS)
def test_a_bad_root_is_named(command: str, tmp_path: Path) -> None:
    argv = COMMANDS[command]
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    empty = tmp_path / "empty"
    empty.mkdir()
    for root, says in ((tmp_path / "missing", "is not a directory"),
                       (a_file, "Not a directory"),
                       (empty, "cluster start --root")):  # no cluster.json: how to get one
        line = one_line(here(*argv, "--root", str(root)), command)
        assert f"{root}/cluster.json" in line and says in line, line


@pytest.mark.parametrize("command", COMMANDS)
def test_a_bad_host_port_or_no_target_is_bad_usage(command: str) -> None:
    argv = COMMANDS[command]
    for masters, says in (("nohost", "invalid address 'nohost'"),
                          ("127.0.0.1:99999", "port 99999 outside"),
                          ("127.0.0.1:7051,", None), (",", "no address given")):
        out = here(*argv, "--masters", masters, "--deadline", "1")
        if says is None:  # an empty item after a comma is skipped: a valid list (the
            continue      # command then finds nothing there; not a usage question)
        line = one_line(out, command)
        assert "--masters" in line and says in line, line
    line = one_line(here(*argv), command)  # neither --masters nor --root
    assert "--root" in line and "--masters" in line, line
    line = one_line(here(*argv, "--masters", "127.0.0.1:1", "--no-such-flag"), command)
    assert "--no-such-flag" in line, line


@pytest.mark.parametrize("argv, says", [
    (("table", "describe"), "required: name"),
    (("table", "create"), "required: name"),
    (("table", "delete"), "required: name"),
    (("table", "create", "t", "--tablets", "0"), "--tablets"),
    (("table", "create", "t", "--replicas", "three"), "--replicas"),
    (("row", "get", "--table", "t"), "required: KEY"),
    (("row", "put", "--table", "t", "k"), "required: VALUE"),
    (("row", "get", "--table", "t", "k"), "--table needs --masters or --root"),
    (("row", "get", "k"), "required: --tservers and --tablet, or --masters"),
    (("row", "get", "--table", "t", "k", "--hex"), "not valid hex"),
    (("tserver", "retire"), "required: uuid"),
    (("master", "add"), "required: HOST:PORT"),
    (("master", "add", "no-port"), "invalid address 'no-port'"),
    (("master", "add", "127.0.0.1:1", "--cas", "-1"), "--cas"),
    (("master", "remove"), "required: UUID"),
    (("ksck", "--deadline", "0"), "--deadline"),
    (("master", "list", "--call-timeout", "soon"), "--call-timeout"),
    (("tserver", "list", "--call-timeout", "-1"), "--call-timeout"),
])
def test_a_missing_or_malformed_argument_is_named(argv: tuple[str, ...], says: str) -> None:
    # The row cases about the target itself are given none; every other case a valid one.
    target = () if "needs --masters" in says or "--tservers" in says else (
        "--masters", "127.0.0.1:1")
    command = " ".join(argv[:1] if argv[0] == "ksck" else argv[:2])
    line = one_line(here(*argv, *target), command)
    assert says in line, line


# ---------------------------------------------------------------------------- one cluster


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A live cluster of 1 master and 1 tablet server (killed on the way out)."""
    path = str(tmp_path_factory.mktemp("bad-input") / "c")
    with cleaned_up(path):
        ok("cluster", "start", "--root", path, "--num-masters", "1", "--num-tservers", "1")
        yield path


def test_an_unknown_name_on_a_live_cluster(root: str) -> None:
    """A definite "no" (the cluster answered: no such table, no such server) is exit 1;
    a name the command itself cannot place is bad usage (2)."""
    argv: tuple[str, ...]
    for argv in (("table", "describe", "nope"), ("table", "delete", "nope"),
                 ("table", "alter", "nope", "--add-column", "c")):
        line = one_line(here(*argv, "--root", root), " ".join(argv[:2]), code=1)
        assert "'nope'" in line and "not found" in line, line
    for argv in (("row", "get", "--table", "nope", "k"),
                 ("row", "put", "--table", "nope", "k", "v")):
        line = one_line(here(*argv, "--root", root), " ".join(argv[:2]), code=1)
        assert "table 'nope' not found" in line, line
    line = one_line(here("tserver", "retire", UUID, "--root", root), "tserver retire",
                    code=1)
    assert f"no tablet server {UUID}" in line, line
    # Nothing runs at the new master's address: named at once, not after the deadline.
    line = one_line(here("master", "add", "127.0.0.1:1", "--root", root, "--deadline",
                         "30"), "master add")
    assert "no master answers at 127.0.0.1:1" in line and "--join" in line, line
    for run, argv in ((here, ("cluster", "kill", "ts9")),
                      (revivify, ("cluster", "restart", "m7"))):  # (a restart: its own
        line = one_line(run(*argv, "--root", root), " ".join(argv[:2]))  # process)
        assert "m0" in line and "ts0" in line, line  # the names it has
    # Removing a master that is not a member is idempotent (README): exit 0, "already".
    removed = here("master", "remove", UUID, "--root", root)
    assert removed.returncode == 0 and "already not a member" in removed.stdout


def test_every_command_against_a_cluster_whose_processes_are_dead(root: str) -> None:
    kill_recorded(root)  # SIGKILL every process cluster.json names: nothing answers
    record = clusterfile.load(root)
    assert not any(pid_alive(r.pid, r.start_ticks) for r in record.masters + record.tservers)
    for command, argv in COMMANDS.items():
        line = one_line(here(*argv, "--root", root, "--deadline", "1"), command)
        assert len(line) < 400, line  # one readable line, not a dump
    status = here("cluster", "status", "--root", root)
    assert status.returncode == 1 and status.stdout.count(" NO ") == 2
    stopped = here("cluster", "stop", "--root", root)
    assert stopped.returncode == 0 and "none was running" in stopped.stdout
    line = one_line(here("cluster", "kill", "m0", "--root", root), "cluster kill", code=1)
    assert "not running" in line
