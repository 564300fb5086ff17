"""The status pages in one process: a master and a tablet server (real TCP, real disk, one
trio run), their pages served by impl/web on ephemeral ports, fetched over raw sockets in
the same run (urllib would block the loop the servers run on).

What is checked: each JSON twin holds the fields of the CLI's ``--json`` for the same thing
(built through the client the CLI uses) with equal values; the HTML page shows the same
numbers; bad input is answered 400/404 with one line; a huge header, a half-sent request
and many idle connections neither stop the pages nor the RPC server.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import attrs
import trio

from revivify.impl.cli import render
from revivify.impl.client import (
    copy_replica,
    create_tablet,
    list_copies,
    open_tablet_client,
    server_status,
)
from revivify.impl.client.documents import (
    copy_info_doc,
    master_status_doc,
    table_info_doc,
    table_locations_doc,
)
from revivify.impl.client.master import master_call, master_status
from revivify.impl.master import api
from revivify.impl.master.server import MasterOptions, open_master
from revivify.impl.servers.process import WebBind, start_web
from revivify.impl.tablet.columns import Column
from revivify.impl.tserver.server import ServerOptions, open_tserver
from revivify.impl.web.apps import master_app, tserver_app
from revivify.impl.web.serve import READ_TIMEOUT

DEADLINE = 60.0
BIND = WebBind("127.0.0.1", 0, explicit=True)


@attrs.frozen
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def text(self) -> str:
        return self.body.decode()


async def fetch(web: str, path: str, *, raw: bytes | None = None) -> Reply:
    """One HTTP/1.1 request (``raw``: these exact bytes instead), the whole answer."""
    host, port = web.rsplit(":", 1)
    stream = await trio.open_tcp_stream(host, int(port))
    async with stream:
        await stream.send_all(raw or f"GET {path} HTTP/1.1\r\nHost: {web}\r\n"
                                     "Connection: close\r\n\r\n".encode())
        data = b""
        while chunk := await stream.receive_some(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.lower().split(": ", 1) for line in lines[1:] if ": " in line)
    if headers.get("transfer-encoding") == "chunked":
        body = _unchunk(body)
    return Reply(int(lines[0].split()[1]), headers, body)


def _unchunk(body: bytes) -> bytes:
    out = b""
    while body:
        size_line, _, rest = body.partition(b"\r\n")
        size = int(size_line, 16)
        if size == 0:
            break
        out, body = out + rest[:size], rest[size + 2:]
    return out


@attrs.frozen
class Pair:
    """A master and a tablet server that heartbeats it, each with its pages."""

    master: Any
    master_web: str
    server: Any
    server_web: str
    table_id: str
    tablet_ids: list[str]


@asynccontextmanager
async def pair(tmp: Path) -> AsyncIterator[Pair]:
    webs: dict[str, str] = {}

    async def master_pages(master: Any, ts: Any, nursery: trio.Nursery) -> None:
        web = await start_web(nursery, BIND, master_app(master, ts, started_at=0.0),
                              "master", ts.uuid)
        master.web_address = webs["master"] = web.address

    async def server_pages(server: Any, nursery: trio.Nursery) -> None:
        web = await start_web(nursery, BIND, tserver_app(server, started_at=0.0),
                              "tserver", server.uuid)
        server.web_address = webs["tserver"] = web.address

    mopts = MasterOptions(fs_root=str(tmp / "m"), rpc_host="127.0.0.1", rpc_port=0,
                          tick_seconds=0.02)
    async with open_master(mopts, on_bound=master_pages) as master:
        topts = ServerOptions(fs_root=str(tmp / "ts"), rpc_port=0, tick_seconds=0.02,
                              masters=(master.address,), heartbeat_seconds=0.05)
        async with open_tserver(topts, on_bound=server_pages) as server:
            created = await _create_table(master.address)
            yield Pair(master, webs["master"], server, webs["tserver"], created.table_id,
                       created.tablet_ids)


async def _create_table(master: str) -> api.TableCreatedReply:
    with trio.fail_after(DEADLINE):
        while not (await master_status(master)).ready:
            await trio.sleep(0.05)
        reply = await master_call([master], api.MASTER_CREATE_TABLE, api.CreateTableRequest(
            "t1", [Column("key", key=True), Column("v", "int64")], 2, 1, "req-1"),
            api.TableCreatedReply)
        while True:  # both tablets led: the numbers stop moving
            st = await server_status_of_all(master)
            if len(st) == 2 and all(r.role == "LEADER" and r.commit_index >= 1 for r in st):
                break
            await trio.sleep(0.05)
        while True:  # ... and the master knows it (a report processed: HEALTHY, not RECOVERING)
            where = await master_call([master], api.MASTER_TABLE_LOCATIONS,
                                      api.TableLocationsRequest("t1"), api.TableLocationsReply)
            if all(t.state == "RUNNING" and any(r.leader for r in t.replicas)
                   for t in where.tablets):
                return reply
            await trio.sleep(0.05)


async def server_status_of_all(master: str) -> list[Any]:
    listed = await master_call([master], api.MASTER_LIST_TSERVERS, api.Empty(),
                               api.TabletServerList)
    out = []
    for t in listed.tservers:
        out += (await server_status(t.address)).replicas
    return out


def run(tmp: Path, body: Callable[[Pair], Awaitable[None]]) -> None:
    async def main() -> None:
        with trio.fail_after(DEADLINE * 2):
            async with pair(tmp) as p:
                await body(p)
    trio.run(main)


def same_fields(page: dict[str, Any], cli: dict[str, Any]) -> None:
    """Every field of the CLI's document is in the page's, with the same value."""
    for key, value in cli.items():
        assert key in page, key
        assert page[key] == value, (key, page[key], value)


# ---------------------------------------------------------------------------- twins


def test_tablet_server_twins_match_the_cli(tmp_path: Path) -> None:
    async def body(p: Pair) -> None:
        cli = render.server_status_doc(await server_status(p.server.address))
        page = (await fetch(p.server_web, "/api/v1/tablets")).json()
        assert page["uuid"] == cli["uuid"] and page["address"] == cli["address"]
        assert len(page["replicas"]) == len(cli["replicas"]) == 2
        for shown, said in zip(page["replicas"], cli["replicas"], strict=True):
            same_fields(shown, said)
            assert shown["wal_bytes"] > 0  # the WAL holds the leader's no-op at least
        # The table and partition as the leader master's heartbeat answers name them.
        with trio.fail_after(DEADLINE):
            while any(r["table"] is None for r in page["replicas"]):
                await trio.sleep(0.05)
                page = (await fetch(p.server_web, "/api/v1/tablets")).json()
        assert sorted((r["table"], r["partition"]) for r in page["replicas"]) == \
            [("t1", 0), ("t1", 1)]
        assert {r["table_link"] for r in page["replicas"]} == \
            {f"http://{p.master_web}/table?id={p.table_id}"}
        home = (await fetch(p.server_web, "/api/v1/")).json()
        assert home["uuid"] == p.server.uuid and home["replicas"] == 2
        assert [m["address"] for m in home["masters"]] == [p.master.address]
        assert home["masters"][0]["link"] == f"http://{p.master_web}/"
        assert home["healthy"] is True
        # The HTML shows the same numbers.
        html = (await fetch(p.server_web, "/tablets")).text
        for r in cli["replicas"]:
            row = re.search(rf'data-tablet="{r["tablet_id"]}">(.*?)</tr>', html, re.S)
            assert row is not None
            assert f'<td class="num term">{r["term"]}</td>' in row.group(1)
            assert f'<td class="num commit">{r["commit_index"]}</td>' in row.group(1)
        # One tablet: its leader's view of its peers and its newest log entries.
        page = await fetch(p.server_web, f"/tablet?id={p.tablet_ids[0]}")
        assert page.status == 200 and '<dd id="role">LEADER</dd>' in page.text
        for path in ("/", "/copies", "/logs", "/tablets?state=RUNNING&page=1"):
            assert (await fetch(p.server_web, path)).status == 200, path
        tablet = (await fetch(p.server_web, f"/api/v1/tablet?id={p.tablet_ids[0]}")).json()
        assert tablet["replica"]["role"] == "LEADER"
        assert [x["uuid"] for x in tablet["progress"]] == [p.server.uuid]
        assert tablet["log"][0]["index"] == tablet["replica"]["last_opid"][1]
        # Its newest trace events, newest first: it became leader in its current term.
        events = tablet["trace"]
        assert events and [e["lamport"] for e in events] == sorted(
            (e["lamport"] for e in events), reverse=True)
        assert any(e["event"] == "become_leader" for e in events), events
        assert "Newest trace events" in page.text and "become_leader" in page.text
        # Filtering by state; nothing is copying.
        assert len((await fetch(p.server_web, "/api/v1/tablets?state=RUNNING")).json()
                   ["replicas"]) == 2
        assert (await fetch(p.server_web, "/api/v1/tablets?state=TOMBSTONED")).json()[
            "replicas"] == []
        copies = (await fetch(p.server_web, "/api/v1/copies")).json()
        assert copies["copies"] == [] and copies["source_sessions"] == []
    run(tmp_path, body)


def test_master_twins_match_the_cli(tmp_path: Path) -> None:
    async def body(p: Pair) -> None:
        master = p.master.address
        home = (await fetch(p.master_web, "/api/v1/")).json()
        same_fields(home, master_status_doc(await master_status(master)))
        assert home["ready"] is True and home["role"] == "LEADER"
        tables = (await fetch(p.master_web, "/api/v1/tables")).json()["tables"]
        listed = await master_call([master], api.MASTER_LIST_TABLES, api.ListTablesRequest(),
                                   api.TableList)
        assert len(tables) == 1
        same_fields(tables[0], table_info_doc(listed.tables[0]))
        table = (await fetch(p.master_web, f"/api/v1/table?id={p.table_id}")).json()
        described = table_locations_doc(await master_call(
            [master], api.MASTER_TABLE_LOCATIONS, api.TableLocationsRequest("t1"),
            api.TableLocationsReply))
        assert table["name"] == described["name"] == "t1"
        assert [c["name"] for c in table["columns"]] == ["key", "v"]
        for shown, said in zip(table["tablets"], described["tablets"], strict=True):
            assert shown["tablet_id"] == said["tablet_id"] and shown["term"] == said["term"]
            assert shown["health"] == "HEALTHY"
            replica = shown["replicas"][0]
            assert replica["link"] == f"http://{p.server_web}/tablet?id={shown['tablet_id']}"
        tservers = (await fetch(p.master_web, "/api/v1/tablet-servers")).json()
        assert [(t["uuid"], t["live"], t["replicas"]) for t in tservers["tservers"]] == \
            [(p.server.uuid, True, 2)]
        assert tservers["tservers"][0]["link"] == f"http://{p.server_web}/"
        ksck = (await fetch(p.master_web, "/api/v1/ksck")).json()
        assert ksck["healthy"] is True, ksck["problems"]
        assert ksck["summary"].startswith("HEALTHY: 1 master, 1 tablet server, 1 table")
        masters = (await fetch(p.master_web, "/api/v1/masters")).json()["masters"]
        assert [(m["uuid"], m["role"], m["link"]) for m in masters] == \
            [(p.master.uuid, "LEADER", f"http://{p.master_web}/")]
        ops = (await fetch(p.master_web, "/api/v1/operations")).json()
        assert ops["leader"] is True and ops["moves"] == []
        for path in ("/", "/masters", "/tablet-servers", "/tables", f"/table?id={p.table_id}",
                     "/operations", "/ksck", "/logs"):
            page = await fetch(p.master_web, path)
            assert page.status == 200 and page.headers["content-type"].startswith("text/html")
    run(tmp_path, body)


def test_metrics_healthz_and_logs(tmp_path: Path) -> None:
    async def body(p: Pair) -> None:
        for web in (p.master_web, p.server_web):
            metrics = await fetch(web, "/metrics")
            assert metrics.status == 200
            assert metrics.headers["content-type"].startswith("text/plain; version=")
            health = await fetch(web, "/healthz")
            assert (health.status, health.text) == (200, "ok\n")
            logs = (await fetch(web, "/api/v1/logs?lines=5")).json()
            assert len(logs["lines"]) <= 5
    run(tmp_path, body)


# ---------------------------------------------------------------------------- bad input


def test_bad_requests_are_answered_with_one_line(tmp_path: Path) -> None:
    async def body(p: Pair) -> None:
        cases = [
            (p.server_web, "/no/such/page", 404),
            (p.server_web, "/tablet?id=nosuchtablet", 404),
            (p.server_web, "/tablet", 400),
            (p.server_web, "/tablet?id=bad%20id", 400),
            (p.server_web, "/tablets?page=0", 400),
            (p.server_web, "/tablets?page=abc", 400),
            (p.server_web, "/tablets?state=BOGUS", 400),
            (p.server_web, "/logs?lines=100000", 400),
            (p.master_web, "/table?id=nosuchtable", 404),
            (p.master_web, "/table", 400),
            (p.master_web, "/tables?page=-1", 400),
        ]
        for web, path, status in cases:
            page = await fetch(web, path)
            assert page.status == status, (path, page.status, page.text)
            assert page.text.count("\n") == 1 and page.text.startswith(f"{status}: "), page.text
            twin = await fetch(web, "/api/v1" + path)
            assert twin.status == status and twin.headers["content-type"] == "application/json"
            assert set(twin.json()) == {"error"}
        # A page past the end is an empty page, not an error.
        beyond = (await fetch(p.server_web, "/api/v1/tablets?page=9")).json()
        assert beyond["replicas"] == [] and beyond["paging"]["total"] == 2
    run(tmp_path, body)


def test_abuse_does_not_stop_pages_or_rpc(tmp_path: Path) -> None:
    """A header past the limit, a request that never ends, 200 idle connections: the
    pages still answer, and so does the RPC server (the same trio run)."""
    async def body(p: Pair) -> None:
        web = p.server_web
        huge = (b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 100_000 + b"\r\n\r\n")
        refused = await fetch(web, "/", raw=huge)
        assert refused.status in (400, 413, 431)
        host, port = web.rsplit(":", 1)
        idle = [await trio.open_tcp_stream(host, int(port)) for _ in range(200)]
        half = await trio.open_tcp_stream(host, int(port))
        await half.send_all(b"GET /tablets HTTP/1.1\r\nHost: x\r\nX-Slow:")
        try:
            with trio.fail_after(10):
                assert (await fetch(web, "/api/v1/")).json()["uuid"] == p.server.uuid
                status = await server_status(p.server.address)
                assert len(status.replicas) == 2
                assert (await fetch(p.master_web, "/healthz")).status == 200
            # The half-sent request is given up after the read timeout: closed, maybe
            # with an answer first, never kept open for ever.
            with trio.fail_after(READ_TIMEOUT + 15):
                while await half.receive_some(65536):
                    pass
        finally:
            for stream in [*idle, half]:
                await stream.aclose()
    run(tmp_path, body)


def test_healthz_is_503_until_every_tablet_on_disk_is_opened(tmp_path: Path) -> None:
    """A server restarted on a directory with two tablets, its startup held at the first
    one: its pages already answer, /healthz says 503 and how many are left; released, 200."""
    root = tmp_path / "ts"

    async def main() -> None:
        options = ServerOptions(fs_root=str(root), rpc_port=0, tick_seconds=0.02)
        async with open_tserver(options) as server:
            for tablet in ("t-a", "t-b"):
                await create_tablet([server.address], 1, tablet)
        release, web = trio.Event(), {}

        async def gate(tablet_id: str) -> None:
            await release.wait()

        async def pages(server: Any, nursery: trio.Nursery) -> None:
            web["at"] = (await start_web(nursery, BIND, tserver_app(server, started_at=0.0),
                                         "tserver", server.uuid)).address
            nursery.start_soon(check_then_release)

        async def check_then_release() -> None:
            health = await fetch(web["at"], "/healthz")
            assert (health.status, health.text) == (503, "starting: 2 tablet(s) not opened yet\n")
            states = (await fetch(web["at"], "/api/v1/tablets")).json()["replicas"]
            assert [r["state"] for r in states] == ["STARTING", "STARTING"]
            release.set()

        with trio.fail_after(DEADLINE):
            async with open_tserver(options, startup_gate=gate, on_bound=pages):
                assert release.is_set()
                health = await fetch(web["at"], "/healthz")
                assert (health.status, health.text) == (200, "ok\n")
    trio.run(main)


def test_copies_page_shows_a_copy_from_both_ends(tmp_path: Path) -> None:
    """A slow copy (the source waits per chunk, the destination asks for small chunks):
    the destination's /copies shows it as `copy list --json` does, the source's its
    session, and the tablet page of the destination names the copy."""
    async def main() -> None:
        slow = ServerOptions(fs_root=str(tmp_path / "a"), rpc_port=0, tick_seconds=0.02,
                             fault_slow_copy_ms=100)
        small = ServerOptions(fs_root=str(tmp_path / "b"), rpc_port=0, tick_seconds=0.02,
                              copy_chunk_bytes=512)
        webs: dict[str, str] = {}

        def pages(name: str) -> Any:
            async def start(server: Any, nursery: trio.Nursery) -> None:
                webs[name] = (await start_web(nursery, BIND, tserver_app(server, started_at=0),
                                              "tserver", server.uuid)).address
            return start

        with trio.fail_after(DEADLINE):
            async with open_tserver(slow, on_bound=pages("a")) as a, \
                    open_tserver(small, on_bound=pages("b")) as b:
                await create_tablet([a.address], 1, "t-copy")
                async with open_tablet_client([a.address], "t-copy") as client:
                    for i in range(40):
                        await client.put(f"k{i:03d}".encode(), b"v" * 100)
                await copy_replica(a.address, b.address, "t-copy")
                while True:
                    dest = (await fetch(webs["b"], "/api/v1/copies")).json()
                    source = (await fetch(webs["a"], "/api/v1/copies")).json()
                    if dest["copies"] and source["source_sessions"] \
                            and dest["copies"][0]["bytes_done"] > 0:
                        break
                    await trio.sleep(0.05)
                said = [copy_info_doc(c) for c in (await list_copies(b.address)).copies]
                shown = dest["copies"]
                stable = ("tablet_id", "source_uuid", "source_address", "total_bytes",
                          "files_total")
                assert [{k: c[k] for k in stable} for c in shown] == \
                    [{k: c[k] for k in stable} for c in said]
                assert shown[0]["total_bytes"] > shown[0]["bytes_done"] > 0
                session = source["source_sessions"][0]
                assert (session["tablet_id"], session["requester"]) == ("t-copy", b.uuid)
                assert session["total_bytes"] == shown[0]["total_bytes"]
                tablet = (await fetch(webs["b"], "/api/v1/tablet?id=t-copy")).json()
                assert tablet["replica"]["state"] == "COPYING"
                assert tablet["copying"]["source_uuid"] == a.uuid
                assert (await fetch(webs["b"], "/copies")).status == 200
                assert (await fetch(webs["b"], "/tablet?id=t-copy")).status == 200
    trio.run(main)
