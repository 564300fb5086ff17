"""The committed corpus: every valid trace passes, every bad one reports its violation."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from revivify.checker.cli import trace_main
from revivify.checker.local import check_paths

from .conftest import TRACES

BAD = sorted(p for p in (TRACES / "bad").iterdir() if p.is_dir())
WALKS = sorted(p for p in (TRACES / "spec-walks").iterdir() if p.is_dir())


def test_corpus_is_big_enough() -> None:
    assert len(BAD) >= 13
    assert len(WALKS) >= 10


@pytest.mark.parametrize("walk", WALKS, ids=lambda p: p.name)
def test_spec_walk_is_clean(walk: Path) -> None:
    report = check_paths([str(walk)])
    assert report.findings == {}, report.text()
    assert report.exit_code() == 0


def test_walks_cover_every_action() -> None:
    report = check_paths([str(TRACES / "spec-walks")])
    assert report.coverage_summary()["actions_not_exercised"] == []
    assert report.frontiers.get(1, 0) > 0, "no walk exercised the crash frontier"


@pytest.mark.parametrize("case", BAD, ids=lambda p: p.name)
def test_bad_trace_reports_expected(case: Path) -> None:
    expected = json.loads((case / "expected.json").read_text())
    report = check_paths([str(case)])
    assert expected["kind"] in report.kinds(), report.text()
    assert report.exit_code() == expected["exit_code"], report.text()


def test_cli_exit_codes(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert trace_main(["check", str(TRACES / "spec-walks" / "walk-000")]) == 0
    assert trace_main(["check", str(TRACES / "bad" / "two-leaders-one-term")]) == 1
    assert trace_main(["check", str(tmp_path / "missing")]) == 2
    assert trace_main(["check", str(tmp_path)]) == 2  # no trace files
    assert trace_main(["check"]) == 2
    assert trace_main(["bogus"]) == 2
    out = capsys.readouterr()
    assert "Traceback" not in out.out + out.err


def test_cli_json(capsys: pytest.CaptureFixture[str]) -> None:
    code = trace_main(["check", "--json", str(TRACES / "bad" / "merge-drops-vote")])
    report = json.loads(capsys.readouterr().out)
    assert code == 1 and report["exit_code"] == 1
    f = next(f for f in report["findings"] if f["kind"] == "StateMismatch")
    assert f["file"].endswith(".jsonl") and f["line"] > 0
    assert f["expected"] and f["observed"] and f["context"] and f["last_matched"]
    assert "voted_for" in f["message"]
