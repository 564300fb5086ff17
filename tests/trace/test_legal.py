"""What real Kudu legally does is accepted: each case of ``traces/legal/`` (written by
tests/trace/legal_v3.py from runs of the spec; the crashed shape's by bad_crashed.py) is
clean on both engines, and shows the behaviour it is named after."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from revivify.checker.local import check_paths
from revivify.checker.spark import validate_spark

from .conftest import TRACES

LEGAL = sorted(p for p in (TRACES / "legal").iterdir() if p.is_dir())


def test_cases_are_written_by_their_generator(tmp_path: Path) -> None:
    from .bad_catalog import write as write_catalog
    from .bad_crashed import LEGAL as CRASHED
    from .bad_crashed import write as write_crashed
    from .legal_v3 import CASES, write

    assert set(write(str(tmp_path))) == set(CASES) == {
        p.name for p in LEGAL} - {"catalog-failover", *CRASHED}
    write_catalog(str(tmp_path / "catalog"))
    (tmp_path / "catalog" / "legal" / "catalog-failover").rename(tmp_path / "catalog-failover")
    write_crashed(str(tmp_path / "crashed"))
    for name in CRASHED:
        (tmp_path / "crashed" / "legal" / name).rename(tmp_path / name)
    for case in LEGAL:
        for f in case.iterdir():
            assert f.read_bytes() == (tmp_path / case.name / f.name).read_bytes(), f


@pytest.mark.parametrize("case", LEGAL, ids=lambda p: p.name)
def test_legal_case_is_clean(case: Path) -> None:
    report = check_paths([str(case)])
    assert report.findings == {}, report.text()
    assert report.exit_code() == 0


@pytest.mark.parametrize("case", LEGAL, ids=lambda p: p.name)
def test_case_shows_its_behaviour(case: Path) -> None:
    """The events the case is about occur, in order, on its server's trace."""
    expected = json.loads((case / "expected.json").read_text())
    events = [json.loads(line)["event"]
              for f in sorted(case.glob(f"{expected['node']}.*.jsonl"))
              for line in f.read_text().splitlines()]
    it = iter(events)
    assert all(any(e == want for e in it) for want in expected["shows"]), events


@pytest.mark.spark
def test_legal_cases_clean_on_spark(spark: Any) -> None:
    paths = [str(p) for p in LEGAL]
    report = validate_spark(paths, spark=spark, partitions=4)
    local = check_paths(paths)
    assert report.findings == {} and report.exit_code() == 0, report.text()
    assert report.coverage == local.coverage and report.events == local.events
