"""Read-only master requests over a committed snapshot: ListTables, GetTableLocations.

Locations for writers: RUNNING tablets only (Kudu's BuildLocationsForTablet answers
ServiceUnavailable for a tablet that is not RUNNING). A tablet CREATING in the catalog has
had no leader reported yet, and the leader master REPLACES it after ``creation_timeout``
(a new empty tablet for the same bucket, the old one's replicas DELETED). If a client could
write to it meanwhile, a row that tablet acknowledged would vanish with it (the master
simulation's CREATING_TABLET_REPLACED). So a request that asks ``running_only`` (the table
client always does) gets a not-RUNNING tablet with its id, bucket and state but NO replicas:
nothing to write to, and the client retries until the tablet is RUNNING. Once RUNNING, a
tablet is never replaced (TABLET_TRANSITIONS: only CREATING -> REPLACED), so every row a
RUNNING tablet acknowledged stays in the live tablet of its bucket until its table is
deleted. Admin views (``table describe``, ksck, replica moves) ask without it and keep
seeing every live tablet's replicas, CREATING ones included.

Readers see committed data only (seed 004 contract step 2: mutations are copy-on-write, so
concurrent readers see the snapshot of the last commit). Locations are computed from the
tablet records' committed consensus state and the tablet-server map, never from a cache of
per-tablet replica locations (KUDU-1353: right after a failover that cache was empty; the
records are complete as soon as the leader rebuilt its snapshot from the catalog).

Follower reads (KUDU-500; issue 19 "Beyond Kudu 1.0")
----------------------------------------------------
A follower master may answer ListTables and GetTableLocations from its own catalog replica
when the client names a freshness bound B (seconds). Two rules, and why they suffice:

1. Only what is applied. The follower reads the rows of its catalog replica at its applied
   index, and a replica applies committed entries only: it never shows a table the leader
   has not committed (nor a write a later leader will truncate).
2. Only what is fresh. ``Freshness`` holds *anchors* (asked_at, index): at time
   ``asked_at`` on the follower's own clock, it asked the leader master for a read index
   (Master.ReadIndex: the leader confirms its leadership with a majority, Raft's ReadIndex,
   and answers an index it has applied, at least its commit index at the time the request
   reached it). The request left after ``asked_at``, so every catalog write committed
   before ``asked_at`` (by this leader or any earlier one) is at or below that index.
   Once the follower has applied up to the index, its catalog therefore holds every write
   committed before ``asked_at``: it is no older than ``now - asked_at``. ``staleness`` is
   that age for the latest anchor already applied, and the follower answers only when it
   is at most B; otherwise it refuses (StaleCatalog, retryable, naming the staleness).

The argument needs no lease and no synchronised clocks: both times are read from the
follower's own monotonic clock, and the leader's side is Raft's ReadIndex (no clock). A
follower cut off from the leader gets no new anchor, so its staleness grows with the
follower's clock and it refuses once it exceeds the bound. A deposed leader that still
believes it leads cannot fool it: its ReadIndex round needs a majority's acknowledgement
in its own term, which it cannot get once a majority follows a newer leader, so it answers
no anchor. The leader master itself answers as before, from its ready snapshot.
"""

from __future__ import annotations

from collections.abc import Callable

import attrs

from revivify.impl.tablet.columns import Column

from .catalog import Catalog, TableState, TabletState
from .errors import NotFound

ANCHORS_KEPT = 8  # read indexes asked for and not yet applied, at most (the oldest go)


@attrs.frozen
class TableSummary:
    name: str
    table_id: str
    state: TableState
    schema_version: int
    num_tablets: int


@attrs.frozen
class ReplicaLocation:
    uuid: str
    address: str  # the live address from the tablet-server map, else the recorded one
    member_type: str  # VOTER | NON_VOTER
    leader: bool
    live: bool


@attrs.frozen
class TabletLocation:
    tablet_id: str
    partition: int
    state: TabletState
    term: int
    replicas: tuple[ReplicaLocation, ...]
    config_index: int = 0  # the recorded committed config's opid_index
    moving_from: str | None = None  # a replica move off that server is in progress


