"""The catalog: table and tablet records, their rows in the catalog tablet, and the snapshot.

Seed 004, "Current design": all persistent master metadata is one replicated tablet whose rows
are tables and tablets; the leader caches it in memory, updates the cache only after a change
is replicated, and a new leader rebuilds every cache from the tablet alone. This module is
that tablet's content and that cache, with no I/O:

    TableRecord, TabletRecord   the two kinds of row value (msgspec structs: they are
                                persisted in the catalog tablet's WAL and blocks)
    table_key / tablet_key      the row keys: b"table/<id>" and b"tablet/<id>"
    CatalogWrite                ONE replicated write: the rows a master operation puts,
                                tablets first, then tables (the commit order, below)
    Catalog                     an immutable snapshot: records by id, the name index, each
                                table's tablets; rebuilt from rows alone (`from_rows`) or
                                advanced by a committed write (`apply`)

Invariants
----------
C1  Rows are never deleted: records of REMOVED tables and of DELETED/REPLACED tablets stay
    forever (seed appendix A: that is what lets a master tell a deleted tablet from one it
    never heard of, so it never has to delete a replica it has no record of). No planner
    emits a delete; `apply` mirrors the tablet's row semantics anyway, so that a catalog
    advanced write by write always equals `Catalog.from_rows` of the same rows (tested).
C2  The name index holds exactly the tables that are not REMOVED (a new table may reuse a
    deleted table's name; seed 004 map 3). Two such tables never share a name.
C3  Every tablet record names a table record. A table's live tablets (CREATING or RUNNING)
    hold each hash bucket 0..num_tablets-1 exactly once while the table is not REMOVED
    (a replacement swaps one tablet of a bucket for another in one write).
C4  `version` counts the writes of a row: a planner writes ``old.version + 1`` (1 for a new
    row). A write planned on a snapshot is *fresh* while the catalog still holds each of its
    rows at version - 1 (`CatalogWrite.stale_rows`): the shell checks this under the locks
    before proposing, so two writes planned on one snapshot cannot both commit (no lost
    update). A plan's write is *held* by a catalog whose rows are exactly the write's
    (`Catalog.holds`): that is how a plan proves its write committed. Exactly, not "at that
    version or later": a write that failed must never be taken for another one that
    committed the same rows at the same versions later (the shell resolves a plan at the
    apply of its own entry, before the next entry changes those rows).
C5  State changes follow TABLE_TRANSITIONS and TABLET_TRANSITIONS, nothing else; a pair
    missing from a table is refused (REFUSED_*), and both tables are total (tested).

Commit order (seed 004 "Ensure strict ordering", step 5): when one write holds table and
tablet rows, the tablet rows come first in the batch, so a reader that watches the rows
being applied in order never sees a table whose new state its tablets do not have yet (a
RUNNING table with tablets that do not exist, a REMOVED table with RUNNING tablets is fine,
the reverse is not). The tablet store applies a batch atomically anyway; the order makes the
contract hold for any reader of the op stream too.

Row format: the value is the msgpack encoding of the record; ``format`` is the row format
(FORMAT; a row with a newer format is refused rather than misread) and new fields are only
ever added with defaults. Keys and values stay within the tablet store's limits (ops.py):
ids are 32 hex characters, names at most 256 bytes, schemas at most MAX_COLUMNS columns.

Limits: a snapshot is copied on every write (copy-on-write of two dicts), O(records) per
write; fine for thousands of tablets, a persistent map later if the catalog grows past that.
"""

from __future__ import annotations

import enum
import hashlib
import random
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, Final, Literal, TypeVar

import attrs
import msgspec

from revivify.impl.consensus.messages import Config, Peer
from revivify.impl.tablet.columns import COLUMN_TYPES, Column
from revivify.impl.tablet.ops import RowOp, WriteBatch, put

from .errors import CatalogCorrupt

FORMAT: Final = 1

TABLE_PREFIX: Final = b"table/"
TABLET_PREFIX: Final = b"tablet/"

