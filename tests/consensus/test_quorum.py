"""Property tests of quorum.py, the only code that counts votes and acknowledgements.

Why these properties: Raft's safety rests on one fact, that any two majorities of one
configuration share a member. One leader per term follows (a voter votes once per term, so
two winners would need a voter in both majorities to vote twice), and so does leader
completeness (the majority holding a committed entry meets every electing majority). The
other two functions must agree with the definition of a majority: an election is WON
exactly when the granted votes form one and LOST exactly when the refusals leave none
possible, never both, and once decided it stays decided as more answers arrive; the
committed index is the largest index a majority holds, and raising any voter's match index
can never lower it.
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from revivify.impl.consensus.quorum import (
    VoteResult,
    committed_index,
    has_quorum,
    majority,
    vote_result,
)

UUIDS = [str(k) for k in range(1, 8)]
voter_sets = st.frozensets(st.sampled_from(UUIDS), min_size=1, max_size=7)
answers = st.dictionaries(st.sampled_from([*UUIDS, "x", "y"]), st.booleans())
matches = st.dictionaries(st.sampled_from([*UUIDS, "x"]), st.integers(0, 20))


@given(st.integers(0, 50))
def test_majority_is_more_than_half(n: int) -> None:
    m = majority(n)
    assert 2 * m > n
    assert 2 * (m - 1) <= n  # and it is the smallest such number


@given(voter_sets, st.data())
def test_two_majorities_intersect(voters: frozenset[str], data: st.DataObject) -> None:
    a = data.draw(st.frozensets(st.sampled_from(sorted(voters))))
    b = data.draw(st.frozensets(st.sampled_from(sorted(voters))))
    if has_quorum(voters, a) and has_quorum(voters, b):
        assert a & b
    assert has_quorum(voters, a) == (len(a) >= majority(len(voters)))


@given(voter_sets, st.frozensets(st.sampled_from(["x", "y", "z"])),
       st.frozensets(st.sampled_from(UUIDS)))
def test_non_voters_never_count(voters: frozenset[str], outsiders: frozenset[str],
                                active: frozenset[str]) -> None:
    assert has_quorum(voters, active | outsiders) == has_quorum(voters, active)
    assert not has_quorum(voters, outsiders)


def test_no_voters_no_quorum() -> None:
    assert not has_quorum([], ["1"])
    assert vote_result([], {"1": True}) is VoteResult.LOST
    assert committed_index([], {"1": 5}) == 0


@given(voter_sets, answers)
def test_vote_result_matches_its_definition(voters: frozenset[str],
                                            votes: dict[str, bool]) -> None:
    granted = sum(1 for v in voters if votes.get(v) is True)
    refused = sum(1 for v in voters if votes.get(v) is False)
    need = majority(len(voters))
    result = vote_result(voters, votes)
    # WON and LOST are exclusive: a majority granted leaves no majority of refusals
    assert (result is VoteResult.WON) == (granted >= need)
    assert (result is VoteResult.LOST) == (granted < need and len(voters) - refused < need)
    # votes from outside the configuration change nothing
    inside = {k: v for k, v in votes.items() if k in voters}
    assert vote_result(voters, inside) is result


@given(voter_sets, answers, st.data())
def test_vote_result_is_monotone(voters: frozenset[str], votes: dict[str, bool],
                                 data: st.DataObject) -> None:
    """More answers never undo a decision: WON stays WON, LOST stays LOST."""
    before = vote_result(voters, votes)
    more = dict(votes)
    for v in sorted(voters):
        if v not in more and data.draw(st.booleans()):
            more[v] = data.draw(st.booleans())
    after = vote_result(voters, more)
    if before is not VoteResult.PENDING:
        assert after is before
    # once every voter answered, it is decided
    full = {v: more.get(v, False) for v in voters}
    assert vote_result(voters, full) is not VoteResult.PENDING


@given(voter_sets, st.data())
def test_two_candidates_never_both_win(voters: frozenset[str], data: st.DataObject) -> None:
    """One vote per voter per term: the granted sets of two candidates are disjoint."""
    choice = {v: data.draw(st.sampled_from(["a", "b", None])) for v in sorted(voters)}
    a = {v: c == "a" for v, c in choice.items() if c is not None}
    b = {v: c == "b" for v, c in choice.items() if c is not None}
    assert not (vote_result(voters, a) is VoteResult.WON
                and vote_result(voters, b) is VoteResult.WON)


@given(voter_sets, matches)
def test_committed_index_is_what_a_majority_holds(voters: frozenset[str],
                                                  match: dict[str, int]) -> None:
    c = committed_index(voters, match)
    need = majority(len(voters))
    holding = sum(1 for v in voters if match.get(v, 0) >= c)
    assert holding >= need
    # and it is the largest such index
    assert sum(1 for v in voters if match.get(v, 0) >= c + 1) < need
    # non-voters' matches are ignored
    assert committed_index(voters, {k: v for k, v in match.items() if k in voters}) == c


@given(voter_sets, matches, st.sampled_from(UUIDS), st.integers(0, 20))
def test_committed_index_is_monotone(voters: frozenset[str], match: dict[str, int],
                                     who: str, raise_by: int) -> None:
    before = committed_index(voters, match)
    higher = dict(match)
    higher[who] = higher.get(who, 0) + raise_by
    assert committed_index(voters, higher) >= before
