"""``revivify trace follow`` and ``trace check --state`` as a person runs them: real
processes, real files written while the follower runs, signals, exit codes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO, Any

ROOT = Path(__file__).resolve().parents[2]
BAD = ROOT / "traces" / "bad"
CMD = [sys.executable, "-m", "revivify.impl.cli.main", "trace"]


class Follow:
    """A ``trace follow`` process; its stdout lines as they come, each with its time."""

    def __init__(self, *args: str) -> None:
        env = dict(os.environ, REVIVIFY_PROGRESS_SECONDS="60")
        self.p = subprocess.Popen([*CMD, "follow", *args, "--json"], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True, env=env)
        self.lines: list[tuple[float, dict[str, Any]]] = []
        self.err: list[str] = []
        assert self.p.stdout is not None and self.p.stderr is not None
        self.ready = threading.Event()
        threading.Thread(target=self._out, args=(self.p.stdout,), daemon=True).start()
        threading.Thread(target=self._err, args=(self.p.stderr,), daemon=True).start()
        assert self.ready.wait(120), self.err

    def _out(self, fh: IO[str]) -> None:
        for line in fh:
            self.lines.append((time.monotonic(), json.loads(line)))

    def _err(self, fh: IO[str]) -> None:
        for line in fh:
            self.err.append(line)
            if "following" in line:
                self.ready.set()

    def finding(self, kind: str, timeout: float) -> float | None:
        """When a finding of ``kind`` was printed (waiting up to ``timeout``)."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            for t, d in self.lines:
                if d.get("finding", {}).get("kind") == kind:
                    return t
            time.sleep(0.02)
        return None

    def wait(self) -> tuple[int, dict[str, Any]]:
        rc = self.p.wait(60)
        time.sleep(0.1)
        return rc, self.lines[-1][1]["report"]


def lines_of(case: Path) -> list[tuple[int, str, bytes]]:
    """The case's lines in clock order (a causal order): (clock, file name, line)."""
    out = []
    for f in sorted(case.glob("*.jsonl")):
        for raw in f.read_bytes().splitlines(keepends=True):
            out.append((json.loads(raw)["lamport"], f.name, raw))
    return sorted(out, key=lambda x: x[0])


def append(d: Path, name: str, data: bytes) -> float:
    with open(d / name, "ab") as fh:
        fh.write(data)
    return time.monotonic()


def test_a_local_finding_is_printed_within_a_second(tmp_path: Path) -> None:
    """CommitNotInLog is proven by one line: nothing before it is written, then it is
    printed within 1 s of that line (written torn first, completed 0.5 s later: the
    clock starts when the line is whole)."""
    case = BAD / "commit-not-in-log"
    at = json.loads((case / "expected.json").read_text())["at"]
    proving = (case / at["file"]).read_bytes().splitlines(keepends=True)[at["line"] - 1]
    f = Follow(str(tmp_path), "--until-idle", "3")
    before = [x for x in lines_of(case) if x[2] != proving]
    for _, name, raw in before[: len(before) - 2]:
        append(tmp_path, name, raw)
    time.sleep(1.0)
    assert f.finding("CommitNotInLog", 0.5) is None
    append(tmp_path, at["file"], proving[:20])
    time.sleep(0.5)
    assert f.finding("CommitNotInLog", 0.1) is None  # a torn line is not judged
    t0 = append(tmp_path, at["file"], proving[20:])
    t1 = f.finding("CommitNotInLog", 5)
    assert t1 is not None and t1 - t0 < 1.0, (t1, t0)
    for _, name, raw in before[len(before) - 2:]:
        append(tmp_path, name, raw)
    rc, report = f.wait()
    assert rc == 1
    assert "CommitNotInLog" in {v["kind"] for v in report["findings"]}


def test_a_global_finding_once_every_server_stopped_and_sigterm(tmp_path: Path) -> None:
    """AppendOfUnelectedTerm needs every node's trace: it is printed within 1 s of the
    last server_stop; SIGTERM then ends the follower with the final verdict (exit 1)."""
    case = BAD / "append-of-unelected-term"
    f = Follow(str(tmp_path))
    lines = lines_of(case)
    for _, name, raw in lines[:-1]:
        append(tmp_path, name, raw)
        time.sleep(0.02)
    time.sleep(1.0)
    assert f.finding("AppendOfUnelectedTerm", 0.1) is None
    t0 = append(tmp_path, lines[-1][1], lines[-1][2])
    t1 = f.finding("AppendOfUnelectedTerm", 5)
    assert t1 is not None and t1 - t0 < 1.0, (t1, t0)
    f.p.send_signal(signal.SIGTERM)
    rc, report = f.wait()
    assert rc == 1
    assert report["findings"]


def test_check_state_resumes_and_refuses_a_bad_state(tmp_path: Path) -> None:
    case = BAD / "commit-not-in-log"
    d = tmp_path / "t"
    d.mkdir()
    state = tmp_path / "state"
    lines = lines_of(case)
    half = len(lines) // 2
    for _, name, raw in lines[:half]:
        append(d, name, raw)
    one = subprocess.run([*CMD, "check", str(d), "--state", str(state), "--json"],
                         capture_output=True, text=True)
    for _, name, raw in lines[half:]:
        append(d, name, raw)
    two = subprocess.run([*CMD, "check", str(d), "--state", str(state), "--json"],
                         capture_output=True, text=True)
    whole = subprocess.run([*CMD, "check", str(d), "--json"], capture_output=True, text=True)
    assert two.returncode == whole.returncode == 1, (one.stderr, two.stderr)
    got, want = json.loads(two.stdout), json.loads(whole.stdout)
    assert got["findings"] == want["findings"]
    state.write_bytes(state.read_bytes()[:-10])
    bad = subprocess.run([*CMD, "check", str(d), "--state", str(state)], capture_output=True,
                         text=True)
    assert bad.returncode == 2
    assert bad.stderr.count("\n") == 1 and "corrupt or truncated" in bad.stderr


def test_sigint_ends_with_the_verdict_of_check(tmp_path: Path) -> None:
    """Ctrl-C (SIGINT) is the normal way out: the final verdict, trace check's exit code
    (2 here: a torn line in the middle of a file that a later line follows is malformed
    input), and no traceback."""
    case = BAD / "commit-not-in-log"
    for _, name, raw in lines_of(case):
        append(tmp_path, name, raw)
    name = sorted(tmp_path.glob("*.jsonl"))[0].name
    append(tmp_path, name, b'{"v":3,"node":\n')
    append(tmp_path, name, (tmp_path / name).read_bytes().splitlines(keepends=True)[0])
    f = Follow(str(tmp_path))
    time.sleep(0.5)
    f.p.send_signal(signal.SIGINT)
    rc, report = f.wait()
    check = subprocess.run([*CMD, "check", str(tmp_path), "--json"], capture_output=True,
                           text=True)
    assert rc == check.returncode == 2
    assert report["findings"] == json.loads(check.stdout)["findings"]
    assert not any("Traceback" in line for line in f.err)
