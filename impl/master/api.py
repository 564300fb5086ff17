"""The master's RPC interface: method names, request and response bodies, typed errors.

One module both sides import (the master's service, impl/master/service.py, and the client,
impl/client/master.py), so the wire shape is written once, like impl/tserver/api.py. Bodies
are msgspec Structs (msgpack on the wire). The heartbeat's name and bodies are defined with
the tablet server (impl/tserver/master_api.py), whose heartbeater builds them: a master
embeds a tablet server, so the tablet server cannot import this module.

Methods
-------
    Master.Heartbeat          Heartbeat                 -> HeartbeatResponse    (every master)
    Master.Status             Empty                     -> MasterStatus         (every master)
    Master.ListTabletServers  Empty                     -> TabletServerList     (every master)
    Master.CreateTable        CreateTableRequest        -> TableCreatedReply    (ready leader)
    Master.DeleteTable        DeleteTableRequest        -> TableDeletedReply    (ready leader)
    Master.AlterTable         AlterTableRequest         -> TableAlteredReply    (ready leader)
    Master.ListTables         ListTablesRequest         -> TableList            (ready leader*)
    Master.GetTableLocations  TableLocationsRequest     -> TableLocationsReply  (ready leader*)
    Master.ReadIndex          Empty                     -> ReadIndexReply       (ready leader)
    Master.AddReplica         ReplicaChangeRequest      -> ReplicaChangeReply   (ready leader)
    Master.RemoveReplica      ReplicaChangeRequest      -> ReplicaChangeReply   (ready leader)
    Master.MoveReplica        MoveReplicaRequest        -> MoveReplicaReply     (ready leader)
    Master.AddMaster          MasterChangeRequest       -> MasterChangeReply    (ready leader)
    Master.RemoveMaster       MasterChangeRequest       -> MasterChangeReply    (ready leader)

    * or any master, when the request names a ``freshness`` bound (below)

Every master answers Heartbeat (liveness: KUDU-1358), Status and ListTabletServers (its own
tablet-server map). The catalog operations are served by the ready leader only (seed 004:
followers reject client requests), except the two reads when the request names a
``freshness`` bound (KUDU-500 follower reads, queries.py "Follower reads"): a follower then
answers from its applied catalog if that is known to be no older than the bound, and a
follower asks the leader for ``Master.ReadIndex`` to know it. ListTablesRequest and
TableLocationsRequest are Empty and TableName on the wire plus an optional field, so old
and new clients and masters understand each other (a master that ignores ``freshness``
answers as a leader, or refuses as a follower). DeleteTableRequest is TableName plus an
optional ``request_id`` likewise (and AlterTableRequest has one too): CreateTable,
DeleteTable and AlterTable are answered OK when retried with the request id of a try that
committed (operations.py "Retries").

    MasterNotLeader(leader_uuid, leader_address, term)   this master is not the catalog's
                                                         leader: try the hint (may be None)
    ServiceUnavailable(detail)                           the leader is not ready yet (the
                                                         leader-ready gate), retry here
    Refused(reason, detail, retryable)                   the core refused the request: one
                                                         of REASONS (errors.py's refusals);
                                                         retryable 1 for NAME_RESERVED and
                                                         NOT_ENOUGH_SERVERS
    CatalogWriteFailed(detail)                           the ONE replicated write of the
                                                         operation did not commit in time
                                                         (lost leadership, timeout:
                                                         KUDU-495); it may still commit
                                                         under the next leader: outcome
                                                         unknown, a retry with the same
                                                         request id is safe
    StaleCatalog(staleness_ms, bound_ms, applied_index)  a follower asked for a bounded-
                                                         staleness read cannot show its
                                                         catalog is that fresh (-1: it has
                                                         no read index from a leader yet);
                                                         retryable, at another master
"""

from __future__ import annotations

from typing import Final

import msgspec

from revivify.impl.rpc.errors import AppError
from revivify.impl.tablet.columns import Column

from .errors import (
    AlreadyPresent,
    IllegalState,
    InvalidArgument,
    MasterError,
    NameReserved,
    NotEnoughServers,
    NotFound,
)

