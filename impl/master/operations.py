"""Master operations as pure planners over a catalog snapshot: the seed's ordering contract.

Seed 004 "Ensure strict ordering for all state changes" asks every master operation to:
(1) lock the table, then its tablets; (2) mutate copy-on-write, invisible to readers;
(3) replicate all the mutations in ONE batch, the operation failing cleanly if that fails;
(4) from here on, never fail; (5) commit, tablets before table; (6) be consistent on disk and
in memory; (7) only then send RPCs to tablet servers. Its audit (appendix B) found three
places that broke it. Here each operation is a function

    plan_xxx(catalog snapshot, request, injected inputs) -> Plan[Reply] | MasterError

that does no I/O and changes nothing. A `Plan` holds:

    write    the ONE `CatalogWrite` to replicate (tablet rows, then table rows): step 3, 5
    locks    what to lock first, in the contract's order: tables, then tablets     step 1
    reads    the version of every row the decision rests on (0: absent)
    reserve  table names to hold in the shell's reservation set until the write commits
             or fails (Kudu's reserved_table_names_)

and, out of reach, the reply and the tablet-server calls. Those come only from
`Plan.commit(catalog)`, which refuses (NotCommitted) unless the catalog it is given holds
the plan's write: **a plan cannot send anything before its write is committed**, and no
client sees the outcome (table id, tablet ids) before then either. That is how the three
exceptions of the audit are impossible here:

    CreateTable state visible before replication  the snapshot is immutable; the new table
                                                  exists only in plan.write until a
                                                  committed catalog holds it
    DeleteTable RPCs before commit                the DeleteTablet calls are released by
                                                  commit() only
    replacement of a timed-out tablet visible     the same: old REPLACED and new CREATING
    before replication                            are one write, seen together or not at all

How the shell runs a plan (the steps of the contract):

    1. plan on the current snapshot; acquire ``plan.locks`` in order; hold ``plan.reserve``
    2. if not ``plan.is_fresh(current snapshot)``: release and plan again (someone's write
       committed in between; never propose a write planned on rows that changed)
    3. propose ``plan.write.to_batch(...)`` to the catalog tablet (an empty write needs no
       replication); on failure (lost leadership, timeout: KUDU-495) release everything and
       answer the error: nothing was changed, nothing is sent
    4. at the apply of that entry, the snapshot advances (`Catalog.apply_ops`); then
       ``plan.commit(snapshot)`` gives the reply and the calls
    5. release locks and reservations, answer the client, send the calls (retried; reports
       re-drive any that are lost with the master, KUDU-1374)

Lock order is tables before tablets, each by id (`lock_order`), so two operations never
wait on each other in a cycle. Commit order is tablets before tables (catalog.py), so a
reader of the applied rows never sees a table ahead of its tablets.

Retries. A CreateTable, DeleteTable or AlterTable carries a client-chosen ``request_id``
(random, 128 bits), recorded in the table row by the write that carries out the request
(``create_request``, ``delete_request``, ``alter_request``). A retry whose first try did
commit, its reply lost, finds its id there and gets OK with what the first try did, as an
empty plan (nothing written, nothing sent again: the first try's calls were released by
its own commit, and reports re-drive what they missed):

    CreateTable  the table of that name carries the id: OK with it (any other request:
                 ALREADY_PRESENT). While the first try is in flight the name is reserved
                 (NameReserved, retryable).
    DeleteTable  no live table of that name, but a REMOVED one of that name carries the
                 id: OK with its table id (any other request: NOT_FOUND).
    AlterTable   the live table that carries the id as its LAST alter (under its new name
                 after a rename): OK with its schema version. A later alter of the table
                 replaces the id; a retry after that is planned as a new request (and
                 usually refused: the column exists).

Kudu's DDL may answer ALREADY_PRESENT or NOT_FOUND to its own retry; the request id
removes that ambiguity. An empty id (an older client) is the old behaviour.
"""

from __future__ import annotations

import random
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Generic, Literal, TypeVar

import attrs

from revivify.impl.consensus.messages import Peer
from revivify.impl.tablet.columns import Column

