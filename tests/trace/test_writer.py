"""impl/trace.py writes what checker/traces.py reads."""

from __future__ import annotations

from pathlib import Path

from revivify.checker.local import check_paths
from revivify.impl.trace import TraceWriter, durable_state


def test_writer_round_trip(tmp_path: Path) -> None:
    with TraceWriter(str(tmp_path), "node-a", 1, wall_ns=lambda: 42) as w:
        w.event("server_format")
        w.event("server_start")
        ready = durable_state(data_state="READY", cmeta={"term": 0, "voted_for": None,
                                                        "config_index": 0},
                              wal="LIVE", blocks="PRESENT")
        w.event("create_tablet", {"config_index": 0}, ready, tablet="t1")
        voted = dict(ready, cmeta={"term": 1, "voted_for": "node-a", "config_index": 0})
        w.event("start_election", {"me": "node-a"}, voted, tablet="t1")
        w.event("server_stop")
    with TraceWriter(str(tmp_path), "node-a", 2) as w:
        w.event("server_start")
        w.event("startup", {"case": "READY"}, voted, tablet="t1")
    report = check_paths([str(tmp_path)])
    assert report.findings == {}, report.text()
    assert report.events == 3 and report.frontiers == {0: 1}


def test_killed_writer_loses_nothing_written(tmp_path: Path) -> None:
    w = TraceWriter(str(tmp_path), "n", 1)
    w.event("server_start")
    # No close, no flush: a single os.write per event is already in the file.
    assert Path(w.path).read_text().count("\n") == 1
    w.close()
