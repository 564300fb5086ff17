"""What every status page shares: one view per page, served twice (HTML and its JSON twin),
the query checks, paging, and the pages every server has (``/logs``, ``/metrics``,
``/healthz``, the stylesheet).

A *view* is an async function from the request to a plain JSON-able document; the same
document is the ``/api/v1/...`` answer and the template's input, so what a person reads on
the page is what a program reads from the twin. Views read the server's state between two
checkpoints of the server's own trio run (impl/web/serve.py) and copy what they show. What
a view awaits: the server's own RPC handlers in-process, the sizes of a page's files through
the server's blocking-disk helper, and (the master's) status calls to other servers bounded
by a deadline; never while holding a lock.

Bounded work: a list longer than PER_PAGE rows is cut into pages (``?page=N``, from 1); a
page past the end is an empty page, not an error.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol, TypeVar

import attrs
import jinja2
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from revivify.impl.observe.logs import tail_handler

PER_PAGE = 50
MAX_PAGE = 1_000_000
LOG_LINES = 200  # /logs without ?lines=
MAX_LOG_LINES = 1000
_HERE = os.path.dirname(__file__)
_ID = re.compile(r"^[A-Za-z0-9_.:-]{1,128}$")  # tablet and table ids, server UUIDs

ICON = (b'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 16 16">'
        b'<rect width="16" height="16" fill="#23395d"/></svg>')

T = TypeVar("T")
View = Callable[[Request], Awaitable[dict[str, Any]]]


class Problem(Exception):
    """A request the page cannot answer: its HTTP status and a one-line reason."""

    def __init__(self, status: int, reason: str, location: str | None = None) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason
        self.location = location  # a redirect's target (307: another server has it)


def page_number(request: Request) -> int:
    text = request.query_params.get("page", "1")
    if not text.isdigit() or not 1 <= int(text) <= MAX_PAGE:
        raise Problem(400, f"page must be an integer in 1..{MAX_PAGE}, got {text[:40]!r}")
    return int(text)


def paged(rows: Sequence[T], request: Request) -> tuple[list[T], dict[str, int]]:
    """The rows of the requested page, and where it is: page, pages, per_page, total."""
    page = page_number(request)
    pages = max(1, math.ceil(len(rows) / PER_PAGE))
    start = (page - 1) * PER_PAGE
    return list(rows[start:start + PER_PAGE]), {
        "page": page, "pages": pages, "per_page": PER_PAGE, "total": len(rows)}


def id_param(request: Request, name: str = "id") -> str:
    """A required id in the query (a tablet, table or server id): 400 if missing or
    malformed (the caller says 404 when it names nothing)."""
    value = request.query_params.get(name)
    if value is None or value == "":
        raise Problem(400, f"missing ?{name}=")
    if not _ID.match(value):
        raise Problem(400, f"bad {name} {value[:40]!r}: 1-128 of [A-Za-z0-9_.:-]")
    return value


def choice_param(request: Request, name: str, choices: Sequence[str]) -> str | None:
    value = request.query_params.get(name)
    if value is None or value == "":
        return None
    if value not in choices:
        raise Problem(400, f"{name} must be one of {', '.join(choices)}, got {value[:40]!r}")
    return value


def web_link(web: str, path: str) -> str | None:
    """An absolute link to another server's page, or None when its pages are unknown."""
    return f"http://{web}{path}" if web else None


@attrs.frozen
class Page:
    """One page: its path, its template, its title in the navigation (None: not listed)."""

    path: str
    template: str
    view: View
    title: str | None


class Exposition(Protocol):
    """What ``/metrics`` serves: a registry's Prometheus text (a server's
    ``observe.metrics.ServerMetrics``; the trace follower's own registry)."""

    def exposition(self) -> bytes: ...


@attrs.frozen
class Site:
    """A process's pages: who it is (for every page's header) and the pages. Any process
    with pages builds its app from one (the servers: apps.py; the trace follower:
    impl/cli/follow_web.py), so every site has the same header, /metrics, /healthz, JSON
    twins and error answers."""

    kind: str  # "tserver" | "master" | "follower"
    uuid: Callable[[], str]
    pages: Sequence[Page]
    metrics: Exposition
    healthz: Callable[[], tuple[bool, str]]  # (healthy, one line)


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(os.path.join(_HERE, "templates")),
                             autoescape=True, undefined=jinja2.StrictUndefined,
                             trim_blocks=True, lstrip_blocks=True)
    env.filters["opid"] = lambda v: f"{v[0]}.{v[1]}" if v else ""
    env.filters["size"] = _size
    return env


