"""Shared test configuration: the Hypothesis profiles.

* ``ci`` (the default): deterministic (``derandomize=True``, no example database), a bounded
  number of examples and steps, no deadline (the spec is slow under coverage and on a busy
  machine). ``make test`` runs it; the same commit always tries the same examples.
* ``soak``: many more examples and longer runs, random seeds; ``make soak`` selects it with
  ``HYPOTHESIS_PROFILE=soak``. A failure prints the seed and the shrunk steps.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci",
    derandomize=True,
    database=None,
    max_examples=60,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    print_blob=False,
)
settings.register_profile(
    "soak",
    max_examples=3000,
    stateful_step_count=120,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    print_blob=True,
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """One local Spark session for the whole run (the trace tests, the explorer's Spark
    engine): tests that take it are marked ``spark`` and share one xdist worker."""
    from revivify.checker.spark import spark_session

    session = spark_session("local[2]", shuffle_partitions=4)
    yield session
    session.stop()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under pytest-xdist (``make test``), whole modules go to one worker, Spark to one.

    ``--dist loadgroup`` sends the tests of one ``xdist_group`` to the same worker. Each module
    is a group, so a module-scoped fixture (a cluster of real processes) starts once, not once
    per worker; every Spark test is in one group, so the session-scoped Spark session
    (tests/trace/conftest.py) starts one JVM. Without xdist the marker is inert.
    """
    for item in items:
        spark = item.get_closest_marker("spark") is not None
        group = "spark" if spark else item.nodeid.split("::", 1)[0]
        item.add_marker(pytest.mark.xdist_group(group))
