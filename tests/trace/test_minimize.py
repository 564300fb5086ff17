"""``revivify trace minimize``: a violating trace set shrinks to a corpus case that the
checker rejects for the same reason at the same event (checker/minimize.py).

The inputs are corpus cases padded with legal traces (whole legal cases' files beside the
bad case's): the minimizer must find the bad case's fault among them, drop the padding,
and write a case that ``trace check`` rejects by the same kind at the line of the same
event, no bigger than the case it came from.
"""

from __future__ import annotations

import itertools
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from revivify.checker.cli import trace_main
from revivify.checker.local import check_paths
from revivify.checker.minimize import Target, TraceFile, judge, minimize
from revivify.checker.replay import Violation
from revivify.checker.report import Report

from .conftest import TRACES
from .test_corpus import rejected_at

# Located cases of different checks (a replay guard, a state mismatch, a global Raft
# check, a catalog rule, an order check), each padded with two legal cases.
CASES = ["vote-twice-after-restart", "merge-drops-vote", "two-leaders-one-term",
         "catalog-call-before-commit", "sequence-gap"]
PADDING = ["tombstone-purged", "votes-during-deletion"]


def _events(d: Path) -> list[dict[str, object]]:
    return [json.loads(line) for p in sorted(d.glob("*.jsonl"))
            for line in p.read_text().splitlines() if line.strip()]


def _event_at(d: Path, file: str, line: int) -> dict[str, object]:
    event: dict[str, object] = json.loads((d / file).read_text().splitlines()[line - 1])
    return event


def padded(case: str, tmp: Path) -> Path:
    """The case's files plus the padding's, in one directory."""
    out = tmp / "in"
    out.mkdir()
    for src in [TRACES / "bad" / case, *(TRACES / "legal" / p for p in PADDING)]:
        for f in src.glob("*.jsonl"):
            shutil.copy(f, out / f.name)
    return out


def _expected(case: str) -> dict[str, object]:
    expected: dict[str, object] = json.loads(
        (TRACES / "bad" / case / "expected.json").read_text())
    return expected


def _located(case: str) -> tuple[str, int]:
    """Where the case is rejected: its expected.json's ``at``, or else the line of the
    first finding of its kind (the cases written before ``at`` existed)."""
    expected = _expected(case)
    at = expected.get("at")
    if isinstance(at, dict):
        return str(at["file"]), int(at["line"])
    report = check_paths([str(TRACES / "bad" / case)])
    v = next(v for v in report.sorted() if expected["kind"] in (v.kind, *v.also))
    return Path(v.file).name, v.line


@pytest.mark.parametrize("case", CASES)
def test_padded_case_shrinks_to_the_same_finding(case: str, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    src = padded(case, tmp_path)
    expected = _expected(case)
    before = check_paths([str(src)])
    assert expected["kind"] in before.kinds(), before.text()
    out = tmp_path / "out"
    code = trace_main(["minimize", str(src), "--out", str(out), "--name", case,
                       "--kind", str(expected["kind"])])
    cap = capsys.readouterr()
    assert code == 0, cap.err
    assert "before:" in cap.out and "after:" in cap.out
    assert "minimize: events" in cap.err  # progress on stderr
    got = out / case
    mine = json.loads((got / "expected.json").read_text())
    assert mine["kind"] == expected["kind"] and mine["exit_code"] == 1
    # trace check rejects the case by that kind at its line (the corpus test's judgement)
    # with nothing else (one fault, one finding)...
    assert trace_main(["check", "--quiet", str(got)]) == 1
    report = check_paths([str(got)])
    assert rejected_at(report, got), report.text()
    assert len([v for v in report.findings.values() if v.severity != "warning"]) == 1
    # ...and that line holds the event the original case is rejected at (same node,
    # incarnation and content; only the seq may have been renumbered).
    orig = _event_at(TRACES / "bad" / case, *_located(case))
    mapped = _event_at(got, mine["at"]["file"], mine["at"]["line"])
    assert {k: v for k, v in mapped.items() if k != "seq"} == \
        {k: v for k, v in orig.items() if k != "seq"}
    # No bigger than the case it came from; the padding is gone.
    assert len(_events(got)) <= len(_events(TRACES / "bad" / case))
    padding_nodes = {str(e["node"]) for p in PADDING for e in _events(TRACES / "legal" / p)}
    assert not {str(e["node"]) for e in _events(got)} & padding_nodes
    # Every file is well-formed: seqs gapless from 0, clocks strictly increasing.
    for f in got.glob("*.jsonl"):
        evs = [json.loads(x) for x in f.read_text().splitlines()]
        if case != "sequence-gap":
            assert [e["seq"] for e in evs] == list(range(len(evs))), f.name
        assert all(a["lamport"] < b["lamport"] for a, b in itertools.pairwise(evs))


@pytest.mark.parametrize(("case", "kind"), [("sequence-gap", "SequenceGap"),
                                            ("events-out-of-order", "OutOfOrder")])
def test_an_order_defect_is_kept(case: str, kind: str, tmp_path: Path) -> None:
    """The renumbering keeps an order defect it did not make (each seq goes down by the
    removed events below it): a gap stays a gap, a swap a swap."""
    src = padded(case, tmp_path)
    out = minimize([str(src)], kind=kind)
    assert out.target.kind == kind
    assert out.after[1] < out.before[1]
    name, line = out.at()
    report = check_paths([str(_write(out.case_files(), tmp_path / "case"))])
    assert any(v.kind == kind and Path(v.file).name == name and v.line == line
               for v in report.findings.values()), report.text()


def _write(files: dict[str, bytes], d: Path) -> Path:
    d.mkdir()
    for name, data in files.items():
        (d / name).write_bytes(data)
    return d


def test_deterministic(tmp_path: Path) -> None:
    src = padded("merge-drops-vote", tmp_path)
    cases = []
    for n in (1, 2):
        assert trace_main(["minimize", "--quiet", str(src), "--out",
                           str(tmp_path / f"o{n}")]) == 0
        cases.append({p.name: p.read_bytes() for p in (tmp_path / f"o{n}").iterdir()})
    assert cases[0] == cases[1]


def test_budget_bounds_the_tests_and_still_reproduces(tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]
                                                      ) -> None:
    src = padded("two-leaders-one-term", tmp_path)
    out = tmp_path / "o"
    assert trace_main(["minimize", str(src), "--out", str(out), "--max-tests", "3"]) == 0
    text = capsys.readouterr().out
    assert "tests:  3 (budget spent" in text
    assert rejected_at(check_paths([str(out)]), out)


