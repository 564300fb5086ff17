"""The tablet server's pages: what each shows, as a JSON-able document (pages.py "view").

Where a CLI command shows the same thing, the document is built by the same function
(impl/client/documents.py) from the same answer: the page calls the server's own RPC
handler in-process (``Admin.Status``, ``Admin.ListCopies``), so ``/api/v1/tablets`` holds
``revivify tserver status --json``'s fields and ``/api/v1/copies`` ``revivify copy list
--json``'s. The handlers used here do not await before they answer, so each document is one
consistent snapshot of the server.

Tablet servers do not record which table a tablet belongs to (only the masters' catalog
does): the leader master names each reported tablet's table and partition in its heartbeat
answers (``TabletPlace``), kept in memory (``server.tablet_places``) for these pages, with a
link to the table's page on that master. A server without masters shows none.
"""

from __future__ import annotations

import importlib.metadata
import time
from typing import Any

import msgspec
import trio
from starlette.requests import Request

from revivify.impl.client.documents import copy_info_doc, server_status_doc
from revivify.impl.rpc.service import CallContext
from revivify.impl.tserver import api
from revivify.impl.tserver.copy.source import SourceSessionView
from revivify.impl.tserver.server import TabletServer

from .pages import Problem, View, choice_param, id_param, paged, web_link

CTX = CallContext("web", 0, "", 0)  # the pages' in-process calls to the server's handlers
LOG_ENTRIES = 20  # the newest WAL entries /tablet shows
STATES = [k.value for k in api.Kind if k is not api.Kind.ABSENT]
# A tablet in these states has not been opened since the process started (/healthz).
UNOPENED = (api.Kind.STARTING.value,)


def version() -> str:
    try:
        return importlib.metadata.version("revivify")
    except importlib.metadata.PackageNotFoundError:  # pragma: no cover (a source tree)
        return "unknown"


def healthz(server: TabletServer) -> tuple[bool, str]:
    """Healthy once every tablet on disk has been opened (running, failed or otherwise
    settled): a restarted server answers 503 while it is still replaying WALs."""
    left = sum(1 for i in server.tablets.offline_infos() if i.state in UNOPENED)
    if left:
        return False, f"starting: {left} tablet(s) not opened yet"
    return True, "ok"


def masters_doc(server: TabletServer) -> list[dict[str, Any]]:
    pool = server.heartbeats
    if pool is None:
        return []
    now = trio.current_time()
    rows = []
    for address, (beater, _) in sorted(pool.beaters.items()):
        since = None if beater.answered_at is None else round(now - beater.answered_at, 3)
        rows.append({"address": address, "uuid": beater.master_uuid or None,
                     "leader": beater.leader, "term": beater.term,
                     "responses": beater.responses, "seconds_since_answer": since,
                     "web": beater.master_web or None,
                     "link": web_link(beater.master_web, "/")})
    return rows


def home_view(server: TabletServer, started_at: float) -> View:
    async def view(request: Request) -> dict[str, Any]:
        healthy, why = healthz(server)
        return {"uuid": server.uuid, "address": server.address,
                "web": server.web_address or None, "version": version(),
                "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started_at)),
                "uptime_seconds": round(time.time() - started_at, 1),
                "healthy": healthy, "health": why,
                "replicas": len(server.tablets.core.slots), "masters": masters_doc(server)}
    return view


def _disk_usage(server: TabletServer, tablet_ids: list[str]
                ) -> dict[str, tuple[int | None, int | None]]:
    """(WAL bytes, data block bytes) of each tablet, from the files (None: unreadable;
    a file removed while counted is skipped). Blocking: run with ``server.blocking``."""
    disk, out = server.disk, {}
    for tablet_id in tablet_ids:
        wal: int | None = 0
        data: int | None = 0
        try:
            wal_dir = server.layout.wal_dir(tablet_id)
            names = disk.listdir(wal_dir) if disk.is_dir(wal_dir) else []
            wal = sum(_size_or_zero(disk, f"{wal_dir}/{n}") for n in names)
        except (OSError, ValueError):
            wal = None
        try:
            sb = server.metadata.load_superblock(tablet_id)
            blocks = sb.live_blocks if sb is not None else ()
            data = sum(_size_or_zero(disk, server.blocks.path(b)) for b in blocks)
        except Exception:  # a superblock being rewritten or corrupt: shown as unknown
            data = None
        out[tablet_id] = (wal, data)
    return out


def _size_or_zero(disk: Any, path: str) -> int:
    try:
        return int(disk.file_size(path))
    except OSError:
        return 0


def _leader_master_web(server: TabletServer) -> str:
    """The pages of the master whose last answer said it is the ready leader ("" none)."""
    pool = server.heartbeats
    if pool is None:
        return ""
    return next((b.master_web for b, _ in pool.beaters.values() if b.leader), "")


