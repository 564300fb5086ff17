"""Checks across keys: what no single (node, tablet) replay can see.

The replay core checks, per key, everything that one server's history decides: each step
allowed by the spec, term monotonic per (node, tablet) across incarnations (``TermRegression``)
and at most one vote per (node, tablet, term) across incarnations (``DoubleVote``). What
needs several keys is checked here, from the *facts* the core emits:

* ``TwoLeaders``: at most one node becomes leader of a tablet in a term (Raft election
  safety; the spec's ``OneLeaderPerTerm``);
* ``CommitTermMismatch``: for each (tablet, index), every replica that commits it commits the
  same term (Raft state-machine safety, as the traces can show it);
* ``OneReadyLeaderPerTerm``, ``ReadyHoldsCommitted``: the masters' checks across nodes
  (checker/catalog.py, from its ``mready``, ``ccommit`` and ``crecord`` facts);
* ``UuidReused``: a node UUID is formatted at most once (a wiped server comes back with a
  new UUID; seed 001, "Failure of a disk with consensus metadata").
* ``LeaderWithoutMajority``, ``CommitWithoutMajority``: a leader won its term with the
  votes of, and commits an entry of its term held by, a majority of the voters of the
  config it knew (the spec's ``has_majority`` and ``leader_commit`` system guards);
* ``CausalityViolation``: a vote is later (Lamport) than the candidate's start_election,
  an append of an entry of the node's own term later than that term's become_leader;
* the log checks over the logs the core rebuilds (contract version 3): ``LogMatching``
  (every run of a term starts at one index after one term), ``LeaderCompleteness`` (a
  leader of t holds what was committed in terms below t), ``CommittedEntryTruncated`` (no
  entry is cut in a term at or above one it was committed in), ``AppendOfUnelectedTerm``
  (entries only of terms someone won, when the input would show the winner) and
  ``CommitBeyondLeader`` (a follower commits no further than its term's leader did). They
  rest on terms, not clocks; traces/README.md "Version 3" argues each.

The majority and causality checks are sound, not complete: they stay silent whenever a
fact they need may be missing (a voter's files absent, steps a crashed incarnation may
have taken unlogged, membership changes the node had not yet learned). A crash excuses
only what the writer's guarantee lets it hide: at most ``max_frontier`` unlogged steps
per key (1 by default), from the state the key's last event in the crashed incarnation
reports, and none that the key's own log rules out (``_lost_*``; traces/README.md,
"Unlogged steps at a crash"). traces/README.md
("Majorities and causality") states each rule and why a correct run never breaks it. Their
facts (``checker.facts``) are one per key and term, per (tablet, term, voter) or per
incarnation, each merged as a min or a max, and both engines decide them here
(``GlobalChecks.violations``).

What a commit event says. ``commit(index, op_term)`` means every index up to ``index`` is
committed, and names the term of one entry: the one at ``index`` (a server commits once per
batch, so successive events of a key need not name consecutive indices). Where the key's
rebuilt log knows the committed entries (version 3), they all come as commit runs too, so
every such index is compared. Otherwise the terms of the
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
import json
from collections.abc import Callable
from typing import Any, Final, TypeVar

import attrs

from revivify.checker.catalog import CatalogGlobal
from revivify.checker.facts import (
    RECORDS,
    Blind,
    CatalogRecord,
    CatalogWrite,
    CommitRun,
    CommittedRun,
    ConfigCommit,
    Deny,
    Elect,
    EntryTermAppend,
    FollowerCommit,
    GlobalFact,
    Hold,
    Incarnation,
    KeyLast,
    Lead,
    Leader,
    LeaderCommit,
    LeaderLog,
    MasterReady,
    Named,
    OwnTermAppend,
    RunStart,
    ServerFormat,
    Truncation,
    Vote,
)
from revivify.checker.replay import DEFAULT_MAX_FRONTIER, Violation

K = TypeVar("K")
V = TypeVar("V", bound=tuple[Any, ...])
# Which tablets' findings to read (``GlobalChecks.violations``): None, every tablet's.
Only = Callable[[str], bool] | None


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
    """The local engine's incremental form of the checks (a ``facts.FactSink``)."""

    leaders: dict[tuple[str, int], list[tuple[str, str, int]]] = attrs.Factory(dict)
    # The checks across masters (checker/catalog.py), from the facts of every master.
    catalog: CatalogGlobal = attrs.Factory(CatalogGlobal)
    formats: dict[str, list[tuple[str, int]]] = attrs.Factory(dict)
    runs: dict[str, tuple[list[int], list[_Run]]] = attrs.Factory(dict)
    bad_commits: dict[tuple[str, int], list[tuple[int, str, str, int]]] = attrs.Factory(dict)
    leads: dict[tuple[str, int], set[tuple[int, str, str, int, int, str, int]]] = \
        attrs.Factory(dict)
    elects: dict[tuple[str, int, str], tuple[int, int, str, int]] = attrs.Factory(dict)
    votes: dict[tuple[str, int, str, str], tuple[int, str, int]] = attrs.Factory(dict)
    lcommits: dict[tuple[str, int, str], tuple[int, int, str, int, int, str]] = \
        attrs.Factory(dict)
    holds: dict[tuple[str, str], tuple[int, int]] = attrs.Factory(dict)
    appends: dict[tuple[str, int, str], tuple[int, str, int]] = attrs.Factory(dict)
    configs: dict[str, set[int]] = attrs.Factory(dict)
    incs: dict[str, dict[int, tuple[int, int, bool]]] = attrs.Factory(dict)
    # The log checks' tables (their facts: ``checker.facts``): per (tablet, term) the
    # (start, previous term) pairs of its runs, each with its lowest-clocked witness; per tablet the
    # committed runs, the leaders' logs and the removed entries; the lowest-clocked append
    # per (tablet, entry term, node); the highest non-leader commit per (tablet, term,
    # node); per tablet the nodes its events name.
    starts: dict[tuple[str, int], dict[tuple[int, int], tuple[int, str, str, int]]] = \
        attrs.Factory(dict)
    cruns: dict[str, set[tuple[int, int, int, int, str, str, int]]] = attrs.Factory(dict)
    llogs: dict[str, set[tuple[int, str, int, int, str, str, int]]] = attrs.Factory(dict)
    truncs: dict[str, set[tuple[int, int, int, int, str, str, int]]] = attrs.Factory(dict)
    tappends: dict[tuple[str, int, str], tuple[int, str, int]] = attrs.Factory(dict)
    fcommits: dict[tuple[str, int, str], tuple[int, int, str, int]] = attrs.Factory(dict)
    named: dict[str, set[str]] = attrs.Factory(dict)
    copied: set[tuple[str, str]] = attrs.Factory(set)
    # What bounds the excuse of a crash (``_lost_*``): per (tablet, node) and incarnation
    # the key's state after its last event in it (cmeta term or -1 without a cmeta, the
    # vote's UUID or "", the WAL's last index), and the votes logged as denied
    # (tablet, term, voter, candidate). ``max_frontier``: how many unlogged steps a crash
    # may hide per key, as the replay was told (the writer's guarantee: 1).
    klast: dict[tuple[str, str], dict[int, tuple[int, str, int]]] = attrs.Factory(dict)
    denies: set[tuple[str, int, str, str]] = attrs.Factory(set)
    max_frontier: int = DEFAULT_MAX_FRONTIER
    # Incarnations with a line that gave no event (malformed, unknown, a sequence gap...):
    # what they did is not all in the input, so their crash bounds nothing.
    blind: set[tuple[str, int]] = attrs.Factory(set)

    def fact(self, f: GlobalFact) -> None:
        """Merge one fact (``checker.facts``): its kind's merge below (``_MERGES``). Every
        merge is a min, a max or a union over a total order, so the tables do not depend
        on the order the facts come in."""
        _MERGES[type(f)](self, f)

    # -- the first checks: leaders, formats, commit runs, incarnations ----------------

    def _leader(self, f: Leader) -> None:
        self.leaders.setdefault((f.tablet, f.term), []).append((f.node, f.file, f.line))

    def _server_format(self, f: ServerFormat) -> None:
        self.formats.setdefault(f.node, []).append((f.file, f.line))

    def _commit_run(self, f: CommitRun) -> None:
        """``node`` committed every index ``lo..hi`` with ``term``, the first at
        ``file:line``. The tablet's runs stay disjoint and sorted: the parts of ``lo..hi``
        no run covers are added with ``term``; a covered index whose run has another term
        is a ``CommitTermMismatch`` (its witnesses: where each conflicting run began)."""
        tablet, lo, hi, term = f.tablet, f.lo, f.hi, f.term
        los, runs = self.runs.setdefault(tablet, ([], []))
        w = (f.node, f.file, f.line)
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

    def _incarnation(self, f: Incarnation) -> None:
        self.incs.setdefault(f.node, {})[f.inc] = (f.first, f.last, f.clean)

    # -- the majority and causality checks ---------------------------------------------

    def _lead(self, f: Lead) -> None:
        self.leads.setdefault((f.tablet, f.term), set()).add(
            (f.lamport, f.node, f.file, f.line, f.config_index, f.voters, f.inc))

    def _elect(self, f: Elect) -> None:
        _keep_min(self.elects, (f.tablet, f.term, f.node), (f.lamport, f.inc, f.file, f.line))

    def _vote(self, f: Vote) -> None:
        _keep_min(self.votes, (f.tablet, f.term, f.candidate, f.voter),
                  (f.lamport, f.file, f.line))

    def _leader_commit(self, f: LeaderCommit) -> None:
        key = (f.tablet, f.term, f.leader)
        new = (f.index, -f.lamport, f.file, f.line, f.config_index, f.voters)
        old = self.lcommits.get(key)
        if old is None or new[:4] > old[:4]:
            self.lcommits[key] = new

    def _hold(self, f: Hold) -> None:
        old = self.holds.get((f.tablet, f.node))
        if old is None or (f.term, f.index) > old:
            self.holds[(f.tablet, f.node)] = (f.term, f.index)

    def _own_term_append(self, f: OwnTermAppend) -> None:
        _keep_min(self.appends, (f.tablet, f.term, f.node), (f.lamport, f.file, f.line))

    def _config(self, f: ConfigCommit) -> None:
        self.configs.setdefault(f.tablet, set()).add(f.config_index)

    # -- the log checks' facts ----------------------------------------------------------

    def _run_start(self, f: RunStart) -> None:
        pairs = self.starts.setdefault((f.tablet, f.term), {})
        seen = (f.lamport, f.node, f.file, f.line)
        first = pairs.get((f.start, f.prev_term))
        if first is None or seen < first:
            pairs[(f.start, f.prev_term)] = seen

    def _committed_run(self, f: CommittedRun) -> None:
        self.cruns.setdefault(f.tablet, set()).add(
            (f.lo, f.hi, f.term, f.committed_in, f.node, f.file, f.line))

    def _leader_log(self, f: LeaderLog) -> None:
        self.llogs.setdefault(f.tablet, set()).add(
            (f.term, f.node, f.lo, f.hi, f.runs, f.file, f.line))

    def _truncation(self, f: Truncation) -> None:
        self.truncs.setdefault(f.tablet, set()).add(
            (f.lo, f.hi, f.term, f.node_term, f.node, f.file, f.line))

    def _entry_term_append(self, f: EntryTermAppend) -> None:
        _keep_min(self.tappends, (f.tablet, f.term, f.node), (f.lamport, f.file, f.line))

    def _follower_commit(self, f: FollowerCommit) -> None:
        key = (f.tablet, f.term, f.node)
        new = (f.index, -f.lamport, f.file, f.line)
        old = self.fcommits.get(key)
        if old is None or new > old:
            self.fcommits[key] = new

    def _named(self, f: Named) -> None:
        self.named.setdefault(f.tablet, set()).update(f.names.split("\n"))
        if f.copied:
            self.copied.add((f.tablet, f.node))

    # -- what bounds a crash's excuse ---------------------------------------------------

    def _key_last(self, f: KeyLast) -> None:
        incs = self.klast.setdefault((f.tablet, f.node), {})
        last = (f.term, f.voted_for, f.wal_last_index)
        if f.inc not in incs or last > incs[f.inc]:
            incs[f.inc] = last

    def _deny(self, f: Deny) -> None:
        self.denies.add((f.tablet, f.term, f.voter, f.candidate))

    def _blind(self, f: Blind) -> None:
        self.blind.add((f.node, f.inc))

    def _master_ready(self, f: MasterReady) -> None:
        self.catalog.ready(f)

    def _catalog_write(self, f: CatalogWrite) -> None:
        self.catalog.write(f)

    def _catalog_record(self, f: CatalogRecord) -> None:
        self.catalog.record(f)

    def _complete(self, node: str) -> bool:
        """All of the node's incarnations 1..n are in the input (a lost *last* file cannot
        be seen)."""
        incs = self.incs.get(node) or {}
        return bool(incs) and sorted(incs) == list(range(1, len(incs) + 1))

    # -- what a crash may hide (traces/README.md, "Majorities and causality") -----------
    #
    # A crash is not an event: an incarnation that did not end with ``server_stop`` may
    # have taken steps it never logged. The writer's guarantee bounds them: per key (node,
    # tablet) at most ``max_frontier`` (1 by default: the step in flight), taken after the
    # key's last logged event in that incarnation, from the state that event reports
    # (``klast``). Each ``_lost_*`` below asks whether such steps can be the one a check
    # would otherwise miss; each answers "maybe" whenever the facts do not rule it out.

    def _crashed_before(self, node: str, before: int) -> list[int]:
        """The incarnations of ``node`` that ended in a crash after writing their last
        event at a Lamport clock below ``before``: what they did unlogged before the crash
        may have caused an event at ``before`` (its messages carry a clock at least that
        last event's). Also those with a line that gave no event (``blind``) and began
        below ``before``: that line may be any step, at any point of the incarnation."""
        return sorted(inc for inc, (first, last, clean) in self.incs.get(node, {}).items()
                      if (not clean and last < before)
                      or ((node, inc) in self.blind and first < before))

    def _lost_vote(self, tablet: str, voter: str, cand: str, term: int, before: int,
                   voted: set[str]) -> bool:
        """``voter`` may have granted ``cand`` its vote in ``term`` unlogged, at a crash
        that may bear on an event at ``before``. ``voted``: the candidates ``voter`` logged
        a vote for in ``term`` (a grant, or its own start_election). Ruled out by

        * a logged vote for another candidate in ``term`` (one vote per term), or a logged
          denial of ``cand`` in ``term`` (the spec denies iff it cannot grant; the
          request's last OpId is fixed while ``cand`` campaigns, and the voter's log moves
          in ``term`` only by entries of ``term``'s leader, another node);
        * the key's state after its last event in the crashed incarnation: the vote is
          the step after it, so the term is at most ``term``, and in ``term`` itself the
          vote was still free or already ``cand``'s; a key with no event in the
          incarnation needs a step before the vote (its startup or creation), so two;
        * the states the key reports in later incarnations (up to one without a cmeta:
          a lost cmeta forgets): terms never go down and a vote stays for its term, so
          each is past ``term`` or still voted for ``cand`` in it."""
        if voted - {cand} or (tablet, term, voter, cand) in self.denies:
            return False
        lasts = self.klast.get((tablet, voter), {})
        for inc in self._crashed_before(voter, before):
            if (voter, inc) in self.blind:
                return True
            st = lasts.get(inc)
            if st is None:
                if self.max_frontier < 2:
                    continue
            elif st[0] > term or (st[0] == term and st[1] not in ("", cand)):
                continue
            if self._later_says_no_vote(lasts, inc, cand, term):
                continue
            return True
        return False

    @staticmethod
    def _later_says_no_vote(lasts: dict[int, tuple[int, str, int]], inc: int, cand: str,
                            term: int) -> bool:
        for j in sorted(j for j in lasts if j > inc):
            t_j, v_j, _ = lasts[j]
            if t_j < 0:
                return False  # no cmeta: what follows forgot the vote
            if t_j < term or (t_j == term and v_j != cand):
                return True
        return False

    def _lost_append(self, tablet: str, voter: str, term: int, before: int) -> bool:
        """``voter`` may have appended an entry of the leader's ``term`` unlogged (and
        acknowledged it), at a crash that may bear on the commit at ``before``. Only as
        the key's last step in an incarnation after which it logged nothing more: a later
        incarnation's states show its WAL (``hold``). The append is one step from a state
        in ``term``; from a lower term (or a key with no event in the incarnation) the
        term rise (or the startup) is a second."""
        lasts = self.klast.get((tablet, voter), {})
        for inc in self._crashed_before(voter, before):
            if (voter, inc) in self.blind:
                return True
            if any(j > inc for j in lasts):
                continue
            st = lasts.get(inc)
            if st is not None and st[0] > term:
                continue  # it would answer the leader of term with a higher term
            need = 1 if st is not None and st[0] == term else 2
            if need <= self.max_frontier:
                return True
        return False

    def _lost_leader(self, tablet: str, node: str, term: int, before: int) -> bool:
        """``node`` may have become leader of ``term`` and created an entry of it, neither
        logged, at a crash that may bear on an append at ``before``: two steps
        (become_leader, its log_append) from a state where it is the candidate of
        ``term`` (its term, its own vote), three from a lower term or from no event in
        the incarnation (start_election, or the startup, first). The writer loses one."""
        lasts = self.klast.get((tablet, node), {})
        for inc in self._crashed_before(node, before):
            if (node, inc) in self.blind:
                return True
            st = lasts.get(inc)
            if st is not None and (st[0] > term or (st[0] == term and st[1] != node)):
                continue
            need = 2 if st is not None and st[0] == term else 3
            if need <= self.max_frontier:
                return True
        return False

    def _lost_commit(self, tablet: str, leader: str, term: int, index: int) -> bool:
        """``leader`` may have committed ``index`` unlogged (sending the commit index in
        its appends before it logs the commit) at a crash, then led ``term``: the commit
        is the key's step after its last event in a crashed incarnation, in a term up to
        ``term``, and commits only what its WAL held then (the WAL's last index; with
        more than one lost step an append could come first)."""
        lasts = self.klast.get((tablet, leader), {})
        for inc, (_, _, clean) in self.incs.get(leader, {}).items():
            if (leader, inc) in self.blind:
                return True
            if clean:
                continue
            if self.max_frontier >= 2:
                return True
            st = lasts.get(inc)
            if st is not None and st[0] <= term and st[2] >= index:
                return True
        return False

    def _slack(self, tablet: str, cfg: int) -> int:
        """How many single-voter changes the config a node acted on may be from the one it
        last committed: one uncommitted change, plus each later config any node of the
        tablet committed (see the module docstring)."""
        return 1 + sum(1 for ci in self.configs.get(tablet, ()) if ci > cfg)

    def _majority_violations(self, only: Only = None) -> list[Violation]:
        out: list[Violation] = []
        # Each grant's (lowest) clock: a vote counts toward a leader's majority only if it
        # is traced below the leader's become_leader. A voter traces its vote before the
        # answer leaves (the plan order, impl/consensus/plan.py) and the answer carries its
        # clock, so a vote that helped win the term is below it; one traced at or above it
        # was answered before it was durable, or came after the election was won.
        granted_to: dict[tuple[str, int, str], dict[str, int]] = {}
        voted: dict[tuple[str, int, str], set[str]] = {}
        for (tablet, term, cand, voter), (vlam, _, _) in self.votes.items():
            if only is not None and not only(tablet):
                continue
            granted_to.setdefault((tablet, term, cand), {})[voter] = vlam
            voted.setdefault((tablet, term, voter), set()).add(cand)
        for tablet, term, cand in self.elects:
            if only is not None and not only(tablet):
                continue
            voted.setdefault((tablet, term, cand), set()).add(cand)
        for (tablet, term), leads in self.leads.items():
            if only is not None and not only(tablet):
                continue
            for lam, node, f, ln, cfg, payload, _ in sorted(leads):
                if cfg < 0 or not payload:
                    continue
                voters: list[str] = json.loads(payload)
                if not voters or not all(self._complete(v) for v in voters):
                    continue
                votes = granted_to.get((tablet, term, node), {})
                granted = sorted(
                    v for v in voters if v == node or votes.get(v, lam) < lam
                    or self._lost_vote(tablet, v, node, term, lam,
                                       voted.get((tablet, term, v), set())))
                slack = self._slack(tablet, cfg)
                if 2 * len(granted) + slack <= len(voters):
                    out.append(Violation(
                        kind="LeaderWithoutMajority", severity="violation", file=f, line=ln,
                        subject=f"tablet={tablet} term={term} leader={node}",
                        message=f"{node} became leader of tablet {tablet} in term {term} "
                                f"with the votes of {granted or 'no voter'} out of the "
                                f"{len(voters)} voters {voters} of config {cfg} (a majority "
                                f"needs more, allowing {slack} membership change(s))",
                        node=node, tablet=tablet, event="become_leader",
                        failed="has_majority", witnesses=tuple(granted)))
        for (tablet, term, node), (index, neg_lam, f, ln, cfg, payload) in \
                self.lcommits.items():
            if cfg < 0 or not payload or (only is not None and not only(tablet)):
                continue
            voters = json.loads(payload)
            if not voters or not all(self._complete(v) for v in voters):
                continue
            holders = sorted(v for v in voters
                             if self.holds.get((tablet, v), (0, 0)) >= (term, index)
                             or self._lost_append(tablet, v, term, -neg_lam))
            slack = self._slack(tablet, cfg)
            if 2 * len(holders) + slack <= len(voters):
                out.append(Violation(
                    kind="CommitWithoutMajority", severity="violation", file=f, line=ln,
                    subject=f"tablet={tablet} term={term} leader={node}",
                    message=f"leader {node} of term {term} committed index {index} of tablet "
                            f"{tablet}, but only {holders or 'no voter'} of the "
                            f"{len(voters)} voters {voters} of config {cfg} ever held an "
                            f"entry at or past ({term}, {index}) (allowing {slack} "
                            f"membership change(s))",
                    node=node, tablet=tablet, event="commit", failed="leader_commit",
                    witnesses=tuple(holders)))
        return out

    def _causality_violations(self, only: Only = None) -> list[Violation]:
        out: list[Violation] = []
        for (tablet, term, cand, voter), (lam, f, ln) in self.votes.items():
            e = self.elects.get((tablet, term, cand))
            if e is None or lam > e[0] or (only is not None and not only(tablet)):
                continue
            # A request from a later incarnation of the candidate (its clock restarts)
            # could carry a lower clock: only flag when none of them began below the vote.
            later = [first for inc, (first, _, _) in self.incs.get(cand, {}).items()
                     if inc > e[1]]
            if any(first < lam for first in later):
                continue
            out.append(Violation(
                kind="CausalityViolation", severity="violation", file=f, line=ln,
                subject=f"tablet={tablet} term={term} vote={voter}->{cand}",
                message=f"{voter} granted its term-{term} vote to {cand} at Lamport {lam}, "
                        f"not after {cand}'s start_election for term {term} (Lamport "
                        f"{e[0]}, {e[2]}:{e[3]}): the vote answers a request not yet sent",
                node=voter, tablet=tablet, event="vote_granted", failed="VoteAfterRequest",
                witnesses=(f"{e[2]}:{e[3]} start_election lamport={e[0]}",)))
        for (tablet, term, node), (lam, f, ln) in self.appends.items():
            leads = self.leads.get((tablet, term))
            if not leads or (only is not None and not only(tablet)):
                continue
            first = min(leads)
            if lam > first[0]:
                continue
            out.append(Violation(
                kind="CausalityViolation", severity="violation", file=f, line=ln,
                subject=f"tablet={tablet} term={term} append={node}",
                message=f"{node} appended an entry of term {term} (its own term) at Lamport "
                        f"{lam}, not after {first[1]} became leader of term {term} (Lamport "
                        f"{first[0]}, {first[2]}:{first[3]}): only that leader sends it "
                        f"entries in term {term}",
                node=node, tablet=tablet, event="log_append", failed="AppendAfterLeader",
                witnesses=(f"{first[2]}:{first[3]} become_leader lamport={first[0]}",)))
        return out

    # -- the log checks (contract version 3: the rebuilt logs) --------------------------

    def _tablet_complete(self, tablet: str) -> bool:
        """Every node the tablet's events name (its replicas, the voters of its configs,
        vote candidates, copy callers and sources) has its whole trace in the input."""
        named = self.named.get(tablet, set())
        return bool(named) and all(self._complete(n) for n in named)

    def _log_violations(self, only: Only = None) -> list[Violation]:
        return (self._log_matching(only) + self._leader_completeness(only)
                + self._committed_truncated(only) + self._unelected_appends(only)
                + self._commits_beyond_leader(only))

    def _log_matching(self, only: Only = None) -> list[Violation]:
        """``LogMatching``: the entries of a term form one run in every log that holds
        them, starting where the term's leader began it, after the same previous term."""
        out: list[Violation] = []
        for (tablet, term), pairs in self.starts.items():
            if len(pairs) < 2 or (only is not None and not only(tablet)):
                continue
            w = sorted((lam, node, f, ln, start, pred)
                       for (start, pred), (lam, node, f, ln) in pairs.items())
            _, _, f, ln, _, _ = w[-1]
            out.append(Violation(
                kind="LogMatching", severity="violation", file=f, line=ln,
                subject=f"tablet={tablet} term={term}",
                message=f"the entries of term {term} of tablet {tablet} begin at different "
                        "places in different logs (Raft's Log Matching: an entry decides "
                        "every entry before it): "
                        + "; ".join(f"{node} at index {start} after term {pred}"
                                    for _, node, _, _, start, pred in w),
                tablet=tablet, event="log_append", failed="LogMatching",
                witnesses=tuple(f"{fl}:{li} {node} index={start} prev_term={pred}"
                                for _, node, fl, li, start, pred in w)))
        return out

    def _leader_completeness(self, only: Only = None) -> list[Violation]:
        """``LeaderCompleteness``: a leader of term t holds every entry committed by a
        node in a term below t (a commit in term u means the entry was committed by the
        leader of u or an earlier one, so every leader of a later term holds it)."""
        out: list[Violation] = []
        for tablet, llogs in self.llogs.items():
            if only is not None and not only(tablet):
                continue
            crs = sorted(self.cruns.get(tablet, ()), key=lambda c: (c[0], c[3], c[4:]))
            if not crs:
                continue
            for t, node, lo, hi, runs_json, f, ln in sorted(llogs):
                runs: list[list[int]] = json.loads(runs_json)
                starts = [r[0] for r in runs]
                miss: tuple[int, int, int | None, str, str, int, int] | None = None
                for clo, chi, cterm, tx, cnode, cf, cln in crs:
                    if tx >= t:
                        continue
                    if chi > hi:
                        miss = (max(clo, hi + 1), cterm, None, cnode, cf, cln, tx)
                        break
                    index = max(clo, lo)
                    while index <= chi:
                        j = bisect.bisect_right(starts, index) - 1
                        if j < 0:
                            break
                        if runs[j][1] != cterm:
                            miss = (index, cterm, runs[j][1], cnode, cf, cln, tx)
                            break
                        index = starts[j + 1] if j + 1 < len(starts) else hi + 1
                    if miss:
                        break
                if miss is None:
                    continue
                index, cterm, have, cnode, cf, cln, tx = miss
                holds = "has no entry" if have is None else f"holds term {have}"
                out.append(Violation(
                    kind="LeaderCompleteness", severity="violation", file=f, line=ln,
                    subject=f"tablet={tablet} term={t} leader={node}",
                    message=f"{node} became leader of tablet {tablet} in term {t} but its "
                            f"log {holds} at index {index}, where {cnode} committed an "
                            f"entry of term {cterm} while in term {tx} < {t}",
                    node=node, tablet=tablet, event="become_leader",
                    failed="LeaderCompleteness",
                    witnesses=(f"{cf}:{cln} {cnode} committed ({cterm}, {index}) in term "
                               f"{tx}",)))
        return out

    def _committed_truncated(self, only: Only = None) -> list[Violation]:
        """``CommittedEntryTruncated``: a node removes an entry from its log (a batch
        overwrites or cuts it) while in a term at or above one in which some node had
        committed that entry."""
        out: list[Violation] = []
        for tablet, truncs in self.truncs.items():
            if only is not None and not only(tablet):
                continue
            crs = sorted(self.cruns.get(tablet, ()))
            if not crs:
                continue
            for lo, hi, term, now, node, f, ln in sorted(truncs):
                for clo, chi, cterm, tx, cnode, cf, cln in crs:
                    if cterm != term or tx > now or clo > hi or lo > chi:
                        continue
                    index = max(lo, clo)
                    out.append(Violation(
                        kind="CommittedEntryTruncated", severity="violation", file=f,
                        line=ln, subject=f"tablet={tablet} index={index} node={node}",
                        message=f"{node} (in term {now}) removed the entry ({term}, "
                                f"{index}) from its log, which {cnode} had committed in "
                                f"term {tx}: a committed entry is never truncated",
                        node=node, tablet=tablet, event="log_append",
                        failed="StateMachineSafety",
                        witnesses=(f"{cf}:{cln} {cnode} committed ({cterm}, {index}) in "
                                   f"term {tx}",)))
                    break
        return out

    def _unelected_appends(self, only: Only = None) -> list[Violation]:
        """``AppendOfUnelectedTerm``: an entry of term t appended where no node became
        leader of t, in an input that would show that leader: every node the tablet's
        events name is present whole, and none of them crashed (possibly losing the vote
        that elected a leader named nowhere) before the append."""
        out: list[Violation] = []
        for (tablet, term, node), (lam, f, ln) in self.tappends.items():
            if term < 1 or (tablet, term) in self.leads or \
                    (only is not None and not only(tablet)):
                continue
            if not self._tablet_complete(tablet):
                continue
            named = self.named[tablet]
            if any(self._lost_leader(tablet, n, term, lam) for n in named):
                continue
            out.append(Violation(
                kind="AppendOfUnelectedTerm", severity="violation", file=f, line=ln,
                subject=f"tablet={tablet} term={term} append={node}",
                message=f"{node} appended an entry of term {term} to tablet {tablet}, but "
                        f"no node became leader of term {term} (every trace the tablet's "
                        f"events name is here: {sorted(named)}): only a leader creates "
                        "entries",
                node=node, tablet=tablet, event="log_append", failed="ElectionSafety"))
        return out

    def _commits_beyond_leader(self, only: Only = None) -> list[Violation]:
        """``CommitBeyondLeader``: a node that is not leading commits index i in term u,
        which it learned from the leader of u; that leader's commit index came from its
        own commits (as leader, in a term up to u) or from commits it learned in an
        earlier term. Flagged when none reaches i, the leader's trace is whole and it
        never crashed (a crash may lose the event of a commit), nor copied the tablet (a
        copied replica starts from the copied data's commit index, logged by no commit of
        its own)."""
        out: list[Violation] = []
        best: dict[tuple[str, str], list[tuple[int, int, bool]]] = {}
        for (tablet, t, node), lc in self.lcommits.items():
            if only is not None and not only(tablet):
                continue
            best.setdefault((tablet, node), []).append((t, lc[0], True))
        for (tablet, t, node), fc in self.fcommits.items():
            if only is not None and not only(tablet):
                continue
            best.setdefault((tablet, node), []).append((t, fc[0], False))
        for (tablet, tf, node), (index, _, f, ln) in self.fcommits.items():
            leads = self.leads.get((tablet, tf))
            if not leads or (only is not None and not only(tablet)):
                continue
            leaders = sorted({lead[1] for lead in leads})
            excused = False
            for leader in leaders:
                # A leader's commit index may come from a copy (the copied data's applied
                # index), and a crash may have lost a commit's event.
                if not self._complete(leader) or (tablet, leader) in self.copied or \
                        self._lost_commit(tablet, leader, tf, index):
                    excused = True
                    break
                if any(i >= index and (t <= tf if led else t < tf)
                       for t, i, led in best.get((tablet, leader), ())):
                    excused = True
                    break
            if excused:
                continue
            out.append(Violation(
                kind="CommitBeyondLeader", severity="violation", file=f, line=ln,
                subject=f"tablet={tablet} term={tf} commit={node}",
                message=f"{node} committed index {index} of tablet {tablet} in term {tf}, "
                        f"beyond anything the leader of term {tf} ({', '.join(leaders)}) "
                        "committed by then (as leader up to that term, or learned before "
                        "it)",
                node=node, tablet=tablet, event="commit", failed="CommitFromLeader",
                witnesses=tuple(leaders)))
        return out

    def violations(self, only: Only = None) -> list[Violation]:
        """The findings of the tables; with ``only``, those of the checks per tablet only
        for the tablets it keeps (the checks per node and the masters' are all read): a
        tablet's findings read only its own entries and the tables per node, so they are
        the same with or without it (the follower's judgement by shards,
        checker/follow.py ``Follower._judge_shards``)."""
        out: list[Violation] = (self._majority_violations(only)
                                + self._causality_violations(only)
                                + self._log_violations(only) + self.catalog.violations())
        for (tablet, term), w in self.leaders.items():
            if len({n for n, _, _ in w}) > 1 and (only is None or only(tablet)):
                out.append(leader_violation(tablet, term, w))
        for node, fw in self.formats.items():
            if len(fw) > 1:
                out.append(uuid_violation(node, fw))
        for (tablet, index), cw in self.bad_commits.items():
            if only is None or only(tablet):
                out.append(commit_violation(tablet, index, cw))
        return out

    def size(self) -> int:
        return (len(self.leaders) + len(self.formats)
                + sum(len(r[1]) for r in self.runs.values())
                + len(self.leads) + len(self.elects) + len(self.votes) + len(self.lcommits)
                + len(self.holds) + len(self.appends) + len(self.incs)
                + len(self.starts) + sum(len(x) for x in self.cruns.values())
                + sum(len(x) for x in self.llogs.values())
                + sum(len(x) for x in self.truncs.values()) + len(self.tappends)
                + len(self.fcommits) + len(self.named)
                + sum(len(x) for x in self.klast.values()) + len(self.denies)
                + len(self.blind))


