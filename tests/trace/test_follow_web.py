"""The follower's page state (impl/cli/follow_web.py) in-process: the snapshot the pages
and ``/metrics`` read, its verdict and lag, against the files and findings it came from.
(The pages and processes themselves: tests/web/test_follower.py.)"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import attrs
import pytest
import trio
from prometheus_client.parser import text_string_to_metric_families

from revivify.checker.follow import Follower
from revivify.checker.keys import Violation
from revivify.impl.cli.follow_web import FollowerMetrics, Snapshot, Watch

REPO = Path(__file__).resolve().parents[2]
BAD = REPO / "traces" / "bad" / "append-leaves-gap"


def _violation(kind: str, severity: str = "violation") -> Violation:
    return Violation(kind=kind, severity=severity, file="f.jsonl", line=3,
                     subject="f.jsonl:3", message="m")


def test_newest_wall_clock_is_the_newest_line_read(tmp_path: Path) -> None:
    walls = []
    for f in sorted(BAD.glob("*.jsonl")):
        shutil.copy(f, tmp_path / f.name)
        walls += [json.loads(line)["wall_ns"] for line in f.read_text().splitlines()]
    fol = Follower([str(tmp_path)])
    assert fol.newest_wall_ns == 0
    fol.poll()
    assert fol.newest_wall_ns == max(walls)


def test_watch_snapshot_and_metrics(tmp_path: Path) -> None:
    told: list[Violation] = []
    watch = Watch(Follower([str(tmp_path)]), told.append)
    trio.run(watch.poll)
    assert watch.snapshot.verdict() == "CLEAN" and watch.snapshot.events == 0
    for f in sorted(BAD.glob("*.jsonl")):
        shutil.copy(f, tmp_path / f.name)
    assert trio.run(watch.poll)
    s = watch.snapshot
    assert s.verdict() == "VIOLATIONS" and s.files == 3 and s.events > 0
    assert [v.kind for v in told] == ["GuardFailed"] and s.by_kind() == {"GuardFailed": 1}
    doc = s.document(s.newest_wall_ns / 1e9 + 2.5)
    assert doc["lag_seconds"] == 2.5 and doc["findings"][0]["kind"] == "GuardFailed"
    samples = {(x.name, tuple(x.labels.items())): x.value
               for fam in text_string_to_metric_families(
                   FollowerMetrics(watch).exposition().decode()) for x in fam.samples}
    assert samples[("revivify_follower_findings", (("kind", "GuardFailed"),))] == 1
    assert samples[("revivify_follower_events_checked_total", ())] == s.events
    assert samples[("revivify_follower_clean", ())] == 0


def test_verdict_counts_what_stands() -> None:
    """Warnings leave it CLEAN (trace check's exit 0); a withdrawn finding no longer
    counts, nor is it a kind in the metrics."""
    s = Snapshot(("d",), 0.0, findings=(_violation("Slow", "warning"),))
    assert s.verdict() == "CLEAN" and s.by_kind() == {"Slow": 1}
    bad = _violation("TwoLeaders")
    assert attrs.evolve(s, findings=(bad,)).verdict() == "VIOLATIONS"
    gone = attrs.evolve(s, findings=(attrs.evolve(bad, severity="withdrawn"),))
    assert gone.verdict() == "CLEAN" and gone.by_kind() == {}
    assert gone.lag_seconds(10.0) is None


def test_web_without_the_pages_module_is_one_line(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """The checker never imports impl: its ``trace_main`` serves pages only with the
    module the revivify command hands it; called without, ``--web`` is exit 2, one line."""
    from revivify.checker.cli import trace_main

    assert trace_main(["follow", str(tmp_path), "--web", "127.0.0.1:0",
                       "--until-idle", "0.1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--web needs the revivify command's pages" in err
