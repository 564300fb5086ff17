"""The master's RPC methods (api.py), on the embedded tablet server's RPC service.

Each handler is thin: it refuses while the process starts, turns the request into a
planner's input, and hands it to the room that owns it: catalog operations to the plan
runner (runner.py), reads to follower_reads.py, heartbeats to the tablet-server map (a
report also to the runner and the healing policy's soft state), replica moves to the
runner and the background task, master membership to membership.py. The replies are built
here from what those return.

AlterTable: the table row's one write (schema version + 1, ALTERING), then an AlterSchema
to each tablet's recorded leader (impl/tserver/schema.py records it durably); the reports
bring the versions back, and the write that records the last one makes the table RUNNING
(reports.py). A tablet that reports an old version gets the alter again.
"""

from __future__ import annotations

import random

import attrs
import msgspec

from revivify.impl.rpc import AppError, CallContext, Service
from revivify.impl.tablet.columns import Column
from revivify.impl.tserver.master_api import (
    MASTER_HEARTBEAT,
    Heartbeat,
    HeartbeatResponse,
    TabletPlace,
    TabletReport,
)

from . import api
from .background import Background
from .catalog import Catalog
from .embedded import EmbeddedServer, master_logger
from .errors import InvalidArgument, MasterError, NotEnoughServers
from .follower_reads import FollowerReads
from .gate import ReadyGate
from .healing import Healer
from .membership import Membership
from .operations import (
    AlterTable,
    CreateTable,
    Plan,
    TableCreated,
    plan_alter_table,
    plan_create_table,
    plan_delete_table,
)
from .placement import Candidate
from .queries import list_tables, table_locations
from .replication import plan_add_replica, plan_move_replica, plan_remove_replica
from .reports import process_report
from .runner import PlanRunner

logger = master_logger()