def _keep_min(table: dict[K, V], key: K, value: V) -> None:
    old = table.get(key)
    if old is None or value < old:
        table[key] = value


# One merge per kind of fact (``GlobalChecks.fact``); what each kind says is in its record's
# docstring (checker/facts.py).
_MERGES: Final[dict[type[GlobalFact], Callable[[GlobalChecks, Any], None]]] = {
    Leader: GlobalChecks._leader, ServerFormat: GlobalChecks._server_format,
    CommitRun: GlobalChecks._commit_run, Incarnation: GlobalChecks._incarnation,
    Lead: GlobalChecks._lead, Elect: GlobalChecks._elect, Vote: GlobalChecks._vote,
    LeaderCommit: GlobalChecks._leader_commit, Hold: GlobalChecks._hold,
    OwnTermAppend: GlobalChecks._own_term_append, ConfigCommit: GlobalChecks._config,
    RunStart: GlobalChecks._run_start, CommittedRun: GlobalChecks._committed_run,
    LeaderLog: GlobalChecks._leader_log, Truncation: GlobalChecks._truncation,
    EntryTermAppend: GlobalChecks._entry_term_append,
    FollowerCommit: GlobalChecks._follower_commit, Named: GlobalChecks._named,
    KeyLast: GlobalChecks._key_last, Deny: GlobalChecks._deny, Blind: GlobalChecks._blind,
    MasterReady: GlobalChecks._master_ready, CatalogWrite: GlobalChecks._catalog_write,
    CatalogRecord: GlobalChecks._catalog_record,
}
assert set(_MERGES) == set(RECORDS), "a kind of fact without its merge"


