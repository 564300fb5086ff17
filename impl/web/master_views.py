"""The master's pages: what each shows, as a JSON-able document (pages.py "view").

As on the tablet server (tserver_views.py), a page that shows what a CLI command shows
calls the master's own RPC handler in-process and builds its document with the command's
function (impl/client/documents.py): ``/api/v1/`` holds ``master status --json``'s fields,
``/api/v1/masters`` ``master list --json``'s, ``/api/v1/tablet-servers`` ``tserver list
--json``'s, ``/api/v1/tables`` ``table list --json``'s, ``/api/v1/table`` ``table describe
--json``'s and ``/api/v1/ksck`` is ``ksck --json`` (the same code, impl/client/ksck.py).

The catalog pages (tables, a table, replica counts, moves) read the ready leader's catalog
snapshot; another master redirects ``/tables`` and ``/table`` (307) to the leader's pages,
or answers 503 with the leader's address while it cannot (and shows no counts or moves).
A tablet's health on ``/table`` is the master's own view (the catalog's voters and which
of their servers heartbeat), the quick answer; ``/ksck`` asks every server.
"""

from __future__ import annotations

import json
import time
from typing import Any

import trio
from starlette.requests import Request

from revivify.impl.client.documents import (
    master_list_docs,
    master_status_doc,
    table_info_doc,
    table_locations_doc,
    tserver_entry_doc,
)
from revivify.impl.client.errors import ClientError
from revivify.impl.client.ksck import NoMaster, check, gather
from revivify.impl.client.master import master_status
from revivify.impl.client.options import ClientOptions
from revivify.impl.master import api
from revivify.impl.master.catalog import Catalog
from revivify.impl.master.server import MasterServer
from revivify.impl.rpc import AppError
from revivify.impl.rpc.address import parse_address
from revivify.impl.rpc.service import CallContext
from revivify.impl.tserver.server import TabletServer

from . import tserver_views
from .pages import Problem, View, id_param, paged, web_link

CTX = CallContext("web", 0, "", 0)
ASK_SECONDS = 2.0  # another master's status, for /masters and the leader's link
KSCK_DEADLINE = 5.0
FOLLOWER_SECONDS = 1.0  # the trace follower's /api/v1/follower, for the home page
MAX_FOLLOWER_BYTES = 4 << 20
HEALTHY, RECOVERING = "HEALTHY", "RECOVERING"
UNDER_REPLICATED, UNAVAILABLE = "UNDER_REPLICATED", "UNAVAILABLE"


def healthz(master: MasterServer, ts: TabletServer) -> tuple[bool, str]:
    """As a tablet server's: every tablet on disk (the catalog) opened, and the master's
    rooms started on it."""
    healthy, why = tserver_views.healthz(ts)
    if healthy and master.embedded.ts is None:
        return False, "starting: the master's services are not running yet"
    return healthy, why


async def _status(master: MasterServer) -> api.MasterStatus:
    try:
        return await master.service.on_status(api.Empty(), CTX)
    except AppError as exc:
        raise Problem(503, str(exc)) from None


async def _other_status(address: str) -> api.MasterStatus | str:
    """Another master's answer, or why there is none (bounded by ASK_SECONDS)."""
    with trio.move_on_after(ASK_SECONDS):
        try:
            return await master_status(address, ClientOptions(deadline=ASK_SECONDS))
        except (ClientError, AppError, OSError) as exc:
            return str(exc) or type(exc).__name__
    return f"no answer within {ASK_SECONDS:g}s"


def _why_not_ready(master: MasterServer, st: api.MasterStatus) -> str:
    if st.ready:
        return "ready: the leader, its catalog loaded"
    if master.catalog_replica() is None:
        return "no catalog tablet here yet (waiting for every master, or for a copy)"
    if st.role != "LEADER":
        return f"a {st.role.lower() or 'starting'} replica of the catalog; the leader is " \
               f"{st.leader_address or 'unknown (an election is on)'}"
    return "the leader, waiting to load the catalog (the leader-ready gate)"


