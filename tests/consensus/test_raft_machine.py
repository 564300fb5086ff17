"""Runs the Raft state machine (raft_machine.py) against the real core.

The CI run takes its own budget, above the ci profile's default (60 examples of 40 steps):
300 examples of up to 50 steps, about 10 s on one core (the machine's setup elects a
leader, so every example starts from a working cluster). ``make soak`` runs the slow
variant too: at least 1000 examples of 120 steps, with the soak profile's random seeds.
"""

from __future__ import annotations

import pytest
from hypothesis import settings
from hypothesis.stateful import run_state_machine_as_test
from raft_machine import RaftMachine, rows_checked


@settings(max_examples=300, stateful_step_count=50)
class RaftMachineCI(RaftMachine):
    pass


TestRaftMachine = RaftMachineCI.TestCase


@pytest.mark.slow
def test_raft_machine_soak() -> None:
    current = settings()
    run_state_machine_as_test(
        RaftMachine,
        settings=settings(current, max_examples=max(current.max_examples, 1000),
                          stateful_step_count=max(current.stateful_step_count, 120)))


def test_rows_declare_the_facts_they_emit() -> None:
    """Across realistic runs, each transition row emits only the facts it declares."""
    with rows_checked() as problems:
        run_state_machine_as_test(
            RaftMachine, settings=settings(max_examples=60, stateful_step_count=40))
    assert not problems, sorted(set(problems))


def test_the_machine_crashes_leaders_between_their_sends_and_their_fsync() -> None:
    """The machine reaches "the leader crashed after its appends left, before its own
    fsync" (rule crash_mid_append), and every safety property holds there and after (the
    checker runs after every step; a violation would raise)."""
    RaftMachine.mid_append_crashes = 0
    run_state_machine_as_test(RaftMachine, settings=settings(
        max_examples=40, stateful_step_count=30, deadline=None, database=None))
    assert RaftMachine.mid_append_crashes >= 5, RaftMachine.mid_append_crashes
