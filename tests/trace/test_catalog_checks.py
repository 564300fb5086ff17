"""The masters' ordering contract, checked: each rule of spec/catalog.py has a known-bad
trace that breaks it (traces/bad/catalog-*, written by bad_catalog.py) and is rejected at
its line, by the local and the Spark engine; each rule dropped (spec/mutants.py
CATALOG_MUTANTS) lets at least one of them through, so every rule is live; a master's
clean history across a failover passes. Issue 32's rules (ReadyHoldsCommittedRecords,
ReadyLeaderElected) have a case whose guilty master stops and one where it is killed,
each checking clean, exit 0, under its rule's mutant; their comparisons are also tested
on the facts and on the spec's guard directly."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from revivify.checker.catalog import CatalogGlobal
from revivify.checker.facts import CatalogRecord, MasterReady
from revivify.checker.local import check_paths
from revivify.checker.spark import validate_spark
from revivify.spec.catalog import DEFAULT, MasterState, Ready, ReplicaView
from revivify.spec.mutants import CATALOG_MUTANTS

from .bad_catalog import ready_after_election
from .conftest import TRACES

CASES = sorted(p for p in (TRACES / "bad").iterdir() if p.name.startswith("catalog-"))
LEGAL = TRACES / "legal" / "catalog-failover"


def expected(case: Path) -> dict[str, Any]:
    e: dict[str, Any] = json.loads((case / "expected.json").read_text())
    return e


def test_every_rule_has_a_bad_case() -> None:
    assert {expected(c)["kind"] for c in CASES} == set(DEFAULT.names())


@pytest.mark.parametrize("case", CASES, ids=lambda p: p.name)
def test_bad_case_is_rejected_by_its_rule_only(case: Path) -> None:
    """One fault, one finding: the case's rule, at its line, and nothing else."""
    report = check_paths([str(case)])
    e = expected(case)
    (v,) = report.findings.values()
    assert (v.kind, Path(v.file).name, v.line) == (e["kind"], e["at"]["file"],
                                                   e["at"]["line"]), report.text()
    assert report.exit_code() == 1


