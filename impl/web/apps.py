"""The two sites: a tablet server's pages and a master's (pages.py builds the app; the
views are tserver_views.py and master_views.py). A master's pages are the master's own plus
/logs, /metrics and /healthz: the tablet server it embeds (the catalog's host) has no
pages of its own, since the process has one log, one registry and one web port."""

from __future__ import annotations

from starlette.applications import Starlette

from revivify.impl.master.server import MasterServer
from revivify.impl.tserver.server import TabletServer

from . import master_views, tserver_views
from .pages import LOGS_PAGE, Page, Site, build_app


def tserver_app(server: TabletServer, *, started_at: float) -> Starlette:
    t = tserver_views
    return build_app(Site("tserver", lambda: server.uuid, [
        Page("/", "tserver_home.html", t.home_view(server, started_at), "Server"),
        Page("/tablets", "tablets.html", t.tablets_view(server), "Tablets"),
        Page("/tablet", "tablet.html", t.tablet_view(server), None),
        Page("/copies", "copies.html", t.copies_view(server), "Copies"),
        LOGS_PAGE,
    ], server.metrics, lambda: t.healthz(server)))


def master_app(master: MasterServer, ts: TabletServer, *, started_at: float,
               follower: str | None = None) -> Starlette:
    """``ts``: the master's embedded tablet server (the registry, the catalog's opening),
    given apart since the pages serve before the master has started with it;
    ``follower``: HOST:PORT of a trace follower's pages (``--trace-follower``)."""
    m = master_views
    return build_app(Site("master", lambda: master.uuid, [
        Page("/", "master_home.html", m.home_view(master, started_at, follower), "Master"),
        Page("/masters", "masters.html", m.masters_view(master), "Masters"),
        Page("/tablet-servers", "tservers.html", m.tservers_view(master), "Tablet servers"),
        Page("/tables", "tables.html", m.tables_view(master), "Tables"),
        Page("/table", "table.html", m.table_view(master), None),
        Page("/operations", "operations.html", m.operations_view(master), "Operations"),
        Page("/ksck", "ksck.html", m.ksck_view(master), "ksck"),
        LOGS_PAGE,
    ], ts.metrics, lambda: m.healthz(master, ts)))


__all__ = ["master_app", "tserver_app"]