class MasterService:
    """The handlers of the master's RPC methods (module docstring)."""

    def __init__(self, embedded: EmbeddedServer, gate: ReadyGate, runner: PlanRunner,
                 reads: FollowerReads, membership: Membership, healer: Healer,
                 background: Background, rng: random.Random) -> None:
        self._embedded = embedded
        self._gate = gate
        self._runner = runner
        self._reads = reads
        self._membership = membership
        self._healer = healer
        self._background = background
        self._rng = rng
        self.web_address = ""  # this master's status pages (set once they serve)
        # Each tablet server's status pages, as its heartbeats say: soft state, like the
        # tablet-server map (a new leader learns them from the next heartbeats).
        self.web_addresses: dict[str, str] = {}

    def register(self, service: Service) -> None:
        """The master's methods, on the embedded tablet server's RPC service."""
        service.register(MASTER_HEARTBEAT, Heartbeat, HeartbeatResponse, self.on_heartbeat)
        service.register(api.MASTER_STATUS, api.Empty, api.MasterStatus, self.on_status)
        service.register(api.MASTER_LIST_TSERVERS, api.Empty, api.TabletServerList,
                         self.on_list_tservers)
        service.register(api.MASTER_CREATE_TABLE, api.CreateTableRequest,
                         api.TableCreatedReply, self.on_create_table)
        service.register(api.MASTER_DELETE_TABLE, api.DeleteTableRequest,
                         api.TableDeletedReply, self.on_delete_table)
        service.register(api.MASTER_ALTER_TABLE, api.AlterTableRequest,
                         api.TableAlteredReply, self.on_alter_table)
        service.register(api.MASTER_LIST_TABLES, api.ListTablesRequest, api.TableList,
                         self.on_list_tables)
        service.register(api.MASTER_TABLE_LOCATIONS, api.TableLocationsRequest,
                         api.TableLocationsReply, self.on_table_locations)
        service.register(api.MASTER_READ_INDEX, api.Empty, api.ReadIndexReply,
                         self.on_read_index)
        service.register(api.MASTER_ADD_REPLICA, api.ReplicaChangeRequest,
                         api.ReplicaChangeReply, self.on_add_replica)
        service.register(api.MASTER_REMOVE_REPLICA, api.ReplicaChangeRequest,
                         api.ReplicaChangeReply, self.on_remove_replica)
        service.register(api.MASTER_MOVE_REPLICA, api.MoveReplicaRequest,
                         api.MoveReplicaReply, self.on_move_replica)
        service.register(api.MASTER_ADD_MASTER, api.MasterChangeRequest,
                         api.MasterChangeReply, self.on_add_master)
        service.register(api.MASTER_UNREGISTER_TSERVER, api.UnregisterTServerRequest,
                         api.UnregisterTServerReply, self.on_unregister_tserver)
        service.register(api.MASTER_REMOVE_MASTER, api.MasterChangeRequest,
                         api.MasterChangeReply, self.on_remove_master)

    # ------------------------------------------------------------------ servers, status

    async def on_heartbeat(self, hb: Heartbeat, ctx: CallContext) -> HeartbeatResponse:
        """Every master keeps the map; only the ready leader processes the report."""
        self._embedded.require_started()
        verdict = self._embedded.tmap().heartbeat(hb, self._embedded.now())
        if hb.web_address:
            self.web_addresses[hb.server_uuid] = hb.web_address
        report = verdict.report
        if report is not None:
            # Soft state for the healing policy (replication.py "A FAILED replica").
            self._healer.note_report(hb.server_uuid, report)
            try:
                result = await self._runner.run_plan(
                    lambda c: process_report(c, hb.server_uuid, report))
                if isinstance(result, MasterError):
                    logger.warning("report of %s refused: %s", hb.server_uuid, result.message)
            except AppError as exc:
                logger.info("report of %s not processed: %s", hb.server_uuid, exc)
                self._embedded.tmap().report_failed(hb.server_uuid)
        # Read after the report's write: a config change that committed meanwhile is told.
        index, masters = self._membership.master_config()
        return msgspec.structs.replace(verdict.response, masters=masters,
                                       masters_index=index, web_address=self.web_address,
                                       places=self._places(report))

    def _places(self, report: TabletReport | None) -> dict[str, TabletPlace]:
        """The table and partition of each reported tablet, from the ready leader's
        catalog (the tablet server's pages show them); {} from any other master."""
        if report is None or self._gate.ready_term is None:
            return {}
        catalog, places = self._gate.catalog, {}
        for replica in report.replicas:
            tablet = catalog.tablets.get(replica.tablet_id)
            table = catalog.tables.get(tablet.table_id) if tablet is not None else None
            if tablet is not None and table is not None:
                places[replica.tablet_id] = TabletPlace(table.table_id, table.name,
                                                        tablet.partition)
        return places

    async def on_status(self, req: api.Empty, ctx: CallContext) -> api.MasterStatus:
        self._embedded.require_started()
        replica = self._embedded.catalog_replica()
        role, term, leader, address = self._embedded.role_of(replica)
        index, masters = self._membership.master_config()
        if index < 0:  # no catalog here yet: the configured list, said with no index
            masters = list(self._membership.master_addresses())
        ready = replica is not None and replica.core.is_leader() and self._gate.ready_in(term)
        members = [api.MasterMember(uuid, where, kind)
                   for uuid, where, kind in self._membership.master_members()]
        return api.MasterStatus(self._embedded.uuid, self._embedded.address, role, term,
                                leader, address, ready, masters, index, self.web_address,
                                members)

    async def on_list_tservers(self, req: api.Empty, ctx: CallContext
                               ) -> api.TabletServerList:
        self._embedded.require_started()
        return api.TabletServerList(self._embedded.uuid, [
            api.TabletServerEntry(i.uuid, i.address, i.live, round(i.seconds_since_heartbeat, 3),
                                  i.state.value, self.web_addresses.get(i.uuid, ""))
            for i in self._embedded.tmap().describe(self._embedded.now())])

    async def on_unregister_tserver(self, req: api.UnregisterTServerRequest,
                                    ctx: CallContext) -> api.UnregisterTServerReply:
        """Forget a dead tablet server that hosts nothing (api.UnregisterTServerRequest)."""
        self._embedded.require_started()
        tmap = self._embedded.tmap()
        entry = tmap.entry(req.uuid)
        if entry is None:
            return api.UnregisterTServerReply(self._embedded.uuid, False)
        now = self._embedded.now()
        if tmap.is_live(req.uuid, now):
            raise api.Refused("ILLEGAL_STATE", f"tablet server {req.uuid} is live (heartbeat "
                              f"{now - entry.last_heartbeat:.1f}s ago): stop it first", 0)
        if req.check_catalog:
            catalog, _ = await self._reads.view(None)  # the ready leader's own catalog
            hosted = [t.tablet_id for t in catalog.tablets.values()
                      if t.live and t.is_member(req.uuid)]
            if hosted:
                raise api.Refused("ILLEGAL_STATE", f"tablet server {req.uuid} still hosts "
                                  f"{len(hosted)} replica(s) (e.g. tablet {hosted[0]}): "
                                  "wait for healing or 'tserver retire' it first", 0)
        forgotten = tmap.forget(req.uuid, self._embedded.now())
        logger.info("tablet server %s (%s) unregistered by an operator", req.uuid,
                    entry.address)
        return api.UnregisterTServerReply(self._embedded.uuid, forgotten)

    # ------------------------------------------------------------------ tables

    async def on_create_table(self, req: api.CreateTableRequest, ctx: CallContext
                              ) -> api.TableCreatedReply:
        self._embedded.require_started()
        request = CreateTable(req.name, tuple(req.schema) or (Column("key", key=True),),
                              req.num_tablets, req.num_replicas, req.request_id)
        now = self._embedded.now()
        servers = self._embedded.tmap().candidates(now)
        started = self._embedded.started_at
        # Heard from every live server (errors.NotEnoughServers): a refusal is final.
        settled = started is not None and now - started >= self._embedded.tmap().dead_after

        def plan(c: Catalog) -> Plan[TableCreated] | MasterError:
            result = plan_create_table(c, request, servers=servers,
                                       reserved=frozenset(self._runner.reserved),
                                       rng=self._rng)
            if isinstance(result, NotEnoughServers) and settled:
                return attrs.evolve(result, certain=True)
            return result

        reply = await self._runner.run_or_refuse(plan)
        if not reply.already_existed:
            logger.info("table %s created (%s): %d tablets, %d replicas each", req.name,
                        reply.table_id, len(reply.tablet_ids), req.num_replicas)
        return api.TableCreatedReply(reply.table_id, list(reply.tablet_ids),
                                     reply.already_existed)

    async def on_delete_table(self, req: api.DeleteTableRequest, ctx: CallContext
                              ) -> api.TableDeletedReply:
        self._embedded.require_started()
        reply = await self._runner.run_or_refuse(lambda c: plan_delete_table(
            c, req.name, req.request_id))
        logger.info("table %s deleted (%s)", req.name, reply.table_id)
        return api.TableDeletedReply(reply.table_id)

    async def on_alter_table(self, req: api.AlterTableRequest, ctx: CallContext
                             ) -> api.TableAlteredReply:
        self._embedded.require_started()
        request = AlterTable(req.name, tuple(req.add_columns), tuple(req.drop_columns),
                             req.new_name, req.request_id)
        reply = await self._runner.run_or_refuse(lambda c: plan_alter_table(
            c, request, reserved=frozenset(self._runner.reserved)))
        logger.info("table %s altered (%s): schema version %d%s", req.name, reply.table_id,
                    reply.schema_version, f", renamed {req.new_name}" if req.new_name else "")
        return api.TableAlteredReply(reply.table_id, reply.schema_version)

    # ------------------------------------------------------------------ reads

    async def on_list_tables(self, req: api.ListTablesRequest, ctx: CallContext
                             ) -> api.TableList:
        self._embedded.require_started()
        catalog, served_by = await self._reads.view(req.freshness)
        return api.TableList([
            api.TableInfo(t.name, t.table_id, t.state.value, t.schema_version, t.num_tablets)
            for t in list_tables(catalog)], served_by)

    async def on_table_locations(self, req: api.TableLocationsRequest, ctx: CallContext
                                 ) -> api.TableLocationsReply:
        self._embedded.require_started()
        catalog, served_by = await self._reads.view(req.freshness)
        now = self._embedded.now()
        tmap = self._embedded.tmap()
        found = table_locations(catalog, req.name, address=tmap.address,
                                live=lambda uuid: tmap.is_live(uuid, now),
                                running_only=req.running_only)
        if isinstance(found, MasterError):
            raise api.refusal(found)
        return api.TableLocationsReply(found.table_id, found.name, found.schema_version,
                                       found.num_tablets, [
            api.TabletLocationInfo(t.tablet_id, t.partition, t.state.value, t.term, [
                api.ReplicaLocationInfo(r.uuid, r.address, r.member_type, r.leader, r.live)
                for r in t.replicas], t.config_index, t.moving_from)
            for t in found.tablets], found.num_replicas, served_by,
            [api.ColumnInfo(c.name, c.type, c.key, added_in) for c, added_in in found.columns])

    async def on_read_index(self, req: api.Empty, ctx: CallContext) -> api.ReadIndexReply:
        self._embedded.require_started()
        return await self._reads.read_index()

    # ------------------------------------------------------------------ replicas

    def _live_server(self, uuid: str) -> Candidate:
        """The live tablet server ``uuid`` as a placement candidate, else the refusal."""
        now = self._embedded.now()
        found = next((c for c in self._embedded.tmap().candidates(now) if c.uuid == uuid),
                     None)
        if found is None:
            raise api.refusal(InvalidArgument(f"{uuid} is not a live tablet server"))
        return found

    async def on_add_replica(self, req: api.ReplicaChangeRequest, ctx: CallContext
                             ) -> api.ReplicaChangeReply:
        self._embedded.require_started()
        if req.member_type not in ("VOTER", "NON_VOTER"):
            raise api.refusal(InvalidArgument(f"member type {req.member_type!r}: VOTER or "
                                              "NON_VOTER"))
        server = self._live_server(req.uuid)
        reply = await self._runner.run_or_refuse(lambda c: plan_add_replica(
            c, req.tablet_id, server, voter=req.member_type == "VOTER"))
        return api.ReplicaChangeReply(reply.tablet_id, reply.leader, reply.cas_config_index,
                                      reply.already_done)

    async def on_remove_replica(self, req: api.ReplicaChangeRequest, ctx: CallContext
                                ) -> api.ReplicaChangeReply:
        self._embedded.require_started()
        reply = await self._runner.run_or_refuse(lambda c: plan_remove_replica(
            c, req.tablet_id, req.uuid))
        return api.ReplicaChangeReply(reply.tablet_id, reply.leader, reply.cas_config_index,
                                      reply.already_done)

    async def on_move_replica(self, req: api.MoveReplicaRequest, ctx: CallContext
                              ) -> api.MoveReplicaReply:
        self._embedded.require_started()
        to = self._live_server(req.to_uuid) if req.to_uuid else None
        reply = await self._runner.run_or_refuse(lambda c: plan_move_replica(
            c, req.tablet_id, req.from_uuid, to))
        self._background.wake()  # a recorded move: its first change goes out now
        return api.MoveReplicaReply(reply.tablet_id, reply.from_uuid, reply.to_uuid,
                                    reply.already_recorded, reply.done)

    # ------------------------------------------------------------------ masters

    async def on_add_master(self, req: api.MasterChangeRequest, ctx: CallContext
                            ) -> api.MasterChangeReply:
        self._embedded.require_started()
        return await self._membership.add_master(req.address, req.cas_config_index)

    async def on_remove_master(self, req: api.MasterChangeRequest, ctx: CallContext
                               ) -> api.MasterChangeReply:
        self._embedded.require_started()
        return await self._membership.remove_master(req.uuid, req.cas_config_index)


__all__ = ["MasterService"]
