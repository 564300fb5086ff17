"""Majority arithmetic: the only place that counts votes and acknowledgements.

Pure functions over sets and maps (etcd's ``quorum/majority.go`` shape), property-tested in
tests/consensus/test_quorum.py. Only voters count; NON_VOTER members never appear in the
``voters`` argument.

Theory:
* A majority of n voters is n // 2 + 1: any two majorities of one configuration intersect,
  which is what makes "one leader per term" and "a committed entry survives" true.
* An election is WON once the granted votes form a majority, LOST once the refusals make a
  majority impossible, else PENDING. Votes from non-voters are ignored.
* The committed index of a configuration is the largest index that a majority has matched:
  sort the voters' match indexes in descending order and take the (majority - 1)-th. It is
  monotone in every argument (raising any match index never lowers it).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping


class VoteResult(enum.Enum):
    PENDING = "PENDING"
    WON = "WON"
    LOST = "LOST"


def majority(n_voters: int) -> int:
    """The size of a majority of ``n_voters`` (at least 1)."""
    if n_voters < 0:
        raise ValueError(f"negative voter count {n_voters}")
    return n_voters // 2 + 1


def vote_result(voters: Iterable[str], votes: Mapping[str, bool]) -> VoteResult:
    """The outcome of an election among ``voters`` given the answers so far."""
    voter_set = frozenset(voters)
    if not voter_set:
        return VoteResult.LOST
    need = majority(len(voter_set))
    granted = sum(1 for v in voter_set if votes.get(v) is True)
    refused = sum(1 for v in voter_set if votes.get(v) is False)
    if granted >= need:
        return VoteResult.WON
    if len(voter_set) - refused < need:
        return VoteResult.LOST
    return VoteResult.PENDING


def committed_index(voters: Iterable[str], match: Mapping[str, int]) -> int:
    """The largest index matched by a majority of ``voters`` (0 if none, or no voters)."""
    indexes = sorted((match.get(v, 0) for v in frozenset(voters)), reverse=True)
    if not indexes:
        return 0
    return indexes[majority(len(indexes)) - 1]


def has_quorum(voters: Iterable[str], active: Iterable[str]) -> bool:
    """Whether the ``active`` members include a majority of ``voters``."""
    voter_set = frozenset(voters)
    return len(voter_set & frozenset(active)) >= majority(len(voter_set)) if voter_set else False


__all__ = ["VoteResult", "committed_index", "has_quorum", "majority", "vote_result"]
