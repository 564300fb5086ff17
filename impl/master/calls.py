"""The calls a master makes to tablet servers, as values: what a plan sends once committed.

A `TabletServerCall` names its destination server, the RPC method and the request body of
the tablet server's interface (``impl/tserver/api.py``): the shell sends it as is, and
retries it until it succeeds or a later report makes it moot (seed 004 contract step 7:
"the work done by an RPC must take place, either by retrying the RPC until it succeeds, or
through some other mechanism, such as sending a new RPC in response to a heartbeat").

Every call here is safe to send twice, or late, or from a master that has since lost its
leadership (seed 004 appendix A, the fencing audit):

    CreateTablet                idempotent: the server already holding the tablet refuses
                                with TabletAlreadyExists, which the shell counts as done
    DeleteTablet mode DELETED   only for a tablet whose committed record is DELETED or
                                REPLACED (or whose table is REMOVED): a decision that can
                                never become wrong, since nothing is ever undeleted
    DeleteTablet mode TOMBSTONE only for a replica outside the committed config the record
                                holds, with cas_config_index = that config's opid_index:
                                the server refuses if it has a newer config (the master
                                decided on stale information)
    AlterSchema                 idempotent: a tablet at that schema version or later
                                ignores it (``Admin.AlterSchema``: not yet in api.py, see
                                the master section of docs/architecture.md)
    ChangeConfig                compare-and-set on the committed config index (seed 001)

No call is ever made for a tablet the catalog has no record of (appendix A's one unfenced
case): the report processor keeps such replicas (reports.py).
"""

from __future__ import annotations

from typing import Final, Literal

import attrs
import msgspec

from revivify.impl.consensus.messages import ConfigChange
from revivify.impl.tserver.api import (
    ADMIN_CHANGE_CONFIG,
    ADMIN_CREATE_TABLET,
    ADMIN_DELETE_TABLET,
    ChangeConfig,
    CreateTablet,
    DeleteTablet,
)

from .catalog import Column, TableRecord, TabletRecord

ADMIN_ALTER_SCHEMA: Final = "Admin.AlterSchema"

DeleteMode = Literal["TOMBSTONE", "DELETED"]


class AlterSchema(msgspec.Struct, frozen=True):
    """Bring a tablet to ``schema_version`` (sent to its leader, which replicates the
    change through the tablet's Raft log). Ignored by a tablet already at that version or
    later, so a master may send it on every report that shows an old version."""

    tablet_id: str
    schema_version: int
    schema: list[Column]


Body = CreateTablet | DeleteTablet | ChangeConfig | AlterSchema


@attrs.frozen
class TabletServerCall:
    """One RPC to one tablet server. ``why`` is for logs and traces only."""

    dest: str  # the tablet server's UUID (the RPC layer refuses a call addressed elsewhere)
    method: str
    body: Body
    why: str

    @property
    def tablet_id(self) -> str:
        return self.body.tablet_id


def create_tablet(dest: str, tablet: TabletRecord, why: str) -> TabletServerCall:
    peers = list(tablet.consensus.config.peers)
    assert any(p.uuid == dest for p in peers), "a replica is created only on a member"
    return TabletServerCall(dest, ADMIN_CREATE_TABLET, CreateTablet(tablet.tablet_id, peers),
                            why)


def delete_tablet(dest: str, tablet_id: str, mode: DeleteMode, cas_config_index: int | None,
                  why: str) -> TabletServerCall:
    assert mode == "DELETED" or cas_config_index is not None, "a tombstone carries its CAS"
    return TabletServerCall(dest, ADMIN_DELETE_TABLET,
                            DeleteTablet(tablet_id, mode, cas_config_index), why)


def alter_schema(dest: str, tablet_id: str, table: TableRecord, why: str) -> TabletServerCall:
    body = AlterSchema(tablet_id, table.schema_version, list(table.schema))
    return TabletServerCall(dest, ADMIN_ALTER_SCHEMA, body, why)


def change_config(dest: str, tablet_id: str, change: ConfigChange, cas_config_index: int,
                  why: str) -> TabletServerCall:
    return TabletServerCall(dest, ADMIN_CHANGE_CONFIG,
                            ChangeConfig(tablet_id, change, cas_config_index), why)


__all__ = [
    "ADMIN_ALTER_SCHEMA",
    "AlterSchema",
    "Body",
    "DeleteMode",
    "TabletServerCall",
    "alter_schema",
    "change_config",
    "create_tablet",
    "delete_tablet",
]