def _place(server: TabletServer, row: dict[str, Any], master_web: str) -> None:
    """Add the tablet's table and partition (as the leader master last named them) and a
    link to the table's page on that master."""
    place = server.tablet_places.get(row["tablet_id"])
    row["table_id"] = place.table_id if place is not None else None
    row["table"] = place.table_name if place is not None else None
    row["partition"] = place.partition if place is not None else None
    row["table_link"] = (web_link(master_web, f"/table?id={place.table_id}")
                         if place is not None else None)


def tablets_view(server: TabletServer) -> View:
    async def view(request: Request) -> dict[str, Any]:
        state = choice_param(request, "state", STATES)
        doc = server_status_doc(await server.on_status(api.Empty(), CTX))
        rows = [r for r in doc["replicas"] if state is None or r["state"] == state]
        shown, paging = paged(rows, request)
        usage = await server.blocking(_disk_usage, server, [r["tablet_id"] for r in shown])
        master_web = _leader_master_web(server)
        for r in shown:
            r["wal_bytes"], r["data_bytes"] = usage[r["tablet_id"]]
            _place(server, r, master_web)
        return {**doc, "replicas": shown, "paging": paging, "state": state,
                "states": STATES}
    return view


def _progress_doc(server: TabletServer, tablet_id: str) -> list[dict[str, Any]]:
    """A leader's view of each peer: PROBE / REPLICATE / NEEDS_COPY and the match index."""
    replica = server.tablets.running_replica(tablet_id)
    if replica is None:
        return []
    return [{"uuid": p.uuid, "member_type": p.member_type, "state": p.state.value,
             "match_index": p.match, "next_index": p.next,
             "copy_expected": p.copy_expected} for p in replica.core.status().peers]


def _log_doc(server: TabletServer, tablet_id: str) -> list[dict[str, Any]]:
    replica = server.tablets.replica(tablet_id)
    if replica is None:
        return []
    log = replica.core.log
    entries = log.slice(log.last_index - LOG_ENTRIES + 1, log.last_index)
    return [{"term": e.term, "index": e.index, "kind": e.kind, "bytes": len(e.data)}
            for e in reversed(entries)]


def _trace_doc(server: TabletServer, tablet_id: str) -> list[dict[str, Any]]:
    """The tablet's newest trace events (the Tracer's memory of them), newest first."""
    if server.trace is None:
        return []
    return [{"lamport": lamport, "event": event, "args": msgspec.to_builtins(args)}
            for lamport, event, args in server.trace.recent_events(tablet_id)]


def tablet_view(server: TabletServer) -> View:
    async def view(request: Request) -> dict[str, Any]:
        tablet_id = id_param(request)
        doc = server_status_doc(await server.on_status(api.Empty(), CTX))
        found = [r for r in doc["replicas"] if r["tablet_id"] == tablet_id]
        if not found:
            raise Problem(404, f"tablet {tablet_id} is not on this server")
        _place(server, found[0], _leader_master_web(server))
        job = server.copies.jobs.get(tablet_id)
        sources = [_session_doc(s) for s in server.copies.sessions.describe()
                   if s.tablet_id == tablet_id]
        return {"uuid": server.uuid, "address": server.address, "replica": found[0],
                "progress": _progress_doc(server, tablet_id),
                "log": _log_doc(server, tablet_id),
                "trace": _trace_doc(server, tablet_id),
                "copying": copy_info_doc(job.info()) if job is not None else None,
                "source_sessions": sources, "masters": masters_doc(server)}
    return view


def _session_doc(s: SourceSessionView) -> dict[str, Any]:
    rate = s.bytes_served / s.elapsed_seconds if s.elapsed_seconds > 0 else 0.0
    return {"session_id": s.session_id, "requester": s.requester, "tablet_id": s.tablet_id,
            "bytes_done": s.bytes_served, "total_bytes": s.total_bytes, "files": s.files,
            "rate_bytes_per_second": round(rate, 1),
            "elapsed_seconds": round(s.elapsed_seconds, 3),
            "idle_seconds": round(s.idle_seconds, 3)}


def copies_view(server: TabletServer) -> View:
    async def view(request: Request) -> dict[str, Any]:
        reply = await server.copies.on_list_copies(api.Empty(), CTX)
        sources = [_session_doc(s) for s in server.copies.sessions.describe()]
        shown, paging = paged(sources, request)
        return {"copies": [copy_info_doc(c) for c in reply.copies],
                "max_concurrent": reply.max_concurrent, "source_sessions": shown,
                "paging": paging}
    return view


__all__ = ["copies_view", "healthz", "home_view", "tablet_view", "tablets_view", "version"]
