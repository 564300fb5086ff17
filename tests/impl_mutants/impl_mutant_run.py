"""``make mutants``: every seeded bug of impl_mutant_list.py against the project's checks.

    python tests/impl_mutants/impl_mutant_run.py [--only NAME ...] [--json PATH]
                                                  [--detectors sim,tests,nemesis]

For each mutant the detectors run in a fixed order and the first that catches it is
recorded (later ones are skipped):

    sim      the in-process scenarios of impl_mutant_sim.py (tablet servers on SimDisk,
             MemoryNetwork and MockClock; crashes at durable steps), then the trace checker
             and a lost-write / stale-read check. Caught: the checker's finding kind, or
             LostWrite, StaleRead, Hang, Error:<type>.
    tests    pytest -x over a fixed list of test modules (TESTS). Caught: the first
             failing test.
    nemesis  ``python -m revivify.impl.testing.nemesis --profile short --seed 1`` (real
             processes under kills, pauses, partitions). Caught: a non-zero exit.

Every detector runs in a process of its own with this directory on ``PYTHONPATH`` and the
mutant named in ``REVIVIFY_IMPL_MUTANT``: ``sitecustomize.py`` applies it at start-up, in
the tablet servers the tests and the nemesis spawn too. First a baseline: the sim detector
without a mutant must find nothing (else the run stops: a detector that fails without a
bug proves nothing). Prints a table and the kill rate; writes the same as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from revivify.impl.testing.nemesis.netns import unavailable

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(HERE))

from impl_mutant_list import BY_NAME, ENV, MUTANTS  # noqa: E402

TESTS = ("tests/consensus", "tests/storage", "tests/copy", "tests/tserver", "tests/tablet")
DETECTORS = ("sim", "tests", "nemesis")
TESTS_TIMEOUT = 900
NEMESIS_TIMEOUT = 300


def _env(mutant: str | None) -> dict[str, str]:
    env = dict(os.environ)
    path = env.get("PYTHONPATH", "")
    env["PYTHONPATH"] = f"{HERE}{os.pathsep}{path}" if path else str(HERE)
    env.pop(ENV, None)
    if mutant:
        env[ENV] = mutant
    return env


def sim_in_process(stop_at_first: bool = True) -> dict[str, Any]:
    """The sim detector in this process (the mutant, if any, applied by sitecustomize)."""
    from impl_mutant_sim import SCENARIOS, run_scenario

    for scenario in SCENARIOS:
        outcome = run_scenario(scenario)
        if outcome.findings:
            return {"caught": True, "by": f"{outcome.findings[0]} in {scenario.__name__}",
                    "kinds": list(outcome.findings), "detail": outcome.detail}
    return {"caught": False, "by": "", "kinds": [], "detail": ""}


def detect_sim(mutant: str | None) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, __file__, "--sim-worker"], env=_env(mutant),
                          cwd=ROOT, capture_output=True, text=True, timeout=1800)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr.strip().splitlines() or ["?"])[-1]
        return {"caught": True, "by": "Error in the scenario process",
                "detail": tail[:300]}
    result: dict[str, Any] = json.loads(lines[-1])
    return result


def detect_tests(mutant: str) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-m", "not slow", "-p",
           "no:cacheprovider", "--timeout=300", *TESTS]
    try:
        proc = subprocess.run(cmd, env=_env(mutant), cwd=ROOT, capture_output=True,
                              text=True, timeout=TESTS_TIMEOUT)
    except subprocess.TimeoutExpired:
        return {"caught": True, "by": f"timeout after {TESTS_TIMEOUT}s", "detail": ""}
    if proc.returncode == 0:
        return {"caught": False, "by": "", "detail": ""}
    failed = re.findall(r"^(?:FAILED|ERROR) (\S+)", proc.stdout, re.M)
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("E ")), "")
    return {"caught": True, "by": failed[0] if failed else f"pytest exit {proc.returncode}",
            "detail": line[:300]}


def detect_nemesis(mutant: str) -> dict[str, Any]:
    # Kernel partitions where they can be made, chosen explicitly: a run refused for want of
    # root or nft must not count as a caught mutant.
    partitions = "kernel" if unavailable() is None else "rpc"
    cmd = [sys.executable, "-m", "revivify.impl.testing.nemesis", "--profile", "short",
           "--seed", "1", "--partitions", partitions]
    try:
        proc = subprocess.run(cmd, env=_env(mutant), cwd=ROOT, capture_output=True,
                              text=True, timeout=NEMESIS_TIMEOUT)
    except subprocess.TimeoutExpired:
        return {"caught": True, "by": f"timeout after {NEMESIS_TIMEOUT}s", "detail": ""}
    if proc.returncode == 0:
        return {"caught": False, "by": "", "detail": ""}
    out = (proc.stdout + proc.stderr).strip().splitlines()
    verdicts = [ln.strip() for ln in out if re.search(r"lost|linearizable|trace", ln, re.I)]
    return {"caught": True, "by": f"exit {proc.returncode}",
            "detail": "; ".join(verdicts[-3:])[:300] or (out[-1][:300] if out else "")}


def run_one(name: str, detectors: tuple[str, ...]) -> dict[str, Any]:
    start = time.monotonic()
    row: dict[str, Any] = {"mutant": name, "description": BY_NAME[name].doc,
                           "expected": BY_NAME[name].expected, "caught_by": None,
                           "finding": "", "detail": "", "tried": []}
    for det in detectors:
        t0 = time.monotonic()
        if det == "sim":
            res = detect_sim(name)
        elif det == "tests":
            res = detect_tests(name)
        else:
            res = detect_nemesis(name)
        row["tried"].append({"detector": det, "seconds": round(time.monotonic() - t0, 1),
                             **res})
        if res["caught"]:
            row.update(caught_by=det, finding=res["by"], detail=res.get("detail", ""))
            break
    row["seconds"] = round(time.monotonic() - start, 1)
    return row


def table(rows: list[dict[str, Any]]) -> str:
    out = ["| mutant | description | caught by | finding | time (s) |",
           "|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| {r['mutant']} | {r['description']} | {r['caught_by'] or 'SURVIVED'} "
                   f"| {r['finding']} | {r['seconds']} |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--only", nargs="*", default=None, help="these mutants only")
    p.add_argument("--detectors", default=",".join(DETECTORS))
    p.add_argument("--json", default=str(ROOT / "build" / "mutants.json"))
    p.add_argument("--sim-worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.sim_worker:
        print(json.dumps(sim_in_process()), flush=True)
        return 0
    detectors = tuple(d for d in args.detectors.split(",") if d)
    assert set(detectors) <= set(DETECTORS), detectors
    names = args.only or [m.name for m in MUTANTS]
    unknown = [n for n in names if n not in BY_NAME]
    if unknown:
        print(f"unknown mutants: {', '.join(unknown)}", file=sys.stderr)
        return 2
    print("baseline (no mutant): the sim detector must find nothing", file=sys.stderr)
    base = detect_sim(None)
    if base["caught"]:
        print(f"baseline failed: {base}", file=sys.stderr)
        return 1
    rows: list[dict[str, Any]] = []
    for name in names:
        print(f"mutant {name} ...", file=sys.stderr, flush=True)
        row = run_one(name, detectors)
        print(f"  -> {row['caught_by'] or 'SURVIVED'}: {row['finding']} ({row['seconds']} s)"
              f" {row['detail'][:160]}", file=sys.stderr, flush=True)
        rows.append(row)
    killed = sum(1 for r in rows if r["caught_by"])
    rate = killed / len(rows) if rows else 0.0
    print(table(rows))
    print(f"\nkill rate: {killed}/{len(rows)} = {rate:.0%}")
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps({"rows": rows, "killed": killed,
                                           "total": len(rows), "kill_rate": rate},
                                          indent=2) + "\n")
    print(f"JSON: {args.json}")
    return 0 if rate >= 0.9 else 1


if __name__ == "__main__":
    sys.exit(main())