def _size(n: int | None) -> str:
    """Bytes for a person: B, KiB, MiB or GiB ("" when unknown)."""
    if n is None:
        return ""
    if n < 1024:
        return f"{n} B"
    value = n / 1024
    for unit in ("KiB", "MiB"):
        if value < 1024:
            return f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GiB"


def _page_endpoints(site: Site, page: Page, env: jinja2.Environment
                    ) -> tuple[Callable[[Request], Awaitable[Response]],
                               Callable[[Request], Awaitable[Response]]]:
    nav = [(p.path, p.title) for p in site.pages if p.title is not None]

    async def html(request: Request) -> Response:
        try:
            doc = await page.view(request)
        except Problem as exc:
            headers = {"location": exc.location} if exc.location else None
            return PlainTextResponse(f"{exc.status}: {exc.reason}\n", exc.status, headers)
        body = env.get_template(page.template).render(
            doc=doc, kind=site.kind, uuid=site.uuid(), nav=nav, path=page.path,
            query=dict(request.query_params))
        return HTMLResponse(body)

    async def api(request: Request) -> Response:
        try:
            return JSONResponse(await page.view(request))
        except Problem as exc:
            headers = {"location": exc.location} if exc.location else None
            return JSONResponse({"error": exc.reason}, exc.status, headers)

    return html, api


def build_app(site: Site) -> Starlette:
    """The Starlette app of ``site``: each page at its path and its twin at /api/v1/...,
    and the pages every server has."""
    env = _environment()
    with open(os.path.join(_HERE, "static", "style.css"), "rb") as f:
        css = f.read()  # served from memory: no file I/O (nor thread) per request
    routes: list[Route] = []
    for page in site.pages:
        html, api = _page_endpoints(site, page, env)
        routes.append(Route(page.path, html, methods=["GET", "HEAD"]))
        routes.append(Route("/api/v1" + page.path, api, methods=["GET", "HEAD"]))

    async def metrics(request: Request) -> Response:
        return Response(site.metrics.exposition(), media_type=CONTENT_TYPE_LATEST)

    async def healthz(request: Request) -> Response:
        healthy, line = site.healthz()
        return PlainTextResponse(line + "\n", 200 if healthy else 503)

    async def style(request: Request) -> Response:
        return Response(css, media_type="text/css",
                        headers={"cache-control": "max-age=300"})

    async def icon(request: Request) -> Response:
        # Browsers ask for it on every page without a <link rel=icon> (the JSON twins): a
        # 404 there is a console error in every browser test.
        return Response(ICON, media_type="image/svg+xml",
                        headers={"cache-control": "max-age=86400"})

    routes += [Route("/metrics", metrics), Route("/healthz", healthz),
               Route("/style.css", style), Route("/favicon.ico", icon)]

    async def not_found(request: Request, exc: Exception) -> Response:
        status = exc.status_code if isinstance(exc, HTTPException) else 500
        reason = "not found" if status == 404 else str(getattr(exc, "detail", exc))
        line = f"{reason}: {request.url.path[:200]}"
        if request.url.path.startswith("/api/"):
            return JSONResponse({"error": line}, status)
        return PlainTextResponse(f"{status}: {line}\n", status)

    return Starlette(routes=routes, exception_handlers={HTTPException: not_found})


async def logs_view(request: Request) -> dict[str, Any]:
    """The newest lines of the process's log (``?lines=N``, at most MAX_LOG_LINES)."""
    text = request.query_params.get("lines", str(LOG_LINES))
    if not text.isdigit() or not 1 <= int(text) <= MAX_LOG_LINES:
        raise Problem(400, f"lines must be an integer in 1..{MAX_LOG_LINES}, got "
                           f"{text[:40]!r}")
    handler = tail_handler()
    return {"installed": handler is not None,
            "lines": handler.tail(int(text)) if handler is not None else []}


LOGS_PAGE = Page("/logs", "logs.html", logs_view, "Logs")

__all__ = [
    "LOGS_PAGE",
    "PER_PAGE",
    "Exposition",
    "Page",
    "Problem",
    "Site",
    "View",
    "build_app",
    "choice_param",
    "id_param",
    "page_number",
    "paged",
    "web_link",
]