# -- merging facts that are taken back ------------------------------------------------------

_ABSENT: Final = object()


class Journal:
    """Facts merged into ``tables`` that ``undo`` takes back: the follower's provisional
    judgement (checker/follow.py: every key's pending facts merged as if it ended now,
    the findings read, then the tables as they were) on its own tables, where a copy of
    them would double their memory for the time of a judgement.

    Before a fact is merged, each entry its merge may change is saved: ``_TOUCHES`` names
    them per kind, beside ``_MERGES``. A merge only adds entries or replaces their values
    (never deletes), and a dict keeps its insertion order, so an entry that was absent
    needs no record: ``undo`` pops each table's newest entries back to its length before
    the first fact; an entry that was present is saved (its value, copied when mutable)
    and put back. Only the kinds a key's end flushes (``LogTracker.finish``) and the
    running incarnations are journaled; any other kind is refused. ``violations`` reads
    the tables without changing them (tests/trace/test_follow.py checks both: the tables
    after ``undo`` are the tables before, byte for byte)."""

    def __init__(self, tables: GlobalChecks) -> None:
        self.tables = tables
        # table, key, old value, flat: an entry saved twice is restored to its first
        # value, since ``undo`` goes backwards.
        self.saved: list[Any] = []
        # Per dict touched, its length before the first fact.
        self.lengths: dict[int, tuple[dict[Any, Any], int]] = {}
        # Per table saved with a copy, the keys of the entries already looked at.
        self.copied: dict[int, set[Any]] = {}
        # bad_commits: its entries appear where two commit runs conflict (rare): saved
        # whole, once.
        self.bad: dict[tuple[str, int], list[tuple[int, str, str, int]]] | None = None

    def fact(self, f: GlobalFact) -> None:
        touch = _TOUCHES.get(type(f))
        if touch is None:
            raise TypeError(f"a {type(f).__name__} fact cannot be taken back")
        touch(self, f)
        self.tables.fact(f)

    def incarnation(self, node: str, inc: int, first: int, last: int) -> None:
        """A running incarnation, taken as crashed after its last line (unless the
        tables know it already)."""
        self.save(self.tables.incs, node, dict)
        self.tables.incs.setdefault(node, {}).setdefault(inc, (first, last, False))

    def save(self, table: Any, key: Any, copy: Callable[[Any], Any] | None = None) -> None:
        """Save ``table[key]`` (a set ``table``: whether it holds ``key``)."""
        if isinstance(table, set):
            self.saved += (table, key, key in table)
            return
        if id(table) not in self.lengths:
            self.lengths[id(table)] = (table, len(table))
        if copy is not None:
            # An entry shared by several keys (per tablet, per node): what it was before
            # the first fact is all that matters, so it is looked at once.
            done = self.copied.setdefault(id(table), set())
            if key in done:
                return
            done.add(key)
        old = table.get(key, _ABSENT)
        if old is _ABSENT:
            return  # popped by ``undo``
        self.saved += (table, key, old if copy is None else copy(old))

    def save_bad_commits(self) -> None:
        if self.bad is None:
            self.bad = {k: list(v) for k, v in self.tables.bad_commits.items()}

    def undo(self) -> None:
        """The tables as they were before the first fact."""
        saved = self.saved
        for at in range(len(saved) - 3, -1, -3):
            table, key, old = saved[at:at + 3]
            if isinstance(table, set):
                if old:
                    table.add(key)
                else:
                    table.discard(key)
            else:
                table[key] = old
        for table, length in self.lengths.values():
            while len(table) > length:
                table.popitem()  # the newest entry: one the facts added
        if self.bad is not None:
            self.tables.bad_commits.clear()
            self.tables.bad_commits.update(self.bad)
        saved.clear()
        self.lengths.clear()
        self.copied.clear()
        self.bad = None


