"""Every seeded bug in the Raft core is caught (raft_mutants.py lists them).

For each mutant: the scripts named for it must stop with an InvariantViolation (not merely
print something else: the safety checker itself must object), and where a budget is given,
the Hypothesis state machine must find a violation within it. Shrinking is skipped (only
finding matters here), and the CI profile is derandomized, so each run tries the same
examples. The real core passes the same scripts (test_scenarios.py) and the same machine
(test_raft_machine.py), so every failure here is the mutant's.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis.stateful import run_state_machine_as_test
from raft_machine import RaftMachine
from raft_mutants import MUTANTS, Mutant
from raft_script import run_script

from revivify.impl.testing.raft import InvariantViolation

TESTDATA = Path(__file__).parent / "testdata"
ALL = sorted(MUTANTS.values(), key=lambda m: m.name)
WITH_MACHINE = [m for m in ALL if m.machine is not None]


def test_there_are_enough_mutants() -> None:
    assert len(MUTANTS) >= 4
    assert len(WITH_MACHINE) >= 4


@pytest.mark.parametrize("mutant", ALL, ids=lambda m: m.name)
def test_a_scenario_catches_it(mutant: Mutant, monkeypatch: pytest.MonkeyPatch) -> None:
    mutant.apply(monkeypatch)
    assert mutant.scenarios
    for name in mutant.scenarios:
        with pytest.raises(InvariantViolation):
            run_script(TESTDATA / f"{name}.txt")


def machine_finds(name: str) -> bool:
    """Run the state machine under mutant ``name`` within its budget; True if it found a
    violation. (Run in a fresh interpreter by the test below, see there.)"""
    mutant = MUTANTS[name]
    assert mutant.machine is not None
    examples, steps = mutant.machine
    budget = settings(derandomize=True, database=None, deadline=None, max_examples=examples,
                      stateful_step_count=steps, phases=[Phase.generate],
                      report_multiple_bugs=False,
                      suppress_health_check=list(HealthCheck))
    with pytest.MonkeyPatch.context() as mp:
        mutant.apply(mp)
        try:
            run_state_machine_as_test(RaftMachine, settings=budget)
        except InvariantViolation:
            return True
    return False


# Since flow control (impl/consensus/progress.py: peers probed one append at a time, a
# bounded pipeline) and plan-ordered crash points, the derandomized machine no longer finds
# these two within their budgets (nor within 600 examples for the first, 200 for the
# second). The scenarios still catch both (test_a_scenario_catches_it). Strict: the day
# the machine finds them again, this marker must go.
LOST_BY_THE_MACHINE = {"follower_commit_unbounded", "no_log_check"}


@pytest.mark.parametrize("mutant", [
    pytest.param(m, marks=pytest.mark.xfail(strict=True, reason="not found by the machine "
                                            "since flow control; see LOST_BY_THE_MACHINE"))
    if m.name in LOST_BY_THE_MACHINE else m for m in WITH_MACHINE], ids=lambda m: m.name)
def test_the_machine_catches_it(mutant: Mutant) -> None:
    # A fresh interpreter: the derandomized search must not depend on which Hypothesis
    # tests ran before it in this process (it did: the same budget found a bug when run
    # alone and missed it after other test files).
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import test_mutants as t; "
            "sys.exit(0 if t.machine_finds(sys.argv[2]) else 3)")
    out = subprocess.run([sys.executable, "-c", code, str(Path(__file__).parent),
                          mutant.name], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, (
        f"the machine did not find {mutant.name} within {mutant.machine} "
        f"(exit {out.returncode}):\n{out.stderr[-2000:]}")
