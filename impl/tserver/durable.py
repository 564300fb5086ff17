"""A tablet's durable state on one server, as a value: what the trace contract reports.

Rules of this file
------------------
* ``Durable`` is frozen. Every durable step of the lifecycle core (``core.py``) computes the
  value *after* the step from the value before it; the shell writes the files, fsyncs, and
  traces exactly this value. Nothing here touches a disk: the shell reads what a startup
  finds and builds the first ``Durable`` of each tablet from it (``found_*`` below are the
  pure parts of that classification).
* The fields are the spec's durable fields, one for one (``traces/README.md``, "state"):

      data_state       superblock: DOES_NOT_EXIST / DELETED (a tombstone) / COPYING / READY
      tombstone_last   the last logged OpId a tombstone (or a COPYING replica) retains
      sb_qdir          whether the superblock names a quarantine directory
      cmeta            term, vote, committed config (None: no cmeta file)
      wal, wal_last    where the WAL is (ABSENT / LIVE / QUARANTINED / DAMAGED) and its last
                       OpId (a LIVE or DAMAGED one's; (0, 0) otherwise)
      blocks           ABSENT / PARTIAL / PRESENT / DAMAGED
      quarantine       the newest quarantine dir's contents: (superblock copy, cmeta copy),
                       None when the tablet has no quarantine dir

Invariant kept by construction (and asserted in ``__attrs_post_init__``): a tombstone or a
DOES_NOT_EXIST tablet has no live blocks and no live WAL once its deletion finished; READY
has PRESENT (or DAMAGED) blocks. The roll-forward states in between are the reason the
invariant is checked at step boundaries by the core's tests, not here.
"""

from __future__ import annotations

import enum

import attrs

from revivify.contract.events import (
    CmetaState,
    DurableState,
    QuarantineState,
    SuperblockState,
    WalState,
)
from revivify.impl.storage.values import ConsensusMeta, OpId

OpIdPair = tuple[int, int]
NO_OPID: OpIdPair = (0, 0)


def opid_pair(opid: OpId | None) -> OpIdPair:
    """A stored OpId as the pair the durable state carries (none: ``NO_OPID``)."""
    return (opid.term, opid.index) if opid else NO_OPID


class Sb(enum.Enum):
    """The superblock's data state (seed 001)."""

    DOES_NOT_EXIST = "DOES_NOT_EXIST"  # never hosted here (or fully deleted)
    DELETED = "DELETED"  # a tombstone: cmeta and last logged OpId kept forever
    COPYING = "COPYING"  # a tablet copy in progress (startup turns it into DELETED)
    READY = "READY"


class Wal(enum.Enum):
    ABSENT = "ABSENT"
    LIVE = "LIVE"
    QUARANTINED = "QUARANTINED"
    DAMAGED = "DAMAGED"  # in wals/<id> but failing verification


class Blocks(enum.Enum):
    ABSENT = "ABSENT"
    PARTIAL = "PARTIAL"
    PRESENT = "PRESENT"
    DAMAGED = "DAMAGED"  # listed, but some missing or corrupt


@attrs.frozen
class Durable:
    """One tablet's durable state (see the module header)."""

    data_state: Sb
    tombstone_last: OpIdPair = NO_OPID
    sb_qdir: bool = False
    cmeta: ConsensusMeta | None = None
    wal: Wal = Wal.ABSENT
    wal_last: OpIdPair = NO_OPID
    blocks: Blocks = Blocks.ABSENT
    quarantine: tuple[bool, bool] | None = None

    def __attrs_post_init__(self) -> None:
        assert min(self.tombstone_last) >= 0 and min(self.wal_last) >= 0, self
        # Only a tombstone (or a copy that started from one) retains a last OpId.
        assert self.tombstone_last == NO_OPID or self.data_state in (Sb.DELETED, Sb.COPYING), \
            self

    def last_logged(self) -> OpIdPair:
        """The last logged OpId as votes and StartTabletCopy see it: a tombstone's (or a
        COPYING replica's) retained one, else the WAL's."""
        if self.data_state in (Sb.DELETED, Sb.COPYING):
            return self.tombstone_last
        return self.wal_last

    def committed_config_index(self) -> int:
        if self.cmeta is None:
            return 0
        return self.cmeta.committed_config.opid_index or 0

    def record(self) -> DurableState:
        """The contract's record of this state (what a trace line's ``state`` holds)."""
        cm = self.cmeta
        return DurableState(
            superblock=SuperblockState(self.data_state.value, self.tombstone_last,
                                       self.sb_qdir),
            cmeta=None if cm is None else CmetaState(
                cm.current_term, cm.voted_for, cm.committed_config.opid_index or 0),
            wal=WalState(self.wal.value, self.wal_last),
            blocks=self.blocks.value,
            quarantine=None if self.quarantine is None
            else QuarantineState(self.quarantine[0], self.quarantine[1]))


def never_hosted(wal_at_rest: Wal, quarantine: tuple[bool, bool] | None) -> Durable:
    """DOES_NOT_EXIST: nothing live; a quarantined WAL and a quarantine dir may remain."""
    return Durable(Sb.DOES_NOT_EXIST, wal=wal_at_rest, quarantine=quarantine)


def running(cmeta: ConsensusMeta | None, wal_last: OpIdPair,
            quarantine: tuple[bool, bool] | None) -> Durable:
    """A READY replica with its WAL and blocks in place."""
    return Durable(Sb.READY, cmeta=cmeta, wal=Wal.LIVE, wal_last=wal_last,
                   blocks=Blocks.PRESENT, quarantine=quarantine)


__all__ = ["NO_OPID", "Blocks", "Durable", "OpIdPair", "Sb", "Wal", "never_hosted", "opid_pair",
           "running"]
