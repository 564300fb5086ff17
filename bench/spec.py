"""Benchmarks of the spec tools: the z3 proofs, the exhaustive explorer, the Hypothesis machine.

    python bench/spec.py [--before REV] [--prefix N] [--profile-states N]
                         [--only explorer|profile]

Each measurement is a function returning rows (name, value, unit, target); ``main`` runs
them all and prints one table with each value's ratio to its target (seconds: lower is
better, so the ratio is target / value; rates: value / target). More rows are added by
appending a function to ``MEASUREMENTS``.

The explorer before and after, in one run: the explorer of each ``--before`` revision (git
revisions, comma-separated; default the one before issue 21's work and the one where its
second session started; each one's ``spec`` and ``checker`` exported with ``git archive``
and imported from there) and the working tree's explore the first ``--prefix`` states of
the default bounds, alternately in fresh processes, on the same loaded machine; then the
working tree's explorer runs the default bounds to the end. CPU time is reported beside
wall time (other engineers' jobs share the cores: CPU time is the fairer rate). Each run
prints its states and transitions: equal counts say the revisions explored the same
prefix (a revision whose spec differs explores a different one; its rate is then only
indicative).

What bounds the explorer (``--only profile``): the default bounds again under cProfile,
the time split by part (the search loop's own bytecode, canonicalisation, invariant
verdicts, the explorer's caches, the spec's code on cache misses; C built-ins charged to
their callers) with the work per state (transitions, canonicalisations, dict look-ups).
No part dominates: the rate is bounded by the interpreter across all of them.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

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


# The revisions before issue 21's explorer work (dd1c6a5) and before its second session
# (8194ed8): the "befores" of the explorer rows.
BEFORE: str = "dd1c6a5,8194ed8"
PREFIX: int = 300_000
PROFILE_STATES: int = 0  # the profile's states (0: the default bounds to the end)
ROOT = Path(__file__).resolve().parent.parent

# One explorer run in a fresh process: the first PREFIX states of the default bounds (0: all).
_RUN = """
import json, sys, time
from revivify.checker.explore import DEFAULT_BOUNDS, DEFAULT_SERVERS, explore
from revivify.spec import default_spec
cap = int(sys.argv[1]) or None
cpu = time.process_time()
r = explore(default_spec(DEFAULT_SERVERS), DEFAULT_BOUNDS, max_states=cap)
print(json.dumps({"states": r.distinct_states, "transitions": r.transitions,
                  "wall": r.seconds, "cpu": time.process_time() - cpu,
                  "complete": r.complete, "violation": r.violation is not None}))
