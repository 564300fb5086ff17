"""``trace check --html`` and ``history check --html`` (issue 33): the pages' content.

Each bad corpus case with a known line: the page marks the event at that file:line
(``class="ev offending"``, its ``data-file``/``data-line``) and draws one lane per server
incarnation that logged an event of the offending line's tablet (every incarnation, for a
line without a tablet) -- computed here from the files, not from the module. A trace is
untrusted: markup in it renders as text. A recorded non-linearizable history: the page
draws the window the checker's ``--json`` names.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from revivify.checker.cli import trace_main
from revivify.checker.keys import Violation
from revivify.checker.local import check_paths
from revivify.checker.report import Report
from revivify.checker.timeline import MAX_DRAWN, SERVER_EVENTS, render
from revivify.impl.cli.history import history_main
from revivify.spec.catalog import DEFAULT as CATALOG

from .conftest import ROOT, TRACES
from .html_dom import Dom

BAD = sorted(p for p in (TRACES / "bad").iterdir() if p.is_dir())
AT = [p for p in BAD if "at" in json.loads((p / "expected.json").read_text())]
ETCD = ROOT / "tests" / "data" / "histories" / "jepsen-etcd"


def lane_of(path: Path) -> tuple[str, str]:
    node, inc = path.name.split(".")[:2]
    return node, str(int(inc))


def read_lines(path: Path) -> list[dict[str, Any]]:
    out = []
    for text in path.read_text().splitlines():
        try:
            out.append(json.loads(text))
        except ValueError:
            continue
    return out


def expected_lanes(case: Path, at_file: str, at_line: int,
                   witnesses: list[str]) -> set[tuple[str, str]]:
    """The incarnations that logged an event of the offending line's tablet; for a line
    without a tablet, those of the nodes the finding names (the line's, its witnesses',
    a node its arguments name)."""
    files = sorted(case.glob("*.jsonl"))
    at = json.loads((case / at_file).read_text().splitlines()[at_line - 1])
    lanes = {lane_of(case / at_file)} | {lane_of(Path(w)) for w in witnesses}
    if at.get("tablet") is not None:
        return lanes | {lane_of(f) for f in files
                        if any(ev.get("tablet") == at["tablet"] for ev in read_lines(f))}
    nodes = {lane[0] for lane in lanes} | {lane_of(f)[0] for f in files
                                           if lane_of(f)[0] in at["args"].values()}
    return lanes | {lane_of(f) for f in files if lane_of(f)[0] in nodes and read_lines(f)}


def witness_files(v: Violation) -> list[str]:
    """The files of the witnesses that name a line (``file:line ...``)."""
    places = [w.partition(" ")[0].rpartition(":") for w in v.witnesses]
    return [f for f, _, line in places if f and line.isdigit()]


def finding_at(report: Report, case: Path) -> Violation:
    at = json.loads((case / "expected.json").read_text())["at"]
    (v,) = [v for v in report.sorted() if Path(v.file).parent.name == case.name
            and Path(v.file).name == at["file"] and v.line == at["line"]]
    return v


def report_page(tmp_path: Path, *paths: Path, code: int | None = None) -> Dom:
    out = tmp_path / "report.html"
    got = trace_main(["check", "--quiet", "--html", str(out), *map(str, paths)])
    if code is not None:
        assert got == code
    dom = Dom(out.read_text(encoding="utf-8"))
    assert dom.unbalanced == [], dom.unbalanced
    return dom


@pytest.mark.parametrize("case", AT, ids=lambda p: p.name)
def test_offending_line_marked_with_its_lanes(case: Path, tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    expected = json.loads((case / "expected.json").read_text())
    at = expected["at"]
    dom = report_page(tmp_path, case, code=expected["exit_code"])
    marked = [e for e in dom.having("offending")
              if (e.attrs["data-file"], e.attrs["data-line"]) == (at["file"], str(at["line"]))]
    assert marked, [(e.attrs.get("data-file"), e.attrs.get("data-line"))
                    for e in dom.having("offending")]
    (section,) = {e.section for e in marked}
    assert marked[0].attrs["id"] == f"offending-{section + 1}"
    v = finding_at(check_paths([str(case)]), case)
    lanes = {(e.attrs["data-node"], e.attrs["data-inc"]) for e in dom.having("lane", section)}
    assert lanes == expected_lanes(case, at["file"], at["line"], witness_files(v))
    # Beside it, what the spec expected and what the trace holds, as the checker said.
    callout = dom.by_id(f"callout-{section + 1}")
    assert callout is not None
    text = "".join(callout.text.split())  # wrapped over several <text> lines
    assert "".join(v.message.split())[:40] in text
    if v.observed:
        assert "observed:" in text
    capsys.readouterr()


def test_lanes_are_the_findings_own_among_other_cases() -> None:
    """The located cases checked together (each has its own tablet and UUIDs; see
    tests/trace/test_corpus.py): each finding's lanes are still its own case's servers
    involved, none of another case's."""
    alone = "ReadyHoldsCommittedRecords"
    cases = [p for p in AT if json.loads((p / "expected.json").read_text())["kind"] != alone]
    report = check_paths([str(p) for p in cases], catalog=CATALOG.without(alone))
    findings = report.sorted()
    assert len(findings) > MAX_DRAWN
    dom = Dom(render(findings, [str(p) for p in cases], ""))
    assert len({e.section for e in dom.having("offending")}) == MAX_DRAWN  # output bounded
    dom = Dom(render(findings, [str(p) for p in cases], "", max_drawn=len(findings)))
    assert dom.unbalanced == []
    for case in cases:
        v = finding_at(report, case)
        (marked,) = [e for e in dom.having("offending")
                     if Path(v.file).name == e.attrs["data-file"]
                     and e.attrs["data-line"] == str(v.line)
                     and e.attrs["id"] == f"offending-{e.section + 1}"
                     and dom.sections_kind[e.section] in (v.kind, *v.also)]
        lanes = {(e.attrs["data-node"], e.attrs["data-inc"])
                 for e in dom.having("lane", marked.section)}
        assert lanes == expected_lanes(case, Path(v.file).name, v.line, witness_files(v)), (
            case.name)