async def follower_status(address: str) -> dict[str, Any]:
    """The home page's follower block: the trace follower's verdict and figures, read
    from its ``/api/v1/follower`` (HOST:PORT), or why they are unknown.

    Asked here, server-side, rather than by the reader's browser: the pages carry no
    JavaScript, and so the master's JSON twin holds the verdict too, for a script that
    reads ``/api/v1/``. Bounded by FOLLOWER_SECONDS, so a follower that is down or stuck
    costs the page that long at most and shows as unreachable. One HTTP/1.0 GET on a
    trio stream (the answer ends when the follower closes it): a client library for one
    request in one place is not worth a dependency."""
    block: dict[str, Any] = {"web": address, "link": web_link(address, "/follower"),
                             "reachable": False, "verdict": None, "events_checked": None,
                             "findings_total": None, "lag_seconds": None, "error": None}
    data = b""
    with trio.move_on_after(FOLLOWER_SECONDS):
        try:
            host, port = parse_address(address)
            stream = await trio.open_tcp_stream(host, port)
            async with stream:
                await stream.send_all(f"GET /api/v1/follower HTTP/1.0\r\nHost: {address}"
                                      "\r\nAccept: application/json\r\n\r\n".encode())
                while len(data) < MAX_FOLLOWER_BYTES:
                    chunk = await stream.receive_some(65536)
                    if not chunk:
                        break
                    data += chunk
        except (OSError, ValueError, trio.BrokenResourceError) as exc:
            block["error"] = str(exc) or type(exc).__name__
            return block
        head, _, body = data.partition(b"\r\n\r\n")
        status = head.split(b"\r\n", 1)[0]
        try:
            doc = json.loads(body) if status.split(b" ")[1:2] == [b"200"] else None
        except ValueError:
            doc = None
        if not isinstance(doc, dict) or "verdict" not in doc:
            block["error"] = f"not a follower's answer: {status.decode(errors='replace')}"
            return block
        block.update({k: doc.get(k) for k in ("verdict", "events_checked",
                                               "findings_total", "lag_seconds")},
                     reachable=True)
        return block
    block["error"] = f"no answer within {FOLLOWER_SECONDS:g}s"
    return block


def home_view(master: MasterServer, started_at: float, follower: str | None = None) -> View:
    async def view(request: Request) -> dict[str, Any]:
        st = await _status(master)
        leader_web: str | None = (st.web_address or None) if st.ready else None
        if not st.ready and st.leader_address and st.leader_address != st.address:
            other = await _other_status(st.leader_address)
            leader_web = None if isinstance(other, str) else (other.web_address or None)
        return {**master_status_doc(st), "web": master.web_address or None,
                "version": tserver_views.version(),
                "uptime_seconds": round(time.time() - started_at, 1),
                "why": _why_not_ready(master, st), "masters_index": st.masters_index,
                "leader_web": leader_web, "leader_link": web_link(leader_web or "", "/"),
                "follower": await follower_status(follower) if follower else None}
    return view


def masters_view(master: MasterServer) -> View:
    async def view(request: Request) -> dict[str, Any]:
        st = await _status(master)
        answers: dict[str, api.MasterStatus | str] = {}

        async def ask(address: str) -> None:
            answers[address] = st if address == st.address else await _other_status(address)

        addresses = [m.address for m in st.members] or list(st.masters)
        async with trio.open_nursery() as nursery:
            for address in addresses:
                nursery.start_soon(ask, address)
        # `master list --json`'s rows (every member, its member type, role, term, live),
        # and each one's pages.
        rows = master_list_docs(st if st.members else None, answers)
        for row in rows:
            a = answers.get(row["address"])
            web = a.web_address if isinstance(a, api.MasterStatus) else ""
            row["web"] = web or None
            row["link"] = web_link(web, "/")
        return {"masters": rows, "masters_index": st.masters_index}
    return view


def _leader_catalog(master: MasterServer) -> Catalog:
    """The ready leader's catalog snapshot, or 503 naming the leader."""
    replica = master.catalog_replica()
    term = replica.core.status().term if replica is not None else -1
    if replica is None or not replica.core.is_leader() or not master.gate.ready_in(term):
        _, _, _, address = master.embedded.role_of(replica)
        raise Problem(503, f"not the ready leader master; the leader is at "
                           f"{address or 'unknown'} (its pages have the catalog)")
    return master.gate.catalog


async def _catalog_or_redirect(master: MasterServer, request: Request) -> Catalog:
    """The ready leader's catalog; on another master, a redirect (307) to the same page on
    the leader's pages when the leader names them, else _leader_catalog's 503."""
    try:
        return _leader_catalog(master)
    except Problem as problem:
        _, _, _, address = master.embedded.role_of(master.catalog_replica())
        if not address or address == master.address:
            raise
        other = await _other_status(address)
        if isinstance(other, str) or not other.web_address or not other.ready:
            raise problem from None
        target = f"http://{other.web_address}{request.url.path}"
        if request.url.query:
            target += f"?{request.url.query}"
        raise Problem(307, f"the leader master has the catalog: {target}", target) from None


def _replica_counts(catalog: Catalog) -> dict[str, tuple[int, int]]:
    """(replicas, leaders) per tablet server, as the catalog records them."""
    counts: dict[str, tuple[int, int]] = {}
    for tablet in catalog.tablets.values():
        for peer in tablet.consensus.config.peers:
            n, leaders = counts.get(peer.uuid, (0, 0))
            counts[peer.uuid] = (n + 1, leaders + (tablet.consensus.leader == peer.uuid))
    return counts