MASTER_STATUS: Final = "Master.Status"
MASTER_LIST_TSERVERS: Final = "Master.ListTabletServers"
MASTER_CREATE_TABLE: Final = "Master.CreateTable"
MASTER_DELETE_TABLE: Final = "Master.DeleteTable"
MASTER_ALTER_TABLE: Final = "Master.AlterTable"
MASTER_LIST_TABLES: Final = "Master.ListTables"
MASTER_TABLE_LOCATIONS: Final = "Master.GetTableLocations"
MASTER_ADD_REPLICA: Final = "Master.AddReplica"
MASTER_REMOVE_REPLICA: Final = "Master.RemoveReplica"
MASTER_MOVE_REPLICA: Final = "Master.MoveReplica"
MASTER_ADD_MASTER: Final = "Master.AddMaster"
MASTER_REMOVE_MASTER: Final = "Master.RemoveMaster"
MASTER_UNREGISTER_TSERVER: Final = "Master.UnregisterTabletServer"
MASTER_READ_INDEX: Final = "Master.ReadIndex"

# The catalog tablet's well-known id: one tablet, hosted by every master.
CATALOG_TABLET_ID: Final = "sys-catalog"


class Empty(msgspec.Struct, frozen=True):
    pass


class TableName(msgspec.Struct, frozen=True):
    name: str


class MasterMember(msgspec.Struct, frozen=True):
    """One member of the catalog's committed Raft config (``master list``)."""

    uuid: str
    address: str
    member_type: str  # VOTER | NON_VOTER


class MasterStatus(msgspec.Struct, frozen=True):
    uuid: str
    address: str
    role: str  # the catalog replica's Raft role: LEADER | FOLLOWER | CANDIDATE | ... | ""
    term: int
    leader: str | None  # the leader's UUID as this master knows it
    leader_address: str | None
    ready: bool  # this master is the leader and passed the leader-ready gate
    masters: list[str]  # the catalog's members' addresses, from its committed config
    # That config's index (-1: no catalog here, or a master older than the field): a client
    # keeps the list of the highest index it was told (impl/tserver/master_api.py "The
    # master list").
    masters_index: int = -1
    web_address: str = ""  # HOST:PORT of this master's status pages ("" none)
    # The members of the config ``masters`` comes from, with their UUIDs and member types
    # (empty: no catalog here, or a master older than the field).
    members: list[MasterMember] = msgspec.field(default_factory=list)


class TabletServerEntry(msgspec.Struct, frozen=True):
    uuid: str
    address: str
    live: bool
    seconds_since_heartbeat: float
    state: str  # UNKNOWN | REGISTERED | REPORTING (tserver_map.RegState)
    web_address: str = ""  # its status pages, as its heartbeats say ("" none)


class TabletServerList(msgspec.Struct, frozen=True):
    master_uuid: str
    tservers: list[TabletServerEntry]


class CreateTableRequest(msgspec.Struct, frozen=True):
    name: str
    schema: list[Column]
    num_tablets: int
    num_replicas: int
    request_id: str = ""  # client-chosen: a retry of the same request answers OK


class TableCreatedReply(msgspec.Struct, frozen=True):
    table_id: str
    tablet_ids: list[str]
    already_existed: bool = False


class DeleteTableRequest(msgspec.Struct, frozen=True):
    """DeleteTable. A body of TableName (an older client) decodes as one without an id."""

    name: str
    request_id: str = ""  # client-chosen: a retry of the same request answers OK


class TableDeletedReply(msgspec.Struct, frozen=True):
    table_id: str


class AlterTableRequest(msgspec.Struct, frozen=True):
    """A schema change (columns added, dropped: a schema version bump, the table ALTERING
    until every tablet reports it) and/or a rename (operations.py plan_alter_table). Not
    idempotent by itself (a retry of an add that committed would find the column there):
    ``request_id`` makes a retry of the table's last alter answer OK (operations.py
    "Retries")."""

    name: str
    add_columns: list[Column] = []
    drop_columns: list[str] = []
    new_name: str | None = None
    request_id: str = ""  # client-chosen: a retry of the same request answers OK


class TableAlteredReply(msgspec.Struct, frozen=True):
    table_id: str
    schema_version: int


class ListTablesRequest(msgspec.Struct, frozen=True):
    """``freshness``: None, the ready leader answers (seed 004); a number of seconds, any
    master whose applied catalog is known to be no older than that answers (queries.py)."""

    freshness: float | None = None


class TableLocationsRequest(msgspec.Struct, frozen=True):
    """GetTableLocations of table ``name``; ``freshness`` as for ListTablesRequest.
    ``running_only``: a tablet that is not RUNNING comes without replicas (a writer's view,
    queries.py "Locations for writers"); False, every live tablet's (admin views)."""

    name: str
    freshness: float | None = None
    running_only: bool = False


class ReadIndexReply(msgspec.Struct, frozen=True):
    """The leader confirmed its leadership (Raft ReadIndex) in ``term`` and has applied
    the catalog up to ``index``, at least its commit index when the request reached it."""

    term: int
    index: int


