"""``revivify tserver retire UUID --masters ...``: move every replica off a tablet server;
``revivify master add HOST:PORT`` / ``master remove UUID``: the masters join and leave.

The masters do the moving (impl/master/replication.py): for each tablet with a replica on
the server, this command asks the leader master for ``Master.MoveReplica(tablet, from=UUID)``,
which records the move in the tablet's catalog row (one write); the leader master then adds
a replacement on another live server (NON_VOTER with promote: the tablet's leader copies the
tablet there and promotes it once caught up) and removes the retiring replica. Recorded moves
survive a master failover, and the command itself keeps no state: run it again after it was
stopped or killed and it continues from what the catalog says (a move already recorded is
not recorded twice). New replicas placed on the server meanwhile (a tablet healed onto it)
are found on the next look and moved too.

The one step the masters do not take: a replica that LEADS its tablet is not removed (the
Raft leader cannot remove itself). Once its replacement is a voter, this command asks that
server to hand the leadership to another live voter (``Admin.StepDown`` with a new leader,
the same call as ``revivify tablet step-down``), and the masters finish the move.

Progress on stderr: one line per tablet moved (table, tablet, k/N: a running count), and
on a terminal a live bar under those lines (render.progress: tablets moved of those found,
elapsed time); without a terminal, or with ``--json``, the lines alone.
Output: text, or ``--json`` {"tserver", "moved": [{"table", "tablet", "to", "replicas"}],
"count", "remaining"} ("to": the replacement, null when it was already a voter at this run's
first look, e.g. added for an earlier, killed run; "replicas": the tablet's members after).
All three take ``--call-timeout SECONDS`` (common.call_timeout_flag: each master call).
Exit 0 once the server holds no replica in any live tablet's config; 1 for an
unknown server or a refusal; 2 for bad usage or when ``--deadline`` (default 600 s) passes
first (run it again to continue).

``master add HOST:PORT --masters ...``: the new master must already run with ``master run
--join`` (it never creates a catalog of its own). The leader master adds it to the catalog
tablet's Raft config as a NON_VOTER with promote (``Master.AddMaster``, CAS on the committed
config index, one change at a time); the leader copies the catalog to it (tablet copy) and
streams its WAL, and promotes it to VOTER once it has caught up. ``master remove UUID``
takes a master out of the config (``Master.RemoveMaster``); the leader master cannot be
removed (make another lead first). Both are idempotent (a member added again, a non-member
removed again: exit 0, "already"); ``master add`` first asks the new master for its
status, so an address where no master answers is named at once (exit 2). ``--cas INDEX``
names the committed config index the change was planned on (a change planned on a stale
view is refused: exit 1). Output: text, or ``--json`` {"uuid", "address", "config_index",
"already_done"}. Tablet servers and clients keep the master list they were started with
(learning it from the masters is not built yet).
"""

from __future__ import annotations

from typing import Any, Final

import trio

from revivify.impl.client import ClientOptions
from revivify.impl.client.errors import Rejected, Unavailable
from revivify.impl.client.master import MasterClient, open_master_client
from revivify.impl.client.options import DEFAULT_CALL_TIMEOUT
from revivify.impl.master import api
from revivify.impl.rpc import RpcError, open_rpc_client
from revivify.impl.rpc.address import parse_address
from revivify.impl.tserver import api as ts_api

from . import render
from .common import (
    Outcome,
)

PROG: Final = "revivify tserver retire"
RETIRE_DEADLINE: Final = 600.0
POLL_SECONDS: Final = 0.5
CALL_DEADLINE: Final = 30.0  # each master call's own bound, retries included


async def _holding(client: MasterClient, uuid: str
                   ) -> dict[str, tuple[str, api.TabletLocationInfo, int]]:
    """tablet id -> (table name, its location, the table's replica count) for every live
    tablet with a replica on ``uuid``."""
    tables = await client.call(api.MASTER_LIST_TABLES, api.Empty(), api.TableList)
    out: dict[str, tuple[str, api.TabletLocationInfo, int]] = {}
    for table in tables.tables:
        try:
            locs = await client.call(api.MASTER_TABLE_LOCATIONS, api.TableName(table.name),
                                     api.TableLocationsReply)
        except Rejected:
            continue  # deleted meanwhile
        for tablet in locs.tablets:
            if any(r.uuid == uuid for r in tablet.replicas):
                out[tablet.tablet_id] = (table.name, tablet, locs.num_replicas)
    return out


async def _hand_over_leadership(tablet: api.TabletLocationInfo, uuid: str,
                                num_replicas: int, shown: render.Progress) -> None:
    """The retiring replica leads and its replacement is a voter: ask it to transfer the
    leadership to another live voter (the masters never remove a tablet's leader)."""
    me = next((r for r in tablet.replicas if r.uuid == uuid), None)
    others = [r for r in tablet.replicas
              if r.uuid != uuid and r.member_type == "VOTER" and r.live]
    if me is None or not me.leader or len(others) < max(num_replicas, 1):
        return
    host, port = parse_address(me.address)
    try:
        with trio.fail_after(5.0):
            async with open_rpc_client(host, port, uuid, "revivify-retire",
                                       app_errors=ts_api.APP_ERRORS) as rpc:
                await rpc.call(ts_api.ADMIN_STEP_DOWN,
                               ts_api.StepDown(tablet.tablet_id, others[0].uuid), ts_api.Ack)
        shown.note(f"{tablet.tablet_id}: leadership handed from {uuid} to {others[0].uuid}")
    except (RpcError, OSError, trio.TooSlowError):
        pass  # not the leader any more, or unreachable: looked at again next round


