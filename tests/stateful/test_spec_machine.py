"""Hypothesis stateful testing of the spec itself: random runs, every invariant every step.

The explorer (``checker.explore``) covers every state within small bounds; this machine goes
deeper along random paths (more terms, longer runs, more crashes) and shrinks a failure to a
short readable sequence of steps. ``make_machine(spec, bounds)`` builds the machine for any
``Spec``, so the mutant tests reuse it to show that a broken spec is caught.

Each step draws one of the enabled (action, server, parameters) moves of the current state,
labelled readably (``copy_merge_cmeta(server 1, remote_term=0, ...)``); crash and wipe moves
are offered only while the run's budgets last. After each step the step properties are checked
on the transition and (``@invariant``) every state invariant on the new state. On the final
(shrunk) run each step also notes the whole state, one server per line.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import Phase, note, settings
from hypothesis import strategies as st
from hypothesis.control import current_build_context
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test
from revivify.spec import Spec, default_spec
from revivify.spec.actions import Bounds, replace_action
from revivify.spec.merge import MergedCmeta
from revivify.spec.model import ServerState, SystemState

CRASH = "crash"
WIPE = "wipe"


def move_label(name: str, server: int, params: dict[str, Any]) -> str:
    args = "".join(f", {k}={v}" for k, v in params.items())
    return f"{name}(server {server}{args})"


def describe_system(system: SystemState) -> str:
    return "\n".join(f"  s{i}: {s.describe()}" for i, s in enumerate(system))


def _final() -> bool:
    try:
        return bool(current_build_context().is_final)
    except Exception:
        return False


def make_machine(spec: Spec, bounds: Bounds) -> type[RuleBasedStateMachine]:
    """A RuleBasedStateMachine that runs ``spec`` within ``bounds`` (crash/wipe budgets)."""

    class SpecMachine(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.state: SystemState = spec.initial()
            self.crashes = 0
            self.wipes = 0
            self.steps = 0

        def moves(self, server: int | None = None
                  ) -> list[tuple[str, int, dict[str, Any], SystemState]]:
            """Enabled moves that change the state (stutter steps such as a rejected
            StartTabletCopy cannot break an invariant and would only dilute the runs)."""
            out: dict[str, tuple[str, int, dict[str, Any], SystemState]] = {}
            for action, i, p, nxt in spec.successors(self.state, bounds):
                if server is not None and i != server:
                    continue
                if action.name == CRASH and self.crashes >= bounds.max_crashes:
                    continue
                if action.name == WIPE and self.wipes >= bounds.max_wipes:
                    continue
                if nxt == self.state:
                    continue
                label = move_label(action.name, i, p)
                out.setdefault(label, (action.name, i, p, nxt))
            return [out[k] for k in out]

        def take(self, data: st.DataObject, server: int | None) -> bool:
            moves = self.moves(server)
            if not moves:
                return False  # nothing enabled here (a deadlock is not a violation)
            labels = [move_label(n, i, p) for n, i, p, _ in moves]
            chosen = data.draw(st.sampled_from(labels), label="move")
            name, i, _p, nxt = moves[labels.index(chosen)]
            pre = self.state
            self.state = nxt
            self.steps += 1
            self.crashes += name == CRASH
            self.wipes += name == WIPE
            if _final():
                note(f"after step {self.steps}, {chosen}:\n{describe_system(nxt)}")
            bad = spec.step_violations(pre, nxt, i)
            assert not bad, (f"step property {bad[0]} violated by {chosen}\n"
                             f"before:\n{describe_system(pre)}\nafter:\n{describe_system(nxt)}")
            bad = spec.violations(nxt)
            assert not bad, (f"invariant {bad[0]} violated by {chosen} after {self.steps} "
                             f"steps:\n{describe_system(nxt)}")
            return True

        @rule(data=st.data())
        def step(self, data: st.DataObject) -> None:
            """Any one enabled move of any server."""
            self.take(data, None)

        @rule(data=st.data(), server=st.integers(0, spec.n_servers - 1),
              count=st.integers(1, 12))
        def focus(self, data: st.DataObject, server: int, count: int) -> None:
            """Up to ``count`` moves of one server in a row (a deletion or a copy runs
            through its steps far more often than under uniform interleaving)."""
            for _ in range(count):
                if not self.take(data, server):
                    break

        @invariant()
        def invariants_hold(self) -> None:
            bad = spec.violations(self.state)
            assert not bad, (f"invariant {bad[0]} violated after {self.steps} steps:\n"
                             f"{describe_system(self.state)}")

    SpecMachine.__name__ = SpecMachine.__qualname__ = f"SpecMachine_{spec.name}"
    return SpecMachine


# Deeper than the explorer's defaults: more terms and log entries, crashes and a wipe.
MACHINE_BOUNDS = Bounds(max_term=5, max_index=3, max_crashes=3, max_wipes=1)

TestSpecMachine = make_machine(default_spec(), MACHINE_BOUNDS).TestCase


def adopt_remote_term_spec() -> Spec:
    """A broken spec: the cmeta merge adopts the remote's term even when it is lower."""

    def bad_merge(s: ServerState, remote_term: Any, remote_config_index: Any) -> ServerState:
        import attrs

        m = MergedCmeta(term=remote_term, voted_for=s.voted_for,
                        config_index=remote_config_index)
        return attrs.evolve(s, cmeta=True, term=m.term, voted_for=m.voted_for,
                            config_index=m.config_index, step=2)

    actions = replace_action(default_spec().actions, "copy_merge_cmeta", effect=bad_merge)
    return Spec(actions=actions, name="adopt_remote_term")


def vote_twice_spec() -> Spec:
    """A broken spec: RequestVote ignores the vote already cast in the current term."""
    from revivify.spec import actions as A
    from revivify.spec.logic import all_, opid_ge

    def guard(s: ServerState, candidate: Any, t: Any, cand_last_term: Any,
              cand_last_index: Any) -> Any:
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
    machine = make_machine(adopt_remote_term_spec(),
                           Bounds(max_term=2, max_index=1, max_crashes=0, max_wipes=0))
    with pytest.raises(AssertionError, match=r"TermMonotonic|VotesMatchCmeta"):
        run_state_machine_as_test(
            machine,
            settings=settings(settings.default, max_examples=5000, stateful_step_count=60,
                              derandomize=True, database=None),
        )