from .calls import TabletServerCall, alter_schema, create_tablet, delete_tablet
from .catalog import (
    MAX_REPLICAS,
    MAX_TABLETS,
    Catalog,
    CatalogWrite,
    TableRecord,
    TabletRecord,
    TabletState,
    evolve,
    initial_consensus,
    new_id,
    next_table_state,
    next_tablet_state,
    record_key,
    table_key,
    tablet_key,
    validate_name,
    validate_schema,
)
from .errors import (
    AlreadyPresent,
    IllegalState,
    InvalidArgument,
    MasterError,
    NameReserved,
    NotCommitted,
    NotEnoughServers,
    NotFound,
)
from .placement import Candidate, place_tablets

R = TypeVar("R")

LockKey = tuple[Literal["table", "tablet"], str]


def lock_order(tables: Iterable[str], tablets: Iterable[str]) -> tuple[LockKey, ...]:
    """The locks to take, in the contract's order: every table (by id), then every tablet."""
    out: list[LockKey] = [("table", t) for t in sorted(set(tables))]
    out.extend(("tablet", t) for t in sorted(set(tablets)))
    return tuple(out)


@attrs.frozen
class Committed(Generic[R]):
    """What a committed plan releases: the answer to the client and the calls to send."""

    reply: R
    calls: tuple[TabletServerCall, ...]


@attrs.frozen
class Plan(Generic[R]):
    """ONE catalog write and what follows it once committed (module docstring).

    The reply and the calls are private: `commit` is their only way out."""

    op: str
    write: CatalogWrite
    locks: tuple[LockKey, ...]
    reads: Mapping[bytes, int]
    reserve: frozenset[str]
    _reply: R
    _calls: tuple[TabletServerCall, ...]

    def __attrs_post_init__(self) -> None:
        # Locks cover every row written, in order (tables first): step 1 of the contract.
        assert list(self.locks) == list(lock_order(
            (k[1] for k in self.locks if k[0] == "table"),
            (k[1] for k in self.locks if k[0] == "tablet")))
        locked = {_lock_row(k) for k in self.locks}
        assert all(record_key(r) in locked for r in self.write.records()), \
            "a plan writes only rows it locks"
        assert all(record_key(r) in self.reads for r in self.write.records()), \
            "a plan reads (and so checks) every row it writes"

    def is_fresh(self, catalog: Catalog) -> bool:
        """Whether every row the plan read is still at the version it read (C4)."""
        for key, version in self.reads.items():
            current = catalog.record(key)
            if (0 if current is None else current.version) != version:
                return False
        return True

    def commit(self, committed: Catalog) -> Committed[R]:
        """The reply and the calls, given a snapshot that holds this plan's write.

        Call it at the apply of the plan's entry, before the next entry is applied.
        Raises NotCommitted for any other snapshot: the calls of a plan whose write did
        not commit are never sent."""
        if not committed.holds(self.write):
            raise NotCommitted(f"{self.op}: the catalog does not hold the plan's write")
        return Committed(self._reply, self._calls)


def _lock_row(key: LockKey) -> bytes:
    return table_key(key[1]) if key[0] == "table" else tablet_key(key[1])


def make_plan(op: str, write: CatalogWrite, reply: R, calls: Iterable[TabletServerCall], *,
          tables: Iterable[str], tablets: Iterable[str], reads: Mapping[bytes, int],
          reserve: Iterable[str] = ()) -> Plan[R]:
    return Plan(op, write, lock_order(tables, tablets), dict(reads), frozenset(reserve),
                reply, tuple(calls))


# ---------------------------------------------------------------------------- replies


@attrs.frozen
class TableCreated:
    table_id: str
    tablet_ids: tuple[str, ...]
    already_existed: bool = False  # a retry of the request that made it


@attrs.frozen
class TableDeleted:
    table_id: str


@attrs.frozen
class TableAltered:
    table_id: str
    schema_version: int


@attrs.frozen
class TabletsReplaced:
    replaced: tuple[tuple[str, str], ...]  # (old tablet id, new tablet id)


# ---------------------------------------------------------------------------- requests


