"""``revivify tserver run`` as a process: help, bad usage, unusable directories, clean stop."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from revivify.impl.processes.tservers import ProcessCluster

RUN = [sys.executable, "-m", "revivify.impl.servers.tserver"]


def run(args: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*RUN, *args], capture_output=True, text=True, timeout=60)


def test_help_documents_every_flag() -> None:
    out = run(["--help"])
    assert out.returncode == 0
    for flag in ("--fs-root", "--rpc-bind", "--trace-dir", "--tick-ms", "--election-ticks",
                 "--heartbeat-ticks", "--no-fsync", "--fsync-poll-us", "--flush-mb", "--seed"):
        assert flag in out.stdout


@pytest.mark.parametrize("args, message", [
    (["--rpc-bind", "127.0.0.1:1"], "--fs-root"),
    (["--fs-root", "/tmp/x", "--rpc-bind", "nonsense"], "--rpc-bind"),
    (["--fs-root", "/tmp/x", "--rpc-bind", "127.0.0.1:99999"], "--rpc-bind"),
    (["--fs-root", "/tmp/x", "--election-ticks", "2", "--heartbeat-ticks", "2"],
     "--heartbeat-ticks"),
    (["--fs-root", "/tmp/x", "--fsync-poll-us", "-1"], "--fsync-poll-us"),
    (["--fs-root", "/tmp/x", "--max-concurrent-copies", "0"], "--max-concurrent-copies"),
    (["--fs-root", "/tmp/x", "--copy-chunk-kb", "8192"], "--copy-chunk-kb"),
    (["--fs-root", "/tmp/x", "--fault-crash-after", "nonsense"], "--fault-crash-after"),
])
def test_bad_usage_exits_2_with_one_line(args: list[str], message: str) -> None:
    out = run(args)
    assert out.returncode == 2
    assert message in out.stderr
    assert "Traceback" not in out.stderr


def test_unusable_directories_exit_2_naming_the_path(tmp_path: object) -> None:
    a_file = os.path.join(str(tmp_path), "file")
    with open(a_file, "w") as f:
        f.write("not a directory")
    out = run(["--fs-root", a_file])
    assert out.returncode == 2 and a_file in out.stderr and "Traceback" not in out.stderr
    corrupt = os.path.join(str(tmp_path), "corrupt")
    os.makedirs(corrupt)
    with open(os.path.join(corrupt, "instance"), "wb") as f:
        f.write(b"garbage")
    out = run(["--fs-root", corrupt])
    assert out.returncode == 2 and "instance" in out.stderr and "Traceback" not in out.stderr


def test_unreadable_tablet_metadata_refuses_to_start_naming_the_path(tmp_path: object) -> None:
    from .helpers import create_tablet

    with ProcessCluster(str(tmp_path), 1) as c:
        c.start(0)
        create_tablet(c, "t1")
        c.stop(0)
        path = os.path.join(c.servers[0].fs_root, "tablet-meta", "t1")
        with open(path, "r+b") as f:
            f.seek(8)
            f.write(b"\xff\xff\xff\xff")
        out = run(["--fs-root", c.servers[0].fs_root, "--trace-dir", c.trace_dir])
        assert out.returncode == 2 and path in out.stderr and "Traceback" not in out.stderr


def test_sigterm_stops_cleanly_and_traces_server_stop(tmp_path: object) -> None:
    with ProcessCluster(str(tmp_path), 1) as c:
        s = c.start(0)
        first_uuid = s.uuid
        assert c.stop(0) == 0
        c.start(0)  # same directory, same identity, a new incarnation
        assert c.servers[0].uuid == first_uuid
        proc = c.servers[0].proc
        assert proc is not None
        proc.send_signal(signal.SIGINT)  # Ctrl-C
        assert proc.wait(timeout=30) == 0
        c.servers[0].proc = None
    files = sorted(os.listdir(c.trace_dir))
    assert files == [f"{first_uuid}.0001.jsonl", f"{first_uuid}.0002.jsonl"]
    events = []
    for name in files:
        with open(os.path.join(c.trace_dir, name)) as f:
            events.append([json.loads(line)["event"] for line in f])
    assert events[0] == ["server_format", "server_start", "server_stop"]
    assert events[1] == ["server_start", "server_stop"]
