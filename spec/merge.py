"""Consensus-metadata merge (seed 001, "Consensus metadata merge").

When a follower downloads the remote's consensus metadata during tablet copy, it must not
simply adopt it: that would let the term go backwards or forget a vote (consensus amnesia).
The seed's three rules:

  1. Always adopt the highest term when merging consensus metadata.
  2. if remoteTerm <= localTerm: Retain vote history for localTerm, if any.
  3. Always adopt the remote's raft cluster membership configuration.

Rule 2 is silent on remoteTerm > localTerm. We follow what real Kudu settled on
(``ConsensusMetadata::MergeCommittedConsensusStatePB``): when the term rises, the vote is
cleared, because a vote belongs to a term and the new term has none yet; the remote's own
vote is never adopted (it is the remote's vote, not ours). When there is no local cmeta the
remote term and config are adopted with no vote.

Lemmas (proved for all integers by ``checker.prove``): the merged term is >= both inputs'
terms; when the merged term equals the local term the local vote is kept; the merged vote is
either the local vote or none; the merged config is the remote's.
"""

from __future__ import annotations

from typing import Any

import attrs

from revivify.spec.logic import Bool, Int, ite
from revivify.spec.model import NO_VOTE


@attrs.frozen
class MergedCmeta:
    term: Any
    voted_for: Any
    config_index: Any


def merge_cmeta(
    local_present: Bool,
    local_term: Int,
    local_vote: Int,
    remote_term: Int,
    remote_config_index: Int,
) -> MergedCmeta:
    """The merged (term, vote, config) per the rules above; works on values and z3 terms."""
    term_rises = remote_term > local_term
    # Without local cmeta there is nothing to retain: adopt the remote term, no vote.
    term = ite(local_present, ite(term_rises, remote_term, local_term), remote_term)
    vote = ite(local_present, ite(term_rises, NO_VOTE, local_vote), NO_VOTE)
    return MergedCmeta(term=term, voted_for=vote, config_index=remote_config_index)
