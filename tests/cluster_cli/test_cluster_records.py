"""The pieces under ``revivify cluster`` that need no server: a process named by pid and
start time (a zombie or a reused pid is not alive), and DIR/cluster.json written and read
back (by the standard library's json when it is sure, else by msgspec: one verdict)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from revivify.impl.cli import clusterfile
from revivify.impl.processes.pids import pid_alive, process_start_ticks


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


def _full_record() -> clusterfile.ClusterRecord:
    """Every field of every record set, a follower included (each annotation is read)."""
    follower = clusterfile.FollowerRecord(web_port=9000, log="/x/follower.log",
                                          web="127.0.0.1:9000", pid=7, start_ticks=8)
    record = _record()
    return clusterfile.ClusterRecord(version=record.version, masters=record.masters,
                                     tservers=record.tservers, master_args=["--a", "é"],
                                     tserver_args=["--b"], follower=follower)


def test_a_well_formed_file_is_read_without_msgspec() -> None:
    """The fast reader takes what save() writes (so ``cluster status`` never loads msgspec:
    tests/cli/test_import_budget.py), every kind of field included, and rebuilds it
    whole."""
    for record in (_record(), _full_record()):
        data = msgspec.json.encode(record)
        assert clusterfile._read_plainly(data) == record


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner,
                                                                  max_size=3),
    max_leaves=4)


def _places(document: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """The path of every value inside `document` (dict keys and list indexes)."""
    found = [path]
    items = document.items() if isinstance(document, dict) else \
        enumerate(document) if isinstance(document, list) else []
    for key, value in items:
        found += _places(value, (*path, key))
    return found


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_the_plain_reader_never_disagrees_with_msgspec(data: st.DataObject) -> None:
    """A file altered at one place (a value replaced by any JSON value, a key dropped or
    added) is read by the plain reader only as msgspec reads it: the same record, or not
    at all (msgspec then gives its verdict and its words, as before)."""
    document = msgspec.to_builtins(_full_record())
    path = data.draw(st.sampled_from(_places(document)[1:]))
    parent = document
    for key in path[:-1]:
        parent = parent[key]
    change = data.draw(st.sampled_from(["replace", "drop", "add"]))
    if change == "replace" or (change == "drop" and isinstance(parent, list)):
        parent[path[-1]] = data.draw(JSON_VALUES)
    elif change == "drop":
        del parent[path[-1]]
    elif isinstance(parent, dict):
        parent[data.draw(st.text(max_size=6))] = data.draw(JSON_VALUES)
    raw = json.dumps(document).encode()
    try:
        strict: clusterfile.ClusterRecord | None = msgspec.json.decode(
            raw, type=clusterfile.ClusterRecord)
    except msgspec.DecodeError:  # ValidationError included
        strict = None
    plain = clusterfile._read_plainly(raw)
    assert plain is None or plain == strict


@pytest.mark.parametrize("raw", [
    b'{"version": NaN, "masters": [], "tservers": []}',
    b'\xef\xbb\xbf{"version": 1, "masters": [], "tservers": []}',
    '{"version": 1, "masters": [], "tservers": []}'.encode("utf-16"),
    b'{"version": 1, "masters": [], "tservers": [], "x": Infinity}',
])
def test_what_the_two_parsers_might_judge_apart_goes_to_msgspec(raw: bytes) -> None:
    """NaN, Infinity, a byte order mark, UTF-16: Python's json reads some of them, msgspec
    none; the plain reader leaves them all to msgspec."""
    assert clusterfile._read_plainly(raw) is None
    with pytest.raises(msgspec.DecodeError):
        msgspec.json.decode(raw, type=clusterfile.ClusterRecord)
