"""What the explorer reports: the result of a search, its progress, a counterexample."""

from __future__ import annotations

from typing import Any

import attrs

from revivify.spec.actions import Params
from revivify.spec.model import SystemState


@attrs.frozen
class TraceStep:
    """One step of a counterexample: the action that led here (None for the initial state),
    the server it ran on, its parameters, and the whole system state after it."""

    action: str | None
    server: int | None
    params: Params
    state: SystemState
    crashes: int = 0
    wipes: int = 0
    requests: int = 0

    def headline(self) -> str:
        if self.action is None:
            return "initial state"
        args = ", ".join(f"{k}={v}" for k, v in self.params.items())
        return f"{self.action}(server {self.server}{', ' if args else ''}{args})"


@attrs.frozen
class ExploreViolation:
    """An invariant (or step property) that failed, with a shortest path to the failure."""

    invariant: str
    kind: str  # "invariant" (a state invariant) or "step" (a step property)
    trace: tuple[TraceStep, ...]
    doc: str = ""

    def describe(self) -> str:
        """The counterexample as a readable sequence of states."""
        what = "step property" if self.kind == "step" else "invariant"
        lines = [f"{what} {self.invariant} violated after {len(self.trace) - 1} steps:"]
        if self.doc:
            lines.append("  " + " ".join(self.doc.split()))
        for n, step in enumerate(self.trace):
            lines.append(f"  [{n}] {step.headline()}")
            for i, s in enumerate(step.state):
                mark = "*" if step.server == i else " "
                lines.append(f"      {mark}s{i}: {s.describe()}")
        return "\n".join(lines)


@attrs.frozen
class ExploreProgress:
    """How far a search is: a line every few seconds (``level`` None) or the end of a level
    (``level``: its depth; ``frontier``: the states first found at that depth)."""

    distinct_states: int
    transitions: int
    depth: int
    frontier: int
    seconds: float
    level: int | None = None


@attrs.frozen
class ExploreResult:
    distinct_states: int
    transitions: int
    depth: int
    seconds: float
    coverage: dict[str, int]
    dead_actions: tuple[str, ...]
    violation: ExploreViolation | None
    complete: bool  # False when max_states stopped the search early
    server_states: int  # distinct single-server states interned
    symmetry: bool
    # levels[d]: the states first found at depth d (levels[0] == 1, the initial state); on a
    # complete search they sum to distinct_states
    levels: tuple[int, ...] = ()
    engine: str = "local"  # "local" (one process or ``workers`` processes) or "spark"
    workers: int = 1
    # CPU time of this process and its workers (Spark: of the driver only)
    cpu_seconds: float = 0.0

    @property
    def states_per_second(self) -> float:
        return self.distinct_states / self.seconds if self.seconds > 0 else 0.0

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "distinct_states": self.distinct_states,
            "transitions": self.transitions,
            "depth": self.depth,
            "seconds": round(self.seconds, 3),
            "states_per_second": round(self.states_per_second, 1),
            "complete": self.complete,
            "symmetry": self.symmetry,
            "server_states": self.server_states,
            "coverage": self.coverage,
            "dead_actions": list(self.dead_actions),
            "violation": None,
            "levels": list(self.levels),
            "engine": self.engine,
            "workers": self.workers,
            "cpu_seconds": round(self.cpu_seconds, 3),
        }
        if self.violation is not None:
            out["violation"] = {
                "invariant": self.violation.invariant,
                "kind": self.violation.kind,
                "trace": [
                    {"action": s.action, "server": s.server, "params": s.params,
                     "state": [x.describe() for x in s.state]}
                    for s in self.violation.trace
                ],
            }
        return out


class ExplorerError(Exception):
    """The explorer's own consistency check failed (a cached answer disagreed with the
    generic spec, or a counterexample could not be replayed)."""


__all__ = ["ExploreProgress", "ExploreResult", "ExploreViolation", "ExplorerError", "TraceStep"]