@attrs.frozen
class CreateTable:
    name: str
    schema: tuple[Column, ...]
    num_tablets: int
    num_replicas: int
    request_id: str = ""  # client-chosen; a retry carries the same one


@attrs.frozen
class AlterTable:
    name: str
    add_columns: tuple[Column, ...] = ()
    drop_columns: tuple[str, ...] = ()
    new_name: str | None = None
    request_id: str = ""  # client-chosen; a retry carries the same one


# ---------------------------------------------------------------------------- CreateTable


def _unused_id(catalog: Catalog, rng: random.Random, taken: set[str]) -> str:
    """A fresh id: never one of a record (of any kind, deleted ones included) nor one this
    plan already took. 128 random bits make a repeat unlikely, a seeded test makes it sure."""
    while True:
        candidate = new_id(rng)
        if candidate not in catalog.tables and candidate not in catalog.tablets \
                and candidate not in taken:
            taken.add(candidate)
            return candidate


def _check_counts(num_tablets: int, num_replicas: int) -> str | None:
    if not 1 <= num_tablets <= MAX_TABLETS:
        return f"{num_tablets} tablets, must be 1..{MAX_TABLETS}"
    if not 1 <= num_replicas <= MAX_REPLICAS or num_replicas % 2 == 0:
        return f"{num_replicas} replicas, must be odd and 1..{MAX_REPLICAS}"
    return None


def plan_create_table(catalog: Catalog, request: CreateTable, *,
                      servers: Sequence[Candidate], reserved: Collection[str],
                      rng: random.Random) -> Plan[TableCreated] | MasterError:
    """CreateTable (appendix B "Creating a new table", with its improvements 1 and 2).

    One write: the table RUNNING at schema version 0 and its tablets CREATING, each placed
    on ``num_replicas`` of ``servers`` (the live ones). After commit: CreateTablet to every
    replica. ``reserved`` is the shell's set of names in flight."""
    for error in (validate_name(request.name, "table"), validate_schema(request.schema),
                  _check_counts(request.num_tablets, request.num_replicas)):
        if error is not None:
            return InvalidArgument(error)
    existing = catalog.table_by_name(request.name)
    if existing is not None:
        if request.request_id and existing.create_request == request.request_id:
            ids = tuple(t.tablet_id for t in catalog.live_tablets_of(existing.table_id))
            return make_plan("create_table", CatalogWrite(),
                         TableCreated(existing.table_id, ids, already_existed=True), (),
                         tables=(), tablets=(), reads={table_key(existing.table_id):
                                                       existing.version})
        return AlreadyPresent("table", request.name, existing.table_id)
    if request.name in reserved:
        return NameReserved(request.name)
    placement = place_tablets(servers, catalog.replica_counts(), request.num_tablets,
                              request.num_replicas, rng)
    if isinstance(placement, NotEnoughServers):
        return placement

    taken: set[str] = set()
    table_id = _unused_id(catalog, rng, taken)
    table = TableRecord(
        table_id=table_id, name=request.name, schema=tuple(request.schema), schema_version=0,
        num_replicas=request.num_replicas, num_tablets=request.num_tablets,
        state=next_table_state(None, "create"), version=1, create_request=request.request_id)
    tablets = tuple(
        TabletRecord(tablet_id=_unused_id(catalog, rng, taken), table_id=table_id,
                     partition=bucket,
                     state=next_tablet_state(None, "create"),
                     consensus=initial_consensus(peers), version=1,
                     reported_schema_version=table.schema_version)
        for bucket, peers in enumerate(placement))
    calls = [create_tablet(peer.uuid, t, "create table") for t in tablets
             for peer in t.consensus.config.peers]
    reads = {tablet_key(t.tablet_id): 0 for t in tablets}  # new rows: absent until now
    reads[table_key(table_id)] = 0
    return make_plan("create_table", CatalogWrite(tablets=tablets, tables=(table,)),
                 TableCreated(table_id, tuple(t.tablet_id for t in tablets)), calls,
                 tables=(table_id,), tablets=(t.tablet_id for t in tablets), reads=reads,
                 reserve=(request.name,))


# ---------------------------------------------------------------------------- DeleteTable


