"""The consensus-metadata merge of a tablet copy (seed 001, "Consensus metadata merge").

A destination must not simply adopt the source's consensus metadata: its own cmeta (kept by
a tombstone, or written by an earlier attempt) may hold a *higher* term, or a vote cast in
the current term, and forgetting either is consensus amnesia (a second vote in one term,
two leaders in one term). The rules:

1. The merged term is the higher of the two terms (with no local cmeta, the remote's).
2. If the remote term is higher, the vote is cleared: a vote belongs to a term, the new
   term has none yet, and the remote's own vote is the remote's, never ours. Otherwise
   (remote term <= local term) the local vote is kept as it is.
3. The committed config is always the remote's: the copied WAL and blocks are the remote's,
   so its membership is the one that matches them.

Consequences (checked by tests/copy with Hypothesis): the merged term is >= both terms;
the merged vote is the local vote or none, and it is the local vote exactly when the merged
term is the local term; the merged config is the remote's.
"""

from __future__ import annotations

from revivify.impl.storage.values import ConsensusMeta


def merge_cmeta(local: ConsensusMeta | None, remote: ConsensusMeta) -> ConsensusMeta:
    """Merge the downloaded `remote` cmeta into the `local` one (None: there is none).

    Term: max(local, remote). Vote: cleared when the remote term is higher (or there is no
    local cmeta), else the local vote. Config: the remote's committed config. ValueError if
    the two name different tablets.
    """
    if local is None:
        return ConsensusMeta(remote.tablet_id, remote.current_term, None, remote.committed_config)
    if local.tablet_id != remote.tablet_id:
        raise ValueError(
            f"cannot merge cmeta of tablet {remote.tablet_id!r} into tablet {local.tablet_id!r}"
        )
    if remote.current_term > local.current_term:
        return ConsensusMeta(local.tablet_id, remote.current_term, None, remote.committed_config)
    return ConsensusMeta(
        local.tablet_id, local.current_term, local.voted_for, remote.committed_config
    )


__all__ = ["merge_cmeta"]