MAX_NAME_BYTES: Final = 256
MAX_COLUMNS: Final = 300  # Kudu's max_num_columns
MAX_TABLETS: Final = 1000  # per table: one write of 1000 tablet rows is ~300 KB
MAX_REPLICAS: Final = 7  # Kudu's max_num_replicas; the count must be odd


# ---------------------------------------------------------------------------- states


class TableState(enum.Enum):
    # The seed's pre-replication state. Never committed here: the one write of CreateTable
    # holds the table RUNNING, and until it commits the table exists only inside the Plan.
    # Kept so that a row in that state (a future or foreign writer) still decodes.
    PREPARING = "PREPARING"
    RUNNING = "RUNNING"
    ALTERING = "ALTERING"  # a schema version not yet reported by every live tablet
    REMOVED = "REMOVED"  # deleted; the record stays forever (C1)


class TabletState(enum.Enum):
    CREATING = "CREATING"  # placed; no leader reported yet
    RUNNING = "RUNNING"  # a leader has reported
    REPLACED = "REPLACED"  # its creation timed out; another tablet holds its bucket
    DELETED = "DELETED"  # its table was deleted


TableEvent = Literal["create", "alter", "rename", "alter_done", "delete"]
TabletEvent = Literal["create", "report", "leader_reported", "replace", "delete"]
TABLE_EVENTS: Final[tuple[TableEvent, ...]] = ("create", "alter", "rename", "alter_done",
                                                "delete")
TABLET_EVENTS: Final[tuple[TabletEvent, ...]] = ("create", "report", "leader_reported",
                                                  "replace", "delete")

_LIVE_TABLE: Final = (TableState.PREPARING, TableState.RUNNING, TableState.ALTERING)

# (state before or None for a new record, event) -> state after. The only state changes a
# planner may write (C5). `report` is an update that keeps the state (consensus state,
# reported schema version); `rename` keeps the state too.
TABLE_TRANSITIONS: Final[Mapping[tuple[TableState | None, TableEvent], TableState]] = {
    (None, "create"): TableState.RUNNING,
    (TableState.RUNNING, "alter"): TableState.ALTERING,
    (TableState.ALTERING, "alter"): TableState.ALTERING,
    (TableState.RUNNING, "rename"): TableState.RUNNING,
    (TableState.ALTERING, "rename"): TableState.ALTERING,
    (TableState.ALTERING, "alter_done"): TableState.RUNNING,
    **{(state, "delete"): TableState.REMOVED for state in _LIVE_TABLE},
}
TABLET_TRANSITIONS: Final[Mapping[tuple[TabletState | None, TabletEvent], TabletState]] = {
    (None, "create"): TabletState.CREATING,
    (TabletState.CREATING, "report"): TabletState.CREATING,
    (TabletState.RUNNING, "report"): TabletState.RUNNING,
    (TabletState.CREATING, "leader_reported"): TabletState.RUNNING,
    (TabletState.CREATING, "replace"): TabletState.REPLACED,
    (TabletState.CREATING, "delete"): TabletState.DELETED,
    (TabletState.RUNNING, "delete"): TabletState.DELETED,
}
# Every other pair, spelled out so that the tables are visibly total: a planner that would
# need one of these has a bug (the planners check the state first and return a refusal).
REFUSED_TABLE: Final = frozenset(
    (state, event) for state in (None, *TableState) for event in TABLE_EVENTS
) - frozenset(TABLE_TRANSITIONS)
REFUSED_TABLET: Final = frozenset(
    (state, event) for state in (None, *TabletState) for event in TABLET_EVENTS
) - frozenset(TABLET_TRANSITIONS)


class IllegalTransition(Exception):
    """A planner tried a state change its table has no row for (a bug, never a refusal)."""


def next_table_state(state: TableState | None, event: TableEvent) -> TableState:
    after = TABLE_TRANSITIONS.get((state, event))
    if after is None:
        raise IllegalTransition(f"table: no transition from {state} on {event!r}")
    return after


def next_tablet_state(state: TabletState | None, event: TabletEvent) -> TabletState:
    after = TABLET_TRANSITIONS.get((state, event))
    if after is None:
        raise IllegalTransition(f"tablet: no transition from {state} on {event!r}")
    return after


