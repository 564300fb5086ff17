"""The durable values storage persists: frozen attrs classes, mirrored on Kudu's protobufs.

These are what the specification models as a replica's durable state (spec/), so names
follow the seed: `data_state`, `tombstone_last_opid`, `quarantine_dir`, `current_term`,
`voted_for`, `committed_config`. DOES_NOT_EXIST is not a stored state: it is the absence of
the superblock file (seed 001, "Tablet directory structure").

Encoding (metadata.py) is msgspec msgpack of these classes inside a checksummed frame, so
each field here is part of the on-disk format: add fields with defaults, never rename.
"""

from __future__ import annotations

import enum

import attrs


class DataState(enum.Enum):
    """Stored tablet data states (DOES_NOT_EXIST = no superblock file)."""

    DELETED = "DELETED"  # tombstoned: cmeta and tombstone_last_opid kept forever
    COPYING = "COPYING"  # tablet copy in progress; startup turns it into DELETED
    READY = "READY"


class MemberType(enum.Enum):
    VOTER = "VOTER"
    NON_VOTER = "NON_VOTER"
    PRE_VOTER = "PRE_VOTER"


def _non_negative(instance: object, attribute: attrs.Attribute[int], value: int) -> None:
    if value < 0:
        raise ValueError(f"{attribute.name} must be >= 0, got {value}")


@attrs.frozen(order=True)
class OpId:
    """A Raft log position; ordered by (term, index)."""

    term: int = attrs.field(validator=_non_negative)
    index: int = attrs.field(validator=_non_negative)


@attrs.frozen
class RaftPeer:
    uuid: str
    address: str
    member_type: MemberType = MemberType.VOTER
    promote: bool = False  # a NON_VOTER the leader promotes to VOTER once caught up


@attrs.frozen
class RaftConfig:
    """A committed Raft configuration; `opid_index` is None before it was ever committed."""

    opid_index: int | None = None
    peers: tuple[RaftPeer, ...] = ()


@attrs.frozen
class ClientResult:
    """Exactly-once record (Kudu's result tracker): a client's last applied write and its outcome.

    Kept per client id in the superblock (`client_results`) as of the flushed OpId, so a
    retried write is recognised after a flush and a restart. `index` is the log index that
    applied (or rejected) write `seq`; `error` is set when the write was rejected as invalid.
    """

    client_id: str
    seq: int = attrs.field(validator=_non_negative)
    index: int = attrs.field(validator=_non_negative)
    ops_applied: int = attrs.field(validator=_non_negative)
    error: str | None = None


@attrs.frozen
class Superblock:
    """tablet-meta/<tablet-id>: the primary indicator that a tablet exists on this server.

    Block deletion protocol: a block leaves `live_blocks` and enters `orphaned_blocks` in one
    durable superblock write *before* its file is unlinked; a later write clears it from
    `orphaned_blocks`. After a crash, startup re-deletes whatever `orphaned_blocks` names.
    """

    tablet_id: str
    data_state: DataState
    tombstone_last_opid: OpId | None = None
    quarantine_dir: str | None = None
    live_blocks: tuple[str, ...] = ()
    orphaned_blocks: tuple[str, ...] = ()
    table_name: str = ""  # placeholder for the table / schema of later issues
    schema: tuple[str, ...] = ()
    # Tablet data (revivify.impl.tablet), written together with `live_blocks` in one atomic
    # superblock write by a flush: every entry up to `flushed_opid` is in the live blocks, and
    # `client_results` is the exactly-once table as of that OpId (sorted by client id). The
    # WAL may be collected below `flushed_opid.index`; replay starts after it.
    flushed_opid: OpId | None = None
    client_results: tuple[ClientResult, ...] = ()
    # A COPYING superblock records how far the tablet copy got (seed 001 copy steps 3-4), so
    # that startup reports the state the copy's last durable step left: "" (nothing
    # downloaded yet), "WAL" (every WAL segment durable; `copy_wal_last` is its last OpId),
    # "BLOCKS_PARTIAL" (some blocks, listed in `live_blocks`), "BLOCKS_DONE".
    copy_step: str = ""
    copy_wal_last: OpId | None = None


@attrs.frozen
class ConsensusMeta:
    """consensus-meta/<tablet-id>: Raft's durable state (term, vote, committed config)."""

    tablet_id: str
    current_term: int = attrs.field(validator=_non_negative)
    voted_for: str | None = None
    committed_config: RaftConfig = RaftConfig()


@attrs.frozen
class InstanceInfo:
    """The `instance` file: who this server is and when its directory was formatted."""

    server_uuid: str
    format_time_ns: int
