"""Shared test configuration: the Hypothesis profiles.

* ``ci`` (the default): deterministic (``derandomize=True``, no example database), a bounded
  number of examples and steps, no deadline (the spec is slow under coverage and on a busy
  machine). ``make test`` runs it; the same commit always tries the same examples.
* ``soak``: many more examples and longer runs, random seeds; ``make soak`` selects it with
  ``HYPOTHESIS_PROFILE=soak``. A failure prints the seed and the shrunk steps.
"""

from __future__ import annotations

import os

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