# ---------------------------------------------------------------------------- records

class ConsensusState(msgspec.Struct, frozen=True):
    """A tablet's committed consensus state as last reported (seed 004 map 6, persisted
    instead of cached: KUDU-1353). ``config.opid_index`` orders configs; 0 is the config
    the tablet was created with. ``leader`` is the leader known for ``term`` (None: none
    reported for that term yet)."""

    term: int
    leader: str | None
    config: Config


class ReplicaMove(msgspec.Struct, frozen=True):
    """A decision to move one replica of a tablet off ``from_uuid`` (replication.py):
    recorded in the tablet's row before anything is sent, so that a new leader master
    re-drives it from the records alone. ``to_uuid``: the destination an operator named
    (None: placement chooses a live server that is not a member). Cleared by the write
    that finds ``from_uuid`` outside the recorded config (the move is done)."""

    from_uuid: str
    to_uuid: str | None = None
    reason: str = ""
    # Decided by the policy (a dead server, an over-replicated tablet), not asked for by an
    # operator: abandoned if its reason went away before a replacement was added.
    automatic: bool = False


class TableRecord(msgspec.Struct, frozen=True):
    table_id: str
    name: str
    schema: tuple[Column, ...]
    schema_version: int
    num_replicas: int
    num_tablets: int
    state: TableState
    version: int  # writes of this row (C4)
    state_message: str = ""
    # The schema version that added each column of ``schema``, position by position (0: the
    # create). Empty in rows written before it existed: read as every column from the create.
    column_versions: tuple[int, ...] = ()
    # The id of the CreateTable request that made the table: a retry of that very request
    # answers OK with this table, anyone else's create of the name ALREADY_PRESENT.
    create_request: str = ""
    # The ids of the DeleteTable that removed the table and of the last AlterTable that
    # changed it: a retry of that very request (its reply lost) answers OK, not NOT_FOUND
    # or "changes nothing" (operations.py "Retries").
    delete_request: str = ""
    alter_request: str = ""
    partition_hash: Literal["blake2b-64"] = "blake2b-64"
    format: int = FORMAT

    @property
    def live(self) -> bool:
        return self.state is not TableState.REMOVED


class TabletRecord(msgspec.Struct, frozen=True):
    tablet_id: str
    table_id: str
    partition: int  # the hash bucket, 0 <= partition < table.num_tablets
    state: TabletState
    consensus: ConsensusState
    version: int  # writes of this row (C4)
    # The highest schema version any replica reported as applied (an alter is a Raft op on
    # the tablet, so one replica having it means it committed); for a new tablet, the
    # version it is created with.
    reported_schema_version: int = 0
    state_message: str = ""
    replaces: str | None = None  # the timed-out tablet this one replaced
    replaced_by: str | None = None  # set when this one is REPLACED
    # A replica move in progress (re-replication, MoveReplica, a retiring server): at most
    # one per tablet, so a tablet never has two changes decided at once.
    move: ReplicaMove | None = None
    format: int = FORMAT

    @property
    def live(self) -> bool:
        return self.state in (TabletState.CREATING, TabletState.RUNNING)

    def is_member(self, uuid: str) -> bool:
        return self.consensus.config.peer(uuid) is not None


Record = TableRecord | TabletRecord


def table_key(table_id: str) -> bytes:
    return TABLE_PREFIX + table_id.encode("ascii")


def tablet_key(tablet_id: str) -> bytes:
    return TABLET_PREFIX + tablet_id.encode("ascii")


def record_key(record: Record) -> bytes:
    if isinstance(record, TableRecord):
        return table_key(record.table_id)
    return tablet_key(record.tablet_id)


_ENCODER: Final = msgspec.msgpack.Encoder()
_TABLE_DECODER: Final = msgspec.msgpack.Decoder(TableRecord)
_TABLET_DECODER: Final = msgspec.msgpack.Decoder(TabletRecord)


def encode_record(record: Record) -> bytes:
    return _ENCODER.encode(record)


