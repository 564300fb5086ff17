"""The verdict of a nemesis run: lost writes, unavailability, latency, the summary table.

Lost writes are found from the histories alone, independently of the linearizability
checker (both must agree that nothing is wrong): for each key, the value its final read
(after every fault was healed) returned must be one a write could have left there. A write
W is *superseded* when an acknowledged write began after W completed; the final value must
be written by a write that is not superseded (acknowledged or unknown: an unknown write
never completed, so it is never superseded), or be "no value" when no write to the key was
ever acknowledged. Otherwise an acknowledged write was lost (or a value came from nowhere):
one lost write is counted for that key.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Sequence
from typing import Any

import attrs

from .schedule import PARTITIONS, STALLS
from .workload import ok_latencies


@attrs.frozen
class FaultRecord:
    """A fault as it happened: kind, server index, when injected and healed (seconds since
    the workload began), and how the server was healed."""

    kind: str
    server: int
    injected: float
    healed: float
    heal: str  # "lifted", "restarted", "resumed", "copied", "restarted (copy timed out)"...
    detail: str = ""
    # Seconds from the heal until every replica was caught up (with masters: ksck healthy);
    # None if not within the bound (runner.CATCH_UP_SECONDS). After a kernel partition this
    # includes TCP's wait for its next retransmission on connections that lived through it.
    recovered_s: float | None = None


def lost_writes(events: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Keys whose final read contradicts the acknowledged writes (module docstring)."""
    writes: dict[Any, list[tuple[float, float, Any, bool]]] = {}
    open_: dict[Any, dict[str, Any]] = {}
    finals: dict[Any, Any] = {}
    for e in events:
        key = e.get("key")
        if e["type"] == "invoke":
            open_[e["process"]] = e
            continue
        invoke = open_.pop(e["process"], None)
        if invoke is None:
            continue
        if e["f"] == "write":
            if e["type"] == "fail":
                continue
            done = e["time"] if e["type"] == "ok" else math.inf
            writes.setdefault(key, []).append((invoke["time"], done, invoke["value"],
                                               e["type"] == "ok"))
        elif e["f"] == "read" and e["type"] == "ok" and e.get("final"):
            finals[key] = e["value"]
    for e in open_.values():  # invoked, never completed: unknown
        if e["f"] == "write":
            writes.setdefault(e.get("key"), []).append((e["time"], math.inf, e["value"], False))
    lost = []
    for key, final in finals.items():
        ws = writes.get(key, [])
        acked_starts = [start for start, _, _, ok in ws if ok]
        latest_ack = max(acked_starts, default=-math.inf)
        allowed = {value for _, done, value, _ in ws if not latest_ack > done}
        if not acked_starts:
            allowed.add(None)
        if final not in allowed:
            lost.append({"key": key, "final": final, "allowed": sorted(allowed, key=str)})
    return lost


def longest_gap(completions: Iterable[float], start: float, end: float) -> tuple[float, float]:
    """The longest stretch of [start, end] without a completion in it: (length, its start)."""
    points = [start, *sorted(t for t in completions if start <= t <= end), end]
    best = (0.0, start)
    for a, b in itertools.pairwise(points):
        if b - a > best[0]:
            best = (b - a, a)
    return best


def percentile(values: Sequence[float], p: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(p / 100 * len(ordered)) - 1)]


def count_outcomes(events: Sequence[dict[str, Any]]) -> dict[str, int]:
    """ok / fail / info per completed operation; invocations never completed are info."""
    counts = {"ok": 0, "fail": 0, "info": 0}
    open_ = set()
    for e in events:
        if e["type"] == "invoke":
            open_.add(e["process"])
        else:
            open_.discard(e["process"])
            counts[e["type"]] += 1
    counts["info"] += len(open_)
    return counts


