"""The mutant machinery, proven in CI (the full run is ``make mutants``).

A few seeded bugs of impl_mutant_list.py, each applied in this process and undone after,
each caught by one in-process scenario of impl_mutant_sim.py with the finding it must
produce; the same scenarios without a bug find nothing. And one mutant through the path
real processes take (sitecustomize.py on PYTHONPATH, the mutant named in the environment).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from impl_mutant_list import BY_NAME, ENV, MUTANTS, Patcher
from impl_mutant_sim import (
    SCENARIOS,
    copy_after_leader_change,
    crash_in_delete,
    late_master_create,
    partitioned_leader,
    run_scenario,
    stale_copy_request,
    tombstone_unknown_leader,
)

HERE = Path(__file__).resolve().parent


def test_mutant_names_are_unique_and_at_least_fifteen() -> None:
    assert len(BY_NAME) == len(MUTANTS) >= 15


# (mutant, the scenario that catches it, the finding it must produce): one per part of the
# server (copy, Raft shell, deletion, StartTabletCopy, a master's late create, a tombstone's
# answers); none of them makes its scenario hang.
CAUGHT = [
    ("merge_adopts_remote_vote", copy_after_leader_change, "StateMismatch"),
    ("write_acked_before_commit", partitioned_leader, "LostWrite"),
    ("deleted_superblock_not_fsynced", crash_in_delete("delete_move_wal"), "StateMismatch"),
    ("stc_ignores_caller_term", stale_copy_request, "GuardFailed"),
    ("late_master_create_obeyed", late_master_create, "TermRegression"),
    ("tombstone_answers_lost", tombstone_unknown_leader, "NotHealed"),
]


@pytest.mark.parametrize("scenario", [c[1] for c in CAUGHT], ids=lambda s: s.__name__)
def test_no_mutant_no_finding(scenario) -> None:  # type: ignore[no-untyped-def]
    """Without a bug the scenarios below find nothing (``make mutants`` checks them all)."""
    assert run_scenario(scenario).findings == ()


def test_every_scenario_is_listed() -> None:
    assert len({s.__name__ for s in SCENARIOS}) == len(SCENARIOS) >= 10


@pytest.mark.parametrize(("mutant", "scenario", "finding"), CAUGHT,
                         ids=lambda v: v if isinstance(v, str) else "")
def test_a_seeded_bug_is_caught(mutant, scenario, finding) -> None:  # type: ignore[no-untyped-def]
    patcher = Patcher()
    BY_NAME[mutant].apply(patcher)
    try:
        outcome = run_scenario(scenario)
    finally:
        patcher.undo()
    assert finding in outcome.findings, f"{mutant} in {scenario.__name__}: {outcome}"


def test_sitecustomize_applies_the_named_mutant() -> None:
    """The real-process path: a fresh interpreter with this directory on PYTHONPATH and a
    mutant named in the environment runs with that bug (the product has no switch)."""
    env = dict(os.environ, PYTHONPATH=str(HERE), **{ENV: "wal_append_not_fsynced"})
    code = ("import json; from revivify.impl.storage import wal; "
            "print(json.dumps(wal.Log._write_and_sync.__qualname__))")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, check=True).stdout
    assert "wal_append_not_fsynced" in json.loads(out)
