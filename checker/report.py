"""The report: findings, coverage and counts; human text by default, JSON for machines.

Exit codes (the CLI contract): 0 clean (warnings allowed), 1 at least one violation,
2 unusable input (a path missing, no trace files, a malformed line, an unknown schema
version or event) -- unusable input wins over violations, since the verdict on the rest
cannot be trusted.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any, Final

import attrs

from revivify.checker.replay import Violation
from revivify.checker.traces import TABLET_EVENTS, InputError

MAX_KEPT: Final = 10_000
# One fault, one finding. Findings of the same severity at the same line are one fault seen
# by several checks (a double vote is also a refused guard; a term that goes down is also a
# state the spec did not predict): they are folded into one, whose kind is the most
# specific (the generic replay kinds rank last), and which names the others (``also``).
# A file of another schema version is one finding, at its first line.
GENERIC_KINDS: Final = ("StateMismatch", "GuardFailed")
PER_FILE_KINDS: Final = frozenset({"UnsupportedSchemaVersion"})


def _rank(v: Violation) -> tuple[int, str, str]:
    generic = GENERIC_KINDS.index(v.kind) + 1 if v.kind in GENERIC_KINDS else 0
    return (generic, v.kind, v.subject)


def from_input_error(e: InputError, violation: bool = False) -> Violation:
    severity = "warning" if e.warning else "violation" if violation else "error"
    return Violation(kind=e.kind, severity=severity, file=e.file, line=e.line,
                     subject=e.where(), message=e.message, failed=e.field)


@attrs.define
class Report:
    engine: str
    findings: dict[tuple[str, str], Violation] = attrs.Factory(dict)
    counts: Counter[str] = attrs.Factory(Counter)
    files: int = 0
    lines: int = 0
    events: int = 0
    server_events: int = 0
    keys: int = 0
    coverage: dict[tuple[str, str], int] = attrs.Factory(dict)
    frontiers: dict[int, int] = attrs.Factory(dict)
    timings: dict[str, float] = attrs.Factory(dict)
    # where a finding is (``_places``) -> the identity of the one kept there
    _at: dict[tuple[str, str, int | str], tuple[str, str]] = attrs.Factory(dict)

    def add(self, v: Violation) -> None:
        ident = v.identity()
        if ident in self.findings:
            return
        places = self._places(v)
        kept = next((self._at[p] for p in places
                     if p in self._at and self._at[p] in self.findings), None)
        if kept is not None:
            self._fold(kept, v, places)
            return
        self.counts[v.severity] += 1
        if len(self.findings) < MAX_KEPT:
            self.findings[ident] = v
            for p in places:
                self._at[p] = ident

    @staticmethod
    def _places(v: Violation) -> list[tuple[str, str, int | str]]:
        """Where a finding is: its line (a per-file kind: its file), and for a global
        finding the lines of its witnesses (``file:line ...``): a node's refused election
        and the tablet's two leaders it made are one fault."""
        if not v.file or v.line <= 0:
            return []
        if v.kind in PER_FILE_KINDS:
            return [(v.severity, v.file, v.kind)]
        out: list[tuple[str, str, int | str]] = [(v.severity, v.file, v.line)]
        for w in v.witnesses:
            f, _, line = w.partition(" ")[0].rpartition(":")
            if f and line.isdigit():
                out.append((v.severity, f, int(line)))
        return out

    def _fold(self, kept: tuple[str, str], v: Violation,
              places: list[tuple[str, str, int | str]]) -> None:
        """Fold ``v`` into the finding kept at one of its places (the same fault)."""
        old = self.findings[kept]
        if old.kind in PER_FILE_KINDS:
            if v.line < old.line:  # the file's first such line, whatever the read order
                self.findings[kept] = attrs.evolve(v, also=old.also)
            return
        first, other = (old, v) if _rank(old) <= _rank(v) else (v, old)
        also = tuple(sorted({*old.also, *v.also, other.kind} - {first.kind}))
        merged = attrs.evolve(first, also=also)
        ident = merged.identity()
        del self.findings[kept]
        self.findings[ident] = merged
        for p, i in list(self._at.items()):
            if i == kept:
                self._at[p] = ident
        for p in places:
            self._at[p] = ident

    def sorted(self) -> list[Violation]:
        return sorted(self.findings.values(), key=lambda v: (v.file, v.line, v.kind))

    def exit_code(self) -> int:
        if self.counts["error"]:
            return 2
        if self.counts["violation"]:
            return 1
        return 0

    def identities(self, severities: tuple[str, ...] = ("violation", "error",
                                                        "warning")) -> set[tuple[str, str]]:
        return {v.identity() for v in self.findings.values() if v.severity in severities}

    def kinds(self) -> set[str]:
        """Every kind found, those folded into another finding included."""
        return {k for v in self.findings.values() for k in (v.kind, *v.also)}

    # ---------------------------------------------------------------------------------
    def coverage_summary(self) -> dict[str, Any]:
        by_action: Counter[str] = Counter()
        for (action, _), n in self.coverage.items():
            by_action[action] += n
        missing = [a for a in TABLET_EVENTS if by_action[a] == 0]
        return {
            "actions": {a: by_action[a] for a in TABLET_EVENTS},
            "branches": {f"{a}/{b}" if b else a: n
                         for (a, b), n in sorted(self.coverage.items())},
            "actions_not_exercised": missing,
        }

    def unlogged_steps(self) -> int:
        """Steps inferred at crash boundaries: taken, durable, but never logged (the
        writer loses at most the event of the step in flight, so at most one per key and
        crash; ``--max-frontier`` bounds it)."""
        return sum(size * n for size, n in self.frontiers.items() if size > 0)

    def to_json(self) -> dict[str, Any]:
        return {
            "engine": self.engine,
            "exit_code": self.exit_code(),
            "files": self.files, "lines": self.lines, "events": self.events,
            "server_events": self.server_events, "keys": self.keys,
            "counts": dict(self.counts),
            "frontier_sizes": {str(k): v for k, v in sorted(self.frontiers.items())},
            "unlogged_steps": self.unlogged_steps(),
            "coverage": self.coverage_summary(),
            "findings": [v.to_json() for v in self.sorted()],
            "timings": self.timings,
        }

    def dumps(self) -> str:
        return json.dumps(self.to_json(), indent=2, sort_keys=False)

    def text(self) -> str:
        out: list[str] = []
        for v in self.sorted():
            out.append(format_violation(v))
        cov = self.coverage_summary()
        n_actions = len(TABLET_EVENTS) - len(cov["actions_not_exercised"])
        out.append(
            f"checked {self.events} events ({self.server_events} server events) on "
            f"{self.keys} keys in {self.files} files [{self.engine}]")
        if self.frontiers:
            fr = ", ".join((f"{k} unlogged step(s): {v}" if k >= 0 else
                            f"unexplained: {v}") for k, v in sorted(self.frontiers.items()))
            out.append(f"incarnation boundaries: {sum(self.frontiers.values())} ({fr}); "
                       f"unlogged steps inferred: {self.unlogged_steps()}")
        out.append(f"coverage: {n_actions}/{len(TABLET_EVENTS)} spec actions, "
                   f"{len(self.coverage)} action/branch pairs")
        if cov["actions_not_exercised"]:
            out.append("  not exercised: " + ", ".join(cov["actions_not_exercised"]))
        c = self.counts
        out.append(f"result: {c['violation']} violation(s), {c['error']} input error(s), "
                   f"{c['warning']} warning(s) -> exit {self.exit_code()}")
        return "\n".join(out)


def format_violation(v: Violation) -> str:
    head = f"{v.subject if v.line == 0 or v.subject.startswith(v.file) else v.file}"
    if v.line:
        head = f"{v.file}:{v.line}"
    lines = [f"{v.severity.upper()} {v.kind} at {head}"]
    if v.event:
        lines.append(f"  event:    {v.event}" + (f" (node {v.node}, tablet {v.tablet})"
                                                 if v.node else ""))
    lines.append(f"  what:     {v.message}")
    if v.failed:
        lines.append(f"  failed:   {v.failed}")
    if v.also:
        lines.append(f"  also:     {', '.join(v.also)} (the same fault, seen by other checks)")
    if v.last_matched:
        lines.append(f"  last matched: {v.last_matched}")
    for e in v.expected:
        lines.append(f"  spec:     {e}")
    if v.observed:
        lines.append(f"  observed: {v.observed}")
    if v.frontier >= 0:
        lines.append(f"  frontier: {v.frontier}")
    for w in v.witnesses:
        lines.append(f"  witness:  {w}")
    if v.context:
        lines.append("  context:")
        lines.extend(f"    {c}" for c in v.context)
    return "\n".join(lines)