def _copy_runs(entry: tuple[list[int], list[_Run]]) -> tuple[list[int], list[_Run]]:
    los, runs = entry
    return list(los), [_Run(r.lo, r.hi, r.term, r.witness) for r in runs]


def _touch_commit_run(j: Journal, f: CommitRun) -> None:
    j.save(j.tables.runs, f.tablet, _copy_runs)
    j.save_bad_commits()


def _touch_named(j: Journal, f: Named) -> None:
    j.save(j.tables.named, f.tablet, set)
    if f.copied:
        j.save(j.tables.copied, (f.tablet, f.node))


# The entries each kind's merge (``_MERGES``) may change, for the kinds a ``Journal`` takes.
_TOUCHES: Final[dict[type[GlobalFact], Callable[[Journal, Any], None]]] = {
    CommitRun: _touch_commit_run,
    CommittedRun: lambda j, f: j.save(j.tables.cruns, f.tablet, set),
    Hold: lambda j, f: j.save(j.tables.holds, (f.tablet, f.node)),
    LeaderCommit: lambda j, f: j.save(j.tables.lcommits, (f.tablet, f.term, f.leader)),
    OwnTermAppend: lambda j, f: j.save(j.tables.appends, (f.tablet, f.term, f.node)),
    EntryTermAppend: lambda j, f: j.save(j.tables.tappends, (f.tablet, f.term, f.node)),
    FollowerCommit: lambda j, f: j.save(j.tables.fcommits, (f.tablet, f.term, f.node)),
    Named: _touch_named,
}
