"""Benchmarks of the spec tools: the exhaustive explorer and the Hypothesis machine.

Each measurement is a function returning rows (name, value, unit, target); ``main`` runs
them all and prints one table with each value's ratio to its target. More rows (the proof
times) are added by appending a function to ``MEASUREMENTS``.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path

from revivify.checker.explore import DEFAULT_BOUNDS, explore
from revivify.spec import default_spec
from revivify.spec.actions import Bounds

Row = tuple[str, float, str, float | None]  # name, value, unit, target (None: no target)


def explorer_rows() -> list[Row]:
    """The explorer at its default bounds (3 servers): states/s on one core, wall and CPU."""
    cpu0 = time.process_time()
    r = explore(default_spec(), DEFAULT_BOUNDS)
    cpu = time.process_time() - cpu0
    b = DEFAULT_BOUNDS
    tag = f"(3 servers, term {b.max_term}, index {b.max_index}, crashes {b.max_crashes}, " \
          f"wipes {b.max_wipes})"
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
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "stateful"))
    from hypothesis import settings
    from hypothesis.stateful import run_state_machine_as_test
    from test_spec_machine import make_machine  # type: ignore[import-not-found]

    base = make_machine(default_spec(), Bounds(max_term=5, max_index=3, max_crashes=3,
                                               max_wipes=1))
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


MEASUREMENTS: list[Callable[[], list[Row]]] = [explorer_rows, hypothesis_rows]


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
            # seconds: lower is better, so the ratio is target/value; rates: value/target
            ratio = target / value if unit == "s" else value / target
            tail = f"{target:>10,.0f}  {ratio:.2f}"
        print(f"{name:<{width}}  {shown:>14}  {unit:<12}  {tail}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
