"""``revivify history check``: exit codes, the report, --json, --timeout, one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from revivify.impl.cli.main import main

from .histories import inv, jsonl, ok

DATA = Path(__file__).parent.parent / "data" / "histories" / "jepsen-etcd"


def write(tmp_path: Path, lines: list[str], name: str = "h.jsonl") -> str:
    path = tmp_path / name
    path.write_text("".join(lines))
    return str(path)


GOOD = jsonl([inv(0, "write", 1), ok(0, "write", 1), inv(1, "read"), ok(1, "read", 1)])
BAD = jsonl([inv(0, "write", 1), ok(0, "write", 1), inv(1, "read"), ok(1, "read", 2)])


def test_linearizable_exit_0(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["history", "check", write(tmp_path, GOOD), "--model", "register"]) == 0
    assert ": linearizable (register model, 2 operations" in capsys.readouterr().out


def test_not_linearizable_exit_1_with_the_window(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["history", "check", write(tmp_path, BAD), "--model", "register"]) == 1
    out = capsys.readouterr().out
    assert "NOT linearizable" in out and "lines 1-4 (2 operations)" in out
    assert "process  op     value  invoked  completed  outcome" in out


def test_json_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["history", "check", write(tmp_path, BAD), "--model", "register",
                 "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["linearizable"] is False and doc["operations"] == 2
    window = doc["failures"][0]["window"]
    assert (window["first_line"], window["last_line"], window["initial_value"]) == (1, 4, "nil")
    assert [(o["f"], o["value"], o["role"]) for o in window["operations"]] == [
        ("write", 1, "complete"), ("read", 2, "complete")]


def test_kv_names_the_failing_key(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lines = jsonl([inv(0, "write", 1, key="a"), ok(0, "write", 1, key="a"),
                   inv(1, "read", key="b"), ok(1, "read", 1, key="b")])
    assert main(["history", "check", write(tmp_path, lines), "--model", "kv"]) == 1
    out = capsys.readouterr().out
    assert "1 of 2 keys fail" in out and 'key "b": the smallest failing window' in out


def test_jepsen_format(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["history", "check", str(DATA / "etcd_014.log"), "--model", "register",
                 "--format", "jepsen"]) == 1
    assert "lines 47-51 (2 operations)" in capsys.readouterr().out


def test_timeout_is_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    # etcd_002 takes about a million search steps: far over a millisecond.
    assert main(["history", "check", str(DATA / "etcd_002.log"), "--model", "register",
                 "--format", "jepsen", "--timeout", "0.001", "--quiet"]) == 2
    assert "no verdict within 0.001 s (--timeout)" in capsys.readouterr().err


@pytest.mark.parametrize("args, needle", [
    (["--model", "register"], "h.jsonl:4: not a JSON object (torn or malformed line"),
    (["--model", "kv"], "h.jsonl:1: no 'key' field"),
    (["--model", "register", "--format", "jepsen"], "h.jsonl:1: not a Jepsen log line"),
    (["--model", "bogus"], "invalid choice: 'bogus'"),
    (["--model", "register", "--timeout", "0"], "--timeout must be positive"),
])
def test_unusable_input_exit_2_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                        args: list[str], needle: str) -> None:
    path = write(tmp_path, [*GOOD[:3], GOOD[3][:20]])
    assert main(["history", "check", path, *args]) == 2
    err = capsys.readouterr().err
    assert needle in err and err.count("\n") == 1, err


def test_missing_file_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["history", "check", str(tmp_path / "nope"), "--model", "register"]) == 2
    assert "nope: No such file or directory" in capsys.readouterr().err


def test_a_real_process_prints_no_traceback(tmp_path: Path) -> None:
    path = write(tmp_path, ['{"process": 0, "type": "ok", "f": "read", "value": 1}\n'])
    r = subprocess.run([sys.executable, "-m", "revivify.impl.cli.main", "history", "check",
                        path, "--model", "register"], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr == (f"revivify history check: {path}:1: ok completion of read by "
                        "process 0 without an invocation\n")