def plan_delete_table(catalog: Catalog, name: str,
                      request_id: str = "") -> Plan[TableDeleted] | MasterError:
    """DeleteTable (appendix B, with both improvements: one write holding the table REMOVED
    and its live tablets DELETED, committed tablets first; the DeleteTablet calls, mode
    DELETED, to every replica of those tablets only after). A repeated DeleteTable finds no
    table of that name: NotFound, unless it is a retry of the request that removed it
    (module docstring "Retries"). Replicas the calls miss (a server down, a replica outside
    the recorded config) are deleted when they report (reports.py rule DELETED)."""
    # The retry first: if a new table of that name was created since, it is not deleted
    # by someone's retry of the request that deleted its predecessor.
    done = _deleted_by(catalog, name, request_id)
    if done is not None:
        return make_plan("delete_table", CatalogWrite(), TableDeleted(done.table_id), (),
                         tables=(), tablets=(), reads={table_key(done.table_id):
                                                       done.version})
    table = catalog.table_by_name(name)
    if table is None:
        return NotFound("table", name)
    message = f"table {name!r} deleted"
    removed = evolve(table, state=next_table_state(table.state, "delete"),
                                 state_message=message, delete_request=request_id)
    tablets = catalog.tablets_of(table.table_id)
    deleted = tuple(
        evolve(t, state=next_tablet_state(t.state, "delete"),
                            state_message=message)
        for t in tablets if t.live)
    calls = [delete_tablet(peer.uuid, t.tablet_id, "DELETED", None, message)
             for t in deleted for peer in t.consensus.config.peers]
    reads = {tablet_key(t.tablet_id): t.version for t in tablets}
    reads[table_key(table.table_id)] = table.version
    return make_plan("delete_table", CatalogWrite(tablets=deleted, tables=(removed,)),
                 TableDeleted(table.table_id), calls, tables=(table.table_id,),
                 tablets=(t.tablet_id for t in tablets), reads=reads)


def _deleted_by(catalog: Catalog, name: str, request_id: str) -> TableRecord | None:
    """The REMOVED table named ``name`` that DeleteTable ``request_id`` removed, if any."""
    if not request_id:
        return None
    found = [t for t in catalog.tables.values()
             if not t.live and t.name == name and t.delete_request == request_id]
    assert len(found) <= 1, "a request removes one table"
    return found[0] if found else None


def _altered_by(catalog: Catalog, request: AlterTable) -> TableRecord | None:
    """The live table whose last alter was ``request`` (under its old or new name)."""
    if not request.request_id:
        return None
    for name in (request.name, request.new_name):
        table = catalog.table_by_name(name) if name is not None else None
        if table is not None and table.alter_request == request.request_id:
            return table
    return None


# ---------------------------------------------------------------------------- AlterTable


