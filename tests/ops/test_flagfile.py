"""``--flagfile FILE`` (impl/flagfile.py): what a file may hold, the errors it can cause, and
the precedence command line > environment > file, through the real parsers of the client
commands and of both servers, and a real tablet server started from a flagfile."""

from __future__ import annotations

import argparse
import itertools
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from revivify.impl.cli.common import Parser, common_flags, masters_flags, parse_args
from revivify.impl.cli.main import main
from revivify.impl.cli.table import _table_parser
from revivify.impl.flagfile import FlagfileError, apply_flagfiles, read_flagfile
from revivify.impl.servers import master as master_server
from revivify.impl.servers import tserver as tserver_server

CLI_MASTERS = "127.0.0.1:7101"
ENV_MASTERS = "127.0.0.1:7201"
FILE_MASTERS = "127.0.0.1:7301"


def _write(path: Path, *lines: str) -> str:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(path)


def _client_parse(argv: list[str]) -> Any:
    # Built after the environment is set: masters_flags makes --masters required only when
    # REVIVIFY_MASTERS is empty, as the real commands do.
    return parse_args(Parser(prog="t", parents=[masters_flags()]), argv)


@pytest.mark.parametrize("cli, env, file", list(itertools.product([True, False], repeat=3)))
def test_precedence_matrix_for_the_masters(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture[str], cli: bool,
                                           env: bool, file: bool) -> None:
    argv: list[str] = []
    if cli:
        argv += ["--masters", CLI_MASTERS]
    if env:
        monkeypatch.setenv("REVIVIFY_MASTERS", ENV_MASTERS)
    else:
        monkeypatch.delenv("REVIVIFY_MASTERS", raising=False)
    if file:
        argv += ["--flagfile", _write(tmp_path / "c.flags", f"--masters={FILE_MASTERS}")]
    args = _client_parse(argv)
    expected = (CLI_MASTERS if cli else ENV_MASTERS if env else FILE_MASTERS if file
                else None)
    if expected is None:
        assert args == 2 and "--masters" in capsys.readouterr().err
    else:
        assert isinstance(args, argparse.Namespace), capsys.readouterr().err
        assert args.masters == [expected]


def test_the_command_line_drops_a_file_flag_of_its_exclusive_group(tmp_path: Path) -> None:
    """--root on the command line and --masters in the file are one choice (a mutually
    exclusive pair): the command line's wins instead of argparse refusing the pair."""
    parser = Parser(prog="t", parents=[common_flags(), masters_flags()])
    f = _write(tmp_path / "c.flags", f"--masters={FILE_MASTERS}", "--deadline=3")
    assert apply_flagfiles(["--root", "/x", f"--flagfile={f}"], parser) == \
        ["--root", "/x", "--deadline=3"]
    # So does the environment (REVIVIFY_MASTERS) for the pair, and only where it is passed.
    env = {"REVIVIFY_MASTERS": ENV_MASTERS}
    flags = {"REVIVIFY_MASTERS": "--masters"}
    assert apply_flagfiles(["--flagfile", f], parser, env, flags) == ["--deadline=3"]
    assert apply_flagfiles(["--flagfile", f], parser, {"REVIVIFY_MASTERS": ""}, flags) == \
        [f"--masters={FILE_MASTERS}", "--deadline=3"]
    assert apply_flagfiles(["--flagfile", f], parser) == \
        [f"--masters={FILE_MASTERS}", "--deadline=3"]


def test_an_appending_flag_on_the_command_line_replaces_the_files(tmp_path: Path) -> None:
    f = _write(tmp_path / "t.flags", "--add-column=from_file", f"--masters={FILE_MASTERS}")
    args = parse_args(_table_parser(), ["alter", "t1", "--add-column", "from_cli",
                                        "--flagfile", f])
    assert isinstance(args, argparse.Namespace)
    assert "from_file" not in repr(args.add_column) and "from_cli" in repr(args.add_column)
    only_file = parse_args(_table_parser(), ["alter", "t1", "--flagfile", f])
    assert isinstance(only_file, argparse.Namespace)
    assert "from_file" in repr(only_file.add_column)
    assert only_file.masters == [FILE_MASTERS]