class ServedBy(msgspec.Struct, frozen=True):
    """Which master answered a read, and how fresh its catalog was known to be."""

    uuid: str
    leader: bool  # the ready leader answered (its snapshot: staleness 0)
    staleness: float  # seconds: the catalog holds every write committed before now - this
    applied_index: int


class TableInfo(msgspec.Struct, frozen=True):
    name: str
    table_id: str
    state: str
    schema_version: int
    num_tablets: int


class TableList(msgspec.Struct, frozen=True):
    tables: list[TableInfo]
    served_by: ServedBy | None = None  # None: a master older than follower reads


class ReplicaLocationInfo(msgspec.Struct, frozen=True):
    uuid: str
    address: str
    member_type: str
    leader: bool
    live: bool


class TabletLocationInfo(msgspec.Struct, frozen=True):
    tablet_id: str
    partition: int
    state: str
    term: int
    replicas: list[ReplicaLocationInfo]
    config_index: int = 0  # the recorded committed config's opid_index
    moving_from: str | None = None  # a replica move off that server is in progress


class ColumnInfo(msgspec.Struct, frozen=True):
    """One column of a table's schema, and the schema version that added it (0: create)."""

    name: str
    type: str
    key: bool
    added_in: int


class TableLocationsReply(msgspec.Struct, frozen=True):
    table_id: str
    name: str
    schema_version: int
    num_tablets: int
    tablets: list[TabletLocationInfo]
    num_replicas: int = 0  # the table's replica count (0: a master that did not say)
    served_by: ServedBy | None = None  # None: a master older than follower reads
    columns: list[ColumnInfo] = []  # the schema ([]: a master that did not say)


class ReplicaChangeRequest(msgspec.Struct, frozen=True):
    """AddReplica (``member_type`` NON_VOTER: added with promote, the leader makes it a
    VOTER once caught up; or VOTER at once) or RemoveReplica (``member_type`` ignored)."""

    tablet_id: str
    uuid: str
    member_type: str = "NON_VOTER"


class ReplicaChangeReply(msgspec.Struct, frozen=True):
    """The ChangeConfig sent to ``leader`` with ``cas_config_index``; ``already_done``: the
    server was already a member (add) or not one (remove), nothing was sent."""

    tablet_id: str
    leader: str | None
    cas_config_index: int
    already_done: bool = False


class MoveReplicaRequest(msgspec.Struct, frozen=True):
    """Move the replica of ``tablet_id`` off ``from_uuid`` (to ``to_uuid``, or where
    placement chooses when None). Recorded in the catalog; the leader master drives it."""

    tablet_id: str
    from_uuid: str
    to_uuid: str | None = None


class UnregisterTServerRequest(msgspec.Struct, frozen=True):
    """Forget a dead tablet server (Kudu's ``kudu tserver unregister``). ``check_catalog``:
    refuse while a live tablet's config names it (the ready leader checks its catalog; the
    CLI then tells every other master, which only checks that the server is dead)."""

    uuid: str
    check_catalog: bool = True


class UnregisterTServerReply(msgspec.Struct, frozen=True):
    master_uuid: str
    forgotten: bool  # False: this master did not know the server (already forgotten)


class MasterChangeRequest(msgspec.Struct, frozen=True):
    """A change of the catalog tablet's Raft config, one master at a time. AddMaster names
    the new master's ``address`` (it must run with ``master run --join``: it waits for the
    catalog to be copied to it); RemoveMaster its ``uuid``. ``cas_config_index``: the
    committed config index the change was planned on (None: the leader's current one)."""

    address: str = ""
    uuid: str = ""
    cas_config_index: int | None = None


class MasterChangeReply(msgspec.Struct, frozen=True):
    uuid: str
    address: str
    config_index: int  # the index of the config entry that carries the change (or the
    already_done: bool = False  # committed one, when the master already was / was not in)


class MoveReplicaReply(msgspec.Struct, frozen=True):
    tablet_id: str
    from_uuid: str
    to_uuid: str | None
    already_recorded: bool = False  # the same move was in progress: nothing written
    done: bool = False  # ``from_uuid`` is no longer a member: the move is over


# ---------------------------------------------------------------------------- errors


class MasterNotLeader(AppError):
    code = "master.not_leader"
    fields = ("leader_uuid", "leader_address", "term")

    def __init__(self, leader_uuid: str | None, leader_address: str | None,
                 term: int) -> None:
        hint = f"; try {leader_uuid} at {leader_address}" if leader_uuid else ""
        super().__init__(f"this master is not the leader (term {term}){hint}")
        self.leader_uuid = leader_uuid
        self.leader_address = leader_address
        self.term = term


