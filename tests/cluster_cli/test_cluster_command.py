"""``revivify cluster start|status|stop|kill|restart`` and ``--root DIR``, as a user runs them:
each command a new process, the servers real detached processes on 127.0.0.1.

Every test that starts servers runs inside `cleaned_up(root)`, which SIGKILLs whatever the
directory's cluster.json names on the way out, pass or fail.
"""

from __future__ import annotations

import json
import os
import urllib.request
from pathlib import Path

from clusterproc import as_json, assert_traces_clean, cleaned_up, here, ok, ok_here, revivify

from revivify.impl.cli import clusterfile
from revivify.impl.processes.control import pid_alive

# The commands' --deadline on a machine other tests load too (a bound, not a measurement).
PATIENT = ("--deadline", "60")


def _alive(root: str) -> dict[str, bool]:
    doc = as_json(here("cluster", "status", "--root", root, "--json"))
    return {s["name"]: s["alive"] for s in doc["masters"] + doc["tservers"]}


def test_one_master_round_trip_keeps_data_across_stop_and_start(tmp_path: Path) -> None:
    """start (1 master, 2 tablet servers) -> status -> a second start refused -> a table and
    a row through --root -> replica list's fields -> stop -> all dead -> start again on the
    same ports and UUIDs -> the row is still there -> stop; traces clean."""
    root = str(tmp_path / "c")
    with cleaned_up(root):
        started = ok("cluster", "start", "--root", root, "--num-masters", "1",
                     "--num-tservers", "2", "--json")
        doc = as_json(started)
        assert [m["name"] for m in doc["masters"]] == ["m0"]
        assert [t["name"] for t in doc["tservers"]] == ["ts0", "ts1"]
        for server in doc["masters"] + doc["tservers"]:
            assert set(server) == {"name", "uuid", "address", "pid", "alive", "log",
                                   "server_log", "web"}
            assert server["alive"] and server["uuid"] and server["pid"] > 0
            # The console (stdout, stderr) and the server's own log, at INFO: its start-up.
            assert os.path.exists(server["log"])
            with open(server["server_log"]) as f:
                assert "serving on" in f.read()
            # Every server shows itself on the free port the start gave it.
            assert server["web"].startswith("http://127.0.0.1:")
            with urllib.request.urlopen(server["web"] + "/api/v1/", timeout=30) as page:
                assert json.load(page)["uuid"] == server["uuid"]
        with open(doc["masters"][0]["server_log"]) as f:  # the one master became ready
            assert "ready leader in term" in f.read()
        # The record is on disk, complete, and its processes outlived the command.
        record = clusterfile.load(root)
        assert all(pid_alive(r.pid, r.start_ticks) for r in record.masters + record.tservers)
        assert os.path.isdir(os.path.join(root, "traces"))
        assert os.path.exists(os.path.join(root, "m-0.log"))

        status = ok_here("cluster", "status", "--root", root)
        assert "ts1" in status.stdout and "NO" not in status.stdout

        again = revivify("cluster", "start", "--root", root)
        assert again.returncode == 1
        assert "already running" in again.stderr and again.stderr.count("\n") == 1

        ok_here("table", "create", "t1", "--root", root, "--tablets", "1", "--replicas", "1",
                *PATIENT)
        ok_here("row", "put", "--root", root, "--table", "t1", "greeting", "hello", *PATIENT)
        assert ok_here("row", "get", f"--root={root}", "--table", "t1", "greeting",
                       *PATIENT).stdout.strip() == "hello"
        listed = as_json(ok_here("table", "list", "--root", root, "--json"))
        assert [t["name"] for t in listed["tables"]] == ["t1"]
        assert len(as_json(ok_here("tserver", "list", "--root", root, "--json"))["tservers"]) == 2
        assert len(as_json(ok_here("master", "list", "--root", root, "--json"))["masters"]) == 1

        # replica list --json has what tserver status --json has (one vocabulary).
        hosts = [t["address"] for t in doc["tservers"]]
        rows = [r for a in hosts for r in as_json(ok_here("replica", "list", "--tserver", a,
                                                     "--json"))["replicas"]]
        assert len(rows) == 1
        status_rows = [r for a in hosts for r in as_json(ok_here("tserver", "status", "--tserver",
                                                            a, "--json"))["replicas"]]
        assert set(rows[0]) == set(status_rows[0])
        assert rows[0]["state"] == "RUNNING" and rows[0]["role"] in ("LEADER", "FOLLOWER")
        assert {"commit_index", "config_index", "peers", "member_type"} <= set(rows[0])
        # ...and the directory's view says the data state, under its own name.
        holder = next(t for t in record.tservers
                      if rows[0] in as_json(ok_here("replica", "list", "--tserver", t.address,
                                                "--json"))["replicas"])
        on_disk = ok_here("local-replica", "list", "--fs-root", holder.fs_root)
        assert "DATA STATE" in on_disk.stdout and "READY" in on_disk.stdout

        stopped = ok("cluster", "stop", "--root", root)
        assert "stopped 3 server(s)" in stopped.stdout
        assert _alive(root) == {"m0": False, "ts0": False, "ts1": False}
        assert revivify("cluster", "status", "--root", root).returncode == 1

        ok("cluster", "start", "--root", root)
        restarted = clusterfile.load(root)
        assert [(r.uuid, r.port) for r in restarted.masters + restarted.tservers] == \
            [(r.uuid, r.port) for r in record.masters + record.tservers]
        # ...and their pages on the same web ports.
        assert [r.web for r in restarted.masters + restarted.tservers] == \
            [r.web for r in record.masters + record.tservers]
        assert all(r.web.endswith(f":{r.web_port}") for r in restarted.masters)
        assert ok_here("row", "get", "--root", root, "--table", "t1", "greeting",
                       *PATIENT).stdout.strip() == "hello"
        ok("cluster", "stop", "--root", root)
        assert not any(_alive(root).values())
    assert_traces_clean(root)


