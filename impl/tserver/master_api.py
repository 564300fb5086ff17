"""The tablet server's wire with its masters: the heartbeat it sends every master, and the
one call only a master makes to it.

Wire values (msgspec structs, msgpack in an RPC body), written once here for both sides:
the tablet server's heartbeater (heartbeat.py) builds the heartbeats and its schema service
(schema.py) serves the alters; the master's shell hands heartbeats to the pure core
(impl/master/tserver_map.py decides what to do with a heartbeat, impl/master/reports.py what
a report means) and sends alters as calls (impl/master/calls.py).

    Master.Heartbeat   Heartbeat(server_uuid, incarnation, registration?, report?)
                       -> HeartbeatResponse(master_uuid, leader, term,
                                            needs_register, needs_full_report,
                                            masters, masters_index)
    Admin.AlterSchema  AlterSchema(tablet_id, schema_version, schema) -> Ack

Why here, in the tablet server's package, and not in the master's: a master process embeds a
tablet server (impl/master/server.py opens one for the catalog tablet), so the master
imports the tablet server and never the reverse (the layers contract in pyproject.toml).
Both ends of this wire therefore meet at the lower of the two, beside the tablet server's
own interface (api.py). Moving these structs between modules changes no byte on the wire:
none has a tag, and a msgspec Struct is encoded as a map of its fields.

Seed 004, "Heartbeat to all masters": a tablet server heartbeats EVERY master, one
heartbeater each, with its own report sequence per master. Every master refreshes the
server's liveness (KUDU-1358); only the leader processes reports. A report is incremental
(the tablets that changed since the last report that master acknowledged: edge-triggered) or
full (every tablet the server holds, tombstones included). It is full at registration, when
the master asks (``needs_full_report``), and whenever the server sees a master newly become
leader (``leader`` false -> true, or a new ``term``): KUDU-1374, so that whatever a dead
leader decided and never sent is decided again by the new one.

``incarnation`` distinguishes two runs of one server (a restart): a master that knows the
server under another incarnation asks it to register again. A wiped server has a new UUID
and is simply a new server (seed 001 "Failure of a disk with consensus metadata").

The master list (issue 19, "tablet servers and clients learn the new master list from any
master"). Every master answers with the addresses of the catalog tablet's *committed* Raft
config as it knows it (``masters``, voters and non-voters: a master being added hears from
every server before it is promoted and may lead) and that config's index
(``masters_index``; -1 with an empty list: this master holds no catalog yet, or is older
than the field). Configs are totally ordered by their index, so a server keeps the list of
the highest index any master told it and ignores older ones: a removed master, which may
never learn that its removal committed, keeps answering its older config and is outvoted by
the index, never by a count of masters. Both fields have defaults, so a master and a server
of different versions still understand each other (the old side simply keeps its flag).
"""

from __future__ import annotations

from typing import Final, Literal

import msgspec

from revivify.impl.consensus.messages import Config
from revivify.impl.tablet.columns import Column

MASTER_HEARTBEAT: Final = "Master.Heartbeat"
ADMIN_ALTER_SCHEMA: Final = "Admin.AlterSchema"

# A replica as its server's tablet manager sees it: the states of its slot
# (impl/tserver/manager/core.py) but ABSENT, which is not reported. TOMBSTONED: deleted,
# cmeta and last OpId kept (it votes on); DELETING: a deletion is in progress; FAILED:
# startup or the store failed, the evidence is kept; CREATING: a CreateTablet is being
# carried out; STARTING: found on disk, being opened; COPYING: a tablet copy is running.
ReplicaState = Literal["STARTING", "CREATING", "RUNNING", "FAILED", "COPYING", "TOMBSTONED",
                       "DELETING"]
REPLICA_STATES: Final[tuple[ReplicaState, ...]] = (
    "STARTING", "CREATING", "RUNNING", "FAILED", "COPYING", "TOMBSTONED", "DELETING")


class ReportedConsensus(msgspec.Struct, frozen=True):
    """The replica's durable consensus facts: its current term, the leader it knows in that
    term (None if none), and its *committed* config (opid_index orders configs)."""

    term: int
    leader: str | None
    config: Config


class ReportedReplica(msgspec.Struct, frozen=True):
    tablet_id: str
    state: ReplicaState
    consensus: ReportedConsensus | None = None  # None: no committed consensus state known
    schema_version: int | None = None  # the schema version the replica has applied
    error: str = ""  # why FAILED


class TabletReport(msgspec.Struct, frozen=True):
    """``seq`` counts the reports sent to this master in this incarnation, from 0."""

    full: bool
    seq: int
    replicas: list[ReportedReplica]


class Registration(msgspec.Struct, frozen=True):
    address: str  # host:port of the server's RPC endpoint


class Heartbeat(msgspec.Struct, frozen=True):
    server_uuid: str
    incarnation: int
    registration: Registration | None = None
    report: TabletReport | None = None
    # HOST:PORT of the server's status pages ("" none, or a server older than the field):
    # the master's pages link to them.
    web_address: str = ""


class TabletPlace(msgspec.Struct, frozen=True):
    """Where a reported tablet belongs, as the leader's catalog records it (for the tablet
    server's status pages only: tablet servers keep no table of their own)."""

    table_id: str
    table_name: str
    partition: int


class HeartbeatResponse(msgspec.Struct, frozen=True):
    master_uuid: str
    leader: bool  # this master is the ready leader (the server watches for a change)
    term: int
    needs_register: bool = False
    needs_full_report: bool = False
    # The catalog's committed config as this master knows it (module docstring): [] / -1
    # says nothing (no catalog here yet, or a master older than these fields).
    masters: list[str] = msgspec.field(default_factory=list)
    masters_index: int = -1
    web_address: str = ""  # the answering master's status pages ("" none): linked back
    # The table and partition of each tablet of the report just processed, from the ready
    # leader's catalog ({} from another master, or one older than the field).
    places: dict[str, TabletPlace] = msgspec.field(default_factory=dict)


class AlterSchema(msgspec.Struct, frozen=True):
    """Bring a tablet to ``schema_version`` (sent to its leader as the catalog records it,
    which records the version durably: schema.py). Ignored by a tablet already at that
    version or later, so a master may send it on every report that shows an old version."""

    tablet_id: str
    schema_version: int
    schema: list[Column]


__all__ = [
    "ADMIN_ALTER_SCHEMA",
    "MASTER_HEARTBEAT",
    "REPLICA_STATES",
    "AlterSchema",
    "Heartbeat",
    "HeartbeatResponse",
    "Registration",
    "ReplicaState",
    "ReportedConsensus",
    "ReportedReplica",
    "TabletPlace",
    "TabletReport",
]
