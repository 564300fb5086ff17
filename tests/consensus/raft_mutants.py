"""Seeded bugs in the Raft core, applied with pytest's monkeypatch (the core itself has no
mutation switches): test_mutants.py shows that the scenarios and the state machine catch
each one. A checker that cannot fail proves nothing.

Each mutant is a classic Raft bug, written as a small patch over the real code:

    double_vote           a follower grants a second vote in a term (ignores voted_for)
    no_log_check          votes ignore the election restriction (candidate's log may lag)
    commit_old_terms      the leader commits by counting replicas of any term (figure 8)
    read_without_round    ReadIndex answered at once, without the heartbeat round
    vote_not_durable      a vote is granted without writing it to the cmeta first
    follower_commit_unbounded  a follower takes the leader's commit index even when the
                          consistency check failed (bounded by its log, not by what matches)
    stale_leader_accepted AppendRequests from a lower term are accepted
"""

from __future__ import annotations

from collections.abc import Callable

import attrs
import pytest

from revivify.contract.events import VoteArgs
from revivify.impl.consensus import core as core_mod
from revivify.impl.consensus import quorum
from revivify.impl.consensus.core import RAFT_TRANSITIONS, RaftCore, ReadState, Role, Transition
from revivify.impl.consensus.log import RaftLog
from revivify.impl.consensus.messages import AppendRequest, Message, VoteRequest


@attrs.frozen
class Mutant:
    """A seeded bug: ``apply`` patches it in; ``scenarios`` are the testdata scripts that
    must stop with an InvariantViolation under it; ``machine`` is the (examples, steps)
    budget within which the state machine finds it (None: a sequence too specific for
    random search, left to the scenarios)."""

    name: str
    doc: str
    apply: Callable[[pytest.MonkeyPatch], None]
    scenarios: tuple[str, ...]
    machine: tuple[int, int] | None = None


def _wrap_rows(mp: pytest.MonkeyPatch, kind: type,
               wrapper: Callable[[Callable[[RaftCore, Message | None], None], RaftCore,
                                  Message | None], None]) -> None:
    for key, row in list(RAFT_TRANSITIONS.items()):
        if key[1] is kind:
            def handler(c: RaftCore, m: Message | None,
                        _orig: Callable[[RaftCore, Message | None], None] = row.handler
                        ) -> None:
                wrapper(_orig, c, m)
            mp.setitem(RAFT_TRANSITIONS, key, Transition(handler, row.facts))


def double_vote(mp: pytest.MonkeyPatch) -> None:
    def wrapper(orig: Callable[[RaftCore, Message | None], None], c: RaftCore,
                m: Message | None) -> None:
        if isinstance(m, VoteRequest) and not m.pre_vote and m.term == c.term \
                and c.role is Role.FOLLOWER:
            c.voted_for = None  # BUG: the vote of this term is forgotten
        orig(c, m)
    _wrap_rows(mp, VoteRequest, wrapper)


def no_log_check(mp: pytest.MonkeyPatch) -> None:
    mp.setattr(RaftLog, "up_to_date", lambda self, last_term, last_index: True)


def commit_old_terms(mp: pytest.MonkeyPatch) -> None:
    def _maybe_commit(self: RaftCore) -> None:
        match = {u: p.match for u, p in self.progress.items()}
        match[self.me] = self.durable_index
        candidate = quorum.committed_index(self.voters(), match)
        if candidate > self.commit_index:  # BUG: no "of the leader's own term" check
            self._advance_commit(candidate)
            if self._read_queue:
                self._start_read_rounds()
    mp.setattr(RaftCore, "_maybe_commit", _maybe_commit)


def read_without_round(mp: pytest.MonkeyPatch) -> None:
    def _start_read_rounds(self: RaftCore) -> None:
        if self.role is not Role.LEADER or not self._read_queue:
            return
        if not self.committed_in_term():
            return
        # BUG: no heartbeat round confirms that this node still leads
        self._read_states.extend(ReadState(r, self.commit_index) for r in self._read_queue)
        self._read_queue.clear()
    mp.setattr(RaftCore, "_start_read_rounds", _start_read_rounds)


def vote_not_durable(mp: pytest.MonkeyPatch) -> None:
    def _vote_fact(self: RaftCore, m: VoteRequest, *, granted: bool) -> None:
        fact = self._fact("vote_granted" if granted else "vote_denied", VoteArgs(
            candidate=m.src, t=m.term, cand_last_term=m.last_term,
            cand_last_index=m.last_index))
        self._emit(core_mod.Step(fact))  # BUG: no cmeta write
    mp.setattr(RaftCore, "_vote_fact", _vote_fact)


def follower_commit_unbounded(mp: pytest.MonkeyPatch) -> None:
    def wrapper(orig: Callable[[RaftCore, Message | None], None], c: RaftCore,
                m: Message | None) -> None:
        orig(c, m)
        if isinstance(m, AppendRequest) and c.role is Role.FOLLOWER and m.term == c.term:
            # BUG: the leader's commit index, bounded by our log, not by what matched
            c._advance_commit(min(m.commit_index, c.log.last_index))
    _wrap_rows(mp, AppendRequest, wrapper)


def stale_leader_accepted(mp: pytest.MonkeyPatch) -> None:
    orig = RaftCore._term_gate

    def _term_gate(self: RaftCore, m: Message) -> bool:
        if isinstance(m, AppendRequest) and m.term < self.term and self.role is Role.FOLLOWER:
            return True  # BUG: an old leader's entries are taken
        return orig(self, m)
    mp.setattr(RaftCore, "_term_gate", _term_gate)


MUTANTS: dict[str, Mutant] = {
    m.name: m for m in (
        Mutant("double_vote", "a second vote in one term", double_vote,
               ("votes",), (60, 40)),
        Mutant("no_log_check", "votes ignore the election restriction", no_log_check,
               ("votes",), (60, 40)),
        Mutant("commit_old_terms", "commit by counting old-term replicas", commit_old_terms,
               ("figure8",)),
        Mutant("read_without_round", "ReadIndex without a heartbeat round",
               read_without_round, ("read-index",)),
        Mutant("vote_not_durable", "a vote granted before it is durable", vote_not_durable,
               ("election", "votes"), (60, 40)),
        Mutant("follower_commit_unbounded", "follower commit not bounded by the match",
               follower_commit_unbounded, ("divergence", "figure8"), (300, 50)),
        Mutant("stale_leader_accepted", "AppendRequests of a lower term accepted",
               stale_leader_accepted, ("stale-leader",)),
    )
}
