"""``revivify trace validate --engine spark`` in a real process, both plans: exit codes,
the human and JSON reports, and report.json + findings.parquet under --out."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

TRACES = Path(__file__).resolve().parents[2] / "traces"

pytestmark = pytest.mark.spark


def validate(*args: str, env: dict[str, str] | None = None,
             ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "revivify.impl.cli.main", "trace",
                           "validate", *args, "--engine", "spark", "--master", "local[2]"],
                          capture_output=True, text=True, timeout=600,
                          env=None if env is None else {**os.environ, **env})


def test_dataframe_plan_rejects_a_double_vote(tmp_path: Path) -> None:
    out = tmp_path / "report"
    r = validate(str(TRACES / "bad" / "vote-twice-after-restart"), "--plan", "dataframe",
                 "--out", str(out), "--json")
    assert r.returncode == 1, r.stderr[-2000:]
    assert "Traceback" not in r.stderr
    report = json.loads(r.stdout)
    assert report["engine"] == "spark-dataframe"
    assert "DoubleVote" in {f["kind"] for f in report["findings"]}
    saved = json.loads((out / "report.json").read_text())
    assert {f["kind"] for f in saved["findings"]} == {f["kind"] for f in report["findings"]}
    import pyarrow.parquet as pq

    kinds = set(pq.read_table(out / "findings.parquet").column("kind").to_pylist())
    assert "DoubleVote" in kinds


def test_files_plan_passes_the_walks(tmp_path: Path) -> None:
    # Progress every 0.2 s instead of 5 s, so this short job reports some.
    r = validate(str(TRACES / "spec-walks"), "--out", str(tmp_path / "report"),
                 env={"REVIVIFY_PROGRESS_SECONDS": "0.2"})
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert "Traceback" not in r.stderr
    assert "trace validate: stage" in r.stderr and "tasks done" in r.stderr
    assert (tmp_path / "report" / "findings.parquet").exists()
    saved = json.loads((tmp_path / "report" / "report.json").read_text())
    assert saved["engine"] == "spark" and saved["events"] > 0 and not saved["findings"]


def test_spark_submit_ships_the_package_to_executors(tmp_path: Path) -> None:
    """The documented cluster command, on local[2]: ``spark-submit spark_main.py PATH --out
    DIR``. The executors' Python here cannot import revivify (``-S``: no site processing,
    so no editable-install hook; only the third-party packages on PYTHONPATH), so the run
    passes only if the driver ships the package itself."""
    import sysconfig

    site = sysconfig.get_paths()["purelib"]
    bare = tmp_path / "python-without-revivify"
    bare.write_text(f'#!/bin/sh\nexec {sys.executable} -S "$@"\n')
    bare.chmod(0o755)
    probe = subprocess.run([str(bare), "-c", "import revivify.checker"], capture_output=True,
                           env={"PYTHONPATH": site, "PATH": "/usr/bin:/bin"}, text=True)
    assert probe.returncode != 0, "the bare interpreter must not see revivify"
    import revivify.checker.spark_main as spark_main

    submit = Path(sys.executable).parent / "spark-submit"
    env = {**__import__("os").environ, "PYTHONPATH": site, "PYSPARK_PYTHON": str(bare),
           "PYSPARK_DRIVER_PYTHON": sys.executable}
    r = subprocess.run([str(submit), "--master", "local[2]", spark_main.__file__,
                        str(TRACES / "bad" / "vote-twice-after-restart"), "--out",
                        str(tmp_path / "report"), "--json"],
                       capture_output=True, text=True, timeout=600, env=env)
    assert r.returncode == 1, r.stdout[-2000:] + r.stderr[-3000:]
    report = json.loads(r.stdout)
    assert "DoubleVote" in {f["kind"] for f in report["findings"]}
    assert (tmp_path / "report" / "findings.parquet").exists()