class ServiceUnavailable(AppError):
    code = "master.service_unavailable"
    fields = ("detail",)

    def __init__(self, detail: str) -> None:
        super().__init__(f"service unavailable: {detail}")
        self.detail = detail


REASONS: Final = ("NOT_FOUND", "ALREADY_PRESENT", "INVALID_ARGUMENT", "NAME_RESERVED",
                  "NOT_ENOUGH_SERVERS", "ILLEGAL_STATE")


class Refused(AppError):
    code = "master.refused"
    fields = ("reason", "detail", "retryable")

    def __init__(self, reason: str, detail: str, retryable: int) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail
        self.retryable = retryable


class CatalogWriteFailed(AppError):
    code = "master.catalog_write_failed"
    fields = ("detail",)

    def __init__(self, detail: str) -> None:
        super().__init__(f"the catalog write did not commit here (it may still commit "
                         f"under the next leader): {detail}")
        self.detail = detail


class StaleCatalog(AppError):
    """A follower cannot show that its applied catalog is within the read's freshness
    bound: ``staleness_ms`` is how old it is known to be (-1: unknown, no read index from a
    leader yet). Retryable: another master, or this one once it hears from the leader."""

    code = "master.stale_catalog"
    fields = ("staleness_ms", "bound_ms", "applied_index")

    def __init__(self, staleness_ms: int, bound_ms: int, applied_index: int) -> None:
        known = "unknown (no read index from the leader yet)" if staleness_ms < 0 \
            else f"{staleness_ms / 1000:.3f} s"
        super().__init__(f"this follower's catalog (applied index {applied_index}) is "
                         f"stale: {known} old, the bound is {bound_ms / 1000:.3f} s")
        self.staleness_ms = staleness_ms
        self.bound_ms = bound_ms
        self.applied_index = applied_index


APP_ERRORS: Final = (MasterNotLeader, ServiceUnavailable, Refused, CatalogWriteFailed,
                     StaleCatalog)


def refusal(error: MasterError) -> Refused:
    """The wire error of one of the core's refusals."""
    reason = {NotFound: "NOT_FOUND", AlreadyPresent: "ALREADY_PRESENT",
              InvalidArgument: "INVALID_ARGUMENT", NameReserved: "NAME_RESERVED",
              NotEnoughServers: "NOT_ENOUGH_SERVERS",
              IllegalState: "ILLEGAL_STATE"}.get(type(error), "ILLEGAL_STATE")
    assert reason in REASONS
    return Refused(reason, error.message, int(error.retryable))


__all__ = [
    "APP_ERRORS",
    "CATALOG_TABLET_ID",
    "MASTER_ADD_MASTER",
    "MASTER_ADD_REPLICA",
    "MASTER_ALTER_TABLE",
    "MASTER_CREATE_TABLE",
    "MASTER_DELETE_TABLE",
    "MASTER_LIST_TABLES",
    "MASTER_LIST_TSERVERS",
    "MASTER_MOVE_REPLICA",
    "MASTER_READ_INDEX",
    "MASTER_REMOVE_MASTER",
    "MASTER_REMOVE_REPLICA",
    "MASTER_STATUS",
    "MASTER_TABLE_LOCATIONS",
    "MASTER_UNREGISTER_TSERVER",
    "REASONS",
    "AlterTableRequest",
    "CatalogWriteFailed",
    "ColumnInfo",
    "CreateTableRequest",
    "DeleteTableRequest",
    "Empty",
    "ListTablesRequest",
    "MasterChangeReply",
    "MasterChangeRequest",
    "MasterMember",
    "MasterNotLeader",
    "MasterStatus",
    "MoveReplicaReply",
    "MoveReplicaRequest",
    "ReadIndexReply",
    "Refused",
    "ReplicaChangeReply",
    "ReplicaChangeRequest",
    "ReplicaLocationInfo",
    "ServedBy",
    "ServiceUnavailable",
    "StaleCatalog",
    "TableAlteredReply",
    "TableCreatedReply",
    "TableDeletedReply",
    "TableInfo",
    "TableList",
    "TableLocationsReply",
    "TableLocationsRequest",
    "TableName",
    "TabletLocationInfo",
    "TabletServerEntry",
    "TabletServerList",
    "UnregisterTServerReply",
    "UnregisterTServerRequest",
    "refusal",
]
