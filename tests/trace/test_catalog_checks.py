"""The masters' ordering contract, checked: each rule of spec/catalog.py has a known-bad
trace that breaks it (traces/bad/catalog-*, written by bad_catalog.py) and is rejected at
its line, by the local and the Spark engine; each rule dropped (spec/mutants.py
CATALOG_MUTANTS) lets at least one of them through, so every rule is live; a master's
clean history across a failover passes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from revivify.checker.local import check_paths
from revivify.checker.spark import validate_spark
from revivify.spec.catalog import DEFAULT
from revivify.spec.mutants import CATALOG_MUTANTS

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


def test_the_clean_history_passes() -> None:
    report = check_paths([str(LEGAL)])
    assert report.findings == {} and report.exit_code() == 0, report.text()


@pytest.mark.parametrize("name", sorted(CATALOG_MUTANTS))
def test_each_mutant_lets_a_bad_case_through(name: str) -> None:
    """With the rule dropped, the case that breaks it passes: the rule, not some other
    check, is what rejects it."""
    mutant = CATALOG_MUTANTS[name]
    rule = name.removeprefix("catalog_without_")
    mine = [c for c in CASES if expected(c)["kind"] == rule]
    assert mine
    for case in mine:
        report = check_paths([str(case)], catalog=mutant)
        assert rule not in report.kinds(), (case.name, report.text())
    # ...and the legal history still passes with every rule in place.
    assert check_paths([str(LEGAL)], catalog=mutant).findings == {}


def test_cases_together() -> None:
    """Each case has its own masters, terms and indexes: checked together (as one
    cluster's history), each is found, and nothing else."""
    report = check_paths([str(c) for c in CASES])
    found = {(v.kind, Path(v.file).parent.name) for v in report.findings.values()}
    assert found == {(expected(c)["kind"], c.name) for c in CASES}


@pytest.mark.spark
def test_spark_agrees(spark: Any) -> None:
    paths = [str(c) for c in CASES] + [str(LEGAL)]
    local = check_paths(paths)
    remote = validate_spark(paths, spark=spark, partitions=4)
    assert {v.identity() for v in remote.findings.values()} == {
        v.identity() for v in local.findings.values()}
