"""What ``tserver run`` and ``master run`` share: parse, serve until SIGTERM/SIGINT, and
the web server beside the RPC server.

The web server runs in the process's own trio run, as more tasks of the server's own
nursery (hypercorn's trio worker): pages then read the server's state on the same thread
that changes it, between two checkpoints, so no page sees a half-made change and no lock is
needed. It starts right after the RPC server binds and before the tablets on disk are
opened (``on_bound``), so ``/healthz`` answers 503 while WALs replay; its line is printed
after the "listening" line (which stays the first line scripts wait for):
``revivify <kind> <uuid> web on http://HOST:PORT``.

``--webserver-bind``: HOST:PORT, ``off``, or nothing (then the RPC host and Kudu's port,
8050 for a tablet server and 8051 for a master). A port given on the command line that
cannot be bound stops the process (exit 2, like a busy RPC port); the *default* port being
busy does not: a second server on one machine then runs without pages and says so on the
web line (``web off (...)``), since its RPC matters more than its pages.
"""

from __future__ import annotations

import argparse
import errno
import sys
from collections.abc import Awaitable, Callable
from typing import Any

import attrs
import trio

from revivify.impl.rpc.address import format_address, parse_address
from revivify.impl.storage.errors import StorageError

TSERVER_WEB_PORT = 8050
MASTER_WEB_PORT = 8051


class UsageError(Exception):
    pass


@attrs.frozen
class WebBind:
    """Where to serve the pages; ``explicit``: named on the command line (a failure to
    bind it is fatal), else the default (a failure is a warning)."""

    host: str
    port: int
    explicit: bool


@attrs.frozen
class Launch:
    """A parsed command line: the server's options and the web server's bind (None: off)."""

    options: Any
    web: WebBind | None
    # A master's ``--trace-follower``: HOST:PORT of a trace follower's pages, whose
    # verdict its home page shows (impl/web/master_views.py).
    trace_follower: str | None = None


def add_web_flag(p: argparse.ArgumentParser, default_port: int) -> None:
    p.add_argument("--webserver-bind", default=None, metavar="HOST:PORT|off",
                   help=f"serve the status pages here (default: the RPC host, port "
                        f"{default_port}; port 0: any free port; 'off': no pages)")


def parse_web_bind(text: str | None, rpc_host: str, default_port: int) -> WebBind | None:
    if text is None:
        return WebBind(rpc_host, default_port, explicit=False)
    if text.strip().lower() == "off":
        return None
    try:
        host, port = parse_address(text, allow_any_port=True)
    except ValueError as exc:
        raise UsageError(f"--webserver-bind: {exc}") from None
    return WebBind(host, port, explicit=True)


@attrs.define
class Web:
    """The pages of one process, once started: their address ("" none) and the web line
    to print after the "listening" line (None: nothing to print, pages switched off)."""

    address: str = ""
    line: str | None = None


async def start_web(nursery: trio.Nursery, bind: WebBind | None, app: Any, kind: str,
                    uuid: str) -> Web:
    """Serve ``app`` as tasks of ``nursery`` (the server's own: impl/tserver/server.py
    ``on_bound``) on ``bind``; what to print once the server says it listens."""
    if bind is None:
        return Web()
    from revivify.impl.web.serve import serve_web  # the web stack: server runs only

    try:
        bound: str = await nursery.start(serve_web, app, bind.host, bind.port)
    except (OSError, BaseExceptionGroup) as exc:  # trio's nurseries may wrap it
        busy = _address_in_use(exc)
        if bind.explicit or busy is None:
            raise
        where = format_address(bind.host, bind.port)
        return Web("", f"revivify {kind} {uuid} web off ({where}: {busy.strerror})")
    return Web(bound, f"revivify {kind} {uuid} web on http://{bound}")


def _address_in_use(exc: BaseException) -> OSError | None:
    """The EADDRINUSE error that ``exc`` is or holds (a group's leaves), if any."""
    if isinstance(exc, OSError):
        return exc if exc.errno == errno.EADDRINUSE else None
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            found = _address_in_use(inner)
            if found is not None:
                return found
    return None


def run_server_process(command: str, argv: list[str], parse: Callable[[list[str]], Launch],
                       serve: Callable[[Launch], Awaitable[None]]) -> int:
    """Parse, then serve until SIGTERM/SIGINT: exit 0, or 2 with one line for bad usage or
    a directory (or port) the server cannot use (shared by ``tserver run`` and ``master
    run``)."""
    try:
        launch = parse(argv)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 2
    except UsageError as exc:
        print(f"{command}: {exc}", file=sys.stderr)
        return 2
    try:
        trio.run(serve, launch)
    except (StorageError, OSError, BaseExceptionGroup) as exc:
        cause = _first_disk_error(exc)
        if cause is None:
            raise
        where = (f"cannot use {launch.options.fs_root}: " if isinstance(cause, StorageError)
                 else "")
        print(f"{command}: {where}{cause}", file=sys.stderr)
        return 2
    return 0


def _first_disk_error(exc: BaseException) -> StorageError | OSError | None:
    """The storage or OS error that stopped the server (trio may wrap it in a group)."""
    if isinstance(exc, StorageError | OSError):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            found = _first_disk_error(inner)
            if found is not None:
                return found
    return None


__all__ = [
    "MASTER_WEB_PORT",
    "TSERVER_WEB_PORT",
    "Launch",
    "UsageError",
    "Web",
    "WebBind",
    "add_web_flag",
    "parse_web_bind",
    "run_server_process",
    "start_web",
]