def decode_row(key: bytes, value: bytes) -> Record:
    """The record a catalog row holds; CatalogCorrupt naming the key for anything else."""
    record: Record
    try:
        if key.startswith(TABLE_PREFIX):
            record = _TABLE_DECODER.decode(value)
            expected = table_key(record.table_id)
        elif key.startswith(TABLET_PREFIX):
            record = _TABLET_DECODER.decode(value)
            expected = tablet_key(record.tablet_id)
        else:
            raise CatalogCorrupt(key, "not a catalog key (table/ or tablet/)")
    except (msgspec.DecodeError, msgspec.ValidationError, UnicodeEncodeError) as exc:
        raise CatalogCorrupt(key, f"does not decode: {exc}") from None
    if record.format > FORMAT:
        raise CatalogCorrupt(key, f"row format {record.format} is newer than {FORMAT}")
    if key != expected:
        raise CatalogCorrupt(key, f"holds the record of {expected!r}")
    return record


# ---------------------------------------------------------------------------- ids, hashing


def new_id(rng: random.Random) -> str:
    """A table or tablet id: 128 random bits from the injected generator, as hex."""
    return f"{rng.getrandbits(128):032x}"


def hash_bucket(key: bytes, num_buckets: int) -> int:
    """The tablet bucket of a row key (``partition_hash`` "blake2b-64"; part of the format:
    a client routes a key with the same function)."""
    assert num_buckets >= 1
    digest = hashlib.blake2b(key, digest_size=8).digest()
    return int.from_bytes(digest, "big") % num_buckets


def validate_schema(columns: Sequence[Column]) -> str | None:
    """Why ``columns`` is not a valid schema, or None."""
    if not columns:
        return "a schema needs at least the key column"
    if len(columns) > MAX_COLUMNS:
        return f"{len(columns)} columns, at most {MAX_COLUMNS} allowed"
    if not columns[0].key:
        return f"the first column {columns[0].name!r} must be the key"
    seen: set[str] = set()
    for position, column in enumerate(columns):
        if column.key and position:
            return f"column {column.name!r}: only the first column is the key"
        if (error := validate_name(column.name, "column")) is not None:
            return error
        if column.type not in COLUMN_TYPES:
            return f"column {column.name!r}: unknown type {column.type!r}"
        if column.name in seen:
            return f"column {column.name!r} appears twice"
        seen.add(column.name)
    return None


def validate_name(name: str, what: str) -> str | None:
    """Why ``name`` is not a valid table or column name, or None."""
    try:
        size = len(name.encode("utf-8"))
    except UnicodeEncodeError:
        return f"{what} name is not valid UTF-8"
    if not 1 <= size <= MAX_NAME_BYTES:
        return f"{what} name is {size} bytes, must be 1..{MAX_NAME_BYTES}"
    if name != name.strip() or any(ch in name for ch in "\x00\n\r\t"):
        return f"{what} name {name!r} has surrounding blanks or control characters"
    return None


# ---------------------------------------------------------------------------- the write


@attrs.frozen
class CatalogWrite:
    """The rows of ONE replicated write (seed 004 "each logical operation is replicated as
    one batch"): committed atomically as one Raft entry, or not at all."""

    tablets: tuple[TabletRecord, ...] = ()
    tables: tuple[TableRecord, ...] = ()

    def __attrs_post_init__(self) -> None:
        keys = [record_key(r) for r in self.records()]
        assert len(keys) == len(set(keys)), "a write puts each row at most once"

    def is_empty(self) -> bool:
        return not (self.tablets or self.tables)

    def records(self) -> Iterator[Record]:
        """Tablets first, then tables: the commit order (module docstring)."""
        yield from self.tablets
        yield from self.tables

    def ops(self) -> list[RowOp]:
        return [put(record_key(r), encode_record(r)) for r in self.records()]

    def to_batch(self, client_id: str, seq: int) -> WriteBatch:
        """The catalog tablet's write payload. ``(client_id, seq)`` is the shell's: the
        store applies a pair at most once, so each proposal needs a fresh pair."""
        assert not self.is_empty(), "an empty write is not replicated"
        return WriteBatch(client_id, seq, self.ops())

    def stale_rows(self, catalog: Catalog) -> tuple[bytes, ...]:
        """The rows ``catalog`` no longer holds at the version this write was planned on
        (C4): the write must be re-planned, not proposed."""
        stale: list[bytes] = []
        for record in self.records():
            current = catalog.record(record_key(record))
            current_version = 0 if current is None else current.version
            if current_version != record.version - 1:
                stale.append(record_key(record))
        return tuple(stale)


