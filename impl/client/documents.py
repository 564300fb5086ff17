"""The JSON documents of the servers' status answers: one function per answer, shared by
the CLI's ``--json`` (impl/cli) and the status pages' ``/api/v1`` twins (impl/web), so a
field has one name and one meaning wherever a program reads it.

Each takes the RPC answer (a msgspec Struct of tserver/api.py or master/api.py) and returns
plain JSON-able values; neither side adds a field the other names differently (the pages
may add fields of their own beside these).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from revivify.impl.consensus.messages import Peer
from revivify.impl.master import api
from revivify.impl.tserver.api import CopyInfo, ReplicaInfo, ServerStatus


def peer_doc(peer: Peer) -> dict[str, Any]:
    return {"uuid": peer.uuid, "address": peer.address, "member_type": peer.member_type,
            "promote": peer.promote}


def replica_doc(info: ReplicaInfo, uuid: str | None = None, address: str | None = None,
                live: bool = True) -> dict[str, Any]:
    """One replica as its server reports it, in the replica vocabulary every command and
    page shares (issue 31): ``uuid`` and ``address`` of its server, ``member_type``
    (VOTER | NON_VOTER), ``role`` (`member_role`: LEADER | FOLLOWER | LEARNER | ...) and
    ``live`` (its server answered); then what only the server knows (``leader_uuid``: the
    leader this replica knows of)."""
    return {
        "uuid": uuid,
        "address": address,
        "member_type": info.member_type,
        "role": member_role(info.role, info.member_type),
        "live": live,
        "tablet_id": info.tablet_id,
        "state": info.state,
        "reason": info.reason,
        "term": info.term,
        "voted_for": info.voted_for,
        "leader_uuid": info.leader,
        "last_opid": list(info.last_opid),
        "commit_index": info.commit_index,
        "applied_index": info.applied_index,
        "config_index": info.config_index,
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
            "replicas": [replica_doc(r, status.uuid, status.address)
                         for r in status.replicas]}


def member_role(role: str, member_type: str | None, leader: bool = False) -> str:
    """A replica's role in the one vocabulary every command and page uses (issue 31):
    LEADER, FOLLOWER, LEARNER (a NON_VOTER: it replicates but neither votes nor leads;
    its own Raft core calls itself a FOLLOWER), CANDIDATE, PRE_CANDIDATE, or TOMBSTONE;
    ``leader``: someone who knows says this replica leads (the catalog's record)."""
    if leader:
        return "LEADER"
    if member_type == "NON_VOTER" and role == "FOLLOWER":
        return "LEARNER"
    return role  # "" for a replica that is not running (no Raft role)


def master_member_doc(address: str, member_type: str | None,
                      answer: api.MasterStatus | str | None) -> dict[str, Any]:
    """One row of ``master list --json`` (and the master's /masters page): a member of
    the catalog's config (``member_type`` None: a master named that the config does not
    hold) with its own answer, or ``live`` false and why it gave none."""
    if not isinstance(answer, api.MasterStatus):
        return {"uuid": None, "address": address, "member_type": member_type, "role": None,
                "term": None, "live": False, "ready": False,
                "error": answer or "not asked"}
    return {"uuid": answer.uuid, "address": address, "member_type": member_type,
            "role": member_role(answer.role, member_type), "term": answer.term,
            "live": True, "ready": answer.ready, "error": None}


def master_list_docs(config: api.MasterStatus | None,
                     answers: Mapping[str, api.MasterStatus | str]) -> list[dict[str, Any]]:
    """``master list --json``'s ``masters`` (impl/client/master.py `master_config`): every
    member of ``config`` (the newest committed catalog config heard of) in address order,
    its UUID from the config even when it does not answer; then any master asked that
    the config does not hold (member_type null)."""
    rows: list[dict[str, Any]] = []
    members = [] if config is None else sorted(config.members, key=lambda m: m.address)
    for m in members:
        row = master_member_doc(m.address, m.member_type, answers.get(m.address))
        row["uuid"] = m.uuid
        rows.append(row)
    held = {m.address for m in members}
    for address, answer in answers.items():
        if address not in held and not (isinstance(answer, api.MasterStatus)
                                        and answer.address in held):
            rows.append(master_member_doc(address, None, answer))
    return rows


def master_status_doc(st: api.MasterStatus) -> dict[str, Any]:
    """``revivify master status --json``: the master's own view, and the catalog's config
    as it knows it (``masters``: each member's uuid, address and member_type)."""
    return {"uuid": st.uuid, "address": st.address, "role": st.role, "term": st.term,
            "leader": st.leader, "leader_address": st.leader_address, "ready": st.ready,
            "masters_index": st.masters_index,
            "masters": [{"uuid": m.uuid, "address": m.address, "member_type": m.member_type}
                        for m in st.members]
            or [{"uuid": None, "address": a, "member_type": None} for a in st.masters]}


def table_info_doc(t: api.TableInfo) -> dict[str, Any]:
    """One row of ``revivify table list --json``."""
    return {"name": t.name, "table_id": t.table_id, "state": t.state,
            "schema_version": t.schema_version, "tablets": t.num_tablets}


def tablet_location_doc(t: api.TabletLocationInfo) -> dict[str, Any]:
    return {"tablet_id": t.tablet_id, "partition": t.partition, "state": t.state,
            "term": t.term,
            "replicas": [location_replica_doc(p) for p in t.replicas]}


def location_replica_doc(p: api.ReplicaLocationInfo) -> dict[str, Any]:
    """A replica as the catalog places it (``table describe``), in the replica vocabulary
    (`replica_doc`): its role is the catalog's word (LEADER for the replica its records
    say leads, else FOLLOWER or LEARNER by member type), ``live`` the leader master's
    heartbeats'."""
    return {"uuid": p.uuid, "address": p.address, "member_type": p.member_type,
            "role": member_role("FOLLOWER", p.member_type, p.leader), "live": p.live}


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


__all__ = ["copy_info_doc", "location_replica_doc", "master_list_docs", "master_member_doc",
           "master_status_doc", "member_role", "peer_doc", "replica_doc", "server_status_doc",
           "table_info_doc", "table_locations_doc", "tablet_location_doc",
           "tserver_entry_doc"]
