"""The committed corpus: every valid trace passes, every bad one reports its violation."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from revivify.checker.cli import trace_main
from revivify.checker.local import check_paths
from revivify.checker.report import PER_FILE_KINDS, Report
from revivify.contract.events import SCHEMA_VERSION
from revivify.spec.catalog import DEFAULT as CATALOG

from .conftest import TRACES

BAD = sorted(p for p in (TRACES / "bad").iterdir() if p.is_dir())
WALKS = sorted(p for p in (TRACES / "spec-walks").iterdir() if p.is_dir())
# Cases whose expected.json names the line they must be rejected at (the global checks).
AT = [p for p in BAD if "at" in json.loads((p / "expected.json").read_text())]
GLOBAL_KINDS = {"LeaderWithoutMajority", "CommitWithoutMajority", "CausalityViolation",
                "LogMatching", "LeaderCompleteness", "CommittedEntryTruncated",
                "AppendOfUnelectedTerm", "CommitBeyondLeader"}
# What contract version 3 lets the checker see, each with a located case (tests/trace/
# bad_v3.py writes them).
V3_KINDS = GLOBAL_KINDS - {"LeaderWithoutMajority", "CommitWithoutMajority",
                           "CausalityViolation"} | {
    "CommitNotInLog", "PhantomTablet", "MissingIncarnation", "MissingStartup",
    "StaleCopySource", "ArgMismatch", "StateMismatch", "BadArgs"}


def rejected_at(report: Report, case: Path) -> bool:
    """The case's expected kind is reported at its expected file:line."""
    expected = json.loads((case / "expected.json").read_text())
    at = expected["at"]
    return any(expected["kind"] in (v.kind, *v.also) and Path(v.file).name == at["file"]
               and Path(v.file).parent.name == case.name and v.line == at["line"]
               for v in report.findings.values())


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


# One fault, one finding (``Report.add`` folds the checks that saw the same line, and a
# global finding into the findings at its witnesses' lines: a node's refused election and
# the tablet's two leaders are one fault; the reader puts swapped lines back in seq order,
# so two swapped events are one reordering, neither a gap nor a refused replay).
@pytest.mark.parametrize("case", BAD, ids=lambda p: p.name)
def test_one_fault_one_finding(case: Path) -> None:
    expected = json.loads((case / "expected.json").read_text())
    report = check_paths([str(case)])
    found = [v for v in report.findings.values() if v.severity != "warning"]
    if expected["kind"] in PER_FILE_KINDS:  # a file of another version: one per file
        want = len(list(case.glob("*.jsonl")))
    else:
        want = 0 if expected["exit_code"] == 0 else 1
    assert len(found) == want, report.text()
    assert report.counts["violation"] + report.counts["error"] == want


def test_swapped_events_are_one_out_of_order_at_the_late_line() -> None:
    """``events-out-of-order`` swaps two neighbouring lines of one file: one finding,
    ``OutOfOrder``, at the line that arrives after a higher seq, naming both seqs; no
    ``SequenceGap`` and nothing from the replay (it sees the events in seq order)."""
    case = TRACES / "bad" / "events-out-of-order"
    late = []
    for path in sorted(case.glob("*.jsonl")):
        seqs = [json.loads(line)["seq"] for line in path.read_text().splitlines()]
        late += [(path.name, n + 1, seqs[n - 1], seqs[n]) for n in range(1, len(seqs))
                 if seqs[n] < seqs[n - 1]]
    ((name, line, before, seq),) = late
    report = check_paths([str(case)])
    (v,) = report.findings.values()
    assert (v.kind, Path(v.file).name, v.line, v.also) == ("OutOfOrder", name, line, ())
    assert f"seq {seq} after seq {before} (line {line - 1})" in v.message
    assert report.exit_code() == 1


def test_a_global_finding_folds_into_its_witness_lines_finding() -> None:
    """Two leaders in a term, one of them elected without a vote: one finding, the leader
    without a majority (every voter logged its term-1 vote for the other, so a crash
    cannot excuse it), naming the refused election and the tablet's two leaders."""
    report = check_paths([str(TRACES / "bad" / "two-leaders-one-term")])
    (v,) = report.findings.values()
    assert v.kind == "LeaderWithoutMajority" and v.also == ("GuardFailed", "TwoLeaders")
    assert report.counts["violation"] == 1


def test_folded_findings_name_each_other(tmp_path: Path) -> None:
    """A double vote is also a refused guard: one finding, naming both."""
    report = check_paths([str(TRACES / "bad" / "vote-twice-after-restart")])
    (v,) = report.findings.values()
    assert v.kind == "DoubleVote" and v.also == ("GuardFailed",)
    assert report.kinds() == {"DoubleVote", "GuardFailed"}
    assert "also:     GuardFailed" in report.text()


def test_every_global_check_has_a_located_case() -> None:
    kinds = {json.loads((p / "expected.json").read_text())["kind"] for p in AT}
    assert kinds >= GLOBAL_KINDS | V3_KINDS
    assert len(AT) >= 18


def test_version_3_cases_are_written_by_their_generator(tmp_path: Path) -> None:
    """tests/trace/bad_v3.py writes the version-3 cases: each is in traces/bad/ with the
    same expectation."""
    from .bad_v3 import CASES, write

    names = write(str(tmp_path))
    assert set(names) == set(CASES)
    for name in names:
        ours = json.loads((TRACES / "bad" / name / "expected.json").read_text())
        assert ours == json.loads((tmp_path / name / "expected.json").read_text()), name


