"""Read-only master requests over a committed snapshot: ListTables, GetTableLocations.

Readers see committed data only (seed 004 contract step 2: mutations are copy-on-write, so
concurrent readers see the snapshot of the last commit). Locations are computed from the
tablet records' committed consensus state and the tablet-server map, never from a cache of
per-tablet replica locations (KUDU-1353: right after a failover that cache was empty; the
records are complete as soon as the leader rebuilt its snapshot from the catalog).
"""

from __future__ import annotations

from collections.abc import Callable

import attrs

from .catalog import Catalog, TableState, TabletState
from .errors import NotFound


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


def list_tables(catalog: Catalog) -> list[TableSummary]:
    """The live tables (not REMOVED), by name."""
    return [TableSummary(t.name, t.table_id, t.state, t.schema_version, t.num_tablets)
            for t in sorted((catalog.tables[i] for i in catalog.names.values()),
                            key=lambda t: t.name)]


def table_locations(catalog: Catalog, name: str, *, address: Callable[[str], str | None],
                    live: Callable[[str], bool]) -> TableLocations | NotFound:
    """Each live tablet of table ``name`` with its replicas, roles and leader.
    ``address`` and ``live`` come from the tablet-server map."""
    table = catalog.table_by_name(name)
    if table is None:
        return NotFound("table", name)
    tablets = []
    for tablet in catalog.live_tablets_of(table.table_id):
        consensus = tablet.consensus
        replicas = tuple(
            ReplicaLocation(uuid=p.uuid, address=address(p.uuid) or p.address,
                            member_type=p.member_type, leader=p.uuid == consensus.leader,
                            live=live(p.uuid))
            for p in consensus.config.peers)
        tablets.append(TabletLocation(
            tablet.tablet_id, tablet.partition, tablet.state, consensus.term, replicas,
            consensus.config.opid_index,
            None if tablet.move is None else tablet.move.from_uuid))
    return TableLocations(table.table_id, table.name, table.schema_version, table.num_tablets,
                          tuple(tablets), table.num_replicas)


__all__ = [
    "ReplicaLocation",
    "TableLocations",
    "TableSummary",
    "TabletLocation",
    "list_tables",
    "table_locations",
]