def test_clean_input_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = trace_main(["minimize", str(TRACES / "legal" / "tombstone-purged"), "--out",
                       str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert code == 1
    assert "nothing to minimize" in err and "check clean" in err
    assert not (tmp_path / "o").exists()


def test_bad_input_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad"
    bad.mkdir()
    good = TRACES / "bad" / "merge-drops-vote"
    lines = next(good.glob("*.jsonl")).read_text().splitlines()
    (bad / "x.0001.jsonl").write_text("\n".join([lines[0], "{not json", *lines[1:]]) + "\n")
    full = tmp_path / "full"
    full.mkdir()
    (full / "f").write_text("x")
    runs = {
        "malformed": ["minimize", str(bad), "--out", str(tmp_path / "o1")],
        "missing path": ["minimize", str(tmp_path / "nope"), "--out", str(tmp_path / "o2")],
        "no --out": ["minimize", str(good)],
        "no path": ["minimize", "--out", str(tmp_path / "o3")],
        "budget": ["minimize", str(good), "--out", str(tmp_path / "o4"), "--max-tests", "0"],
        "not a number": ["minimize", str(good), "--out", str(tmp_path / "o5"),
                         "--max-tests", "x"],
        "out not empty": ["minimize", str(good), "--out", str(full)],
        "bad name": ["minimize", str(good), "--out", str(tmp_path), "--name", "a/b"],
    }
    for what, argv in runs.items():
        assert trace_main(argv) == 2, what
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "Traceback" not in err, (what, err)
    assert not (tmp_path / "o1").exists()


def test_the_revivify_command(tmp_path: Path) -> None:
    """Through the real command (a process of its own): minimize, then `trace check` the
    case it wrote: rejected (exit 1) at the line expected.json names."""
    src = padded("catalog-call-before-commit", tmp_path)
    case = tmp_path / "corpus" / "min-x"

    def cli(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "revivify.impl.cli.main", *argv],
                              capture_output=True, text=True, timeout=300, check=False)

    done = cli("trace", "minimize", str(src), "--out", str(tmp_path / "corpus"),
               "--name", "min-x", "--description", "a call before its commit")
    assert done.returncode == 0, done.stderr
    assert "minimize: tablets:" in done.stderr
    expected = json.loads((case / "expected.json").read_text())
    assert expected["description"] == "a call before its commit"
    assert f"at {expected['at']['file']}:{expected['at']['line']}" in done.stdout
    check = cli("trace", "check", "--json", str(case))
    assert check.returncode == 1, check.stderr
    report = json.loads(check.stdout)
    assert [(f["kind"], Path(f["file"]).name, f["line"]) for f in report["findings"]
            if f["severity"] != "warning"] == [
        (expected["kind"], expected["at"]["file"], expected["at"]["line"])]


def test_the_predicate_refuses_what_is_not_the_same_finding() -> None:
    """A candidate reproduces only with the target's kind at the target event's line, no
    unusable input, and no more findings than the best so far."""
    ev = {"v": 4, "node": "n", "inc": 1, "seq": 0, "lamport": 1, "wall_ns": 0,
          "tablet": None, "event": "server_start", "args": {}, "state": None}
    files = [TraceFile(path="n.0001.jsonl", node="n", inc=1,
                       events=tuple(dict(ev, seq=i, lamport=i + 1) for i in range(3)))]
    target = Target(kind="K", file=0, pos=2, message="")
    kept = frozenset({(0, 0), (0, 2)})  # the target event is now line 2

    def report(*found: tuple[str, str, int]) -> Report:
        r = Report(engine="local")
        for kind, severity, line in found:
            r.add(Violation(kind=kind, severity=severity, file="/x/n.0001.jsonl",
                            line=line, subject=f"n:{line}:{kind}", message=""))
        return r

    assert judge(report(("K", "violation", 2)), files, kept, target, 1) == (True, 1)
    assert not judge(report(("K", "violation", 3)), files, kept, target, 1)[0]  # unmapped
    assert not judge(report(("J", "violation", 2)), files, kept, target, 1)[0]
    assert not judge(report(("K", "violation", 2), ("MalformedLine", "error", 1)),
                     files, kept, target, 5)[0]
    assert not judge(report(("K", "violation", 2), ("J", "violation", 1)),
                     files, kept, target, 1)[0]
    assert judge(report(("K", "violation", 2), ("T", "warning", 1)), files, kept, target,
                 1)[0]
