"""``make demo``: the whole checking pipeline, end to end, on an embedded default.

Until the tablet servers and masters exist (later issues), the demo shows what checks them:

1. ``revivify prove``: z3 proves the spec's invariants inductive for every term;
2. ``revivify prove --mutant stc_seed_order``: the seed's StartTabletCopy order (delete
   first, check the caller's term after) fails, with a counterexample from Init;
3. ``revivify explore``: every reachable state within the default bounds, all invariants;
4. traces: fresh random walks of the spec written as trace files (one per incarnation,
   crashes included), checked by ``revivify trace check`` and by ``revivify trace validate
   --engine spark`` on a local Spark session;
5. a known-bad trace (a tombstone that votes twice in one term after a restart) rejected
   with its evidence, by the local checker and by Spark's dataframe plan.

Each step runs the real ``revivify`` command in its own process; the demo stops at the
first step whose exit code is not the expected one.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

OUT = Path(os.environ.get("REVIVIFY_DEMO_OUT", "demo-out"))


def banner(text: str) -> None:
    print(f"\n{'=' * 78}\n== {text}\n{'=' * 78}", flush=True)


def run(args: list[str], expect: int = 0) -> None:
    cmd = [sys.executable, "-m", "revivify.impl.cli.main", *args]
    print(f"$ revivify {' '.join(args)}", flush=True)
    start = time.perf_counter()
    code = subprocess.call(cmd)
    print(f"[exit {code}, {time.perf_counter() - start:.1f} s]", flush=True)
    if code != expect:
        print(f"demo: expected exit {expect}, got {code}", file=sys.stderr)
        raise SystemExit(1)


def write_walks(root: Path, seeds: range, steps: int) -> None:
    from revivify.checker.walks import random_walk

    shutil.rmtree(root, ignore_errors=True)
    for seed in seeds:
        random_walk(seed, steps=steps).write(str(root / f"walk-{seed:03d}"))
    files = sum(1 for _ in root.rglob("*.jsonl"))
    print(f"wrote {files} trace files ({len(seeds)} walks of {steps} steps) under {root}")


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    banner("1. z3: every invariant of the spec is inductive (3 servers, any term)")
    run(["prove"])

    banner("2. the seed's StartTabletCopy order is unsafe: the mutant fails its proof")
    run(["prove", "--mutant", "stc_seed_order", "--bmc-depth", "8", "--timeout", "5"],
        expect=1)

    banner("3. exhaustive exploration of the spec within the default bounds")
    run(["explore"])

    banner("4. traces of spec walks with crashes, checked locally and on Spark")
    walks = OUT / "traces"
    write_walks(walks, range(100, 112), steps=160)
    run(["trace", "check", str(walks)])
    run(["trace", "validate", str(walks), "--engine", "spark", "--master", "local[2]",
         "--out", str(OUT / "spark-report")])

    banner("5. a known-bad trace: a tombstone votes twice in a term after restart")
    run(["trace", "check", "traces/bad/vote-twice-after-restart"], expect=1)
    # The same on Spark's dataframe plan (Spark reads and shuffles the lines by node).
    run(["trace", "validate", "traces/bad/vote-twice-after-restart", "--engine", "spark",
         "--plan", "dataframe", "--master", "local[2]"], expect=1)

    banner("demo complete")
    print(f"outputs under {OUT}/")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
