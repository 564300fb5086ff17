"""The rebuilt log: per key, its Raft log as index -> term runs, followed through every step
(traces/README.md "Version 3" states each rule and why it is sound).

A version-3 ``log_append`` says every entry's term (``terms``) and the term before the
batch (``prev_term``); a version-2 one only its last entry's. Anything else that moves the
WAL (create, a copied WAL, deletion, a crash's lost steps, a resynchronised state) is
followed from the state the step reports: the last OpId is known, the rest unknown
(``log_sync``). The tracker checks what one key can see (a ``prev_term`` its log
contradicts, a commit its log does not hold, a batch cutting what it committed) and emits
the facts of the cross-node log checks (``global_checks``: Log Matching, Leader
Completeness, State-Machine Safety, appends of a term nobody won, commits beyond the
leader's). It restates no Raft rule: which step is allowed is the spec's (``replay``);
the tracker only records what the allowed steps wrote, and compares records.

Invariants a reader can rely on: while ``log_on``, the runs ``[start, term]`` have
ascending starts, the first at ``log_lo``, and cover exactly ``log_lo..log_hi``; entries
``c_done + 1..commit_hi`` are committed but not yet reported; every fact leaves through
``facts`` (drained by the driver). The tracker's state is all in the keys (``KeyState``):
the object itself holds only where its facts go, so ``replay.Replayer`` holds one and so
can a test.

The fast path. A driver replays a memo hit of a clean append or commit without the
general path (``local.stream_node``, ``Replayer.shape_step``), through ``append`` and
``commit_step``: each first asks whether the step only extends what the key already has
(an append after the log's last run, of its term; a commit inside that run) and then does
only that; anything else takes the general rule below it. Both are here once, beside the
rules they shortcut.
"""

from __future__ import annotations

from typing import Any

from revivify.checker.explain import add_finding, key_finding
from revivify.checker.facts import (
    CommitRun,
    CommittedRun,
    EntryTermAppend,
    FollowerCommit,
    GlobalFact,
    Hold,
    LeaderCommit,
    Named,
    OwnTermAppend,
    RunStart,
    Truncation,
)
from revivify.checker.keys import KeyState, Violation, _Problem
from revivify.spec.model import WAL_IN_PLACE


