"""Both engines, same findings: on the corpus and on generated traces."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from revivify.checker.local import check_paths
from revivify.checker.spark import validate_spark
from revivify.checker.walks import random_walk

from .conftest import TRACES

pytestmark = pytest.mark.spark


def _same(paths: list[str], spark: Any, global_in_spark: bool = False) -> None:
    local = check_paths(paths)
    remote = validate_spark(paths, spark=spark, partitions=4,
                            global_in_spark=global_in_spark)
    assert local.identities() == remote.identities()
    assert local.events == remote.events
    assert local.coverage == remote.coverage
    assert local.frontiers == remote.frontiers
    assert local.exit_code() == remote.exit_code()


def test_corpus_walks(spark: Any) -> None:
    _same([str(TRACES / "spec-walks")], spark)


def test_corpus_bad_together(spark: Any) -> None:
    # One job over every bad case at once (a job per case would cost seconds each): the
    # cases share UUIDs and tablet ids, so cross-case findings appear too; both engines
    # must still agree on every one.
    _same([str(TRACES / "bad")], spark)


def test_corpus_bad_global_checks_in_spark(spark: Any) -> None:
    # The same, with the global checks as Spark aggregations over the facts (leaders by
    # (tablet, term), formats by node, commit runs self-joined per tablet).
    _same([str(TRACES / "bad")], spark, global_in_spark=True)


def test_generated_with_mutations(spark: Any, tmp_path: Path) -> None:
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
    _same([str(tmp_path)], spark)
