"""Issue 20's two checker fixes, on their bad cases (tests/trace/bad_issue20.py): a term
regression is one finding however many events follow in the lower term, and a copy that
begins from another server than the one whose StartTabletCopy was accepted is refused."""

from __future__ import annotations

import json
from pathlib import Path

from revivify.checker.global_checks import GlobalChecks
from revivify.checker.local import check_paths, group_files, stream_node
from revivify.checker.replay import Replayer, Violation
from revivify.checker.traces import discover

from .bad_issue20 import CASES, write
from .conftest import TRACES


def _raw(paths: list[str]) -> list[Violation]:
    """Every finding the replay makes, before a report folds any."""
    files, _ = discover(paths)
    found: list[Violation] = []
    r = Replayer()
    g = GlobalChecks()
    for _, group in group_files(files):
        stream_node(r, group, g, found.append)
    return found + list(g.violations())


def test_committed_cases_are_what_the_builder_writes(tmp_path: Path) -> None:
    write(str(tmp_path))
    for name in CASES:
        for f in (tmp_path / name).iterdir():
            assert (TRACES / "bad" / name / f.name).read_text() == f.read_text(), f


def test_term_regression_is_reported_once() -> None:
    case = TRACES / "bad" / "term-regression-then-more"
    raw = [v for v in _raw([str(case)]) if v.kind == "TermRegression"]
    assert len(raw) == 1, [f"{v.file}:{v.line}" for v in raw]
    at = json.loads((case / "expected.json").read_text())["at"]
    assert (Path(raw[0].file).name, raw[0].line) == (at["file"], at["line"])


def test_term_regression_after_it_rises_again_is_reported_again(tmp_path: Path) -> None:
    """Resynchronising on the lower term forgets nothing that matters: a second fault
    (a later drop below the new maximum) is a second finding."""
    case = TRACES / "bad" / "term-regression-then-more"
    out = tmp_path / "case"
    out.mkdir()
    at = json.loads((case / "expected.json").read_text())["at"]
    for f in case.glob("*.jsonl"):
        lines = f.read_text().splitlines()
        if f.name == at["file"]:
            d = json.loads(lines[at["line"] + 1])  # the third lowered commit
            d["state"]["cmeta"]["term"] = 0
            lines[at["line"] + 1] = json.dumps(d, separators=(",", ":"))
        (out / f.name).write_text("\n".join(lines) + "\n")
    raw = [v for v in _raw([str(out)]) if v.kind == "TermRegression"]
    assert [v.line for v in raw] == [at["line"], at["line"] + 2]


def test_copy_begin_from_another_source_is_refused() -> None:
    case = TRACES / "bad" / "copy-begin-wrong-source"
    report = check_paths([str(case)])
    at = json.loads((case / "expected.json").read_text())["at"]
    hits = [v for v in report.findings.values()
            if v.kind == "ArgMismatch" and v.failed == "args.source"]
    assert [(Path(v.file).name, v.line) for v in hits] == [(at["file"], at["line"])]
    assert report.exit_code() == 1


def test_copy_begin_from_its_source_is_accepted(tmp_path: Path) -> None:
    """The same history with the source the spec allows: no finding about it."""
    case = TRACES / "bad" / "copy-begin-wrong-source"
    at = json.loads((case / "expected.json").read_text())["at"]
    out = tmp_path / "case"
    out.mkdir()
    for f in case.glob("*.jsonl"):
        lines = f.read_text().splitlines()
        if f.name == at["file"]:
            accept = json.loads(lines[at["line"] - 2])
            assert accept["event"] == "stc_accept"
            d = json.loads(lines[at["line"] - 1])
            d["args"]["source"] = accept["args"]["caller"]
            lines[at["line"] - 1] = json.dumps(d, separators=(",", ":"))
        (out / f.name).write_text("\n".join(lines) + "\n")
    report = check_paths([str(out)])
    assert not [v for v in report.findings.values() if v.failed == "args.source"]
    assert report.findings == {}, report.text()