@pytest.mark.parametrize("case", AT, ids=lambda p: p.name)
def test_bad_trace_rejected_at_its_line(case: Path) -> None:
    report = check_paths([str(case)])
    assert rejected_at(report, case), report.text()


def test_located_cases_together() -> None:
    """Each case has its own tablet and UUIDs: checked together, each is still found.
    ReadyHoldsCommittedRecords is left out: it reads every master_ready as the whole
    catalog of ONE cluster (sys-catalog) at its index, so each catalog case's ready would
    have to hold the records the cases before it committed (tests/trace/
    test_catalog_checks.py checks its cases alone). So are the minimized cases of real
    masters (min-*, `trace minimize`): each is a real cluster's catalog, whose terms the
    hand-made catalog cases reuse (two clusters' masters ready in one term would be
    OneReadyLeaderPerTerm, a finding of checking them as one cluster)."""
    alone = "ReadyHoldsCommittedRecords"
    together = [p for p in AT if not (p.name.startswith("min-") and _has_masters(p))]
    report = check_paths([str(p) for p in together], catalog=CATALOG.without(alone))
    cases = [p for p in together
             if json.loads((p / "expected.json").read_text())["kind"] != alone]
    assert all(rejected_at(report, p) for p in cases), report.text()


def _has_masters(case: Path) -> bool:
    """Whether a case's traces hold master events (a master's file)."""
    masters = {'"event":"master_ready"', '"event":"catalog_commit"', '"event":"master_call"'}
    return any(m in f.read_text() for f in case.glob("*.jsonl") for m in masters)


def test_cli_exit_codes(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert trace_main(["check", str(TRACES / "spec-walks" / "walk-000")]) == 0
    assert trace_main(["check", str(TRACES / "bad" / "two-leaders-one-term")]) == 1
    for case in AT:
        expected = json.loads((case / "expected.json").read_text())["exit_code"]
        assert trace_main(["check", "--quiet", str(case)]) == expected
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


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file()}


def test_the_corpus_is_its_generators_output(tmp_path: Path) -> None:
    """`python -m revivify.checker.walks traces` rewrites schema.json, spec-walks/ and its
    version-2 bad cases byte for byte: the committed corpus is what the generator writes
    (the version-2 cases through ``as_version_2``), so regenerating it changes nothing
    unless the spec or the contract did."""
    from revivify.checker import walks

    assert walks.main([str(tmp_path)]) == 0
    assert (tmp_path / "schema.json").read_bytes() == (TRACES / "schema.json").read_bytes(), (
        "traces/ is not what its generator writes; regenerate with "
        "`.venv/bin/python -m revivify.checker.walks traces` and commit the result")
    assert _tree(tmp_path / "spec-walks") == _tree(TRACES / "spec-walks")
    written = sorted(p.name for p in (tmp_path / "bad").iterdir())
    for name in written:
        assert _tree(tmp_path / "bad" / name) == _tree(TRACES / "bad" / name), name
    versions = {name: json.loads((tmp_path / "bad" / name).glob("*.jsonl").__next__()
                                 .read_text().splitlines()[0])["v"] for name in written}
    assert {n for n, v in versions.items() if v == SCHEMA_VERSION} == walks.V3_BAD_CASES


def test_every_bad_case_is_written_by_one_generator(tmp_path: Path) -> None:
    """traces/bad/ is exactly the cases of the three generators (checker/walks.py at
    version 2, tests/trace/bad_v3.py at version 3, tests/trace/bad_catalog.py the masters'
    cases), each byte for byte what it writes."""
    from revivify.checker import walks

    from .bad_catalog import write as write_catalog
    from .bad_crashed import CASES as CRASHED
    from .bad_crashed import CATALOG as CRASHED_CATALOG
    from .bad_issue20 import CASES as ISSUE20
    from .bad_v3 import write

    v3 = set(write(str(tmp_path / "v3")))
    v2 = set(walks.write_bad_corpus(str(tmp_path / "v2")))
    v4 = set(write_catalog(str(tmp_path / "v4")))
    crashed = set(CRASHED) | set(CRASHED_CATALOG)  # test_crashed_checks.py: their bytes
    # tests/trace/bad_issue20.py: test_issue20_fixes.py checks their bytes.
    fixes = set(ISSUE20)
    assert not v2 & v3 and not v4 & (v2 | v3) and not crashed & (v2 | v3 | v4)
    assert not fixes & (v2 | v3 | v4 | crashed)
    # `revivify trace minimize` wrote the min-* cases from real processes' traces (no
    # generator: traces/README.md, "Minimized cases"); the tests above check them.
    minimized = {p.name for p in BAD if p.name.startswith("min-")}
    assert not minimized & (v2 | v3 | v4 | crashed | fixes)
    assert v2 | v3 | v4 | crashed | fixes | minimized == {p.name for p in BAD}
    for name in v3:
        assert _tree(tmp_path / "v3" / name) == _tree(TRACES / "bad" / name), name
    for name in v4:
        assert _tree(tmp_path / "v4" / "bad" / name) == _tree(TRACES / "bad" / name), name
