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
                                ignores it (``Admin.AlterSchema``, defined with the
                                heartbeat in impl/tserver/master_api.py)
    ChangeConfig                compare-and-set on the committed config index (seed 001)

No call is ever made for a tablet the catalog has no record of (appendix A's one unfenced
case): the report processor keeps such replicas (reports.py).

Every attempt re-checked (``still_called_for``)
-----------------------------------------------
"Safe to send late" above holds for each call alone, not for a CreateTablet that arrives
after the DeleteTablet DELETED of its table: the server has deleted the replica for good
(no tombstone, no cmeta), so the late create makes it afresh at term 0 on a server that had
voted in term >= 1 (the checker's TermRegression; the master simulation's
CREATE_AFTER_DELETE), and the deleted table's tablet lives again there. A call is released
once, by the ready leader of some term, and then retried for up to ``call_retry_seconds``;
so the shell (delivery.py ``_deliver``) checks, before EVERY attempt, that

  (1) this master is still the ready leader of the very term that released the call, with
      no snapshot rebuild pending: its snapshot is then the committed catalog, and every
      write that could make the call wrong (a delete, a replacement, a config change) went
      through this same snapshot (one writer per term, runner.py); and
  (2) that snapshot still calls for it (``still_called_for`` below): a CreateTablet only
      while its tablet is CREATING, its table live, and the destination a member of the
      recorded config; a TOMBSTONE only while the destination is outside the live record's
      config at the same index; a ChangeConfig only while the live record's config index is
      the CAS; an AlterSchema only while table and tablet are live and the table is at that
      schema version. DeleteTablet DELETED is always still called for (nothing is undeleted).

and a DeleteTablet to a (server, tablet) waits for a CreateTablet attempt to that same pair
that is on the wire to end (answered or timed out) before its own first attempt. The check
runs before each attempt and again once its connection is open, just before the request is
written; an attempt counts as on the wire from its first check on. Since the leader's
snapshot takes the delete before the DeleteTablet is released, every create attempt either
checked before that (and the delete waits for it to end) or after (and finds the tablet
DELETED: moot). So, from one master, no CreateTablet that was answered can follow the
DeleteTablet of the same replica.

What remains, and the tablet server's guard:
  * an attempt that TIMED OUT may still be delivered later (a slow network buffers it);
  * a deposed leader master that has not yet learnt it lost its term passes (1) on its
    stale snapshot for up to one gate tick plus an election timeout.
Both need a late CreateTablet to overtake a DeleteTablet DELETED that was sent later. The
tablet server closes them: every CreateTablet a master sends carries its term
(``master_term``), and a server refuses a master's create of a tablet it deleted with mode
DELETED (TabletDeleted, which the shell counts as moot): a tablet id is never reused and
nothing is undeleted, so such a create is always a late copy. The server remembers those
ids in memory (impl/tserver/manager/core.py ``LifecycleCore.deleted``): a request in
flight dies with its connection when the server's process exits, so what is left is a
deposed master's retry on a new connection to a server restarted inside that master's
window of one gate tick plus an election timeout. A replica recreated that way is of a
table the catalog holds REMOVED, and the report processor asks the server to delete it
again.
"""

from __future__ import annotations

from typing import Literal

import attrs

from revivify.impl.consensus.messages import ConfigChange
from revivify.impl.tserver.api import (
    ADMIN_CHANGE_CONFIG,
    ADMIN_CREATE_TABLET,
    ADMIN_DELETE_TABLET,
    ChangeConfig,
    CreateTablet,
    DeleteTablet,
)
from revivify.impl.tserver.master_api import ADMIN_ALTER_SCHEMA, AlterSchema

from .catalog import Catalog, TableRecord, TabletRecord, TabletState

DeleteMode = Literal["TOMBSTONE", "DELETED"]


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


def still_called_for(catalog: Catalog, call: TabletServerCall) -> bool:
    """Does the committed ``catalog`` still call for ``call`` (module docstring, (2))?
    False makes the call moot: it is not sent (again)."""
    body = call.body
    tablet = catalog.tablets.get(body.tablet_id)
    table = None if tablet is None else catalog.tables.get(tablet.table_id)
    if isinstance(body, DeleteTablet) and body.mode == "DELETED":
        # Decided on a DELETED / REPLACED record or a REMOVED table: that never reverts.
        return True
    if tablet is None or table is None or not (tablet.live and table.live):
        # Any other call is for a live tablet of a live table; with neither, it is moot
        # (a record is never forgotten, C1, so None means a catalog that never held it).
        return False
    config = tablet.consensus.config
    if isinstance(body, CreateTablet):
        return tablet.state is TabletState.CREATING and tablet.is_member(call.dest)
    if isinstance(body, DeleteTablet):  # TOMBSTONE: a replica outside the recorded config
        return (not tablet.is_member(call.dest)
                and body.cas_config_index == config.opid_index)
    if isinstance(body, ChangeConfig):
        # The CAS was the recorded index when decided; the record only moves forward, and
        # once it has, the tablet's config has too (the server would refuse the CAS).
        return body.cas_config_index == config.opid_index
    assert isinstance(body, AlterSchema), type(body)
    return table.schema_version == body.schema_version


__all__ = [
    "Body",
    "DeleteMode",
    "TabletServerCall",
    "alter_schema",
    "change_config",
    "create_tablet",
    "delete_tablet",
    "still_called_for",
]