def availability(events: Sequence[dict[str, Any]], faults: Sequence[FaultRecord],
                 workload_end: float) -> dict[str, Any]:
    """Longest unavailability overall and inside the stall faults (paused or cut off), and
    the p99 latency of operations that completed ok and began inside a stall fault."""
    done = ok_latencies(list(events))
    completions = [end for _, end in done]
    gap, gap_at = longest_gap(completions, 0.0, workload_end)
    stall_gap = 0.0
    stall_latency: list[float] = []
    for f in faults:
        if f.kind not in STALLS:
            continue
        length, _ = longest_gap(completions, f.injected, f.healed)
        stall_gap = max(stall_gap, length)
        stall_latency += [end - start for start, end in done if f.injected <= start <= f.healed]
    return {"longest_unavailability_s": round(gap, 3), "longest_unavailability_at_s":
            round(gap_at, 3), "stall_longest_unavailability_s": round(stall_gap, 3),
            "stall_p99_latency_s": _round(percentile(stall_latency, 99)),
            "p99_latency_s": _round(percentile([e - s for s, e in done], 99)),
            "stall_ops_ok": len(stall_latency)}


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def render(summary: dict[str, Any]) -> str:
    """The summary as a two-column table."""
    ops = summary["operations"]
    av = summary["availability"]
    target = summary["target"]
    rows: list[tuple[str, str]] = [
        ("profile / seed", f"{summary['profile']} / {summary['seed']}"),
        ("cluster", summary["cluster"]),
        ("partitions made in", {"kernel": "the kernel (netns + nftables)",
                                "rpc": "the RPC layer (fault file)"}.get(
            summary.get("partitions", ""), str(summary.get("partitions")))),
        ("workload seconds", f"{summary['workload_seconds']:.1f}"),
        ("operations ok / failed / indeterminate",
         f"{ops['ok']} / {ops['fail']} / {ops['info']}"),
        ("  register", "{ok} / {fail} / {info}".format(**summary["by_model"]["register"])),
        ("  map", "{ok} / {fail} / {info}".format(**summary["by_model"]["kv"])),
        ("faults injected", ", ".join(f"{k} {n}" for k, n in sorted(
            summary["faults_by_kind"].items())) or "none"),
        ("healed by", ", ".join(f"{k} {n}" for k, n in sorted(
            summary["heals"].items())) or "-"),
        ("longest unavailability", f"{av['longest_unavailability_s']:.2f} s (at "
         f"{av['longest_unavailability_at_s']:.1f} s{_during(summary)})"),
        ("p99 latency (ok operations)", _seconds(av["p99_latency_s"])),
        ("slowest recovery after a cut", _recovery(summary)),
        ("lost writes", str(summary["lost_writes"])),
        ("acknowledged writes readable", "yes" if summary["final_reads_ok"] else "NO"),
        ("linearizable (register / map)", f"{_yes(summary['linearizable']['register'])} / "
         f"{_yes(summary['linearizable']['kv'])}"),
        ("trace verdict", summary["trace_verdict"]),
        ("target, one server stalled", f"{'met' if target['met'] else 'missed'}: p99 "
         f"{_seconds(av['stall_p99_latency_s'])} <= {target['p99_limit_s']:.2f} s, longest "
         f"gap {av['stall_longest_unavailability_s']:.2f} s <= {target['gap_limit_s']:.2f} s"),
        *([("checks after each fault", _checks(summary["checks_after_faults"]))]
          if summary.get("checks_after_faults") else []),
        *([("DDL through the CLI (ok / unknown)", "{ok} / {unknown}".format(
            **summary["ddl"]))] if summary.get("ddl") else []),
        ("verdict", "PASS" if summary["passed"] else "FAIL: " + "; ".join(summary["problems"])),
    ]
    width = max(len(k) for k, _ in rows)
    line = "-" * (width + 3 + max(len(v) for _, v in rows))
    return "\n".join([line, *(f"{k.ljust(width)} | {v}" for k, v in rows), line])


def _during(summary: dict[str, Any]) -> str:
    """", during KIND on TARGET" for the fault in force when the longest gap began (from
    its injection to its heal), or nothing if none was."""
    at = summary["availability"]["longest_unavailability_at_s"]
    for f in summary.get("faults", []):
        if f["injected"] <= at <= f["healed"]:
            return f", during {f['kind']} on {f['server']}"
    return ""


def _recovery(summary: dict[str, Any]) -> str:
    """The longest time from a partition's heal to the cluster caught up, and which."""
    cuts = [f for f in summary.get("faults", []) if f["kind"] in PARTITIONS]
    if not cuts:
        return "no partition"
    slow = [f for f in cuts if f.get("recovered_s") is None]
    if slow:
        return f"NOT within the bound after {len(slow)} of {len(cuts)} cut(s)"
    worst = max(cuts, key=lambda f: f["recovered_s"])
    return (f"{worst['recovered_s']:.2f} s (after {worst['kind']} on {worst['server']}, held "
            f"{worst['healed'] - worst['injected']:.1f} s)")


def _checks(checks: list[dict[str, Any]]) -> str:
    """Per healed fault: ksck healthy and both histories so far linearizable, or what not."""
    out = []
    for c in checks:
        bad = ([] if c["ksck_healthy"] else ["ksck NOT healthy"]) + [
            f"{model} {_yes(v)}" for model, v in c["linearizable"].items() if v is not True]
        out.append(f"{c['after']} {'ok' if not bad else ', '.join(bad)}")
    return "; ".join(out)


def _seconds(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f} s"


def _yes(value: bool | None) -> str:
    return {True: "yes", False: "NO", None: "unknown"}[value]


__all__ = ["FaultRecord", "availability", "count_outcomes", "longest_gap", "lost_writes",
           "percentile", "render"]
