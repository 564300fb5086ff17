"""How the server commands print: aligned text tables for people, JSON for programs.

Every command builds one plain JSON-able document (dicts, lists, strings, numbers, None)
and one text rendering of the same facts; ``--json`` prints the document (one line, UTF-8),
otherwise the text. Bytes (row keys and values) are shown as UTF-8 text, undecodable bytes
as backslash escapes, or as lowercase hex with ``--hex``, in both forms.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from revivify.impl.client import ReplicaStatus, TabletStatus
from revivify.impl.consensus.messages import Peer
from revivify.impl.tserver.api import ReplicaInfo, ServerStatus


def dumps(document: Any) -> str:
    return json.dumps(document, ensure_ascii=False, separators=(",", ":"))


def show_bytes(data: bytes, hex_mode: bool) -> str:
    return data.hex() if hex_mode else data.decode("utf-8", "backslashreplace")


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """Columns aligned on the widest cell, two spaces apart, no trailing blanks."""
    cells = [[str(h) for h in headers], *[[_cell(c) for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
                     for row in cells)


def _cell(value: object) -> str:
    return "-" if value is None or value == "" else str(value)


def opid(value: tuple[int, int] | Sequence[int]) -> str:
    term, index = value
    return f"{term}.{index}"


# ---------------------------------------------------------------------------- documents


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


def server_status_doc(status: ServerStatus) -> dict[str, Any]:
    return {"uuid": status.uuid, "address": status.address,
            "replicas": [replica_doc(r) for r in status.replicas]}


def server_status_text(status: ServerStatus) -> str:
    lines = [f"uuid:     {status.uuid}", f"address:  {status.address}",
             f"replicas: {len(status.replicas)}"]
    if status.replicas:
        lines.append(table(
            ["TABLET", "STATE", "ROLE", "TERM", "LAST", "COMMITTED", "LEADER"],
            [[r.tablet_id, r.state, r.role, r.term, opid(r.last_opid), r.commit_index,
              r.leader] for r in status.replicas]))
    return "\n".join(lines)


def _replica_row_doc(row: ReplicaStatus) -> dict[str, Any]:
    doc: dict[str, Any] = {"address": row.address, "uuid": row.uuid,
                           "reachable": row.reachable, "error": row.error}
    if row.info is not None:
        doc.update(replica_doc(row.info))
    return doc


def tablet_status_doc(status: TabletStatus) -> dict[str, Any]:
    leader = status.leader
    return {
        "tablet_id": status.tablet_id,
        "leader": None if leader is None else leader.uuid,
        "leader_address": None if leader is None else leader.address,
        "replicas": [_replica_row_doc(r) for r in status.replicas],
    }


def tablet_status_text(status: TabletStatus) -> str:
    rows: list[list[object]] = []
    for r in status.replicas:
        info = r.info
        if info is None:
            rows.append([r.address, r.uuid, r.error, None, None, None, None, None])
        else:
            state = info.state if not info.reason else f"{info.state} ({info.reason})"
            rows.append([r.address, r.uuid, state, info.role, info.term,
                         opid(info.last_opid), info.commit_index, info.config_index])
    leader = status.leader
    said = "none" if leader is None else f"{leader.uuid} ({leader.address})"
    return "\n".join([
        f"tablet {status.tablet_id}",
        table(["ADDRESS", "UUID", "STATE", "ROLE", "TERM", "LAST", "COMMITTED", "CONFIG"],
              rows),
        f"leader: {said}",
    ])


__all__ = [
    "dumps",
    "opid",
    "peer_doc",
    "replica_doc",
    "server_status_doc",
    "server_status_text",
    "show_bytes",
    "table",
    "tablet_status_doc",
    "tablet_status_text",
]
