"""The revivify command in real processes: bad input gets a one-line error and exit 2,
never a traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest


def revivify(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "revivify.impl.cli.main", *args],
                          capture_output=True, text=True, timeout=120)


def test_no_arguments_prints_usage_and_exit_2() -> None:
    r = revivify()
    assert r.returncode == 2
    assert "usage: revivify" in r.stdout


def test_help_exit_0() -> None:
    r = revivify("--help")
    assert r.returncode == 0 and "prove" in r.stdout and "trace" in r.stdout


@pytest.mark.parametrize("args, needle", [
    (("frobnicate",), "unknown command 'frobnicate'"),
    (("prove", "--servers", "0"), "--servers"),
    (("prove", "--bmc-depth", "-3"), "--bmc-depth"),
    (("prove", "--mutant", "no_such_bug"), "unknown mutant"),
    (("prove", "--servers", "three"), "invalid int value"),
    (("explore", "--max-term", "-1"), "max-term"),
    (("explore", "--servers", "x"), "invalid int value"),
    (("trace", "check"), ""),
    (("trace", "bogus-subcommand"), ""),
    (("trace", "validate", "traces", "--engine", "spark", "--plan", "bogus"), "--plan"),
    (("trace", "validate", "traces", "--global-in-spark", "--global-on-driver"),
     "not allowed with"),
])
def test_bad_arguments(args: tuple[str, ...], needle: str) -> None:
    r = revivify(*args)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr
    assert needle in r.stderr + r.stdout


def test_trace_check_missing_path(tmp_path: Path) -> None:
    r = revivify("trace", "check", str(tmp_path / "nope"))
    assert r.returncode == 2
    assert "Traceback" not in r.stderr
    assert "nope" in r.stderr + r.stdout


def test_trace_check_empty_directory(tmp_path: Path) -> None:
    r = revivify("trace", "check", str(tmp_path))
    assert r.returncode == 2
    assert "Traceback" not in r.stderr


def test_trace_check_garbage_file(tmp_path: Path) -> None:
    f = tmp_path / "x.0001.jsonl"
    f.write_bytes(b"\x00\xff not json at all\n{\"v\": 1}\n")
    r = revivify("trace", "check", str(f))
    assert r.returncode == 2
    assert "Traceback" not in r.stderr
    assert "x.0001.jsonl" in r.stdout + r.stderr


def test_mutant_proof_fails_with_counterexample() -> None:
    """The prover exits 1 and prints the broken claim for a seeded bug."""
    r = revivify("prove", "--mutant", "last_opid_not_stored", "--bmc-depth", "0",
                 "--timeout", "5")
    assert r.returncode == 1
    assert "TombstoneRetainsLastOpid" in r.stdout
    assert "PROOF FAILED" in r.stdout


def test_trace_check_progress_on_stderr_and_quiet() -> None:
    """Progress lines go to stderr (here every file: REVIVIFY_PROGRESS_SECONDS=0), never
    into the report on stdout; --quiet silences them."""
    import json
    import os

    walks = str(Path(__file__).resolve().parents[2] / "traces" / "spec-walks")
    env = {**os.environ, "REVIVIFY_PROGRESS_SECONDS": "0"}
    r = subprocess.run([sys.executable, "-m", "revivify.impl.cli.main", "trace", "check",
                        walks, "--json"], capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    lines = [x for x in r.stderr.splitlines() if x.startswith("trace check: ")]
    assert len(lines) > 10 and "files" in lines[-1] and "MB" in lines[-1]
    assert json.loads(r.stdout)["events"] > 0
    q = subprocess.run([sys.executable, "-m", "revivify.impl.cli.main", "trace", "check",
                        walks, "--quiet"], capture_output=True, text=True, timeout=120, env=env)
    assert q.returncode == 0 and "trace check: " not in q.stderr


@pytest.mark.parametrize("command", [
    ("tserver", "run", "--rpc-bind", "127.0.0.1:0"),
    ("master", "run", "--rpc-bind", "127.0.0.1:19099", "--masters", "127.0.0.1:19099"),
])
def test_a_server_whose_directory_is_unusable_exits_2_in_one_line(
        tmp_path: Path, command: tuple[str, ...]) -> None:
    """Both servers share one start-up path: a data directory under a regular file is
    named in one line, exit 2, no traceback (the master's used to miss errors trio
    wraps in a group)."""
    blocker = tmp_path / "file"
    blocker.write_text("")
    r = revivify(*command, "--fs-root", str(blocker / "data"))
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "Not a directory" in r.stderr


def test_version_and_did_you_mean() -> None:
    """``--version`` names the installed version; an unknown command suggests the nearest
    one; a noun without its verb lists the verbs (issue 31)."""
    import subprocess
    import sys

    def cli(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "revivify.impl.cli.main", *argv],
                              capture_output=True, text=True, timeout=60)

    version = cli("--version")
    assert version.returncode == 0 and version.stdout.startswith("revivify 0.")
    typo = cli("tabel", "list")
    assert typo.returncode == 2 and "did you mean 'table'?" in typo.stderr
    bare = cli("trace")
    assert bare.returncode == 2 and "{check,validate,follow,minimize}" in bare.stderr
    assert "cmd" not in bare.stderr
    flag = cli("table", "list", "--masters", "127.0.0.1:1", "--jsn")
    assert flag.returncode == 2 and "unrecognized arguments: --jsn" in flag.stderr
    assert "did you mean --json?" in flag.stderr, flag.stderr
    far = cli("table", "list", "--masters", "127.0.0.1:1", "--zzzzzz")
    assert far.returncode == 2 and "did you mean" not in far.stderr, far.stderr


def test_ctrl_c_while_waiting_for_the_masters_is_one_line() -> None:
    """Ctrl-C while a command waits (here on masters that never answer) ends it with exit 130
    and one line, not a trio exception group's traceback (the wait notice runs beside the
    work in a nursery, which used to wrap the KeyboardInterrupt)."""
    import signal
    import subprocess
    import sys
    import time

    proc = subprocess.Popen(
        [sys.executable, "-m", "revivify.impl.cli.main", "table", "list",
         "--masters", "127.0.0.1:1", "--deadline", "30"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        notice = proc.stderr.readline()  # the wait notice: the command is inside its wait
        assert "still waiting" in notice, notice
        time.sleep(0.2)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err
    assert "Traceback" not in err and err.strip() == "revivify: interrupted", err
