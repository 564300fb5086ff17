"""Counterexamples: the shortest path the search recorded, replayed as a real run."""

from __future__ import annotations

from collections.abc import Callable

from revivify.spec.actions import Action
from revivify.spec.model import SystemState

from .engine import Explorer, budget_kind
from .moves import CRASH, FAULT, REQUEST, budget_mask, counter, counter_add
from .results import ExplorerError, TraceStep


def replay(ex: Explorer, chain: list[int],
           final: tuple[str, str] | None) -> tuple[TraceStep, ...]:
    """A real run through the recorded states' symmetry classes, via Spec.successors.

    ``final`` = ("step", property) asks for one more transition that violates it."""
    system = ex.spec.initial()
    cw = 0
    steps = [TraceStep(None, None, {}, system)]
    for target in chain[1:]:
        nxt = _find(ex, system, cw, _reaches(ex, target))
        if nxt is None:
            raise ExplorerError("could not replay the counterexample")
        system, cw, step = nxt
        steps.append(step)
    if final is not None and final[0] == "step":
        prop = final[1]
        nxt = _find(ex, system, cw, lambda a, i, n, c: prop in
                    ex.spec.step_violations(system, n, i))
        if nxt is None:
            raise ExplorerError(f"could not replay the {prop} violation")
        steps.append(nxt[2])
    elif final is not None and final[1] not in ex.spec.violations(system):
        raise ExplorerError(f"the replayed state does not violate {final[1]}")
    return tuple(steps)


def _reaches(ex: Explorer, target: int) -> Callable[[Action, int, SystemState, int], bool]:
    def want(a: Action, i: int, n: SystemState, cw: int) -> bool:
        return ex.key([ex.interner.sid(s) for s in n], cw) == target
    return want


def _find(
    ex: Explorer, system: SystemState, cw: int,
    want: Callable[[Action, int, SystemState, int], bool],
) -> tuple[SystemState, int, TraceStep] | None:
    mask = budget_mask(cw, ex.limits)
    for action, i, p, nxt in ex.spec.successors(system, ex.bounds):
        kind = budget_kind(action.name)
        if kind and not mask & (1 << (kind - 1)):
            continue
        ncw = cw + counter_add(kind)
        if want(action, i, nxt, ncw):
            return nxt, ncw, TraceStep(action.name, i, dict(p), nxt, counter(ncw, CRASH),
                                       counter(ncw, FAULT), counter(ncw, REQUEST))
    return None


__all__ = ["replay"]
