"""The master events of the trace contract, built from the master's own values.

A master traces three kinds of fact beside its catalog tablet's Raft events (contract
version 4, traces/README.md "Master events"): ``master_ready`` when the leader-ready gate
opens (the whole catalog it rebuilt), ``catalog_commit`` when one of its catalog writes has
committed and applied (the records that write holds, as they are after it), and
``master_call`` when a call to a tablet server is released (once, before its first
attempt). The checker replays them against the masters' ordering contract; this module
only says what the facts are, never what is allowed (the implementation does not consult
the spec). Each record carries its row's ``version`` (C4), which lets the checker compare
a rebuilt catalog with the writes committed before it record by record.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final, Literal

from revivify.contract.events import (
    CallMethod,
    CatalogCommitArgs,
    CatalogTable,
    CatalogTablet,
    MasterCallArgs,
    MasterReadyArgs,
)
from revivify.impl.tserver import api as ts_api
from revivify.impl.tserver.master_api import ADMIN_ALTER_SCHEMA, AlterSchema

from .calls import TabletServerCall
from .catalog import Catalog, Record, TableRecord, TabletRecord

_METHODS: Final[dict[str, CallMethod]] = {
    ts_api.ADMIN_CREATE_TABLET: "create_tablet",
    ts_api.ADMIN_DELETE_TABLET: "delete_tablet",
    ts_api.ADMIN_CHANGE_CONFIG: "change_config",
    ADMIN_ALTER_SCHEMA: "alter_schema",
}
_MODES: Final[dict[str, Literal["DELETED", "TOMBSTONE"]]] = {
    "DELETED": "DELETED", "TOMBSTONE": "TOMBSTONE"}


def table_fact(t: TableRecord) -> CatalogTable:
    return CatalogTable(t.table_id, t.name, t.state.value, t.schema_version, t.num_tablets,
                        t.version)


def tablet_fact(t: TabletRecord) -> CatalogTablet:
    config = t.consensus.config
    return CatalogTablet(t.tablet_id, t.table_id, t.partition, t.state.value,
                         config.opid_index, sorted(p.uuid for p in config.peers), t.version)


def _split(records: Iterable[Record]) -> tuple[list[CatalogTable], list[CatalogTablet]]:
    tables: list[CatalogTable] = []
    tablets: list[CatalogTablet] = []
    for r in records:
        if isinstance(r, TableRecord):
            tables.append(table_fact(r))
        else:
            tablets.append(tablet_fact(r))
    return tables, tablets


def ready_fact(term: int, index: int, catalog: Catalog) -> MasterReadyArgs:
    tables, tablets = _split(catalog.records())
    return MasterReadyArgs(term, index, tables, tablets)


def commit_fact(term: int, index: int, op: str, records: Iterable[Record]
                ) -> CatalogCommitArgs:
    tables, tablets = _split(records)
    return CatalogCommitArgs(term, index, op, tables, tablets)


def call_fact(term: int, call: TabletServerCall) -> MasterCallArgs:
    body = call.body
    method = _METHODS[call.method]
    if isinstance(body, ts_api.DeleteTablet):
        return MasterCallArgs(term, method, call.tablet_id, call.dest,
                              mode=_MODES[body.mode], cas_config_index=body.cas_config_index)
    if isinstance(body, AlterSchema):
        return MasterCallArgs(term, method, call.tablet_id, call.dest,
                              schema_version=body.schema_version)
    return MasterCallArgs(term, method, call.tablet_id, call.dest)


__all__ = ["call_fact", "commit_fact", "ready_fact", "table_fact", "tablet_fact"]
