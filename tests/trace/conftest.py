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
