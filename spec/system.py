"""A spec: a transition table with its invariants, over a number of servers.

Every tool takes a ``Spec`` rather than reaching for the module-level table, so the same
explorer, prover, Hypothesis machine and trace checker run on the real spec and on each
deliberately broken variant (``mutants``) alike.
"""

from __future__ import annotations

from collections.abc import Iterator

import attrs

from revivify.spec.actions import ACTIONS, Action, Bounds, Params
from revivify.spec.invariants import (
    INVARIANTS,
    STEP_PROPERTIES,
    Invariant,
    StepProperty,
    check_state,
    check_step,
)
from revivify.spec.model import SystemState, initial_system


@attrs.frozen
class Spec:
    actions: tuple[Action, ...] = ACTIONS
    invariants: tuple[Invariant, ...] = INVARIANTS
    step_properties: tuple[StepProperty, ...] = STEP_PROPERTIES
    n_servers: int = 3
    name: str = "revivify"

    def action(self, name: str) -> Action:
        for a in self.actions:
            if a.name == name:
                return a
        raise KeyError(f"no action {name!r} in spec {self.name!r}")

    def initial(self) -> SystemState:
        return initial_system(self.n_servers)

    def successors(
        self, sys: SystemState, bounds: Bounds
    ) -> Iterator[tuple[Action, int, Params, SystemState]]:
        """Every enabled (action, server, parameters) and the state it leads to."""
        for action in self.actions:
            for i in range(len(sys)):
                for p in action.enum(sys, i, bounds):
                    if action.enabled(sys, i, p):
                        yield action, i, p, action.apply(sys, i, p)

    def violations(self, sys: SystemState) -> list[str]:
        return check_state(self.invariants, sys)

    def step_violations(self, pre: SystemState, post: SystemState, i: int) -> list[str]:
        return check_step(self.step_properties, pre[i], post[i])


def default_spec(n_servers: int = 3) -> Spec:
    return Spec(n_servers=n_servers)
