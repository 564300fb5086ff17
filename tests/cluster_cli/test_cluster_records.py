"""The pieces under ``revivify cluster`` that need no server: a process named by pid and
start time (a zombie or a reused pid is not alive), and DIR/cluster.json written and read
back."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from revivify.impl.cli import clusterfile
from revivify.impl.processes.control import pid_alive, process_start_ticks


def test_a_pid_names_its_process_only_while_it_runs() -> None:
    child = subprocess.Popen(["sleep", "60"])
    try:
        ticks = process_start_ticks(child.pid)
        assert ticks is not None and ticks > 0
        assert pid_alive(child.pid, ticks)
        assert not pid_alive(child.pid, ticks + 1)  # the pid, but another start: reused
        assert not pid_alive(child.pid, 0)  # no start time recorded: not ours to claim
        os.kill(child.pid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while process_start_ticks(child.pid) is not None:  # a zombie until waited for
            assert time.monotonic() < deadline
            time.sleep(0.02)
        assert not pid_alive(child.pid, ticks)
    finally:
        child.kill()
        child.wait()
    assert not pid_alive(child.pid, ticks)
    assert not pid_alive(0, 0) and not pid_alive(-1, 5)


def _record() -> clusterfile.ClusterRecord:
    def server(name: str, port: int) -> clusterfile.ServerRecord:
        return clusterfile.ServerRecord(name=name, address=f"127.0.0.1:{port}", port=port,
                                        fs_root=f"/x/{name}", log=f"/x/{name}.log",
                                        uuid="ab" * 16, pid=123, start_ticks=456)
    return clusterfile.ClusterRecord(version=clusterfile.VERSION,
                                     masters=[server("m0", 7001), server("m1", 7002),
                                              server("m2", 7003)],
                                     tservers=[server("ts0", 7051)],
                                     master_args=["--tick-ms", "20"])


def test_the_cluster_file_round_trips_and_leaves_no_temporary(tmp_path: Path) -> None:
    record = _record()
    clusterfile.save(str(tmp_path), record)
    assert clusterfile.load(str(tmp_path)) == record
    assert clusterfile.master_addresses(str(tmp_path)) == [
        "127.0.0.1:7001", "127.0.0.1:7002", "127.0.0.1:7003"]
    assert os.listdir(tmp_path) == ["cluster.json"]


@pytest.mark.parametrize(("content", "what"), [
    (None, "no such file"),
    ("", "not valid JSON"),
    ('{"version": 1, "masters": [], "tservers": []}', "no masters listed"),
    ('{"version": 9, "masters": [], "tservers": []}', "version 9, expected 1"),
    ('{"version": 1, "masters": [{"name": "m0", "address": 5}], "tservers": []}',
     "not a cluster file"),
    ('[]', "not a cluster file"),
])
def test_a_bad_cluster_file_is_named_with_what_is_wrong(tmp_path: Path, content: str | None,
                                                        what: str) -> None:
    if content is not None:
        (tmp_path / "cluster.json").write_text(content)
    with pytest.raises(clusterfile.ClusterFileError) as caught:
        clusterfile.load(str(tmp_path))
    assert caught.value.path == str(tmp_path / "cluster.json")
    assert what in str(caught.value) and "\n" not in str(caught.value)
