"""Benchmarks of the spec tools: the z3 proofs, the exhaustive explorer, the Hypothesis machine.

Each measurement is a function returning rows (name, value, unit, target); ``main`` runs
them all and prints one table with each value's ratio to its target (seconds: lower is
better, so the ratio is target / value; rates: value / target). More rows are added by
appending a function to ``MEASUREMENTS``.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from hypothesis import settings
from hypothesis.stateful import run_state_machine_as_test

from revivify.checker.explore import DEFAULT_BOUNDS, DEFAULT_SERVERS, explore
from revivify.checker.machine import MACHINE_BOUNDS, make_machine
from revivify.checker.prove import prove
from revivify.spec import default_spec

Row = tuple[str, float, str, float | None]  # name, value, unit, target (None: no target)


def proof_rows() -> list[Row]:
    """Every proof obligation of the real spec (3 servers), induction only (no BMC)."""
    t0 = time.perf_counter()
    report = prove(default_spec(3), bmc_depth=0)
    seconds = time.perf_counter() - t0
    if not report.ok:
        raise SystemExit("bench/spec.py: the proofs failed; run `revivify prove`")
    return [(f"proof seconds ({len(report.obligations)} obligations, all proved)",
             seconds, "s", 30.0)]


def explorer_rows() -> list[Row]:
    """The explorer at its default bounds: states/s on one core, wall and CPU."""
    cpu0 = time.process_time()
    r = explore(default_spec(DEFAULT_SERVERS), DEFAULT_BOUNDS)
    cpu = time.process_time() - cpu0
    b = DEFAULT_BOUNDS
    tag = (f"({DEFAULT_SERVERS} servers, term {b.max_term}, index {b.max_index}, "
           f"crashes {b.max_crashes}, wipes {b.max_wipes})")
    return [
        (f"explorer distinct states {tag}", r.distinct_states, "states", None),
        ("explorer transitions", r.transitions, "transitions", None),
        ("explorer depth", r.depth, "steps", None),
        ("explorer seconds (wall)", r.seconds, "s", 60.0),
        ("explorer states/s (wall)", r.states_per_second, "states/s", 50_000.0),
        ("explorer states/s (CPU time)", r.distinct_states / cpu, "states/s", 50_000.0),
    ]


def hypothesis_rows() -> list[Row]:
    """Steps per second of the Hypothesis machine over the real spec (deterministic)."""
    base = make_machine(default_spec(), MACHINE_BOUNDS)
    steps = [0]

    class Counting(base):  # type: ignore[misc, valid-type]
        def teardown(self) -> None:
            steps[0] += self.steps

    t0 = time.perf_counter()
    run_state_machine_as_test(Counting, settings=settings(
        max_examples=100, stateful_step_count=50, deadline=None, derandomize=True,
        database=None))
    seconds = time.perf_counter() - t0
    return [("hypothesis spec steps", steps[0], "steps", None),
            ("hypothesis spec steps/s", steps[0] / seconds, "steps/s", None)]


MEASUREMENTS: list[Callable[[], list[Row]]] = [proof_rows, explorer_rows, hypothesis_rows]


def main() -> int:
    rows: list[Row] = []
    for measure in MEASUREMENTS:
        rows.extend(measure())
    width = max(len(r[0]) for r in rows)
    print(f"{'measure':<{width}}  {'value':>14}  {'unit':<12}  {'target':>10}  ratio")
    for name, value, unit, target in rows:
        shown = f"{value:,.2f}" if isinstance(value, float) else f"{value:,}"
        if target is None:
            tail = f"{'':>10}  -"
        else:
            ratio = target / value if unit == "s" else value / target
            tail = f"{target:>10,.0f}  {ratio:.2f}"
        print(f"{name:<{width}}  {shown:>14}  {unit:<12}  {tail}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