# ---------------------------------------------------------------------------- the snapshot


def _by_name(tables: Mapping[str, TableRecord]) -> dict[str, str]:
    names: dict[str, str] = {}
    for table in tables.values():
        if table.live:
            if table.name in names:
                raise CatalogCorrupt(table_key(table.table_id),
                                     f"name {table.name!r} also held by {names[table.name]}")
            names[table.name] = table.table_id
    return names


def _tablets_of(tablets: Mapping[str, TabletRecord]) -> dict[str, tuple[str, ...]]:
    grouped: dict[str, list[str]] = {}
    for tablet in sorted(tablets.values(), key=lambda t: (t.partition, t.tablet_id)):
        grouped.setdefault(tablet.table_id, []).append(tablet.tablet_id)
    return {table_id: tuple(ids) for table_id, ids in grouped.items()}


@attrs.frozen(eq=True, hash=False)
class Catalog:
    """An immutable snapshot of the catalog: what readers see between two commits.

    Built from rows alone (`from_rows`, the leader-ready gate) or by applying committed
    writes (`apply`); both give equal snapshots for equal rows. Holds every record (deleted
    ones too, C1), the name index of live tables (C2) and each table's tablets (all of
    them, ordered by bucket then id).
    """

    tables: Mapping[str, TableRecord] = attrs.field(factory=dict)
    tablets: Mapping[str, TabletRecord] = attrs.field(factory=dict)
    names: Mapping[str, str] = attrs.field(init=False)
    tablets_by_table: Mapping[str, tuple[str, ...]] = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        object.__setattr__(self, "names", _by_name(self.tables))
        object.__setattr__(self, "tablets_by_table", _tablets_of(self.tablets))

    @classmethod
    def from_rows(cls, rows: Iterable[tuple[bytes, bytes]]) -> Catalog:
        """Rebuild from the catalog tablet's rows (``TabletStore.scan()``)."""
        tables: dict[str, TableRecord] = {}
        tablets: dict[str, TabletRecord] = {}
        for key, value in rows:
            record = decode_row(key, value)
            if isinstance(record, TableRecord):
                tables[record.table_id] = record
            else:
                tablets[record.tablet_id] = record
        return cls(tables, tablets)

    def rows(self) -> list[tuple[bytes, bytes]]:
        """Every row, in key order (what the catalog tablet holds)."""
        out = [(record_key(r), encode_record(r)) for r in self.records()]
        return sorted(out)

    def records(self) -> Iterator[Record]:
        yield from self.tables.values()
        yield from self.tablets.values()

    def record(self, key: bytes) -> Record | None:
        if key.startswith(TABLE_PREFIX):
            return self.tables.get(key[len(TABLE_PREFIX):].decode("ascii"))
        if key.startswith(TABLET_PREFIX):
            return self.tablets.get(key[len(TABLET_PREFIX):].decode("ascii"))
        return None

    # -- advancing

    def apply(self, write: CatalogWrite) -> Catalog:
        """The snapshot after ``write`` committed (copy-on-write: self is unchanged)."""
        tables = dict(self.tables)
        tablets = dict(self.tablets)
        for record in write.records():
            if isinstance(record, TableRecord):
                tables[record.table_id] = record
            else:
                tablets[record.tablet_id] = record
        return Catalog(tables, tablets)

    def apply_ops(self, ops: Iterable[RowOp]) -> Catalog:
        """The snapshot after a committed catalog batch, from its row ops: what every master
        runs as its catalog tablet applies an entry. Row semantics exactly (C1)."""
        tables = dict(self.tables)
        tablets = dict(self.tablets)
        for op in ops:
            if op.kind == "delete":
                record = self.record(op.key)
                if isinstance(record, TableRecord):
                    tables.pop(record.table_id, None)
                elif isinstance(record, TabletRecord):
                    tablets.pop(record.tablet_id, None)
                continue
            decoded = decode_row(op.key, op.value)
            if isinstance(decoded, TableRecord):
                tables[decoded.table_id] = decoded
            else:
                tablets[decoded.tablet_id] = decoded
        return Catalog(tables, tablets)

    def holds(self, write: CatalogWrite) -> bool:
        """Whether this snapshot has every row of ``write`` exactly (C4): the write is
        the last one applied to each of its rows. An empty write is held by any snapshot."""
        return all(self.record(record_key(r)) == r for r in write.records())

    # -- reads

    def table_by_name(self, name: str) -> TableRecord | None:
        table_id = self.names.get(name)
        return None if table_id is None else self.tables[table_id]

    def tablets_of(self, table_id: str) -> tuple[TabletRecord, ...]:
        return tuple(self.tablets[t] for t in self.tablets_by_table.get(table_id, ()))

    def live_tablets_of(self, table_id: str) -> tuple[TabletRecord, ...]:
        return tuple(t for t in self.tablets_of(table_id) if t.live)

    def replica_counts(self) -> dict[str, int]:
        """Replicas each tablet server holds in live tablets' configs (placement's load)."""
        counts: dict[str, int] = {}
        for tablet in self.tablets.values():
            table = self.tables.get(tablet.table_id)
            if tablet.live and table is not None and table.live:
                for peer in tablet.consensus.config.peers:
                    counts[peer.uuid] = counts.get(peer.uuid, 0) + 1
        return counts

    def check(self) -> None:
        """Assert C2 and C3 (tests and the leader-ready gate call this after a rebuild)."""
        for tablet in self.tablets.values():
            if tablet.table_id not in self.tables:
                raise CatalogCorrupt(tablet_key(tablet.tablet_id),
                                     f"names table {tablet.table_id}, which has no record")
        for table in self.tables.values():
            if not table.live:
                continue
            buckets = sorted(t.partition for t in self.live_tablets_of(table.table_id))
            if buckets != list(range(table.num_tablets)):
                raise CatalogCorrupt(table_key(table.table_id),
                                     f"live tablets hold buckets {buckets}, "
                                     f"expected 0..{table.num_tablets - 1} once each")