class LogTracker:
    """The per-key commit runs, leader commits, first appends and the rebuilt log; its
    facts go to ``facts``."""

    __slots__ = ("facts",)

    def __init__(self, facts: list[GlobalFact]) -> None:
        self.facts = facts

    def _flush_run(self, k: KeyState) -> None:
        if k.c_term is not None:
            self.facts.append(CommitRun(k.tablet, k.c_lo, k.c_hi, k.c_term, k.node,
                                        k.c_file, k.c_line))
        k.c_hi = k.c_lo - 1
        k.c_term = None

    def leader_commit(self, k: KeyState, index: int, term: int, file: str,
                      line: int, lamport: int) -> None:
        """A commit of an entry of the leader's own term (drivers inline this): it is
        pending until another term's commit, a config change, a new incarnation or the
        end of the key flushes it (a leader's commits only grow within its term)."""
        p = k.lc_pending
        if p is not None and p[1] != term:
            self.flush_leader_commit(k)
        k.lc_pending = (index, term, lamport, file, line)

    def flush_leader_commit(self, k: KeyState) -> None:
        p = k.lc_pending
        if p is None:
            return
        k.lc_pending = None
        index, term, lamport, file, line = p
        got = k.lcommits.get(term)
        if got is None or index > got[0]:
            k.lcommits[term] = (index, lamport, file, line, k.cfg_index, k.cfg_voters)

    def first_append(self, k: KeyState, term: int, file: str, line: int,
                     lamport: int) -> None:
        """A log_append of an entry of the key's current term ``term``, the first of the
        term in this incarnation (clocks restart with an incarnation: keep the lowest)."""
        k.app_term = term
        got = k.appends.get(term)
        if got is None or lamport < got[0]:
            k.appends[term] = (lamport, file, line)

    @staticmethod
    def hold(k: KeyState, s: Any) -> None:
        """The key's state ``s`` (a ``Scalars`` tuple): its WAL's last OpId may be the
        highest the key reported."""
        if s.wal_last_term > k.h_term or (s.wal_last_term == k.h_term
                                          and s.wal_last_index > k.h_index):
            k.h_term = s.wal_last_term
            k.h_index = s.wal_last_index

    def wal_seen(self, k: KeyState, term: int, index: int, obs_term: int, file: str,
                 line: int, lamport: int, append: bool) -> None:
        """A reported state whose WAL ends at (term, index); ``append``: a log_append
        (drivers inline this for a memo hit)."""
        if term > k.h_term or (term == k.h_term and index > k.h_index):
            k.h_term = term
            k.h_index = index
        if append and term == obs_term and term != k.app_term:
            self.first_append(k, term, file, line, lamport)

    def commit_break(self, k: KeyState, index: int, term: int, file: str,
                     line: int) -> None:
        """A commit that does not extend the key's run (drivers extend it inline when
        ``index == k.c_hi + 1 and term == k.c_term``): flush the run, open a new one."""
        self._flush_run(k)
        k.c_lo = k.c_hi = index
        k.c_term = term
        k.c_file = file
        k.c_line = line

    # -----------------------------------------------------------------------------------
    # The rebuilt log (traces/README.md "Version 3"). Per key, the log as index -> term,
    # kept as runs over the known indices ``log_lo..log_hi``; indices below ``log_lo`` are
    # unknown. A version-3 log_append says every entry's term (``terms``) and the term
    # before the batch (``prev_term``); a version-2 one only its last entry's. Anything
    # else that moves the WAL (create, a copied WAL, deletion, a crash's lost steps, a
    # resynchronised state) is followed from the state the step reports: the last OpId is
    # known, the rest unknown (``log_sync``). The checks read the log at four moments: an
    # append (its prev_term, the entries it removes), a commit (the committed entries and
    # their terms), an election (the leader's log), and the end (facts for global_checks).

    def log_term(self, k: KeyState, index: int) -> int | None:
        """The term of the entry at ``index`` in the key's rebuilt log, if known."""
        if index == 0:
            return 0
        if not k.log_on or index < k.log_lo or index > k.log_hi:
            return None
        for start, term in reversed(k.log_runs):
            if start <= index:
                return term
        return None

    def log_sync(self, k: KeyState, s: Any) -> None:
        """Follow a step that moved the WAL without saying its entries: keep the rebuilt
        log when it still ends at the state's last OpId, else know only that OpId. A WAL
        that left (deletion) ends the log's lifetime (its commits with it)."""
        if s.wal not in WAL_IN_PLACE:
            if k.log_on or k.commit_hi:
                self._flush_committed(k)
                k.log_on = False
                k.log_lo, k.log_hi, k.log_runs = 1, 0, []
                k.commit_hi = k.c_done = 0
            return
        if k.log_on and k.log_hi == s.wal_last_index and \
                self.log_term(k, k.log_hi) == s.wal_last_term:
            return
        self._flush_committed(k)
        if not k.log_on:
            # A new log (created, or copied): nothing committed in it yet.
            k.commit_hi = k.c_done = 0
        k.log_on = True
        k.log_hi = s.wal_last_index
        if k.log_hi == 0:
            k.log_lo, k.log_runs = 1, []
        else:
            k.log_lo, k.log_runs = k.log_hi, [[k.log_hi, s.wal_last_term]]

    def log_append_step(self, k: KeyState, first: int, prev: int | None,
                        terms: tuple[tuple[int, int], ...] | None, op_term: int,
                        op_index: int, node_term: int, file: str, line: int, lamport: int,
                        args_b: bytes) -> list[Violation] | None:
        """A log_append the spec accepted (the batch ``first..op_index``, its ``prev_term``
        and ``terms`` if it says them, by a node in term ``node_term`` after the step):
        check its prev_term against the rebuilt log, find the entries it removes, apply
        the batch, note its runs' starts and terms."""
        assert first >= 1 and op_index >= first, (first, op_index)
        found: list[Violation] | None = None
        runs = k.log_runs
        if not k.log_on:  # a WAL the model has not seen (cannot happen after log_sync)
            k.log_on, k.log_lo, k.log_hi = True, first, first - 1
            runs.clear()
        if first == k.log_hi + 1:  # the common case: a pure append
            known_prev: int | None = runs[-1][1] if runs else 0 if first == 1 else None
        else:
            known_prev = self.log_term(k, first - 1)
        if prev is not None and known_prev is not None and known_prev != prev:
            found = [key_finding(k, file, line, "log_append", args_b, _Problem(
                "ArgMismatch", "violation", "args.prev_term",
                f"prev_term {prev}, but this node's log holds term {known_prev} at index "
                f"{first - 1}", (str(known_prev),), str(prev)), -1)]
        pred = prev if prev is not None else known_prev
        if k.commit_hi > k.c_done and (first <= k.log_hi or (terms is None and
                                                             first < op_index)):
            self._flush_committed(k)  # before the runs below commit_hi change
        if first <= k.log_hi:
            found = self._truncation(k, first, terms, op_term, op_index, node_term, file,
                                     line, args_b, found)
            # Cut the log before ``first``.
            if first <= k.log_lo:
                runs.clear()
                k.log_lo = first
            else:
                while runs and runs[-1][0] >= first:
                    runs.pop()
        tappends = k.tappends
        if terms is None and first < op_index:
            # Version 2: only the last entry's term is known.
            runs.clear()
            k.log_lo, k.log_hi = op_index, op_index
            runs.append([op_index, op_term])
            got = tappends.get(op_term)
            if got is None or lamport < got[0]:
                tappends[op_term] = (lamport, file, line)
            k.tap_term = op_term
            return found
        pos = first
        for term, count in terms if terms is not None else ((op_term, 1),):
            if pred != term and pred is not None and (term, pos, pred) not in k.starts:
                k.starts.add((term, pos, pred))
                self.facts.append(RunStart(k.tablet, term, pos, pred, k.node, file, line,
                                           lamport))
            if not (runs and runs[-1][1] == term):
                runs.append([pos, term])
            got = tappends.get(term)
            if got is None or lamport < got[0]:
                tappends[term] = (lamport, file, line)
            pos += count
            pred = term
        k.log_hi = op_index
        k.tap_term = op_term
        return found

    def _truncation(self, k: KeyState, first: int, terms: tuple[tuple[int, int], ...] | None,
                    op_term: int, op_index: int, node_term: int, file: str, line: int,
                    args_b: bytes, found: list[Violation] | None) -> list[Violation] | None:
        """The entries a batch starting at ``first <= log_hi`` removes or replaces. Each
        known one goes out as a "trunc" fact (global_checks compares it with what was
        committed); removing an entry this key committed whose term the log no longer
        knows is reported here (``CommittedEntryTruncated``)."""
        hi = k.log_hi
        # The batch's known terms over first..op_index, as (lo, hi, term) segments.
        new: list[tuple[int, int, int]] = []
        if terms is not None:
            pos = first
            for term, count in terms:
                new.append((pos, pos + count - 1, term))
                pos += count
        else:
            new.append((op_index, op_index, op_term))
        old = self._segments(k, max(first, k.log_lo), hi)
        for lo, top, term in old:
            gone: list[tuple[int, int]] = []
            if top > op_index:
                gone.append((max(lo, op_index + 1), top))
            for nlo, nhi, nterm in new:
                a, b = max(lo, nlo), min(top, nhi)
                if a <= b and nterm != term:
                    gone.append((a, b))
            for a, b in gone:
                self.facts.append(Truncation(k.tablet, a, b, term, k.node, file, line,
                                             node_term))
        top_unknown = min(k.commit_hi, hi, k.log_lo - 1)
        if op_index + 1 <= top_unknown:
            found = add_finding(found, key_finding(k, file, line, "log_append", args_b,
                                                     _Problem(
                "CommittedEntryTruncated", "violation", "StateMachineSafety",
                f"the batch {first}..{op_index} removes entries {op_index + 1}.."
                f"{top_unknown}, which this node committed (up to index {k.commit_hi})",
                (), ""), -1))
        return found

    def _segments(self, k: KeyState, lo: int, hi: int) -> list[tuple[int, int, int]]:
        """The rebuilt log's known entries in lo..hi as (lo, hi, term) segments."""
        out: list[tuple[int, int, int]] = []
        if not k.log_on:
            return out
        lo, hi = max(lo, k.log_lo), min(hi, k.log_hi)
        runs = k.log_runs
        for n, (start, term) in enumerate(runs):
            end = runs[n + 1][0] - 1 if n + 1 < len(runs) else k.log_hi
            a, b = max(start, lo), min(end, hi)
            if a <= b:
                out.append((a, b, term))
        return out

    def commit_step(self, k: KeyState, index: int, term: int, lead: bool, tx: int,
                    file: str, line: int, lamport: int, args_b: bytes) -> list[
                        Violation] | None:
        """A commit of ``index`` (naming ``term``) by the key, in its term ``tx``: what
        the rebuilt log says (``CommitNotInLog``; the entries it commits, reported by
        ``_flush_committed``), the key's run of named commits where the log does not know
        the entry, its leader commits and its highest commit per term while following."""
        runs = k.log_runs
        hi = k.log_hi
        if runs and runs[-1][0] <= index <= hi and runs[-1][1] == term and tx == k.ctx \
                and k.commit_hi > k.c_done:
            # The fast path: the log's last run holds the entry, in the term the key
            # committed its last entries in. The committed range grows; the rest of the
            # general rule below would change nothing (the log says the term, so the run
            # of named commits stays; nothing to flush).
            if index > k.commit_hi:
                k.commit_hi = index
            if lead:
                self.leader_commit(k, index, term, file, line, lamport)
            else:
                got = k.fcommits.get(tx)
                if got is None or index > got[0]:
                    k.fcommits[tx] = (index, lamport, file, line)
            return None
        if runs:
            last = runs[-1]
            have = last[1] if last[0] <= index <= hi else self.log_term(k, index)
        else:
            have = None
        if have != term:  # the log does not say it (or says otherwise): name it
            if index == k.c_hi + 1 and term == k.c_term:
                k.c_hi = index
            else:
                self.commit_break(k, index, term, file, line)
        if lead:  # = leader_commit
            self.leader_commit(k, index, term, file, line, lamport)
        else:
            got = k.fcommits.get(tx)
            if got is None or index > got[0]:
                k.fcommits[tx] = (index, lamport, file, line)
        if runs and index > k.commit_hi:
            if tx != k.ctx:
                self._flush_committed(k)
                k.ctx = tx
            if k.commit_hi == k.c_done:
                k.cr_file, k.cr_line = file, line
            k.commit_hi = index if index <= hi else hi
        if have is None or have == term:
            return None
        return [key_finding(k, file, line, "commit", args_b, _Problem(
            "CommitNotInLog", "violation", "StateMachineSafety",
            f"commit of index {index} naming term {term}, but this node's log holds "
            f"term {have} at index {index}", (str(have),), str(term)), -1)]

    def _flush_committed(self, k: KeyState) -> None:
        """Report the committed entries ``c_done + 1..commit_hi`` the rebuilt log knows,
        as runs of one term: "commit" facts (CommitTermMismatch, every index) and "crun"
        facts with the term the key committed them in (the log checks)."""
        if k.commit_hi > k.c_done:
            for a, b, t in self._segments(k, k.c_done + 1, k.commit_hi):
                self.facts.append(CommitRun(k.tablet, a, b, t, k.node, k.cr_file,
                                            k.cr_line))
                self.facts.append(CommittedRun(k.tablet, a, b, t, k.node, k.cr_file,
                                               k.cr_line, k.ctx))
        k.c_done = k.commit_hi

    def append(self, k: KeyState, first: int, one: bool, prev: int | None,
               terms: tuple[tuple[int, int], ...] | None, term: int, index: int,
               lead: bool, node_term: int, file: str, line: int, lamport: int,
               args_b: bytes) -> list[Violation] | None:
        """A memo hit of a clean log_append (the batch ``first..index``, of entries of
        ``term`` only after one of ``term`` when ``one``; ``lead``: an entry of the key's
        current term), the key's state already the step's post state (= the general
        path's ``wal_seen`` + ``log_append_step`` for such a step)."""
        runs = k.log_runs
        if one and first == k.log_hi + 1 and term == k.tap_term and runs and \
                runs[-1][1] == term and (not lead or term == k.app_term):
            # The fast path: it extends the log's last run, whose term this incarnation
            # has already appended (its lowest clock is recorded): nothing else changes.
            k.log_hi = index
            return None
        if lead and term != k.app_term:
            self.first_append(k, term, file, line, lamport)
        return self.log_append_step(k, first, prev, terms, term, index, node_term, file,
                                    line, lamport, args_b)

    def finish(self, k: KeyState, last: Any | None) -> None:
        """The key has no more events (``last``: its last state's ``Scalars`` tuple, None
        when it has none): flush what is pending and send its per-key facts."""
        self._flush_run(k)
        if last is not None:
            self.hold(k, last)
        self.flush_leader_commit(k)
        tablet, node = k.tablet, k.node
        facts = self.facts
        if k.h_term or k.h_index:
            facts.append(Hold(tablet, k.h_term, k.h_index, node))
        for t, (index, lam, f, ln, cfg, voters) in k.lcommits.items():
            facts.append(LeaderCommit(tablet, t, index, cfg, node, f, ln, lam, voters))
        for t, (lam, f, ln) in k.appends.items():
            facts.append(OwnTermAppend(tablet, t, node, f, ln, lam))
        self._flush_committed(k)
        for t, (lam, f, ln) in k.tappends.items():
            facts.append(EntryTermAppend(tablet, t, node, f, ln, lam))
        for t, (index, lam, f, ln) in k.fcommits.items():
            facts.append(FollowerCommit(tablet, t, index, node, f, ln, lam))
        if last is not None:
            facts.append(Named(tablet, k.copied, node, "\n".join(sorted(k.named | {node}))))
        k.h_term = k.h_index = 0
        k.lcommits = {}
        k.appends = {}
        k.app_term = -1
        k.tap_term = -1
        k.tappends = {}
        k.fcommits = {}
        k.named = set()
        k.copied = False
