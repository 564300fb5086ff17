"""merge_cmeta: the seed's merge rules, as properties over arbitrary local and remote cmeta."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from revivify.impl.storage.values import ConsensusMeta, MemberType, RaftConfig, RaftPeer
from revivify.impl.tserver.copy import merge_cmeta

TABLET = "tablet-m"

peers = st.tuples(*[st.builds(RaftPeer, st.just(u), st.just(f"h:{i + 1}"),
                              st.sampled_from(MemberType)) for i, u in enumerate("abc")])
configs = st.builds(RaftConfig, st.none() | st.integers(0, 50), peers)
cmetas = st.builds(ConsensusMeta, st.just(TABLET), st.integers(0, 20),
                   st.none() | st.sampled_from(["a", "b", "c"]), configs)


@given(st.none() | cmetas, cmetas)
def test_merge_rules(local: ConsensusMeta | None, remote: ConsensusMeta) -> None:
    merged = merge_cmeta(local, remote)
    assert merged.tablet_id == TABLET
    assert merged.committed_config == remote.committed_config  # always the remote's config
    assert merged.current_term >= remote.current_term  # the term never decreases ...
    if local is None:
        assert (merged.current_term, merged.voted_for) == (remote.current_term, None)
        return
    assert merged.current_term == max(local.current_term, remote.current_term)  # ... either
    # A vote is kept only in its own term, and the remote's vote is never adopted.
    if merged.current_term == local.current_term:
        assert merged.voted_for == local.voted_for
    else:
        assert merged.voted_for is None


@given(cmetas, cmetas)
def test_merging_twice_changes_nothing_more(local: ConsensusMeta, remote: ConsensusMeta) -> None:
    once = merge_cmeta(local, remote)
    assert merge_cmeta(once, remote) == once


def test_merge_refuses_another_tablet() -> None:
    with pytest.raises(ValueError, match="cannot merge"):
        merge_cmeta(ConsensusMeta("other", 1), ConsensusMeta(TABLET, 1))
