"""A Hypothesis state machine over the spec: random runs, every invariant every step.

The explorer (``checker.explore``) covers every state within small bounds; this machine goes
deeper along random paths (more terms, longer runs, more crashes) and shrinks a failure to a
short readable sequence of steps. ``make_machine(spec, bounds)`` builds the machine for any
``Spec``, so the tests (``tests/stateful``), the mutant tests and ``bench/spec.py`` run the
real spec and broken variants alike.

Each step draws one of the enabled (action, server, parameters) moves of the current state,
labelled readably (``copy_merge_cmeta(server 1, remote_term=0, ...)``); crash moves and disk
faults (``FAULT_ACTIONS``: wipe and damage, one budget) are offered only while the run's
budgets last. After each step the step properties are checked
on the transition and (``@invariant``) every state invariant on the new state. On the final
(shrunk) run each step also notes the whole state, one server per line.
"""

from __future__ import annotations

from typing import Any, Final

from hypothesis import note
from hypothesis import strategies as st
from hypothesis.control import current_build_context
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from revivify.spec.actions import FAULT_ACTIONS, Bounds
from revivify.spec.model import SystemState
from revivify.spec.system import Spec

CRASH_ACTION: Final = "crash"

# Deeper than the explorer's defaults: more terms and log entries, crashes and two disk
# faults (a wipe, a damaged WAL or damaged blocks).
MACHINE_BOUNDS: Final = Bounds(max_term=5, max_index=3, max_crashes=3, max_wipes=2)


def move_label(name: str, server: int, params: dict[str, Any]) -> str:
    args = "".join(f", {k}={v}" for k, v in params.items())
    return f"{name}(server {server}{args})"


def describe_servers(system: SystemState) -> str:
    return "\n".join(f"  s{i}: {s.describe()}" for i, s in enumerate(system))


def _final() -> bool:
    try:
        return bool(current_build_context().is_final)
    except Exception:
        return False


# A move: the action's name, the server, its parameters and the system state it leads to.
SpecMove = tuple[str, int, dict[str, Any], SystemState]


def enabled_moves(spec: Spec, bounds: Bounds, state: SystemState, crashes: int, wipes: int,
                  server: int | None = None) -> list[SpecMove]:
    """The moves enabled in ``state`` (of ``server`` alone, if given) that change it, one per
    label, within the crash and fault budgets left (``crashes`` and ``wipes`` spent).
    Stutter steps such as a rejected StartTabletCopy cannot break an invariant and would
    only dilute the runs."""
    out: dict[str, SpecMove] = {}
    for action, i, p, nxt in spec.successors(state, bounds):
        if server is not None and i != server:
            continue
        if action.name == CRASH_ACTION and crashes >= bounds.max_crashes:
            continue
        if action.name in FAULT_ACTIONS and wipes >= bounds.max_wipes:
            continue
        if nxt == state:
            continue
        out.setdefault(move_label(action.name, i, p), (action.name, i, p, nxt))
    return list(out.values())


def _check_step(spec: Spec, pre: SystemState, nxt: SystemState, server: int, chosen: str,
                steps: int) -> None:
    """The step ``chosen`` of ``server`` from ``pre`` to ``nxt`` keeps every step property,
    and ``nxt`` every invariant (an AssertionError, which Hypothesis shrinks, if not)."""
    bad = spec.step_violations(pre, nxt, server)
    assert not bad, (f"step property {bad[0]} violated by {chosen}\n"
                     f"before:\n{describe_servers(pre)}\nafter:\n{describe_servers(nxt)}")
    bad = spec.violations(nxt)
    assert not bad, (f"invariant {bad[0]} violated by {chosen} after {steps} "
                     f"steps:\n{describe_servers(nxt)}")


def make_machine(spec: Spec, bounds: Bounds) -> type[RuleBasedStateMachine]:
    """A RuleBasedStateMachine that runs ``spec`` within ``bounds`` (crash/wipe budgets).

    Its instances count the steps they took (``steps``); ``.TestCase`` is a unittest case."""

    class SpecMachine(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.state: SystemState = spec.initial()
            self.crashes = 0
            self.wipes = 0
            self.steps = 0

        def moves(self, server: int | None = None) -> list[SpecMove]:
            return enabled_moves(spec, bounds, self.state, self.crashes, self.wipes, server)

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
            self.crashes += name == CRASH_ACTION
            self.wipes += name in FAULT_ACTIONS
            if _final():
                note(f"after step {self.steps}, {chosen}:\n{describe_servers(nxt)}")
            _check_step(spec, pre, nxt, i, chosen, self.steps)
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
                             f"{describe_servers(self.state)}")

    SpecMachine.__name__ = SpecMachine.__qualname__ = f"SpecMachine_{spec.name}"
    return SpecMachine


__all__ = ["MACHINE_BOUNDS", "SpecMove", "describe_servers", "enabled_moves", "make_machine",
           "move_label"]
