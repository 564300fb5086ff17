"""The CLI as a new user meets it: output into a pipe that closes early, and a trace path
that does not exist. No servers."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


def _cluster_file(root: Path, n: int) -> None:
    """A cluster.json whose processes are long gone (pid 0: never alive)."""
    def server(name: str, i: int) -> dict[str, object]:
        return {"name": name, "address": f"127.0.0.1:{7000 + i}", "port": 7000 + i,
                "fs_root": str(root / name), "log": str(root / f"{name}.log"),
                "uuid": f"{i:032x}", "pid": 0, "start_ticks": 0}
    (root / "cluster.json").write_text(json.dumps({
        "version": 1, "masters": [server(f"m{i}", i) for i in range(n)],
        "tservers": [server(f"ts{i}", n + i) for i in range(n)]}))


def test_output_into_a_closed_pipe_is_quiet(tmp_path: Path) -> None:
    _cluster_file(tmp_path, 500)  # a long status table
    for argv in (["cluster", "status"], ["cluster", "status", "--json"]):
        proc = subprocess.Popen([sys.executable, "-m", "revivify.impl.cli.main", *argv,
                                 "--root", str(tmp_path)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert proc.stdout is not None and proc.stderr is not None
        proc.stdout.read(10)  # 'head -c 10'
        proc.stdout.close()
        err = proc.stderr.read().decode()
        proc.stderr.close()
        assert proc.wait(timeout=60) == 141, err
        assert "Traceback" not in err and "BrokenPipe" not in err and err == "", err


def test_the_same_output_in_full_when_the_pipe_stays_open(tmp_path: Path) -> None:
    _cluster_file(tmp_path, 500)
    out = subprocess.run([sys.executable, "-m", "revivify.impl.cli.main", "cluster",
                          "status", "--root", str(tmp_path)],
                         capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 1  # every server is dead
    assert len(out.stdout.splitlines()) == 1 + 1000 and out.stderr == ""


def test_trace_check_of_a_missing_path_is_one_line(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-traces"
    for argv in (["trace", "check", str(missing)], ["trace", "check", str(missing), "--json"],
                 ["trace", "validate", str(missing)]):
        out = subprocess.run([sys.executable, "-m", "revivify.impl.cli.main", *argv],
                             capture_output=True, text=True, timeout=120, check=False)
        assert out.returncode == 2, argv
        assert out.stdout == "", argv  # no report, no coverage
        assert out.stderr == f"revivify trace {argv[1]}: {missing}: no such file or " \
                             "directory\n", argv
