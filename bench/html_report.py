"""Benchmark: what ``trace check --html`` costs on a large input, and that its page stays small.

    python bench/html_report.py [--events 200000 400000] [--dir /tmp/revivify-bench-html]

For each size: the synthetic corpus of ``bench/checker.py`` (valid version-3 traces of
3-replica tablets on 30 nodes), one line in the middle of one file given a Lamport clock
below its predecessor's (one finding: ``LamportNotIncreasing``), then ``trace check`` as a
process without and with ``--html``, side by side. Prints the wall time of each, the peak
memory of each (the page keeps the findings' tablets' events, not the input's:
checker/timeline.py ``Needed``), and the page's size, which must not grow with the input
(at most ``WINDOW`` events around each finding).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from checker import _uuid, generate  # bench/checker.py, beside this file


def plant_fault(root: str) -> str:
    """One line of node 0's file, in the middle, with a clock below the line before it."""
    path = os.path.join(root, f"{_uuid(0)}.0001.jsonl")
    with open(path, encoding="utf-8") as f:
        lines = f.readlines()
    mid = len(lines) // 2
    ev = json.loads(lines[mid])
    ev["lamport"] = json.loads(lines[mid - 1])["lamport"] - 1
    lines[mid] = json.dumps(ev, separators=(",", ":")) + "\n"
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(lines)
    return f"{path}:{mid + 1}"


def run(argv: list[str]) -> tuple[float, float, int]:
    """(wall seconds, peak RSS MiB, exit code) of one ``revivify`` process (its own
    rusage, from ``wait4``)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "revivify.impl.cli.main", *argv],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    return wall, usage.ru_maxrss / 1024, proc.returncode


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, nargs="+", default=[200_000, 400_000])
    ap.add_argument("--dir", default="/tmp/revivify-bench-html")
    a = ap.parse_args()
    rows = [("events", "check s", "check MiB", "--html s", "--html MiB", "page KiB",
             "exit")]
    for n in sorted(a.events):
        root = os.path.join(a.dir, str(n))
        total, _ = generate(root, n, 50)
        plant_fault(root)
        page = os.path.join(a.dir, f"report-{n}.html")
        plain = run(["trace", "check", "--quiet", root])
        html = run(["trace", "check", "--quiet", "--html", page, root])
        rows.append((f"{total:,}", f"{plain[0]:.1f}", f"{plain[1]:.0f}", f"{html[0]:.1f}",
                     f"{html[1]:.0f}", f"{os.path.getsize(page) / 1024:.0f}",
                     f"{plain[2]}/{html[2]}"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