async def retire(masters: list[str], uuid: str, deadline: float, *,
                 bar: bool = True, call_timeout: float = DEFAULT_CALL_TIMEOUT) -> Outcome:
    """Move every replica off ``uuid`` (module docstring); ``bar``: a progress bar on
    stderr when it is a terminal (render.progress); ``call_timeout``: each master call's
    (--call-timeout)."""
    with render.progress(f"retiring {uuid[:8]}", 0, enabled=bar) as shown:
        return await _retire(masters, uuid, deadline, shown, call_timeout)


async def _retire(masters: list[str], uuid: str, deadline: float,
                  shown: render.Progress, call_timeout: float) -> Outcome:
    options = ClientOptions(deadline=min(CALL_DEADLINE, deadline), call_timeout=call_timeout)
    give_up = trio.current_time() + deadline - 1.0
    moved: list[dict[str, Any]] = []
    first_seen: dict[str, tuple[str, frozenset[str]]] = {}
    async with open_master_client(masters, options=options) as client:
        servers = await client.call(api.MASTER_LIST_TSERVERS, api.Empty(),
                                    api.TabletServerList)
        if not any(t.uuid == uuid for t in servers.tservers):
            return Outcome(1, {"tserver": uuid, "error": "unknown tablet server"}, "",
                           f"no tablet server {uuid} is known to the masters")
        holding = await _holding(client, uuid)
        shown.note(f"retiring {uuid}: {len(holding)} tablet(s) hold a replica there")
        while True:
            for tablet_id, (table, tablet, _) in holding.items():
                # Its voters at the first look: the replacement is a member it lacked
                # (added as a NON_VOTER, possibly by an earlier, killed run).
                first_seen.setdefault(tablet_id, (table, frozenset(
                    r.uuid for r in tablet.replicas if r.member_type == "VOTER")))
            shown.set_total(len(first_seen))
            for tablet_id, (table, _) in sorted(first_seen.items()):
                if tablet_id in holding or any(m["tablet"] == tablet_id for m in moved):
                    continue
                moved.append({"table": table, "tablet": tablet_id, "to": None})
                shown.advance()
                shown.note(f"moved {table} {tablet_id} off {uuid} "
                           f"({len(moved)}/{len(first_seen)})")
            if not holding:
                break
            if trio.current_time() >= give_up:
                return Outcome(2, _summary(uuid, moved, len(holding)), "",
                               f"{len(holding)} tablet(s) still hold a replica on {uuid} "
                               "at the deadline; run the command again to continue")
            for tablet_id, (_, tablet, num_replicas) in sorted(holding.items()):
                if tablet.state != "RUNNING":
                    continue
                if tablet.moving_from is None:
                    try:
                        await client.call(api.MASTER_MOVE_REPLICA,
                                          api.MoveReplicaRequest(tablet_id, uuid),
                                          api.MoveReplicaReply)
                    except (Rejected, Unavailable) as exc:
                        # Another move of that tablet in progress (an automatic one for a
                        # failed server, say), or the masters busy: asked again next round.
                        shown.note(f"{tablet_id}: {exc}")
                elif tablet.moving_from == uuid:
                    await _hand_over_leadership(tablet, uuid, num_replicas, shown)
            await trio.sleep(POLL_SECONDS)
            shown.refresh()  # the bar's elapsed time
            try:
                holding = await _holding(client, uuid)
            except Unavailable as exc:  # a master failover: look again next round
                shown.note(f"asking the masters: {exc}")
        # Where each replica went: the members now that were not members before.
        for entry in moved:
            entry["to"], entry["replicas"] = await _new_member(
                client, entry["table"], entry["tablet"], first_seen[entry["tablet"]][1])
    return Outcome(0, _summary(uuid, moved, 0),
                   f"{uuid} holds no replica: {len(moved)} tablet(s) moved")


async def _new_member(client: MasterClient, table: str, tablet_id: str,
                      before: frozenset[str]) -> tuple[str | None, list[str]]:
    """(the replacement, if this run can tell it: None when it was a voter already at the
    first look; the tablet's members now)."""
    try:
        locs = await client.call(api.MASTER_TABLE_LOCATIONS, api.TableName(table),
                                 api.TableLocationsReply)
    except (Rejected, Unavailable):
        return None, []
    tablet = next((t for t in locs.tablets if t.tablet_id == tablet_id), None)
    members = sorted(r.uuid for r in tablet.replicas) if tablet else []
    new = sorted(set(members) - before)
    return (new[0] if new else None), members


def _summary(uuid: str, moved: list[dict[str, Any]], remaining: int) -> dict[str, Any]:
    return {"tserver": uuid, "moved": moved, "count": len(moved), "remaining": remaining}


__all__ = ["retire"]