def test_kill_and_restart_one_server(tmp_path: Path) -> None:
    root = str(tmp_path / "c")
    with cleaned_up(root):
        ok("cluster", "start", "--root", root, "--num-masters", "1", "--num-tservers", "1")
        before = clusterfile.load(root).tservers[0]
        refused = revivify("cluster", "restart", "ts0", "--root", root)
        assert refused.returncode == 1 and "is running" in refused.stderr
        ok("cluster", "kill", "ts0", "--root", root)
        assert _alive(root) == {"m0": True, "ts0": False}
        again = revivify("cluster", "kill", "ts0", "--root", root)
        assert again.returncode == 1 and "not running" in again.stderr
        # --timeout bounds a tablet server's start too (it was the masters' only): no
        # Python process prints its listening line within 50 ms.
        hasty = revivify("cluster", "restart", "ts0", "--root", root, "--timeout", "0.05")
        assert hasty.returncode == 2, hasty.stderr
        assert "ts0 did not start" in hasty.stderr and "within 0.05s" in hasty.stderr
        assert _alive(root) == {"m0": True, "ts0": False}
        ok("cluster", "restart", "ts0", "--root", root)
        after = clusterfile.load(root).tservers[0]
        assert (after.uuid, after.port, after.fs_root) == (before.uuid, before.port,
                                                           before.fs_root)
        assert after.pid != before.pid
        assert _alive(root) == {"m0": True, "ts0": True}
        unknown = revivify("cluster", "kill", "ts7", "--root", root)
        assert unknown.returncode == 2 and "ts0" in unknown.stderr
        ok("cluster", "stop", "--root", root)


def test_a_start_that_fails_kills_what_it_started(tmp_path: Path) -> None:
    """A tablet server that refuses its flags: exit 2 naming it, nothing left running."""
    root = str(tmp_path / "c")
    with cleaned_up(root):
        out = revivify("cluster", "start", "--root", root, "--num-masters", "1",
                       "--num-tservers", "1", "--tserver-arg=--flush-mb",
                       "--tserver-arg=-1")
        assert out.returncode == 2, out.stderr
        assert "did not start" in out.stderr and "--flush-mb" in out.stderr
        assert out.stderr.strip().count("\n") <= 2  # progress, then the one-line error
        assert not any(_alive(root).values())


def test_bad_usage_and_bad_cluster_files(tmp_path: Path) -> None:
    root = tmp_path / "c"
    root.mkdir()
    missing = here("table", "list", "--root", str(root))
    assert missing.returncode == 2
    assert str(root / "cluster.json") in missing.stderr and "no such file" in missing.stderr
    assert missing.stderr.count("\n") == 1
    (root / "cluster.json").write_text("{not json")
    for argv in (("table", "list"), ("tserver", "list"), ("master", "list"), ("ksck",),
                 ("row", "get", "--table", "t", "k"), ("cluster", "status"),
                 ("cluster", "stop")):
        out = here(*argv, "--root", str(root))
        assert out.returncode == 2, (argv, out.stderr)
        assert "cluster.json" in out.stderr and "not valid JSON" in out.stderr, argv
        assert out.stderr.count("\n") == 1 and "Traceback" not in out.stderr, argv
    (root / "cluster.json").write_text(json.dumps({"version": 1, "masters": [{"name": "m0"}],
                                                   "tservers": []}))
    out = here("table", "list", "--root", str(root))
    assert out.returncode == 2 and "address" in out.stderr
    both = here("table", "list", "--root", str(root), "--masters", "127.0.0.1:1")
    assert both.returncode == 2 and "not allowed" in both.stderr
    neither = here("table", "list")
    assert neither.returncode == 2 and "--root" in neither.stderr
    even = revivify("cluster", "start", "--root", str(tmp_path / "d"), "--num-masters", "2")
    assert even.returncode == 2 and "2N+1" in even.stderr
    assert not (tmp_path / "d").exists()
