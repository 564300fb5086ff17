"""The explorer on one process and on several, side by side, at the default bounds.

    python bench/explore.py [--workers 1,2] [--rounds 1] [--max-states N]

Each run is a fresh process (``revivify explore``'s ``explore`` with ``workers``), the
worker counts alternating round by round on the same machine, so a neighbour's load falls
on both. The table gives, per worker count, the best (least wall time) run: wall seconds,
CPU seconds (the process and its workers), states per wall second, and the wall time's
ratio to one worker's (the goal on two cores: 0.6 or less). CPU is the search's own
(``ExploreResult.cpu_seconds``: the process and its workers, which are the fork server's
children, not this one's). The counts are printed too:
every worker count must find the same states, transitions and depth. The load average at
the start of each run says how shared the cores were.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

# One run in a fresh process: the default bounds (or their first N states) on W workers.
_RUN = """
import json, sys, time
from revivify.checker.explore import DEFAULT_BOUNDS, DEFAULT_SERVERS, explore
from revivify.spec import default_spec
workers, cap = int(sys.argv[1]), int(sys.argv[2]) or None
t0 = time.perf_counter()
r = explore(default_spec(DEFAULT_SERVERS), DEFAULT_BOUNDS, max_states=cap, workers=workers)
print(json.dumps({"workers": workers, "wall": time.perf_counter() - t0,
                  "cpu": r.cpu_seconds, "states": r.distinct_states,
                  "transitions": r.transitions, "depth": r.depth, "complete": r.complete}))
"""


def run(workers: int, cap: int) -> dict[str, float]:
    load = os.getloadavg()[0]
    out = subprocess.run([sys.executable, "-c", _RUN, str(workers), str(cap)], check=True,
                         capture_output=True, text=True, cwd=tempfile.gettempdir()).stdout
    got: dict[str, float] = json.loads(out.strip().splitlines()[-1])
    got["load"] = load
    return got


def table(best: dict[int, dict[str, float]]) -> str:
    base = best[min(best)]["wall"]
    lines = [f"{'workers':>7}  {'wall s':>8}  {'CPU s':>8}  {'states/s':>9}  {'ratio':>6}  "
             f"{'load':>5}  states / transitions / depth"]
    for w, r in sorted(best.items()):
        lines.append(f"{w:>7}  {r['wall']:>8.1f}  {r['cpu']:>8.1f}  "
                     f"{r['states'] / r['wall']:>9,.0f}  {r['wall'] / base:>6.2f}  "
                     f"{r['load']:>5.1f}  "
                     f"{int(r['states']):,} / {int(r['transitions']):,} / {int(r['depth'])}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workers", default="1,2", help="worker counts, comma-separated")
    p.add_argument("--rounds", type=int, default=1, help="runs of each worker count")
    p.add_argument("--max-states", type=int, default=0,
                   help="explore only the first N states (0: the whole default bounds)")
    args = p.parse_args(argv)
    counts = [int(w) for w in args.workers.split(",")]
    runs: dict[int, list[dict[str, float]]] = {w: [] for w in counts}
    for _ in range(args.rounds):
        for w in counts:
            r = run(w, args.max_states)
            print(json.dumps(r), file=sys.stderr, flush=True)
            runs[w].append(r)
    best = {w: min(rs, key=lambda r: r["wall"]) for w, rs in runs.items()}
    print(table(best))
    counted = {(r["states"], r["transitions"], r["depth"]) for r in best.values()}
    if not args.max_states and len(counted) != 1:
        print(f"bench/explore.py: the worker counts disagree: {sorted(counted)}",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
