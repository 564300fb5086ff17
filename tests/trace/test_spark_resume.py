"""``trace validate --engine spark --checkpoint DIR``: a Spark run (local[2]) resumed over
batches of new lines gives the verdict of one check of everything."""

from __future__ import annotations

import itertools
import os
import random
from pathlib import Path
from typing import Any

import pytest

from revivify.checker.local import check_paths
from revivify.checker.spark_resume import validate_spark_resumed

from .conftest import TRACES
from .test_follow import _pieces, same

pytestmark = pytest.mark.spark


def test_three_resumed_spark_runs_give_the_whole(spark: Any, sim_traces: Path,
                                                 tmp_path: Path) -> None:
    """The in-process cluster's run and two corpus cases (a global finding; masters)
    written in three batches with torn lines at the cuts: each Spark run resumes from the
    checkpoint and its verdict is the batch check's of the files as they are."""
    rnd = random.Random(3)
    out = tmp_path / "traces"
    out.mkdir()
    ops: list[tuple[int, str, bytes]] = []
    for i, case in enumerate((str(sim_traces), str(TRACES / "bad" / "crashed-two-leaders"),
                              str(TRACES / "legal" / "catalog-failover"))):
        sub = out / str(i)
        sub.mkdir()
        writers = _pieces(case, sub, rnd)
        while any(writers):
            ops.append(rnd.choice([w for w in writers if w]).pop(0))
    ckpt = str(tmp_path / "ckpt")
    for lo, hi in itertools.pairwise([0, len(ops) // 3, 2 * len(ops) // 3 + 1, len(ops)]):
        for _, dest, chunk in ops[lo:hi]:
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            with open(dest, "ab") as fh:
                fh.write(chunk)
        got = validate_spark_resumed([str(out)], ckpt, spark, partitions=2)
        same(check_paths([str(out)]), got)
    assert got.exit_code() == 1 and "TwoLeaders" in got.kinds()
