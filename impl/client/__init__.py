"""The client library: talk to tablet servers by address, to a tablet through its leader.

Used by the ``revivify`` CLI and by workloads. Built on the RPC layer (revivify.impl.rpc) and
the tablet server's interface (revivify.impl.tserver.api); trio throughout, no timeout
parameters anywhere (callers bound calls with trio cancel scopes; the retry policy's own
bounds are ClientOptions).

    options      "HOST:PORT" parsing (revivify.impl.rpc's parser, raising InvalidAddress);
                 ClientOptions: attempts, deadline, call timeout (each single call),
                 backoff (revivify.impl.rpc.Backoff)
    connections  ServerConnections: one RPC connection per server, reopened after it breaks;
                 the UUID handshake (a call to UUID "" is refused with the server's UUID)
    discovery    the one leader-discovery round both clients use: every server asked at
                 once, the first LEADER not older than a term seen wins
    tablet       TabletClient / open_tablet_client: leader discovery (ConsensusState of
                 every server at once, the leader remembered, NotLeader hints followed),
                 retries, exactly-once writes by (client_id, seq),
                 linearizable reads and scans, config change (CAS) and step-down via the
                 leader
    table        TableClient / open_table_client: a table's rows through the masters (its
                 locations from GetTableLocations, cached and refreshed; each key hashed to
                 its tablet; scans of every tablet merged in key order)
    master       MasterClient / open_master_client / master_call: the leader master, found
                 by asking every master at once and remembered; the master list learnt
                 from the masters' answers; master_status
    admin        one-shot helpers for the CLI: server_status, create_tablet, tablet_status,
                 leader_info, change_config, step_down
    errors       ClientError and its subclasses: every error the library raises on purpose

Example::

    async with open_tablet_client(["127.0.0.1:7050", "127.0.0.1:7051"], tablet_id) as t:
        await t.put(b"k", b"v")          # exactly once, whatever retries it took
        assert await t.get(b"k") == b"v"  # linearizable: read at the leader (ReadIndex)
"""

from typing import TYPE_CHECKING

from revivify.impl.lazy import lazy_exports

if TYPE_CHECKING:
    from .admin import (
        CreatedTablet,
        ReplicaStatus,
        TabletStatus,
        cancel_copy,
        change_config,
        copy_replica,
        create_tablet,
        delete_replica,
        leader_info,
        list_copies,
        server_status,
        step_down,
        tablet_status,
    )
    from .connections import HANDSHAKE_UUID, ServerConnections, handshake, open_connections
    from .errors import (
        ChangeRefused,
        ClientError,
        DeadlineExceeded,
        InvalidAddress,
        InvalidRequest,
        MastersUnreachable,
        NoAnswer,
        NoLeader,
        NoMasterAnswered,
        OutcomeUnknown,
        Rejected,
        RetriesExhausted,
        ServerUnreachable,
        TabletNotFoundError,
        TabletNotRunningError,
        Unavailable,
        WrongServerKind,
        outcome_of,
    )
    from .master import MasterClient, master_call, master_status, open_master_client
    from .options import ClientOptions, parse_address
    from .table import TableClient, TableNotFoundError, open_table_client
    from .tablet import TabletClient, open_tablet_client

# Re-exports are lazy: importing one light submodule (documents, errors, options) must not
# load the trio clients, so that the CLI's fast commands start without trio.
_SUBMODULE_OF: dict[str, str] = {
    "ChangeRefused": "errors",
    "ClientError": "errors",
    "ClientOptions": "options",
    "CreatedTablet": "admin",
    "DeadlineExceeded": "errors",
    "HANDSHAKE_UUID": "connections",
    "InvalidAddress": "errors",
    "InvalidRequest": "errors",
    "MasterClient": "master",
    "MastersUnreachable": "errors",
    "NoAnswer": "errors",
    "NoLeader": "errors",
    "NoMasterAnswered": "errors",
    "OutcomeUnknown": "errors",
    "Rejected": "errors",
    "ReplicaStatus": "admin",
    "RetriesExhausted": "errors",
    "ServerConnections": "connections",
    "ServerUnreachable": "errors",
    "TableClient": "table",
    "TableNotFoundError": "table",
    "TabletClient": "tablet",
    "TabletNotFoundError": "errors",
    "TabletNotRunningError": "errors",
    "TabletStatus": "admin",
    "Unavailable": "errors",
    "WrongServerKind": "errors",
    "cancel_copy": "admin",
    "change_config": "admin",
    "copy_replica": "admin",
    "create_tablet": "admin",
    "delete_replica": "admin",
    "handshake": "connections",
    "leader_info": "admin",
    "list_copies": "admin",
    "master_call": "master",
    "master_status": "master",
    "open_connections": "connections",
    "open_master_client": "master",
    "open_table_client": "table",
    "open_tablet_client": "tablet",
    "outcome_of": "errors",
    "parse_address": "options",
    "server_status": "admin",
    "step_down": "admin",
    "tablet_status": "admin",
}


__getattr__ = lazy_exports(__name__, _SUBMODULE_OF, globals())

__all__ = [
    "HANDSHAKE_UUID",
    "ChangeRefused",
    "ClientError",
    "ClientOptions",
    "CreatedTablet",
    "DeadlineExceeded",
    "InvalidAddress",
    "InvalidRequest",
    "MasterClient",
    "MastersUnreachable",
    "NoAnswer",
    "NoLeader",
    "NoMasterAnswered",
    "OutcomeUnknown",
    "Rejected",
    "ReplicaStatus",
    "RetriesExhausted",
    "ServerConnections",
    "ServerUnreachable",
    "TableClient",
    "TableNotFoundError",
    "TabletClient",
    "TabletNotFoundError",
    "TabletNotRunningError",
    "TabletStatus",
    "Unavailable",
    "WrongServerKind",
    "cancel_copy",
    "change_config",
    "copy_replica",
    "create_tablet",
    "delete_replica",
    "handshake",
    "leader_info",
    "list_copies",
    "master_call",
    "master_status",
    "open_connections",
    "open_master_client",
    "open_table_client",
    "open_tablet_client",
    "outcome_of",
    "parse_address",
    "server_status",
    "step_down",
    "tablet_status",
]