def test_later_files_win_and_abbreviations_on_the_command_line_count(tmp_path: Path) -> None:
    a = _write(tmp_path / "a.flags", "--tick-ms=70", "--heartbeat-ms=700",
               f"--fs-root={tmp_path / 'a'}")
    b = _write(tmp_path / "b.flags", "--tick-ms=80")
    launch = tserver_server.parse(["--flagfile", a, "--flagfile", b, "--webserver-bind", "off"])
    assert launch.options.tick_seconds == pytest.approx(0.08)
    assert launch.options.heartbeat_seconds == pytest.approx(0.7)
    # "--tick 90" is argparse's abbreviation of --tick-ms: still the command line's flag.
    launch = tserver_server.parse(["--flagfile", a, "--tick", "90", "--webserver-bind", "off"])
    assert launch.options.tick_seconds == pytest.approx(0.09)


def test_a_servers_flags_from_a_file_and_the_command_line(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    """The servers take nothing from the environment: REVIVIFY_MASTERS is the client's."""
    monkeypatch.setenv("REVIVIFY_MASTERS", ENV_MASTERS)
    f = _write(tmp_path / "ts.flags",
               "# a tablet server",
               "",
               f"--fs-root={tmp_path / 'ts'}",
               "   --no-fsync   ",
               f"--masters={FILE_MASTERS}",
               "--log-retain-entries=123")
    launch = tserver_server.parse([f"--flagfile={f}", "--log-retain-entries", "7",
                                   "--webserver-bind", "off"])
    opts = launch.options
    assert opts.fs_root == str(tmp_path / "ts") and opts.fsync is False
    assert opts.masters == (FILE_MASTERS,) and opts.log_retain_entries == 7
    m = _write(tmp_path / "m.flags", f"--fs-root={tmp_path / 'm'}",
               "--rpc-bind=127.0.0.1:7301", f"--masters={FILE_MASTERS}", "--no-heal")
    launch = master_server.parse(["--flagfile", m, "--webserver-bind", "off"])
    assert launch.options.masters == (FILE_MASTERS,) and launch.options.heal is False


@pytest.mark.parametrize("lines, message", [
    (["--fs-root=/x", "--no-such-flag=1"], "b.flags:2: unknown flag --no-such-flag"),
    (["--tick=5"], "b.flags:1: unknown flag --tick"),  # no abbreviations in files
    (["--fs-rot=/x"], "did you mean --fs-root?"),
    (["fs-root=/x"], "b.flags:1: expected --flag=value"),
    (["# fine", "--fs-root /x"], "b.flags:2: unknown flag --fs-root /x"),
    (["--fs-root"], "b.flags:1: --fs-root needs a value: --fs-root=VALUE"),
    (["--no-fsync=true"], "b.flags:1: --no-fsync takes no value"),
    (["--flagfile=/etc/other.flags"], "b.flags:1: a flagfile cannot name another"),
    (["--help"], "b.flags:1: unknown flag --help"),
])
def test_bad_files_are_one_line_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                       lines: list[str], message: str) -> None:
    bad = _write(tmp_path / "b.flags", *lines)
    assert main(["tserver", "run", "--flagfile", bad]) == 2
    err = capsys.readouterr().err
    assert err.startswith("revivify tserver run: ") and err.count("\n") == 1, err
    assert message in err, err


