"""The JSON documents of the servers' status answers: one function per answer, shared by
the CLI's ``--json`` (impl/cli) and the status pages' ``/api/v1`` twins (impl/web), so a
field has one name and one meaning wherever a program reads it.

Each takes the RPC answer (a msgspec Struct of tserver/api.py or master/api.py) and returns
plain JSON-able values; neither side adds a field the other names differently (the pages
may add fields of their own beside these).
"""

from __future__ import annotations

from typing import Any

from revivify.impl.consensus.messages import Peer
from revivify.impl.master import api
from revivify.impl.tserver.api import CopyInfo, ReplicaInfo, ServerStatus


def peer_doc(peer: Peer) -> dict[str, Any]:
    return {"uuid": peer.uuid, "address": peer.address, "member_type": peer.member_type,
            "promote": peer.promote}


def replica_doc(info: ReplicaInfo) -> dict[str, Any]:
    return {
        "tablet_id": info.tablet_id,
        "state": info.state,
        "reason": info.reason,
        "role": info.role,
        "term": info.term,
        "voted_for": info.voted_for,
        "leader": info.leader,
        "last_opid": list(info.last_opid),
        "commit_index": info.commit_index,
        "applied_index": info.applied_index,
        "config_index": info.config_index,
        "member_type": info.member_type,
        "peers": [peer_doc(p) for p in info.peers],
    }


def copy_info_doc(c: CopyInfo) -> dict[str, Any]:
    """One row of ``revivify copy list --json``: a copy with this server its destination."""
    return {"tablet_id": c.tablet_id, "source_uuid": c.source_uuid,
            "source_address": c.source_address, "phase": c.phase,
            "bytes_done": c.bytes_done, "total_bytes": c.total_bytes,
            "rate_bytes_per_second": round(c.rate_bytes_per_second, 1),
            "files_done": c.files_done, "files_total": c.files_total,
            "retries": c.retries, "elapsed_seconds": round(c.elapsed_seconds, 3)}


def server_status_doc(status: ServerStatus) -> dict[str, Any]:
    """``revivify tserver status --json``."""
    return {"uuid": status.uuid, "address": status.address,
            "replicas": [replica_doc(r) for r in status.replicas]}


def master_status_doc(st: api.MasterStatus) -> dict[str, Any]:
    """``revivify master status --json``."""
    return {"uuid": st.uuid, "address": st.address, "role": st.role, "term": st.term,
            "leader": st.leader, "leader_address": st.leader_address, "ready": st.ready}


def table_info_doc(t: api.TableInfo) -> dict[str, Any]:
    """One row of ``revivify table list --json``."""
    return {"name": t.name, "table_id": t.table_id, "state": t.state,
            "schema_version": t.schema_version, "tablets": t.num_tablets}


def tablet_location_doc(t: api.TabletLocationInfo) -> dict[str, Any]:
    return {"tablet_id": t.tablet_id, "partition": t.partition, "state": t.state,
            "term": t.term,
            "replicas": [{"uuid": p.uuid, "address": p.address,
                          "member_type": p.member_type, "leader": p.leader,
                          "live": p.live} for p in t.replicas]}


def table_locations_doc(r: api.TableLocationsReply) -> dict[str, Any]:
    """``revivify table describe --json`` (without ``served_by``)."""
    return {"name": r.name, "table_id": r.table_id, "schema_version": r.schema_version,
            "num_tablets": r.num_tablets,
            "columns": [{"name": c.name, "type": c.type, "key": c.key, "added_in": c.added_in}
                        for c in r.columns],
            "tablets": [tablet_location_doc(t) for t in r.tablets]}


def tserver_entry_doc(t: api.TabletServerEntry) -> dict[str, Any]:
    """One row of ``revivify tserver list --json``."""
    return {"uuid": t.uuid, "address": t.address, "live": t.live,
            "seconds_since_heartbeat": t.seconds_since_heartbeat}


__all__ = ["copy_info_doc", "master_status_doc", "peer_doc", "replica_doc", "server_status_doc",
           "table_info_doc", "table_locations_doc", "tablet_location_doc",
           "tserver_entry_doc"]