def test_vote_before_its_request_is_a_backwards_link(tmp_path: Path) -> None:
    """The vote answers the candidate's RequestVote, sent after its start_election: the
    link is proven, and drawn backwards (red, dashed) since the vote's clock is lower."""
    dom = report_page(tmp_path, TRACES / "bad" / "vote-before-request", code=1)
    links = dom.having("link")
    assert [e.classes for e in links] == [{"link", "backwards"}]
    assert "RequestVote of term 1" in links[0].text


def test_links_only_where_proven(tmp_path: Path) -> None:
    """Two leaders of term 1: a term-1 append cannot be traced to either, so no append is
    linked; each vote is linked to its candidate's one start_election, forwards."""
    dom = report_page(tmp_path, TRACES / "bad" / "two-leaders-one-term", code=1)
    links = dom.having("link")
    assert links and all("RequestVote" in e.text for e in links)
    assert all("backwards" not in e.classes for e in links)


def test_window_bounds_the_rows(tmp_path: Path) -> None:
    """At most ``window`` events of the tablet either side of the finding (plus its
    witnesses, its cause and the lanes' server events): fewer rows than the trace holds."""
    case = TRACES / "bad" / "committed-entry-truncated"
    report = check_paths([str(case)])
    total = sum(len(f.read_text().splitlines()) for f in case.glob("*.jsonl"))
    for window in (1, 3):
        dom = Dom(render(report.sorted(), [str(case)], "", window=window))
        rows = [e for e in dom.having("ev", 0)
                if e.attrs["data-event"] not in SERVER_EVENTS]
        witnesses = len(dom.having("witness", 0))
        assert 1 < len(rows) <= 2 * window + 1 + witnesses + 1 < total


def test_clean_run_says_no_findings(tmp_path: Path) -> None:
    dom = report_page(tmp_path, TRACES / "spec-walks" / "walk-000", code=0)
    verdict = dom.by_id("verdict")
    assert verdict is not None and verdict.text == "no findings"
    assert dom.having("ev") == [] and dom.having("offending") == []