def plan_alter_table(catalog: Catalog, request: AlterTable, *,
                     reserved: Collection[str]) -> Plan[TableAltered] | MasterError:
    """AlterTable (appendix B): a schema change bumps the schema version and makes the table
    ALTERING (RUNNING again once every live tablet reports the version: reports.py); a
    rename moves the name. One write of the table row; after commit an AlterSchema to each
    live tablet's recorded leader (a tablet with no known leader gets it when it reports:
    KUDU-1353 is why the leader comes from the record, not a cache). A retry of the
    table's last alter answers OK (module docstring "Retries")."""
    done = _altered_by(catalog, request)
    if done is not None:
        return make_plan("alter_table", CatalogWrite(),
                         TableAltered(done.table_id, done.schema_version), (),
                         tables=(), tablets=(), reads={table_key(done.table_id):
                                                       done.version})
    table = catalog.table_by_name(request.name)
    if table is None:
        return NotFound("table", request.name)
    if not (request.add_columns or request.drop_columns or request.new_name is not None):
        return InvalidArgument("an alter must add or drop a column or rename the table")
    schema = _altered_schema(table, request)
    if isinstance(schema, MasterError):
        return schema
    renamed = _altered_name(catalog, table, request, reserved)
    if isinstance(renamed, MasterError):
        return renamed
    name, reserve = renamed
    schema_changed = schema != table.schema
    if not schema_changed and name == table.name:
        return InvalidArgument("the alter changes nothing")
    if schema_changed:
        added_in = dict(zip((c.name for c in table.schema),
                            table.column_versions or (0,) * len(table.schema), strict=True))
        altered = evolve(table, state=next_table_state(table.state, "alter"),
                                     name=name, schema=schema,
                                     schema_version=table.schema_version + 1,
                                     column_versions=tuple(
                                         added_in.get(c.name, table.schema_version + 1)
                                         for c in schema),
                                     state_message=f"altering to schema version "
                                                   f"{table.schema_version + 1}",
                                     alter_request=request.request_id)
        calls = [alter_schema(t.consensus.leader, t.tablet_id, altered, "alter table")
                 for t in catalog.live_tablets_of(table.table_id)
                 if t.consensus.leader is not None]
    else:
        altered = evolve(table, state=next_table_state(table.state, "rename"),
                                     name=name, alter_request=request.request_id)
        calls = []
    # The leaders the alters go to were read from the tablet rows: they count as reads.
    reads = {tablet_key(t.tablet_id): t.version for t in catalog.live_tablets_of(table.table_id)}
    reads[table_key(table.table_id)] = table.version
    return make_plan("alter_table", CatalogWrite(tables=(altered,)),
                 TableAltered(table.table_id, altered.schema_version), calls,
                 tables=(table.table_id,), tablets=(), reads=reads, reserve=reserve)


def _altered_schema(table: TableRecord, request: AlterTable
                    ) -> tuple[Column, ...] | MasterError:
    """The table's schema after the request's drops, then its adds (the key column stays
    the one key column), or why not."""
    schema = list(table.schema)
    for dropped in request.drop_columns:
        position = next((i for i, c in enumerate(schema) if c.name == dropped), None)
        if position is None:
            return InvalidArgument(f"no column {dropped!r} to drop")
        if schema[position].key:
            return InvalidArgument(f"the key column {dropped!r} cannot be dropped")
        del schema[position]
    for added in request.add_columns:
        if added.key:
            return InvalidArgument(f"column {added.name!r}: a table has one key column")
        if any(c.name == added.name for c in schema):
            return InvalidArgument(f"column {added.name!r} already exists")
        schema.append(added)
    if (error := validate_schema(schema)) is not None:
        return InvalidArgument(error)
    return tuple(schema)


def _altered_name(catalog: Catalog, table: TableRecord, request: AlterTable,
                  reserved: Collection[str]) -> tuple[str, tuple[str, ...]] | MasterError:
    """The table's name after the request and the names its plan reserves (a new name,
    free in the catalog and not reserved by a write in flight), or why not."""
    if request.new_name is None or request.new_name == table.name:
        return table.name, ()
    if (error := validate_name(request.new_name, "table")) is not None:
        return InvalidArgument(error)
    other = catalog.table_by_name(request.new_name)
    if other is not None:
        return AlreadyPresent("table", request.new_name, other.table_id)
    if request.new_name in reserved:
        return NameReserved(request.new_name)
    return request.new_name, (request.new_name,)


# ---------------------------------------------------------------------------- replacement


