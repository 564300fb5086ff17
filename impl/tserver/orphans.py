"""What a CreateTablet cut before its commit point leaves, and the rule that removes it
(issue 32: the orphaned cmeta).

The superblock is the tablet's existence on a server (seed 001: "The primary indicator of
a tablet's existence is the presence of a superblock file"). A CreateTablet writes the
cmeta, then the WAL directory (with its first, empty segment), then the superblock, its
commit point (manager/shell.py ``create``; the spec's ``create_tablet`` is one atomic step,
"superblock last", and it is traced only once the superblock is durable). A crash, a power
loss or an error between the cmeta and the superblock leaves a cmeta and perhaps a WAL
directory that belong to no replica: startup registers tablets by their superblocks only,
so nothing here knows them, and the trace (like the spec) says the tablet does not exist
here, with no cmeta.

The rule: a cmeta (or a WAL directory) of a tablet that has no superblock is removed,
durably, before anything reads it: at startup, before the server serves
(``TabletManager.register_all``), and when a tablet copy begins into a server where the
tablet does not exist (``LocalCopyTarget.begin_copying``: Kudu's copy into a server with no
replica starts from no cmeta). Why that is safe and why it is needed:

* Such a cmeta never voted, so removing it forgets no vote (no consensus amnesia): only a
  running replica and a tombstone's (or a COPYING replica's) voter write a cmeta after the
  create's, and each has a superblock; a full delete removes the cmeta before the
  superblock, and a copy writes its COPYING superblock before it merges a cmeta. So a cmeta
  without a superblock is always a create's: term 0, no vote.
* Kept, it must never vote or be merged: a copy into this server would merge it as the
  local cmeta of a replica that does not exist (the checker's ArgMismatch at
  ``copy_merge_cmeta``: "args.local is (term=0, ...), the spec has none"), and were the copy
  cut after its COPYING superblock, startup would tombstone the replica with it. A cmeta
  that belongs to no replica is not evidence of any vote the spec could hold us to; the
  merge's rules (copy/merge.py) are about a cmeta that is this replica's.
* The create's WAL directory holds no entry (its replica never ran). Left in place, it
  makes every copy into the server refuse to begin ("WAL directory ... is not empty"), so
  the tablet could never be copied here. A WAL directory without a superblock that does hold
  entries is no create's: it is kept with the cmeta, for an operator (logged), and a copy
  keeps refusing with that message.

Nothing of this is traced: the spec's state for the server already has no cmeta and no WAL
(``at_rest`` reads neither), so removing them changes no durable state the trace contract
carries; it makes the disk agree with it again.
"""

from __future__ import annotations

import logging

from revivify.impl.storage.disk import is_temp_name
from revivify.impl.storage.layout import ServerLayout
from revivify.impl.storage.metadata import MetadataStore
from revivify.impl.storage.offline import remove_tree
from revivify.impl.storage.wal import salvage_last_opid

logger = logging.getLogger(__name__)


def leftover_tablet_ids(layout: ServerLayout) -> list[str]:
    """Tablets with a cmeta or a WAL directory here but no superblock, sorted (blocking)."""
    disk = layout.disk
    have = set(layout.tablet_ids())
    found: set[str] = set()
    for directory in (layout.consensus_meta_dir, layout.wals_dir):
        found.update(n for n in disk.listdir(directory) if not is_temp_name(n))
    return sorted(found - have)


def discard_uncommitted_create(layout: ServerLayout, metadata: MetadataStore,
                               tablet_id: str) -> list[str]:
    """Remove, durably, what a CreateTablet cut before its superblock left of a tablet that
    has no superblock here: its cmeta, then its WAL directory (the module docstring says
    why). Returns the paths removed: none when the tablet has a superblock (it is not a
    leftover) or nothing is left, and none when the WAL directory holds entries (kept, with
    the cmeta, for an operator). Blocking; a crash halfway leaves a part of the same
    leftovers, which the next call removes."""
    if metadata.load_superblock(tablet_id) is not None:
        return []
    disk = layout.disk
    wal_dir = layout.wal_dir(tablet_id)
    if disk.is_dir(wal_dir):
        last = salvage_last_opid(disk, wal_dir)
        if last is not None:
            logger.error("tablet %s has no superblock here, but its WAL directory %s holds "
                         "entries up to %s: not a CreateTablet's leftover, kept (with its "
                         "cmeta, if any) for an operator to inspect", tablet_id, wal_dir, last)
            return []
    removed: list[str] = []
    cmeta = layout.cmeta_path(tablet_id)
    if disk.exists(cmeta):
        disk.unlink(cmeta)
        disk.fsync_dir(layout.consensus_meta_dir)
        removed.append(cmeta)
    if disk.is_dir(wal_dir):
        remove_tree(disk, wal_dir)
        disk.fsync_dir(layout.wals_dir)
        removed.append(wal_dir)
    return removed


__all__ = ["discard_uncommitted_create", "leftover_tablet_ids"]