def hostile_case(tmp_path: Path) -> Path:
    """vote-before-request with markup in the tablet id and a malformed line of markup."""
    case = tmp_path / "hostile"
    shutil.copytree(TRACES / "bad" / "vote-before-request", case)
    evil = '<script>document.title="pwned"</script>"><img src=x onerror=alert(1)>'
    for f in case.glob("*.jsonl"):
        lines = f.read_text().splitlines()
        out = []
        for text in lines:
            ev = json.loads(text)
            if ev["tablet"] is not None:
                ev["tablet"] = "t" + evil
            out.append(json.dumps(ev, separators=(",", ":")))
        if f.name.startswith("3c9ebbb9"):  # the offending file: one more line, unreadable
            out.insert(2, evil)
        f.write_text("\n".join(out) + "\n")
    return case


def test_markup_in_a_trace_renders_as_text(tmp_path: Path) -> None:
    case = hostile_case(tmp_path)
    out = tmp_path / "report.html"
    code = trace_main(["check", "--quiet", "--html", str(out), str(case)])
    assert code == 2  # the malformed line is unusable input; the page is written anyway
    page = out.read_text(encoding="utf-8")
    assert "<script" not in page.lower() and "<img" not in page.lower()
    assert "&lt;script&gt;" in page and "onerror=alert(1)&gt;" in page
    dom = Dom(page)
    assert dom.unbalanced == []
    assert [e for e in dom.elements if e.tag in ("script", "img")] == []
    assert dom.having("unreadable")  # the malformed line has its row


def test_bad_html_path_is_one_line_exit_2(tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    case = str(TRACES / "bad" / "vote-before-request")
    assert trace_main(["check", "--html", str(tmp_path / "nope" / "r.html"), case]) == 2
    assert trace_main(["check", "--html", str(tmp_path), case]) == 2
    hist = str(ETCD / "etcd_000.log")
    assert history_main(["check", hist, "--model", "register", "--format", "jepsen",
                         "--html", str(tmp_path / "nope" / "r.html")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 3 and all("--html" in line for line in err), err
    assert "no such directory" in err[0] and "is a directory" in err[1]
    assert "Traceback" not in "".join(err)


def test_history_failing_window_drawn(tmp_path: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    hist = str(ETCD / "etcd_000.log")
    argv = ["check", hist, "--model", "register", "--format", "jepsen", "--quiet"]
    assert history_main([*argv, "--json"]) == 1
    (failure,) = json.loads(capsys.readouterr().out)["failures"]
    window = failure["window"]
    out = tmp_path / "history.html"
    assert history_main([*argv, "--html", str(out)]) == 1
    dom = Dom(out.read_text(encoding="utf-8"))
    assert dom.unbalanced == []
    span = dom.by_id("window-1")
    assert span is not None and "window-span" in span.classes
    drawn = sorted(int(e.attrs["data-invoke"]) for e in dom.having("window-op"))
    assert drawn == sorted(op["invoke_line"] for op in window["operations"])
    roles = sorted(e.attrs.get("data-role", "") for e in dom.having("window-op"))
    assert roles == sorted(op["role"] for op in window["operations"])
    lanes = {e.attrs["data-process"] for e in dom.having("lane")}
    assert lanes >= {str(op["process"]) for op in window["operations"]}
    ops = dom.having("op")
    assert len(ops) > len(drawn)  # context around the window, in grey
    assert all(e.classes & {"window-op", "context-op"} for e in ops)


def test_history_linearizable_page(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "history.html"
    assert history_main(["check", str(ETCD / "etcd_002.log"), "--model", "register",
                         "--format", "jepsen", "--quiet", "--html", str(out)]) == 0
    dom = Dom(out.read_text(encoding="utf-8"))
    verdict = dom.by_id("verdict")
    assert verdict is not None and verdict.text.startswith("linearizable")
    assert dom.having("op") == [] and dom.unbalanced == []
    capsys.readouterr()
