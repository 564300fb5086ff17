"""The global checks where servers crashed (issue 20): a crash excuses only what the
writer's guarantee lets it hide (one unlogged step per key, after the key's last logged
event) and what the server's own log does not rule out.

The cases are ``traces/bad/crashed-*`` and ``traces/legal/crash-*`` (written by
tests/trace/bad_crashed.py). Each bad case ends with its guilty servers crashed and is
rejected at its line by its rule only, by both engines; each legal case loses exactly the
step its rule needs and is accepted. With the old excuse (any crash before the event
excused any unlogged step), the majority and log cases pass: the bound is what catches
them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from revivify.checker.global_checks import GlobalChecks
from revivify.checker.local import check_paths
from revivify.checker.spark import validate_spark

from .bad_crashed import CASES, CATALOG, LEGAL, write
from .conftest import TRACES

BAD = [TRACES / "bad" / name for name in [*CASES, *CATALOG]]
GOOD = [TRACES / "legal" / name for name in LEGAL]
# The rules that excused a crash before issue 20 (GlobalChecks._lost_*).
EXCUSING = {"LeaderWithoutMajority", "CommitWithoutMajority", "AppendOfUnelectedTerm",
            "CommitBeyondLeader"}


def expected(case: Path) -> dict[str, Any]:
    return dict(json.loads((case / "expected.json").read_text()))


def located(report: Any) -> set[tuple[str, str, str, int]]:
    return {(v.kind, Path(v.file).parent.name, Path(v.file).name, v.line)
            for v in report.findings.values() if v.severity != "warning"}


def want(cases: list[Path]) -> set[tuple[str, str, str, int]]:
    return {(expected(c)["kind"], c.name, expected(c)["at"]["file"],
             expected(c)["at"]["line"]) for c in cases}


def _old_excuse(monkeypatch: pytest.MonkeyPatch) -> None:
    """Before issue 20: any incarnation that crashed after its last event, below the
    event checked, may have done anything unlogged."""
    def crashed(self: GlobalChecks, node: str, before: int) -> bool:
        return any(not clean and last < before
                   for _, last, clean in self.incs.get(node, {}).values())

    monkeypatch.setattr(GlobalChecks, "_lost_vote",
                        lambda self, tablet, voter, cand, term, before, voted:
                        crashed(self, voter, before))
    monkeypatch.setattr(GlobalChecks, "_lost_append",
                        lambda self, tablet, voter, term, before: crashed(self, voter, before))
    monkeypatch.setattr(GlobalChecks, "_lost_leader",
                        lambda self, tablet, node, term, before: crashed(self, node, before))
    monkeypatch.setattr(GlobalChecks, "_lost_commit",
                        lambda self, tablet, leader, term, index: any(
                            not clean for _, _, clean in self.incs.get(leader, {}).values()))


def test_cases_are_written_by_their_generator(tmp_path: Path) -> None:
    """The committed cases are byte for byte what bad_crashed.py writes."""
    assert set(write(str(tmp_path))) == set(CASES) | set(CATALOG) | set(LEGAL)
    for case in [*BAD, *GOOD]:
        ours = sorted(p.name for p in case.iterdir())
        assert ours == sorted(p.name for p in (tmp_path / case.parent.name / case.name)
                              .iterdir()), case.name
        for name in ours:
            assert (case / name).read_bytes() == \
                (tmp_path / case.parent.name / case.name / name).read_bytes(), (case, name)


def test_every_global_rule_has_a_crashed_case() -> None:
    kinds = {expected(c)["kind"] for c in BAD}
    assert kinds >= EXCUSING | {"TwoLeaders", "CommitTermMismatch", "CausalityViolation",
                                "LogMatching", "LeaderCompleteness",
                                "CommittedEntryTruncated", "UuidReused",
                                "OneReadyLeaderPerTerm", "ReadyHoldsCommitted"}


@pytest.mark.parametrize("case", BAD, ids=lambda p: p.name)
def test_the_guilty_ended_crashed(case: Path) -> None:
    """No server of a bad case stopped cleanly: each ends crashed."""
    events = [json.loads(line)["event"] for f in case.glob("*.jsonl")
              for line in f.read_text().splitlines()]
    assert "server_stop" not in events


@pytest.mark.parametrize("case", BAD, ids=lambda p: p.name)
def test_rejected_at_its_line_by_its_rule_only(case: Path) -> None:
    report = check_paths([str(case)])
    assert located(report) == want([case]), report.text()
    (v,) = report.findings.values()
    assert v.also == (), report.text()
    assert report.exit_code() == 1


@pytest.mark.parametrize("case", [c for c in BAD if expected(c)["kind"] in EXCUSING],
                         ids=lambda p: p.name)
def test_the_old_excuse_let_it_through(case: Path,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The bound is what catches the case: with any crash excusing anything, the rule
    stays silent (so this module's tests can fail)."""
    _old_excuse(monkeypatch)
    report = check_paths([str(case)])
    assert expected(case)["kind"] not in report.kinds(), report.text()


@pytest.mark.parametrize("case", GOOD, ids=lambda p: p.name)
def test_legal_crashed_case_needs_the_excuse(case: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Each legal case is clean, and only because a crash may hide a step: with no
    excuse at all, a majority (or commit) rule rejects it."""
    assert check_paths([str(case)]).findings == {}
    for name in ("_lost_vote", "_lost_append", "_lost_leader", "_lost_commit"):
        monkeypatch.setattr(GlobalChecks, name, lambda self, *a: False)
    assert check_paths([str(case)]).kinds() & EXCUSING


def test_cases_together() -> None:
    """Each case has its own tablet and UUIDs: checked together, each is found at its line
    and nothing else is."""
    report = check_paths([str(c) for c in [*BAD, *GOOD]])
    assert located(report) == want(BAD), report.text()


def test_a_larger_frontier_excuses_more() -> None:
    """``--max-frontier 3`` (version 2's default) lets an unseen leader, a lost term rise
    before an append, or an append before a lost commit hide in one crash."""
    for name in ("crashed-append-of-unelected-term", "crashed-commit-without-majority",
                 "crashed-follower-commits-beyond-leader"):
        case = TRACES / "bad" / name
        assert check_paths([str(case)], max_frontier=3).findings == {}, name


@pytest.mark.spark
@pytest.mark.parametrize("plan", ["files", "dataframe"])
def test_spark_agrees(spark: Any, plan: str) -> None:
    paths = [str(c) for c in [*BAD, *GOOD]]
    remote = validate_spark(paths, spark=spark, partitions=4, plan=plan)
    assert located(remote) == want(BAD), remote.text()
    for max_frontier in (1, 3):
        local = check_paths(paths, max_frontier=max_frontier)
        remote = validate_spark(paths, spark=spark, partitions=4, plan=plan,
                                max_frontier=max_frontier)
        assert {v.identity() for v in remote.findings.values()} == {
            v.identity() for v in local.findings.values()}
