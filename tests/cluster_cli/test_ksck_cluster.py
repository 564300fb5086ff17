"""``revivify ksck`` against a real local cluster (3 masters, 3 tablet servers): healthy,
then a tablet server killed (named as not answering, every tablet it held
under-replicated, exit 1), then healthy again once it is restarted; and the shapes of its
documents. The checking itself (one tablet's verdict from the facts) is tested without
processes in test_ksck_verdicts.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from clusterproc import (
    as_json,
    assert_traces_clean,
    cleaned_up,
    eventually,
    here,
    ok,
    ok_here,
    revivify,
)

from revivify.impl.cli import clusterfile


def _ksck(root: str) -> tuple[int, dict[str, Any]]:
    out = here("ksck", "--root", root, "--json", "--deadline", "30")
    assert out.returncode in (0, 1), (out.returncode, out.stderr)
    doc: dict[str, Any] = as_json(out)
    return out.returncode, doc


def _healthy(root: str) -> bool:
    return here("ksck", "--root", root, "--json", "--deadline", "30").returncode == 0


def test_ksck_healthy_then_a_killed_tablet_server_then_healthy_again(tmp_path: Path) -> None:
    root = str(tmp_path / "c")
    with cleaned_up(root):
        ok("cluster", "start", "--root", root)
        ok_here("table", "create", "t1", "--root", root, "--tablets", "2", "--replicas", "3",
                "--deadline", "60")
        eventually("ksck healthy after the table's creation", lambda: _healthy(root))
        code, doc = _ksck(root)
        assert code == 0 and doc["healthy"] and doc["problems"] == []
        assert doc["summary"].startswith("HEALTHY: 3 masters, 3 tablet servers, 1 table, "
                                         "2 tablets")
        assert sum(m["ready"] for m in doc["masters"]) == 1
        assert len({m["leader"] for m in doc["masters"]}) == 1
        assert all(t["live"] and t["answers"] for t in doc["tservers"])
        [table] = doc["tables"]
        assert table["status"] == "HEALTHY" and len(table["tablets"]) == 2
        for tablet in table["tablets"]:
            assert tablet["leader"] is not None and tablet["live_voters"] == 3
            assert {r["state"] for r in tablet["replicas"]} == {"RUNNING"}
        text = here("ksck", "--root", root)
        assert text.returncode == 0
        assert text.stdout.rstrip().splitlines()[-1].startswith("ksck: HEALTHY")

        victim = clusterfile.load(root).tservers[1]
        ok("cluster", "kill", "ts1", "--root", root)
        code, doc = _ksck(root)
        assert code == 1 and not doc["healthy"]
        assert victim.uuid in doc["summary"] and "under-replicated" in doc["summary"]
        [row] = [t for t in doc["tservers"] if t["uuid"] == victim.uuid]
        assert not row["answers"]
        for tablet in doc["tables"][0]["tablets"]:
            assert tablet["status"] == "UNDER_REPLICATED", tablet
            assert tablet["live_voters"] == 2 and tablet["replica_count"] == 3
            [dead] = [r for r in tablet["replicas"] if r["uuid"] == victim.uuid]
            assert dead["state"] == "UNREACHABLE"
            assert any(victim.uuid in p and "UNDER_REPLICATED" in p
                       for p in doc["problems"] if tablet["tablet_id"] in p)
        text = here("ksck", "--root", root)
        assert text.returncode == 1
        last = text.stdout.rstrip().splitlines()[-1]
        assert last.startswith("ksck: NOT HEALTHY") and victim.uuid in last

        ok("cluster", "restart", "ts1", "--root", root)
        eventually("ksck healthy after the restart", lambda: _healthy(root))
        ok("cluster", "stop", "--root", root)
    assert_traces_clean(root)


def test_ksck_without_a_master_is_exit_2(tmp_path: Path) -> None:
    from revivify.impl.processes.control import free_port

    out = revivify("ksck", "--masters", f"127.0.0.1:{free_port()}", "--deadline", "2")
    assert out.returncode == 2
    assert "no master could be reached" in out.stderr and out.stderr.count("\n") == 1
    assert revivify("ksck").returncode == 2  # neither --masters nor --root
