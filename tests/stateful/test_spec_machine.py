"""Hypothesis stateful testing of the spec itself (the machine: ``revivify.checker.machine``).

The machine runs random paths through the spec within deeper bounds than the explorer's and
checks every step property on each step and every invariant on each state; these tests run
it over the real spec and show that it catches broken variants.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import Phase, settings
from hypothesis.stateful import run_state_machine_as_test

from revivify.checker.machine import MACHINE_BOUNDS, make_machine
from revivify.spec import Spec, default_spec
from revivify.spec.actions import Bounds, replace_action
from revivify.spec.model import ServerState
from revivify.spec.mutants import MUTANTS

TestSpecMachine = make_machine(default_spec(), MACHINE_BOUNDS).TestCase


def adopt_remote_term_spec() -> Spec:
    """Broken: the cmeta merge adopts the remote's term even when it is lower."""
    return MUTANTS["merge_adopts_remote_term"].build(3)


def vote_twice_spec() -> Spec:
    """A broken spec: RequestVote ignores the vote already cast in the current term."""
    from revivify.spec import actions as A
    from revivify.spec.logic import all_, opid_ge

    def guard(s: ServerState, candidate: Any, t: Any, cand_last_term: Any,
              cand_last_index: Any, dest: Any = 0) -> Any:
        lt, li = A.last_logged(s)
        return all_(A.in_consensus(s), candidate >= 0, t >= s.term,
                    opid_ge(cand_last_term, cand_last_index, lt, li))

    actions = replace_action(default_spec().actions, "vote_granted", guard=guard,
                             enum=A.vote_requests)
    return Spec(actions=actions, name="vote_twice")


def test_machine_catches_a_double_vote() -> None:
    """The machine has teeth: a server that votes twice in one term is caught, and the
    failure names the property."""
    machine = make_machine(vote_twice_spec(),
                           Bounds(max_term=1, max_index=0, max_crashes=0, max_wipes=0))
    with pytest.raises(AssertionError, match=r"VoteOnce|VotesMatchCmeta|OneLeaderPerTerm"):
        run_state_machine_as_test(
            machine,
            settings=settings(settings.default, max_examples=100, stateful_step_count=12,
                              derandomize=True, database=None,
                              phases=[Phase.explicit, Phase.generate]),
        )


@pytest.mark.slow
def test_machine_catches_a_broken_merge() -> None:
    """A deeper bug (12 steps, see tests/spec/test_explore.py, which the explorer finds in
    seconds): a merge that lets the term go down. Random runs need the soak budget."""
    # No log entries: the bug needs none (the explorer finds it at max index 0), and the
    # Raft moves a log brings (appends, commits, config commits) would only dilute the
    # random runs.
    machine = make_machine(adopt_remote_term_spec(),
                           Bounds(max_term=2, max_index=0, max_crashes=0, max_wipes=0))
    with pytest.raises(AssertionError, match=r"TermMonotonic|VotesMatchCmeta"):
        run_state_machine_as_test(
            machine,
            settings=settings(settings.default, max_examples=5000, stateful_step_count=60,
                              derandomize=True, database=None),
        )


def test_machine_catches_damage_of_a_running_replica() -> None:
    """Disk faults share the wipe budget: with one allowed, the machine finds the mutant
    that lets damage strike a running replica (which then runs on a damaged WAL)."""
    machine = make_machine(MUTANTS["damage_while_up"].build(3),
                           Bounds(max_term=1, max_index=0, max_crashes=0, max_wipes=1))
    with pytest.raises(AssertionError, match=r"RunningIsIntact"):
        run_state_machine_as_test(
            machine,
            settings=settings(settings.default, max_examples=100, stateful_step_count=12,
                              derandomize=True, database=None,
                              phases=[Phase.explicit, Phase.generate]),
        )


def test_machine_catches_entries_above_the_term() -> None:
    """The claim NoEntryAboveCurrentTerm, by name: a follower that takes a later leader's
    entries without adopting its term is caught in random runs (an election, a leader's
    append, then the append on the server that did not vote)."""
    machine = make_machine(MUTANTS["append_without_adopting_term"].build(3),
                           Bounds(max_term=1, max_index=1, max_crashes=0, max_wipes=0,
                                  max_requests=0))
    with pytest.raises(AssertionError, match=r"invariant NoEntryAboveCurrentTerm violated"):
        run_state_machine_as_test(
            machine,
            settings=settings(settings.default, max_examples=200, stateful_step_count=20,
                              derandomize=True, database=None,
                              phases=[Phase.explicit, Phase.generate]),
        )