"""


def _run_explorer(cap: int, pythonpath: str | None) -> dict[str, float]:
    env = dict(os.environ)
    if pythonpath is not None:
        env["PYTHONPATH"] = pythonpath
    out = subprocess.run([sys.executable, "-c", _RUN, str(cap)], env=env, check=True,
                         capture_output=True, text=True, cwd=tempfile.gettempdir()).stdout
    got: dict[str, float] = json.loads(out.strip().splitlines()[-1])
    return got


def _export(rev: str, into: Path) -> Path:
    """``spec`` and ``checker`` of revision ``rev``, importable as ``revivify.*`` from the
    returned directory."""
    src = into / "src"
    src.mkdir()
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "spec", "checker",
                              "contract"], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(src)], input=archive, check=True)
    pkg = into / "pkg" / "revivify"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    for part in ("spec", "checker", "contract"):
        (pkg / part).symlink_to(src / part)
    return into / "pkg"


def explorer_before_after_rows() -> list[Row]:
    """The explorer of each BEFORE revision and of the working tree on the first PREFIX
    states of the default bounds, alternately (each before, after; twice), in fresh
    processes; the best (least CPU) of each."""
    revs = [r for r in BEFORE.split(",") if r]
    with tempfile.TemporaryDirectory() as tmp:
        paths: dict[str, str | None] = {}
        for k, rev in enumerate(revs):
            into = Path(tmp) / str(k)
            into.mkdir()
            paths[rev] = str(_export(rev, into))
        paths["working tree"] = None
        runs: dict[str, list[dict[str, float]]] = {name: [] for name in paths}
        for _ in range(2):
            for name, path in paths.items():
                runs[name].append(_run_explorer(PREFIX, path))
    rows: list[Row] = []
    best = {k: min(v, key=lambda r: r["cpu"]) for k, v in runs.items()}
    after = best["working tree"]
    for name in paths:
        r = best[name]
        tag = "after" if name == "working tree" else "before"
        rows.append((f"explorer {tag} ({name}): states/s, CPU, first {PREFIX:,} states "
                     f"({int(r['states']):,} states, {int(r['transitions']):,} transitions)",
                     r["states"] / r["cpu"], "states/s", None))
        rows.append((f"explorer {tag} ({name}): states/s, wall", r["states"] / r["wall"],
                     "states/s", None))
    for rev in revs:
        rows.append((f"explorer working tree / {rev} (CPU rate)",
                     (after["states"] / after["cpu"])
                     / (best[rev]["states"] / best[rev]["cpu"]), "x", None))
    return rows


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


# Where the explorer's time goes, by part: (label, test on a profiled function's file and
# name). The first match wins; C built-ins (dict.get, len, min) are charged to the part
# that called them, in proportion to the time each caller spent in them.
_PARTS: list[tuple[str, Callable[[str, str], bool]]] = [
    ("the search loop's own bytecode (search.py)", lambda f, n: f.endswith("search.py")),
    ("canonicalisation (symmetry: min over 3! relabelings)",
     lambda f, n: n == "canon" or f.endswith("symmetry.py")),
    ("invariant verdicts (checks.py and compiled invariants)",
     lambda f, n: f.endswith("checks.py") or "invariant" in f),
    ("spec on cache misses (guards, effects, enumerators; compiled and interpreted)",
     lambda f, n: f.startswith("<compiled") or "/spec/" in f or "/attr/" in f),
    ("the explorer's caches (engine.py, moves.py, probes.py: keys, look-ups, misses)",
     lambda f, n: "/explore/" in f),
]


def _part_of(file: str, name: str) -> str:
    for label, test in _PARTS:
        if test(file, name):
            return label
    return "other (z3 compilation of the spec, start-up)"


def explorer_profile_rows() -> list[Row]:
    """What bounds the explorer: the default bounds (or their first PROFILE_STATES
    states) under cProfile, the time by part (the profiler's overhead inflates function
    calls, so the shares, not the absolute figures, are the evidence), and the work per
    state."""
    spec = default_spec(DEFAULT_SERVERS)
    prof = cProfile.Profile()
    prof.enable()
    r = explore(spec, DEFAULT_BOUNDS, max_states=PROFILE_STATES or None)
    prof.disable()
    stats: dict[Any, Any] = pstats.Stats(prof).stats  # type: ignore[attr-defined]
    spent: dict[str, float] = {}
    calls: dict[str, int] = {}
    for (file, _line, name), (_cc, nc, tt, _ct, callers) in stats.items():
        calls[name] = calls.get(name, 0) + nc
        if file != "~":
            part = _part_of(file, name)
            spent[part] = spent.get(part, 0.0) + tt
            continue
        total = sum(c[2] for c in callers.values()) or 1.0
        for (cfile, _cl, cname), c in callers.items():
            part = _part_of(cfile, cname)
            spent[part] = spent.get(part, 0.0) + tt * c[2] / total
    states = r.distinct_states
    whole = sum(spent.values())
    rows: list[Row] = [
        (f"explorer profile ({states:,} states): transitions per state",
         r.transitions / states, "per state", None),
        ("explorer profile: canonicalisations per state", calls.get("canon", 0) / states,
         "per state", None),
        ("explorer profile: dict look-ups (get) per state", calls.get("<method 'get' of "
                                                                     "'dict' objects>", 0)
         / states, "per state", None),
    ]
    for part, seconds in sorted(spent.items(), key=lambda kv: -kv[1]):
        rows.append((f"explorer profile: {part}, share", 100 * seconds / whole, "%", None))
    return rows


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


MEASUREMENTS: list[Callable[[], list[Row]]] = [proof_rows, explorer_before_after_rows,
                                                explorer_rows, explorer_profile_rows,
                                                hypothesis_rows]


def main() -> int:
    global BEFORE, PREFIX, PROFILE_STATES
    ap = argparse.ArgumentParser(description="benchmarks of the spec tools")
    ap.add_argument("--before", default=BEFORE,
                    help=f"the git revisions of the explorer's befores, comma-separated "
                         f"(default {BEFORE})")
    ap.add_argument("--prefix", type=int, default=PREFIX,
                    help=f"states of the before/after comparison (default {PREFIX:,})")
    ap.add_argument("--profile-states", type=int, default=PROFILE_STATES,
                    help="states of the profile (default 0: the default bounds to the end)")
    ap.add_argument("--only", choices=["explorer", "profile"],
                    help="the explorer rows only, or its profile only")
    a = ap.parse_args()
    BEFORE, PREFIX, PROFILE_STATES = a.before, a.prefix, a.profile_states
    measures = MEASUREMENTS
    if a.only == "explorer":
        measures = [explorer_before_after_rows, explorer_rows, explorer_profile_rows]
    elif a.only == "profile":
        measures = [explorer_profile_rows]
    load = os.getloadavg()
    print(f"load average at start: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    rows: list[Row] = []
    for measure in measures:
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
    load = os.getloadavg()
    print(f"load average at end: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
