"""Shared fixtures for the trace tests (the Spark session is tests/conftest.py's)."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TRACES = ROOT / "traces"


@pytest.fixture(scope="session")
def sim_traces(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Traces of an in-process cluster run (tests/trace/sim.py), written once per session:
    real Raft logs (contract version 3), a truncation, a crash, a copy."""
    from .sim import run

    d = tmp_path_factory.mktemp("sim") / "traces"
    run(str(d))
    return d
