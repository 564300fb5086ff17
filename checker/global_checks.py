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

What a commit event says. ``commit(index, op_term)`` means every index up to ``index`` is
committed, and names the term of one entry: the one at ``index`` (a server commits once per
batch, so successive events of a key need not name consecutive indices). The terms of the
indices a batch covers without naming are not in the trace, so they are never compared:
the check compares exactly the (index, term) pairs that events name.

Commit facts come as runs. The core keeps, per key, the open run of *named* indices that
are consecutive and of one term, and emits one fact per run (``lo, hi, term`` and where it
began), not one per commit: a run grows only when the next commit names the index after
its last with the same term; any other commit (a batch that skips indices, a new term)
closes it and opens a run of one index. A replica that commits every entry emits about one
fact per term; one that commits once per batch, one fact per batch. Memory: leaders are kept
per (tablet, term) and formats per node: they grow with terms and nodes. Commits are kept per
tablet as disjoint runs (``[lo, hi, term]``), adjacent runs of one term merged: one run per
term when replicas name every index, at most one per distinct named index otherwise. The
check is exact: a run only stands for indices that were each named by a commit with its
term, and an index is reported iff two commits (on any keys) name it with different terms.
A witness names the line where the conflicting run began (the key's first commit of it).

The Spark driver computes the same three checks as aggregations over the facts
(``spark.global_findings``: leaders grouped by (tablet, term), formats by node, commit runs
self-joined per tablet on overlapping indices of different terms); both produce one finding
per (kind, subject).
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
    witness: tuple[str, str, int]  # (node, file, line) where the first run merged began


@attrs.define
class GlobalChecks:
    """The local engine's incremental form of the checks (a ``replay.FactSink``)."""

    leaders: dict[tuple[str, int], list[tuple[str, str, int]]] = attrs.Factory(dict)
    formats: dict[str, list[tuple[str, int]]] = attrs.Factory(dict)
    runs: dict[str, tuple[list[int], list[_Run]]] = attrs.Factory(dict)
    bad_commits: dict[tuple[str, int], list[tuple[int, str, str, int]]] = attrs.Factory(dict)

    def leader(self, tablet: str, term: int, node: str, file: str, line: int) -> None:
        self.leaders.setdefault((tablet, term), []).append((node, file, line))

    def server_format(self, node: str, file: str, line: int) -> None:
        self.formats.setdefault(node, []).append((file, line))

    def commit(self, tablet: str, index: int, term: int, node: str, file: str,
               line: int) -> None:
        self.commit_run(tablet, index, index, term, node, file, line)

    def commit_run(self, tablet: str, lo: int, hi: int, term: int, node: str, file: str,
                   line: int) -> None:
        """``node`` committed every index ``lo..hi`` with ``term``, the first at
        ``file:line``. The tablet's runs stay disjoint and sorted: the parts of ``lo..hi``
        no run covers are added with ``term``; a covered index whose run has another term
        is a ``CommitTermMismatch`` (its witnesses: where each conflicting run began)."""
        los, runs = self.runs.setdefault(tablet, ([], []))
        w = (node, file, line)
        # Runs that overlap lo..hi or touch it (a neighbour of the same term merges).
        j = bisect.bisect_right(los, hi + 1)
        i = j
        while i > 0 and runs[i - 1].hi >= lo - 1:
            i -= 1
        if i == j - 1 and runs[i].term == term and runs[i].lo <= lo and hi <= runs[i].hi:
            return  # the common case: already covered by a run of the same term
        seg: list[_Run] = []
        cur = lo
        for run in runs[i:j]:
            if run.lo > cur and cur <= hi:
                seg.append(_Run(cur, min(run.lo - 1, hi), term, w))
            if run.term != term:
                for index in range(max(run.lo, lo), min(run.hi, hi) + 1):
                    key = (tablet, index)
                    if key not in self.bad_commits:
                        self.bad_commits[key] = [(run.term, *run.witness)]
                    self.bad_commits[key].append((term, *w))
            seg.append(run)
            cur = max(cur, run.hi + 1)
        if cur <= hi:
            seg.append(_Run(cur, hi, term, w))
        merged: list[_Run] = []
        for run in seg:
            if merged and merged[-1].term == run.term and merged[-1].hi + 1 == run.lo:
                merged[-1].hi = run.hi
            else:
                merged.append(run)
        runs[i:j] = merged
        los[i:j] = [run.lo for run in merged]

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
