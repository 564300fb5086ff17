"""Checks across keys: what no single (node, tablet) replay can see.

The replay core checks, per key, everything that one server's history decides: each step
allowed by the spec, term monotonic per (node, tablet) across incarnations (``TermRegression``)
and at most one vote per (node, tablet, term) across incarnations (``DoubleVote``). What
needs several keys is checked here, from the *facts* the core emits:

* ``TwoLeaders``: at most one node becomes leader of a tablet in a term (Raft election
  safety; the spec's ``OneLeaderPerTerm``);
* ``CommitTermMismatch``: for each (tablet, index), every replica that commits it commits the
  same term (Raft state-machine safety, as the traces can show it);
* ``UuidReused``: a node UUID is formatted at most once (a wiped server comes back with a
  new UUID; seed 001, "Failure of a disk with consensus metadata").

Memory. Leaders are kept per (tablet, term) and formats per node: they grow with terms and
nodes. Commits are kept per tablet as runs of consecutive indices with one term
(``[lo, hi, term]``): a leader commits consecutive indices, and every replica commits the
same ones, so a tablet holds about one run per term, not one entry per event. The check is
exact (a run only stands for indices that were each committed); gaps in commit indices cost
one run each.

The Spark driver computes the same three checks as aggregations (``spark.global_checks``);
both produce one finding per (kind, subject) with all conflicting witnesses.
"""

from __future__ import annotations

import bisect

import attrs
from revivify.checker.replay import Violation


def leader_violation(tablet: str, term: int, witnesses: list[tuple[str, str, int]]) -> Violation:
    w = sorted(witnesses)
    nodes = sorted({n for n, _, _ in w})
    _, f, ln = w[-1]
    return Violation(
        kind="TwoLeaders", severity="violation", file=f, line=ln,
        subject=f"tablet={tablet} term={term}",
        message=f"{len(nodes)} nodes became leader of tablet {tablet} in term {term}: "
                + ", ".join(nodes),
        tablet=tablet, event="become_leader", failed="OneLeaderPerTerm",
        witnesses=tuple(f"{fl}:{li} {n}" for n, fl, li in w))


def commit_violation(tablet: str, index: int,
                     witnesses: list[tuple[int, str, str, int]]) -> Violation:
    w = sorted(witnesses)
    terms = sorted({t for t, _, _, _ in w})
    _, _, f, ln = w[-1]
    return Violation(
        kind="CommitTermMismatch", severity="violation", file=f, line=ln,
        subject=f"tablet={tablet} index={index}",
        message=f"index {index} of tablet {tablet} committed with terms {terms}",
        tablet=tablet, event="commit", failed="StateMachineSafety",
        witnesses=tuple(f"{fl}:{li} {n} term={t}" for t, n, fl, li in w))


def uuid_violation(node: str, witnesses: list[tuple[str, int]]) -> Violation:
    w = sorted(witnesses)
    f, ln = w[-1]
    return Violation(
        kind="UuidReused", severity="violation", file=f, line=ln, subject=f"node={node}",
        message=f"node UUID {node} was formatted {len(w)} times (a wiped server must come "
                f"back with a new UUID)",
        node=node, event="server_format", failed="UuidNeverReused",
        witnesses=tuple(f"{fl}:{li}" for fl, li in w))


@attrs.define
class _Run:
    lo: int
    hi: int
    term: int
    witnesses: list[tuple[str, str, int]]


@attrs.define
class GlobalChecks:
    """The local engine's incremental form of the checks."""

    leaders: dict[tuple[str, int], list[tuple[str, str, int]]] = attrs.Factory(dict)
    formats: dict[str, list[tuple[str, int]]] = attrs.Factory(dict)
    runs: dict[str, tuple[list[int], list[_Run]]] = attrs.Factory(dict)
    bad_commits: dict[tuple[str, int], list[tuple[int, str, str, int]]] = attrs.Factory(dict)

    def fact(self, kind: str, tablet: str, a: int, b: int, node: str, file: str,
             line: int) -> None:
        if kind == "leader":
            self.leader(tablet, a, node, file, line)
        else:
            self.commit(tablet, a, b, node, file, line)

    def leader(self, tablet: str, term: int, node: str, file: str, line: int) -> None:
        self.leaders.setdefault((tablet, term), []).append((node, file, line))

    def server_format(self, node: str, file: str, line: int) -> None:
        self.formats.setdefault(node, []).append((file, line))

    def commit(self, tablet: str, index: int, term: int, node: str, file: str,
               line: int) -> None:
        los, runs = self.runs.setdefault(tablet, ([], []))
        i = bisect.bisect_right(los, index) - 1
        if i >= 0 and runs[i].lo <= index <= runs[i].hi:
            run = runs[i]
            if run.term != term:
                key = (tablet, index)
                if key not in self.bad_commits:
                    self.bad_commits[key] = [(run.term, *run.witnesses[0])]
                self.bad_commits[key].append((term, node, file, line))
            return
        if i >= 0 and runs[i].hi == index - 1 and runs[i].term == term:
            runs[i].hi = index
            nxt = i + 1
            if nxt < len(runs) and runs[nxt].lo == index + 1 and runs[nxt].term == term:
                runs[i].hi = runs[nxt].hi
                del runs[nxt], los[nxt]
            return
        nxt = i + 1
        if nxt < len(runs) and runs[nxt].lo == index + 1 and runs[nxt].term == term:
            runs[nxt].lo = index
            los[nxt] = index
            return
        runs.insert(nxt, _Run(index, index, term, [(node, file, line)]))
        los.insert(nxt, index)

    def violations(self) -> list[Violation]:
        out: list[Violation] = []
        for (tablet, term), w in self.leaders.items():
            if len({n for n, _, _ in w}) > 1:
                out.append(leader_violation(tablet, term, w))
        for node, fw in self.formats.items():
            if len(fw) > 1:
                out.append(uuid_violation(node, fw))
        for (tablet, index), cw in self.bad_commits.items():
            out.append(commit_violation(tablet, index, cw))
        return out

    def size(self) -> int:
        return len(self.leaders) + len(self.formats) + sum(len(r[1]) for r in
                                                           self.runs.values())
