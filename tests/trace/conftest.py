"""Shared fixtures for the trace tests: one Spark session for the whole run."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
TRACES = ROOT / "traces"


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    from revivify.checker.spark import spark_session

    session = spark_session("local[2]", shuffle_partitions=4)
    yield session
    session.stop()


@pytest.fixture(scope="session")
def sim_traces(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Traces of an in-process cluster run (tests/trace/sim.py), written once per session:
    real Raft logs (contract version 3), a truncation, a crash, a copy."""
    from .sim import run

    d = tmp_path_factory.mktemp("sim") / "traces"
    run(str(d))
    return d