def tservers_view(master: MasterServer) -> View:
    async def view(request: Request) -> dict[str, Any]:
        try:
            reply = await master.service.on_list_tservers(api.Empty(), CTX)
        except AppError as exc:
            raise Problem(503, str(exc)) from None
        try:
            counts: dict[str, tuple[int, int]] | None = _replica_counts(
                _leader_catalog(master))
        except Problem:
            counts = None  # a follower: no catalog snapshot to count from
        rows = []
        for t in reply.tservers:
            n, leaders = counts.get(t.uuid, (0, 0)) if counts is not None else (None, None)
            rows.append({**tserver_entry_doc(t), "state": t.state,
                         "web": t.web_address or None, "link": web_link(t.web_address, "/"),
                         "replicas": n, "leaders": leaders})
        shown, paging = paged(rows, request)
        return {"tservers": shown, "paging": paging,
                "live": sum(1 for r in rows if r["live"]),
                "dead": sum(1 for r in rows if not r["live"])}
    return view


def tables_view(master: MasterServer) -> View:
    async def view(request: Request) -> dict[str, Any]:
        await _catalog_or_redirect(master, request)
        reply = await master.service.on_list_tables(api.ListTablesRequest(), CTX)
        rows = [{**table_info_doc(t), "link": f"/table?id={t.table_id}"}
                for t in reply.tables]
        shown, paging = paged(rows, request)
        return {"tables": shown, "paging": paging}
    return view


def tablet_health(replicas: list[dict[str, Any]], num_replicas: int, state: str) -> str:
    """The master's quick verdict on one tablet, in ksck's words and order."""
    voters = [r for r in replicas if r["member_type"] == "VOTER"]
    live = sum(1 for r in voters if r["live"])
    if live < len(voters) // 2 + 1:
        return UNAVAILABLE
    if live < max(num_replicas, len(voters)):
        return UNDER_REPLICATED
    if state != "RUNNING" or not any(r["role"] == "LEADER" for r in voters):
        return RECOVERING
    return HEALTHY


def _decorate_tablet(t: dict[str, Any], webs: dict[str, str], num_replicas: int,
                     schema_version: int) -> dict[str, Any]:
    for r in t["replicas"]:
        web = webs.get(r["uuid"], "")
        r["web"] = web or None
        r["link"] = web_link(web, f"/tablet?id={t['tablet_id']}")
    t["health"] = tablet_health(t["replicas"], num_replicas, t["state"])
    t["reported_schema_version"] = schema_version
    return t


def table_view(master: MasterServer) -> View:
    async def view(request: Request) -> dict[str, Any]:
        table_id = id_param(request)
        catalog = await _catalog_or_redirect(master, request)
        record = catalog.tables.get(table_id)
        if record is None:
            raise Problem(404, f"no table with id {table_id}")
        try:
            reply = await master.service.on_table_locations(
                api.TableLocationsRequest(record.name), CTX)
        except AppError as exc:
            raise Problem(404 if "not found" in str(exc).lower() else 503, str(exc)) from None
        doc = table_locations_doc(reply)
        webs = master.service.web_addresses
        for t in doc["tablets"]:
            found = catalog.tablets.get(t["tablet_id"])
            _decorate_tablet(t, webs, reply.num_replicas,
                             found.reported_schema_version if found is not None else 0)
        shown, paging = paged(doc["tablets"], request)
        health = {h: sum(1 for t in doc["tablets"] if t["health"] == h)
                  for h in (HEALTHY, RECOVERING, UNDER_REPLICATED, UNAVAILABLE)}
        return {**doc, "tablets": shown, "paging": paging, "state": record.state.value,
                "num_replicas": reply.num_replicas, "health": health}
    return view


def operations_view(master: MasterServer) -> View:
    async def view(request: Request) -> dict[str, Any]:
        now = master.embedded.now() if master.embedded.ts is not None else 0.0
        calls = [{"kind": c.call.method, "target": c.call.dest, "tablet_id": c.call.tablet_id,
                  "why": c.call.why, "term": c.term, "attempts": c.attempts,
                  "last_error": c.last_error or None,
                  "seconds": round(now - c.started, 3)} for c in master.delivery.in_flight()]
        try:
            catalog: Catalog | None = _leader_catalog(master)
        except Problem:
            catalog = None
        moves = [] if catalog is None else [
            {"tablet_id": t.tablet_id, "table_id": t.table_id, "from": t.move.from_uuid,
             "to": t.move.to_uuid, "reason": t.move.reason, "automatic": t.move.automatic}
            for t in sorted(catalog.tablets.values(), key=lambda t: t.tablet_id)
            if t.move is not None]
        shown, paging = paged(calls, request)
        return {"calls": shown, "paging": paging, "moves": moves[:200],
                "leader": catalog is not None}
    return view


def ksck_view(master: MasterServer) -> View:
    async def view(request: Request) -> dict[str, Any]:
        st = await _status(master)
        try:
            return check(await gather(list(st.masters) or [st.address], KSCK_DEADLINE))
        except NoMaster as exc:
            raise Problem(503, exc.message) from None
    return view


__all__ = ["healthz", "home_view", "ksck_view", "masters_view", "operations_view",
           "table_view", "tables_view", "tablet_health", "tservers_view"]
