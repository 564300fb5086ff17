"""Both engines, same findings: on the corpus and on generated traces."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from revivify.checker.local import check_paths
from revivify.checker.spark import PLANS, validate_spark
from revivify.checker.walks import random_walk

from .conftest import TRACES
from .test_corpus import AT, rejected_at

pytestmark = pytest.mark.spark


def _same(paths: list[str], spark: Any, global_in_spark: bool | None = False,
          plan: str = "files") -> None:
    local = check_paths(paths)
    remote = validate_spark(paths, spark=spark, partitions=4,
                            global_in_spark=global_in_spark, plan=plan)
    assert local.identities() == remote.identities()
    assert local.events == remote.events
    assert local.coverage == remote.coverage
    assert local.frontiers == remote.frontiers
    assert local.exit_code() == remote.exit_code()


@pytest.mark.parametrize("plan", PLANS)
def test_corpus_walks(spark: Any, plan: str) -> None:
    _same([str(TRACES / "spec-walks")], spark, plan=plan, global_in_spark=None)


@pytest.mark.parametrize("plan", PLANS)
def test_corpus_bad_together(spark: Any, plan: str) -> None:
    # One job over every bad case at once (a job per case would cost seconds each): the
    # cases share UUIDs and tablet ids, so cross-case findings appear too; both engines
    # must still agree on every one. The dataframe plan runs the global checks in Spark.
    _same([str(TRACES / "bad")], spark, plan=plan, global_in_spark=None)


@pytest.mark.parametrize(("plan", "global_in_spark"),
                         [("files", False), ("files", True), ("dataframe", True)])
def test_global_cases_rejected_at_their_lines(spark: Any, plan: str,
                                              global_in_spark: bool) -> None:
    """The majority and causality cases, in one job: each rejected at its file:line. Not
    the catalog-* cases nor any case whose finding is ReadyHoldsCommittedRecords (such as
    min-rebuild-loses-rows): together they are no one cluster's catalog (every ready would
    have to hold the records the other cases committed), and
    a finding's witnesses fold the other cases' findings into it; test_catalog_checks.py
    checks each at its line alone, and all of them together with both engines agreeing."""
    cases = [p for p in AT if not p.name.startswith("catalog-")
             and json.loads((p / "expected.json").read_text())["kind"]
             != "ReadyHoldsCommittedRecords"]
    paths = [str(p) for p in cases]
    report = validate_spark(paths, spark=spark, partitions=4, plan=plan,
                            global_in_spark=global_in_spark)
    assert all(rejected_at(report, p) for p in cases), report.text()
    assert report.identities() == check_paths(paths).identities()


def test_dataframe_plan_driver_merge(spark: Any) -> None:
    # The dataframe plan with the global checks merged on the driver instead.
    _same([str(TRACES / "bad")], spark, plan="dataframe", global_in_spark=False)


def test_dataframe_plan_file_names_and_gzip(spark: Any, tmp_path: Path) -> None:
    """Spark names files by URL-encoded URI; the plan must map every name back to its file
    (spaces, '+', '%', '#', '?', non-ASCII), read .gz, and keep line numbers, blank lines,
    a torn last line and a bad last line that does end in a newline apart."""
    import gzip
    import shutil

    walk = random_walk(7, steps=60)
    src = tmp_path / "src"
    walk.write(str(src))
    names = ["a b", "a+b=c@d,e;f", "p%41q#r?s", "ü-ñ"]
    out = tmp_path / "odd dir"
    files = sorted(src.rglob("*.jsonl"))
    assert len(files) >= 3
    for i, f in enumerate(files):
        d = out / names[i % len(names)]
        d.mkdir(parents=True, exist_ok=True)
        if i == 0:
            with gzip.open(d / (f.name + ".gz"), "wb") as gz:
                gz.write(f.read_bytes())
        else:
            shutil.copy(f, d / f.name)
    victims = sorted((out / names[1]).glob("*.jsonl"))
    lines = victims[0].read_bytes().splitlines(keepends=True)
    victims[0].write_bytes(b"".join(lines[:2]) + b"\n" + b"".join(lines[2:]) + b'{"v":2,"no')
    if len(victims) > 1:
        victims[1].write_bytes(victims[1].read_bytes() + b"garbage\n")
    local = check_paths([str(out)])
    kinds = {f.kind for f in local.findings.values()}
    assert "TornLine" in kinds
    for plan in PLANS:
        _same([str(out)], spark, plan=plan, global_in_spark=None)


def test_corpus_bad_global_checks_in_spark(spark: Any) -> None:
    # The same, with the global checks as Spark aggregations over the facts (leaders by
    # (tablet, term), formats by node, commit runs self-joined per tablet).
    _same([str(TRACES / "bad")], spark, global_in_spark=True)


@pytest.mark.parametrize("plan", PLANS)
def test_generated_with_mutations(spark: Any, tmp_path: Path, plan: str) -> None:
    import json
    import random

    rng = random.Random(5)
    for seed in range(100, 106):
        random_walk(seed, steps=120, drop_before_crash=0.5).write(str(tmp_path / f"w{seed}"))
    # Mutate a few lines: state fields and args, so both engines must find the same things.
    files = sorted(tmp_path.rglob("*.jsonl"))
    for f in rng.sample(files, 6):
        lines = f.read_text().splitlines()
        i = rng.randrange(len(lines))
        d = json.loads(lines[i])
        if d["state"] and d["state"]["cmeta"]:
            d["state"]["cmeta"]["term"] += 1
        else:
            d["seq"] += 2
        lines[i] = json.dumps(d)
        f.write_text("\n".join(lines) + "\n")
    _same([str(tmp_path)], spark, plan=plan, global_in_spark=None)


@pytest.mark.parametrize(("plan", "global_in_spark"), [("files", True), ("dataframe", None)])
def test_cluster_run_mutated(spark: Any, sim_traces: Path, tmp_path: Path, plan: str,
                             global_in_spark: bool | None) -> None:
    """A real run (contract version 3: rebuilt logs, committed runs, a truncation, a copy)
    with its first term's election taken out (its appends then belong to a term nobody
    won): the same findings from both engines, the commit runs aggregated in Spark or on
    the driver."""
    import json

    files = {f: [json.loads(x) for x in f.read_text().splitlines()]
             for f in sorted(sim_traces.glob("*.jsonl"))}
    first = min(x["args"]["t"] for ls in files.values() for x in ls
                if x["event"] == "become_leader")
    for f, lines in files.items():
        kept = [x for x in lines if not (x["event"] == "become_leader"
                                         and x["args"]["t"] == first)]
        (tmp_path / f.name).write_text("".join(json.dumps(x | {"seq": n}) + "\n"
                                               for n, x in enumerate(kept)))
    assert "AppendOfUnelectedTerm" in check_paths([str(tmp_path)]).kinds()
    _same([str(tmp_path)], spark, plan=plan, global_in_spark=global_in_spark)