def plan_replace_tablets(catalog: Catalog, tablet_ids: Iterable[str], *,
                         servers: Sequence[Candidate],
                         rng: random.Random) -> Plan[TabletsReplaced] | MasterError:
    """Replace tablets whose creation timed out (appendix B "Background task scanning",
    with its improvements 2 and 3): for each, the old tablet REPLACED and a new one
    CREATING in the same bucket on a fresh placement, all in one write. After commit:
    DeleteTablet (mode DELETED) to the old replicas, CreateTablet to the new ones.
    Which tablets timed out is the shell's decision (`CreationWatch`)."""
    old_tablets: list[TabletRecord] = []
    for tablet_id in sorted(set(tablet_ids)):
        tablet = catalog.tablets.get(tablet_id)
        if tablet is None:
            return NotFound("tablet", tablet_id)
        table = catalog.tables[tablet.table_id]
        if tablet.state is not TabletState.CREATING or not table.live:
            return IllegalState(f"tablet {tablet_id} is {tablet.state.value} in a "
                                f"{table.state.value} table: only a CREATING tablet of a "
                                "live table is replaced")
        old_tablets.append(tablet)
    if not old_tablets:
        return InvalidArgument("no tablet to replace")
    load = catalog.replica_counts()
    taken: set[str] = set()
    replaced: list[TabletRecord] = []
    created: list[TabletRecord] = []
    for old in old_tablets:
        table = catalog.tables[old.table_id]
        placement = place_tablets(servers, load, 1, table.num_replicas, rng)
        if isinstance(placement, NotEnoughServers):
            return placement
        peers: tuple[Peer, ...] = placement[0]
        for peer in peers:
            load[peer.uuid] = load.get(peer.uuid, 0) + 1
        new = TabletRecord(tablet_id=_unused_id(catalog, rng, taken), table_id=old.table_id,
                           partition=old.partition, state=next_tablet_state(None, "create"),
                           consensus=initial_consensus(peers), version=1,
                           reported_schema_version=table.schema_version,
                           replaces=old.tablet_id)
        created.append(new)
        replaced.append(evolve(
            old, state=next_tablet_state(old.state, "replace"), replaced_by=new.tablet_id,
            state_message=f"creation timed out; replaced by {new.tablet_id}"))
    calls = [delete_tablet(peer.uuid, old.tablet_id, "DELETED", None, old.state_message)
             for old in replaced for peer in old.consensus.config.peers]
    calls += [create_tablet(peer.uuid, new, f"replaces {new.replaces}")
              for new in created for peer in new.consensus.config.peers]
    reads = {record_key(t): t.version for t in old_tablets}
    reads.update({table_key(t.table_id): catalog.tables[t.table_id].version
                  for t in old_tablets})
    reads.update({record_key(t): 0 for t in created})
    return make_plan("replace_tablets", CatalogWrite(tablets=(*replaced, *created)),
                 TabletsReplaced(tuple((o.tablet_id, n.tablet_id)
                                       for o, n in zip(old_tablets, created, strict=True))),
                 calls, tables=(t.table_id for t in old_tablets),
                 tablets=(t.tablet_id for t in (*old_tablets, *created)), reads=reads)


# ---------------------------------------------------------------------------- background


def creation_nudges(catalog: Catalog) -> tuple[TabletServerCall, ...]:
    """CreateTablet to every replica of every CREATING tablet of a live table (seed 004
    "In the background ... a nudge"). Derived from committed records alone, so a new leader
    continues its predecessor's creations; CreateTablet is idempotent."""
    return tuple(
        create_tablet(peer.uuid, tablet, "creation nudge")
        for tablet in catalog.tablets.values()
        if tablet.state is TabletState.CREATING and catalog.tables[tablet.table_id].live
        for peer in tablet.consensus.config.peers)


@attrs.frozen
class CreationWatch:
    """When this leader first saw each CREATING tablet (shell time, seconds). Kept in
    memory: a new leader starts a fresh watch, so a tablet gets at least one full timeout
    under every leader before it is replaced."""

    since: Mapping[str, float] = attrs.field(factory=dict)

    def observe(self, catalog: Catalog, now: float) -> CreationWatch:
        """Start watching new CREATING tablets; forget those no longer CREATING."""
        since = {tablet_id: self.since.get(tablet_id, now)
                 for tablet_id, tablet in catalog.tablets.items()
                 if tablet.state is TabletState.CREATING}
        return CreationWatch(since)

    def timed_out(self, now: float, timeout: float) -> tuple[str, ...]:
        return tuple(sorted(t for t, first in self.since.items() if now - first >= timeout))


__all__ = [
    "AlterTable",
    "Committed",
    "CreateTable",
    "CreationWatch",
    "LockKey",
    "Plan",
    "TableAltered",
    "TableCreated",
    "TableDeleted",
    "TabletsReplaced",
    "creation_nudges",
    "lock_order",
    "make_plan",
    "plan_alter_table",
    "plan_create_table",
    "plan_delete_table",
    "plan_replace_tablets",
]