@attrs.frozen
class TableLocations:
    table_id: str
    name: str
    schema_version: int
    num_tablets: int
    tablets: tuple[TabletLocation, ...]
    num_replicas: int = 0
    # (column, the schema version that added it), in schema order.
    columns: tuple[tuple[Column, int], ...] = ()


def list_tables(catalog: Catalog) -> list[TableSummary]:
    """The live tables (not REMOVED), by name."""
    return [TableSummary(t.name, t.table_id, t.state, t.schema_version, t.num_tablets)
            for t in sorted((catalog.tables[i] for i in catalog.names.values()),
                            key=lambda t: t.name)]


def table_locations(catalog: Catalog, name: str, *, address: Callable[[str], str | None],
                    live: Callable[[str], bool], running_only: bool = False
                    ) -> TableLocations | NotFound:
    """Each live tablet of table ``name`` with its replicas, roles and leader.
    ``address`` and ``live`` come from the tablet-server map. ``running_only``: a tablet
    not RUNNING is listed without replicas (the module docstring, "Locations for
    writers")."""
    table = catalog.table_by_name(name)
    if table is None:
        return NotFound("table", name)
    tablets = []
    for tablet in catalog.live_tablets_of(table.table_id):
        consensus = tablet.consensus
        hidden = running_only and tablet.state is not TabletState.RUNNING
        replicas = () if hidden else tuple(
            ReplicaLocation(uuid=p.uuid, address=address(p.uuid) or p.address,
                            member_type=p.member_type, leader=p.uuid == consensus.leader,
                            live=live(p.uuid))
            for p in consensus.config.peers)
        tablets.append(TabletLocation(
            tablet.tablet_id, tablet.partition, tablet.state, consensus.term, replicas,
            consensus.config.opid_index,
            None if tablet.move is None else tablet.move.from_uuid))
    versions = table.column_versions or (0,) * len(table.schema)
    return TableLocations(table.table_id, table.name, table.schema_version, table.num_tablets,
                          tuple(tablets), table.num_replicas,
                          tuple(zip(table.schema, versions, strict=True)))


@attrs.frozen
class Anchor:
    """At ``asked_at`` (this master's clock) a read index was asked for: once the catalog
    replica has applied ``index``, it holds every write committed before ``asked_at``."""

    asked_at: float
    index: int


@attrs.define
class Freshness:
    """How old a follower's applied catalog may be (the module docstring's rule 2).

    ``fresh_as_of`` is the latest ``asked_at`` of an anchor whose index is applied; the
    anchors still waiting for their index to be applied are kept (a bounded list, in order
    of ``asked_at``: the read indexes a leader answers never decrease)."""

    fresh_as_of: float | None = None
    pending: list[Anchor] = attrs.Factory(list)

    def anchor(self, asked_at: float, index: int, applied_index: int) -> None:
        """A leader answered ``index`` to a read-index request sent at ``asked_at``."""
        assert index >= 0, index
        self.pending.append(Anchor(asked_at, index))
        self.pending.sort(key=lambda a: a.asked_at)
        del self.pending[:-ANCHORS_KEPT]
        self.settle(applied_index)

    def settle(self, applied_index: int) -> None:
        """Anchors whose index is applied now count; the newest of them sets the age."""
        still: list[Anchor] = []
        for a in self.pending:
            if a.index <= applied_index:
                if self.fresh_as_of is None or a.asked_at > self.fresh_as_of:
                    self.fresh_as_of = a.asked_at
            else:
                still.append(a)
        self.pending = still
        assert len(self.pending) <= ANCHORS_KEPT

    def staleness(self, now: float, applied_index: int) -> float | None:
        """Seconds the applied catalog may lag the leader's commits (None: never anchored)."""
        self.settle(applied_index)
        if self.fresh_as_of is None:
            return None
        return max(0.0, now - self.fresh_as_of)

    def forget(self) -> None:
        """A new incarnation of the catalog replica (copied, restarted): start over."""
        self.fresh_as_of = None
        self.pending.clear()


__all__ = [
    "ANCHORS_KEPT",
    "Anchor",
    "Freshness",
    "ReplicaLocation",
    "TableLocations",
    "TableSummary",
    "TabletLocation",
    "list_tables",
    "table_locations",
]