def test_missing_unreadable_and_binary_files(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    missing = str(tmp_path / "nope.flags")
    assert main(["master", "run", "--flagfile", missing]) == 2
    err = capsys.readouterr().err
    assert f"--flagfile {missing}: No such file or directory" in err and err.count("\n") == 1
    binary = tmp_path / "bin.flags"
    binary.write_bytes(b"--fs-root=\xff\xfe\n")
    assert main(["tserver", "run", "--flagfile", str(binary)]) == 2
    assert "not UTF-8 text" in capsys.readouterr().err
    assert main(["tserver", "run", "--flagfile", str(tmp_path)]) == 2
    assert "Is a directory" in capsys.readouterr().err
    assert main(["tserver", "run", "--flagfile"]) == 2
    assert "--flagfile needs a FILE" in capsys.readouterr().err


def test_client_commands_name_the_file_too(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    bad = _write(tmp_path / "c.flags", "--masters=127.0.0.1:1", "--bogus=2")
    assert main(["table", "list", "--flagfile", bad]) == 2
    err = capsys.readouterr().err
    assert err == f"revivify table: {bad}:2: unknown flag --bogus\n", err
    # A flag another subcommand takes is left to argparse, which names it (one line too).
    wrong = _write(tmp_path / "w.flags", "--tablets=4", "--masters=127.0.0.1:1")
    assert main(["table", "list", "--flagfile", wrong]) == 2
    err = capsys.readouterr().err
    assert "unrecognized arguments: --tablets=4" in err and err.count("\n") == 1, err
    # An abbreviated --flagfile reaches argparse, which refuses it instead of ignoring it.
    assert main(["tserver", "list", "--flagf", bad, "--masters", "127.0.0.1:1"]) == 2
    assert "spell --flagfile in full" in capsys.readouterr().err


def test_read_flagfile_checks_against_the_parser(tmp_path: Path) -> None:
    f = _write(tmp_path / "x.flags", "--fs-root=/a # not a comment", "--no-auto-copy")
    assert read_flagfile(f, tserver_server.build_parser()) == \
        ["--fs-root=/a # not a comment", "--no-auto-copy"]
    with pytest.raises(FlagfileError, match="unknown flag --no-auto-copy"):
        read_flagfile(f, master_server.build_parser())


def test_flags_after_a_double_dash_are_not_read(tmp_path: Path) -> None:
    f = _write(tmp_path / "x.flags", "--tick-ms=5")
    parser = tserver_server.build_parser()
    assert apply_flagfiles(["--flagfile", f, "--", "--flagfile", "y"], parser) == \
        ["--tick-ms=5", "--", "--flagfile", "y"]


# ---------------------------------------------------------------------------- a real server


def _lines(stream: Any) -> queue.Queue[str]:
    q: queue.Queue[str] = queue.Queue()

    def pump() -> None:
        for line in stream:
            q.put(line)
        q.put("")  # end of output: the process exited


    threading.Thread(target=pump, daemon=True).start()
    return q


def _wait_line(q: queue.Queue[str], needle: str, seconds: float) -> str:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            line = q.get(timeout=max(0.01, deadline - time.monotonic()))
        except queue.Empty:
            break
        if not line:
            raise AssertionError(f"the process ended before printing {needle!r}")
        if needle in line:
            return line
    raise AssertionError(f"no line with {needle!r} within {seconds}s")


def test_a_tablet_server_process_starts_from_a_flagfile(tmp_path: Path) -> None:
    """The file gives the directory, the trace directory and a port we hold (so a server
    that took the file's --rpc-bind over the command line's could not start); the command
    line's --rpc-bind 127.0.0.1:0 must win."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        taken = held.getsockname()[1]
        traces = tmp_path / "traces-from-file"
        f = _write(tmp_path / "tserver.flags",
                   "# written as /etc/revivify/tserver.flags would be",
                   f"--fs-root={tmp_path / 'ts'}",
                   f"--rpc-bind=127.0.0.1:{taken}",
                   f"--trace-dir={traces}",
                   "--webserver-bind=off",
                   "--no-fsync")
        proc = subprocess.Popen(
            [sys.executable, "-m", "revivify.impl.servers.tserver", "--flagfile", f,
             "--rpc-bind", "127.0.0.1:0"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            assert proc.stdout is not None
            line = _wait_line(_lines(proc.stdout), "listening on", 120)
            port = int(line.rsplit(":", 1)[1])
            assert port != taken
            assert (tmp_path / "ts" / "instance").exists(), "formatted where the file said"
            assert any(traces.iterdir()), "the trace goes where the file said"
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=60) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


@pytest.mark.parametrize("cli, env, expected", [
    (False, False, "127.0.0.1:1"),  # the file's
    (False, True, "127.0.0.1:2"),   # the environment's over the file's
    (True, True, "127.0.0.1:3"),    # the command line's over both
])
def test_a_real_client_command_asks_the_masters_the_precedence_picks(
        tmp_path: Path, cli: bool, env: bool, expected: str) -> None:
    """Through the installed CLI in a process of its own: ksck asks the masters named by the
    winning source (none answers: the one-line error names the address asked)."""
    f = _write(tmp_path / "c.flags", "--masters=127.0.0.1:1", "--deadline=2")
    argv = [sys.executable, "-m", "revivify.impl.cli.main", "ksck", "--flagfile", f]
    if cli:
        argv += ["--masters", "127.0.0.1:3"]
    environment = {"PATH": "/usr/bin:/bin"}
    if env:
        environment["REVIVIFY_MASTERS"] = "127.0.0.1:2"
    done = subprocess.run(argv, capture_output=True, text=True, env=environment, timeout=120)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    asked = {a for a in ("127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3") if a in done.stderr}
    assert asked == {expected}, done.stderr