@pytest.fixture(scope="module")
def elected(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The legal shape of ReadyLeaderElected: the master's catalog replica elected and
    its no-op committed, then the gate opens in that term (bad_catalog.py)."""
    d = tmp_path_factory.mktemp("catalog-ready-after-election")
    ready_after_election().write(str(d))
    return d


def test_the_clean_history_passes() -> None:
    report = check_paths([str(LEGAL)])
    assert report.findings == {} and report.exit_code() == 0, report.text()


def test_a_ready_after_its_election_passes(elected: Path) -> None:
    report = check_paths([str(elected)])
    assert report.findings == {} and report.exit_code() == 0, report.text()


def test_each_new_rule_has_a_stopped_and_a_killed_case() -> None:
    """Issue 32's rules: each has a case whose guilty master stops and one where it is
    killed (its last file has no server_stop)."""
    for rule in ("ReadyHoldsCommittedRecords", "ReadyLeaderElected"):
        ends = set()
        for case in CASES:
            e = expected(case)
            if e["kind"] != rule:
                continue
            guilty = (case / e["at"]["file"]).read_text().splitlines()
            ends.add('"server_stop"' in guilty[-1])
        assert ends == {True, False}, rule


@pytest.mark.parametrize("name", sorted(CATALOG_MUTANTS))
def test_each_mutant_lets_a_bad_case_through(name: str, elected: Path) -> None:
    """With the rule dropped, the case that breaks it passes: the rule, not some other
    check, is what rejects it."""
    mutant = CATALOG_MUTANTS[name]
    rule = name.removeprefix("catalog_without_")
    mine = [c for c in CASES if expected(c)["kind"] == rule]
    assert mine
    for case in mine:
        report = check_paths([str(case)], catalog=mutant)
        assert rule not in report.kinds(), (case.name, report.text())
    # ...and the legal histories still pass with one rule dropped.
    for legal in (LEGAL, elected):  # each its own cluster (both elect in term 1)
        assert check_paths([str(legal)], catalog=mutant).findings == {}


@pytest.mark.parametrize("rule", ["ReadyHoldsCommittedRecords", "ReadyLeaderElected"])
def test_issue_32_cases_pass_whole_without_their_rule(rule: str) -> None:
    """The holes of issue 32, as they were: with the rule dropped (its mutant), each of its
    cases checks clean, exit 0 (no other rule or Raft check notices anything)."""
    mutant = CATALOG_MUTANTS[f"catalog_without_{rule}"]
    mine = [c for c in CASES if expected(c)["kind"] == rule]
    assert len(mine) >= 2
    for case in mine:
        report = check_paths([str(case)], catalog=mutant)
        assert report.findings == {} and report.exit_code() == 0, (case.name, report.text())


def test_cases_together() -> None:
    """Each case has its own masters, terms and indexes: checked together (as one
    cluster's history), each is found, and nothing else."""
    # ReadyHoldsCommittedRecords reads every ready as the whole catalog of ONE cluster at
    # its index: a case's ready would have to hold the records every earlier case
    # committed. Each case's catalog is its own, so together that rule is left out (each
    # of its cases is found alone, above).
    alone = "ReadyHoldsCommittedRecords"
    report = check_paths([str(c) for c in CASES], catalog=DEFAULT.without(alone))
    found = {(v.kind, Path(v.file).parent.name) for v in report.findings.values()}
    assert found == {(expected(c)["kind"], c.name) for c in CASES
                     if expected(c)["kind"] != alone}


@pytest.mark.spark
def test_spark_agrees(spark: Any) -> None:
    paths = [str(c) for c in CASES] + [str(LEGAL)]
    local = check_paths(paths)
    remote = validate_spark(paths, spark=spark, partitions=4)
    assert {v.identity() for v in remote.findings.values()} == {
        v.identity() for v in local.findings.values()}


def _ready(index: int, holds: str) -> MasterReady:
    return MasterReady(2, index, "b", "b.0001.jsonl", 3, 30, holds)


def _write(index: int, key: str, version: int, digest: str) -> CatalogRecord:
    return CatalogRecord(1, index, "a", "a.0001.jsonl", index, index, key, version, digest)


@pytest.mark.parametrize(("holds", "found"), [
    ("table/t@2#d2", None),  # the last write's version and contents
    ("table/t@3#d3", None),  # a later version: an untraced write (KUDU-495) may have made it
    ("table/t@0#xx", None),  # no version given: presence only
    ("", "lacks it"),
    ("table/t@1#d1", "holds version 1"),  # stale: the write at index 5 lost
    ("table/t@2#zz", "holds version 2 with other contents"),
])
def test_records_compared_by_version_and_digest(holds: str, found: str | None) -> None:
    """ReadyHoldsCommittedRecords on its facts: the ready at index 6 against the last
    write at or below it (version 2 at index 5; a version 9 write at index 7 is above)."""
    g = CatalogGlobal()
    for f in (_write(4, "table/t", 1, "d1"), _write(5, "table/t", 2, "d2"),
              _write(7, "table/t", 9, "d9"), _ready(6, holds)):
        if isinstance(f, CatalogRecord):
            g.record(f)
        else:
            g.ready(f)
    got = [v for v in g.violations() if v.kind == "ReadyHoldsCommittedRecords"]
    if found is None:
        assert got == []
    else:
        (v,) = got
        assert found in v.message and "version 2 at index 5" in v.message, v.message


@pytest.mark.parametrize(("replica", "found"), [
    (None, None),  # no catalog replica event in the node's trace: not constrained
    (ReplicaView(term=3, leader=True, this_incarnation=True), None),
    (ReplicaView(term=2, leader=True, this_incarnation=True), "never elected in term 3"),
    (ReplicaView(term=3, leader=False, this_incarnation=True), "not leader in term 3"),
    (ReplicaView(term=4, leader=False, this_incarnation=True), "never elected in term 3"),
    (ReplicaView(term=3, leader=True, this_incarnation=False), "restart forgets"),
])
def test_ready_leader_elected_reads_the_replica(replica: ReplicaView | None,
                                               found: str | None) -> None:
    """ReadyLeaderElected on the spec's own guard: ready in term 3."""
    _, broken = DEFAULT.ready(MasterState(), Ready(3, 0, (), (), replica))
    if found is None:
        assert broken is None
    else:
        assert broken is not None and broken[0] == "ReadyLeaderElected", broken
        assert found in broken[1], broken[1]