RecordT = TypeVar("RecordT", TableRecord, TabletRecord)


def evolve(record: RecordT, **changes: Any) -> RecordT:
    """``record`` with ``changes`` and its row version bumped (C4): every planner's update."""
    assert "version" not in changes
    return msgspec.structs.replace(record, version=record.version + 1, **changes)


def initial_consensus(peers: Sequence[Peer]) -> ConsensusState:
    """The consensus state a new tablet is recorded with: term 0, no leader, the placed
    peers as config opid_index 0 (what CreateTablet gives every replica)."""
    return ConsensusState(term=0, leader=None, config=Config(opid_index=0, peers=tuple(peers)))


__all__ = [
    "FORMAT",
    "MAX_COLUMNS",
    "MAX_NAME_BYTES",
    "MAX_REPLICAS",
    "MAX_TABLETS",
    "REFUSED_TABLE",
    "REFUSED_TABLET",
    "TABLET_EVENTS",
    "TABLET_TRANSITIONS",
    "TABLE_EVENTS",
    "TABLE_TRANSITIONS",
    "Catalog",
    "CatalogWrite",
    "ConsensusState",
    "IllegalTransition",
    "Record",
    "ReplicaMove",
    "TableEvent",
    "TableRecord",
    "TableState",
    "TabletEvent",
    "TabletRecord",
    "TabletState",
    "decode_row",
    "encode_record",
    "evolve",
    "hash_bucket",
    "initial_consensus",
    "new_id",
    "next_table_state",
    "next_tablet_state",
    "record_key",
    "table_key",
    "tablet_key",
    "validate_name",
    "validate_schema",
]
