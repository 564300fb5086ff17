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

``--rpc-advertised-address HOST:PORT`` (Kudu's ``--rpc_advertised_addresses``): the address
the server gives others (the masters' registry, Raft configs, copy sources, clients, its
"listening" line), when the bind address is not one they can reach: a wildcard bind
(``0.0.0.0``, ``::``), a NAT, a container. A wildcard ``--rpc-bind`` WITHOUT it is refused
at start (one line, exit 2) rather than guessed: a wildcard address reaches nobody, and the
host name is no safer a guess (Debian-style hosts files map it to 127.0.1.1, reachable from
this machine only, and the mistake would surface only as peers failing later). The port of
an advertised address is never 0, and it needs a fixed bind port (with port 0 nobody knows
in advance which port to advertise). The pages follow: a wildcard web bind is advertised
(heartbeats, ``Master.Status``, the web line) under the advertised RPC host.
"""

from __future__ import annotations

import argparse
import errno
import ipaddress
import sys
from collections.abc import Awaitable, Callable
from typing import Any

import attrs
import trio

from revivify.impl import faultfile
from revivify.impl.flagfile import FlagfileError
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


def add_advertised_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--rpc-advertised-address", default=None, metavar="HOST:PORT",
                   help="the address other servers and clients reach this one at (default: "
                        "the --rpc-bind address; required with a wildcard bind such as "
                        "0.0.0.0)")


def is_wildcard(host: str) -> bool:
    """Whether ``host`` is an unspecified address (0.0.0.0, ::): a bind on every interface,
    which names no machine to anyone else."""
    try:
        return ipaddress.ip_address(host).is_unspecified
    except ValueError:
        return False  # a host name: its own business what it resolves to


def advertised_address(text: str | None, bind_host: str, bind_port: int) -> str:
    """The advertised HOST:PORT for ``--rpc-advertised-address text`` and a bind on
    ``bind_host:bind_port`` ("": advertise the bind address), or a UsageError saying why
    not (module docstring: the refusal of a wildcard bind without one)."""
    bind = format_address(bind_host, bind_port)
    if text is None:
        if is_wildcard(bind_host):
            raise UsageError(f"--rpc-bind {bind} is a wildcard address that no other host "
                             f"can reach; add --rpc-advertised-address HOST:PORT")
        return ""
    try:
        host, port = parse_address(text)
    except ValueError as exc:
        raise UsageError(f"--rpc-advertised-address: {exc}") from None
    if is_wildcard(host):
        raise UsageError(f"--rpc-advertised-address {text}: a wildcard host cannot be "
                         f"reached; name this server's own address")
    if bind_port == 0:
        raise UsageError(f"--rpc-advertised-address needs a fixed --rpc-bind port, not "
                         f"{bind}")
    return format_address(host, port)


def listening_line(kind: str, uuid: str, address: str, bound: str) -> str:
    """The first line a server prints: its advertised address (what scripts connect to),
    and the socket's own when that differs (a wildcard bind, a NAT)."""
    line = f"revivify {kind} {uuid} listening on {address}"
    return line if bound in ("", address) else f"{line} (bound {bound})"


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
                    uuid: str, rpc_address: str = "") -> Web:
    """Serve ``app`` as tasks of ``nursery`` (the server's own: impl/tserver/server.py
    ``on_bound``) on ``bind``; what to print once the server says it listens.
    ``rpc_address``: the server's advertised RPC address, whose host stands for a wildcard
    web bind in the address given to others (the pages serve on every interface; the
    machine is reached by the name it advertises)."""
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
    try:
        host, port = parse_address(bound)
        if is_wildcard(host) and rpc_address:
            bound = format_address(parse_address(rpc_address)[0], port)
    except ValueError:
        pass  # not HOST:PORT (a unix socket): shown as the web server says it
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
    except (UsageError, FlagfileError) as exc:
        print(f"{command}: {exc}", file=sys.stderr)
        return 2
    try:
        # Test-only: a clock the nemesis can fault (impl/faultfile.py FaultClock); None (trio's
        # own) unless REVIVIFY_FAULT_FILE is set.
        trio.run(serve, launch, clock=faultfile.clock_for_this_process())
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
    "add_advertised_flag",
    "add_web_flag",
    "advertised_address",
    "is_wildcard",
    "listening_line",
    "parse_web_bind",
    "run_server_process",
    "start_web",
]
