"""``revivify tserver ...``: a tablet server, every verb of it.

  revivify tserver status --tserver HOST:PORT        its UUID, address and replicas
  revivify tserver run ...                           run one (revivify.impl.servers.tserver)
  revivify tserver list (--masters ... | --root DIR) the servers the masters hear from
  revivify tserver retire UUID (--masters ... | --root DIR)   move every replica off it
  revivify tserver unregister UUID (--masters ... | --root DIR)  forget a dead one
  revivify tserver wipe --fs-root DIR [--yes]        clear a stopped server's directory

``status`` is one call to one server, and takes the fast path (oneshot.py: a blocking
socket on impl/rpc's codec, no trio) when the server answers plainly; anything else (no
connection, an error answer, a master at that address) goes through the client library,
whose errors and messages are the reference. ``list`` is a read of the leader master and
tries the same fast path first (oneshot.py `master_read`, the leader found as the trio
client finds it). ``retire`` moves replicas with the masters
(moves.py), ``wipe`` works on the directory (the helpers of local_replica.py).

Exit codes and errors as every command (common.py); ``retire`` and ``wipe`` say more in
their own help.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from . import render
from .common import (
    Outcome,
    Parser,
    address_arg,
    call_timeout,
    call_timeout_flag,
    client_options,
    common_flags,
    execute,
    fail,
    fast_first,
    json_flag,
    masters_flags,
    parse_args,
    print_outcome,
)

TSERVER_MAIN = "revivify.impl.servers.tserver"
STATUS_PROG = "revivify tserver status"
ADMIN_SRC_UUID = "revivify-admin"  # impl/client/admin.py's: whom the calls are from

if TYPE_CHECKING:
    from revivify.impl.master.api import TabletServerList
    from revivify.impl.storage.offline import WipeResult


# ---------------------------------------------------------------------------- status


def status_main(argv: list[str]) -> int:
    """``revivify tserver status --tserver HOST:PORT``."""
    parser = Parser(prog=STATUS_PROG, parents=[common_flags()],
                    description="Print a tablet server's UUID, address and replicas (role, "
                                "term, last and committed OpId).")
    parser.add_argument("--tserver", type=address_arg, required=True, metavar="HOST:PORT",
                        help="the server to ask")
    args = parse_args(parser, argv)
    if isinstance(args, int):
        return args
    from revivify.impl.master.api import CATALOG_TABLET_ID
    from revivify.impl.tserver.api import ADMIN_STATUS, Empty, ServerStatus

    from . import oneshot

    try:
        fast = oneshot.call(args.tserver, ADMIN_SRC_UUID, ADMIN_STATUS, Empty(), ServerStatus,
                            args.deadline)
    except oneshot.OutOfTime:
        return fail(STATUS_PROG, f"no answer within the deadline of {args.deadline:g}s", 2)
    if fast is not None and not any(r.tablet_id == CATALOG_TABLET_ID for r in fast.replicas):
        return print_status(args, fast)
    return execute(STATUS_PROG, args, lambda: _status_work(args))


def print_status(args: argparse.Namespace, reply: Any) -> int:
    from .common import print_outcome

    return print_outcome(STATUS_PROG, args, Outcome(0, render.server_status_doc(reply),
                                                    render.server_status_text(reply)))


async def _status_work(args: argparse.Namespace) -> Outcome:
    from revivify.impl.client import WrongServerKind, server_status
    from revivify.impl.master.api import CATALOG_TABLET_ID

    reply = await server_status(args.tserver)
    if any(r.tablet_id == CATALOG_TABLET_ID for r in reply.replicas):
        # A master embeds a tablet server that hosts the catalog: answering as one would
        # show a master as a tablet server ('replica list' shows its catalog replica).
        raise WrongServerKind(args.tserver, "master", "tablet server")
    return Outcome(0, render.server_status_doc(reply), render.server_status_text(reply))


# ---------------------------------------------------------------------------- run


def run_main(argv: list[str]) -> int:
    """Hand over to ``revivify.impl.servers.tserver:run_main(argv)`` (imported lazily)."""
    try:
        module = importlib.import_module(TSERVER_MAIN)
    except ModuleNotFoundError as exc:
        if exc.name != TSERVER_MAIN:
            return fail("revivify tserver run", f"cannot load {TSERVER_MAIN}: "
                        f"{type(exc).__name__}: {exc}", 2)
        module = None
    except Exception as exc:  # a broken server module: a message, not a traceback
        return fail("revivify tserver run", f"cannot load {TSERVER_MAIN}: "
                    f"{type(exc).__name__}: {exc}", 2)
    server_main: Callable[[list[str]], int] | None = getattr(module, "run_main", None)
    if server_main is None:
        print(f"revivify tserver run: not available in this build ({TSERVER_MAIN}.run_main "
              f"is missing)", file=sys.stderr)
        return 2
    return int(server_main(argv))


# ---------------------------------------------------------------------------- list, unregister


def tserver_list_main(argv: list[str]) -> int:
    parser = Parser(prog="revivify tserver list",
                    parents=[common_flags(), masters_flags(), call_timeout_flag()],
                    description="the tablet servers the leader master hears from")
    args = parse_args(parser, argv)
    if isinstance(args, int):
        return args
    from revivify.impl.master import api

    from . import oneshot

    prog = "revivify tserver list"
    fast, spent = fast_first(args, lambda seconds: _list_outcome(oneshot.master_read(
        args.masters, api.MASTER_LIST_TSERVERS, api.Empty(), api.TabletServerList,
        call_timeout=call_timeout(args), seconds=seconds)))
    if fast is not None:
        return print_outcome(prog, args, fast)
    from revivify.impl.client.master import master_call, master_status

    async def work() -> Outcome:
        options = client_options(args, spent)
        # Any master knows every server (they all get heartbeats); ask the leader's view.
        status = None
        for address in args.masters:
            try:
                st = await master_status(address, options)
            except Exception:  # an unreachable master: ask the next
                continue
            status = st
            if st.ready:
                break
        target = [status.leader_address] if status is not None and status.leader_address \
            else args.masters
        reply = await master_call(target + [m for m in args.masters if m not in target],
                                  api.MASTER_LIST_TSERVERS, api.Empty(),
                                  api.TabletServerList, options)
        outcome = _list_outcome(reply)
        assert outcome is not None
        return outcome

    return execute(prog, args, work, spent=spent)


def _list_outcome(reply: TabletServerList | None) -> Outcome | None:
    """``tserver list``'s outcome from the leader's reply (None: no reply, from the fast
    path)."""
    from revivify.impl.client.documents import tserver_entry_doc

    if reply is None:
        return None
    rows = [tserver_entry_doc(t) for t in reply.tservers]
    text = "\n".join(f"{r['uuid']} {r['address']} {'live' if r['live'] else 'DEAD'} "
                     f"{r['seconds_since_heartbeat']:.1f}s" for r in rows)
    if rows and render.is_terminal():
        text = render.table(["UUID", "ADDRESS", "LIVE", "SINCE HEARTBEAT"], [
            [r["uuid"], r["address"], "live" if r["live"] else "DEAD",
             f"{r['seconds_since_heartbeat']:.1f}s"] for r in rows])
    return Outcome(0, {"tservers": rows}, text)


def tserver_unregister_main(argv: list[str]) -> int:
    """``revivify tserver unregister UUID --masters ...``: forget a dead tablet server that
    hosts no replica (Kudu's ``kudu tserver unregister``). The ready leader checks its
    catalog and forgets it; then every other master is told to forget it too (each refuses
    while the server is live to it). A server that heartbeats again comes back."""
    parser = Parser(prog="revivify tserver unregister",
                    parents=[common_flags(), masters_flags(), call_timeout_flag()],
                    description="forget a dead tablet server that hosts no replica")
    parser.add_argument("uuid", metavar="UUID")
    args = parse_args(parser, argv)
    if isinstance(args, int):
        return args
    from revivify.impl.client.master import master_call, master_call_at, master_status
    from revivify.impl.master import api

    async def work() -> Outcome:
        options = client_options(args)
        first = await master_call(args.masters, api.MASTER_UNREGISTER_TSERVER,
                                  api.UnregisterTServerRequest(args.uuid),
                                  api.UnregisterTServerReply, options)
        status = await master_status(args.masters[0], options)
        others = sorted({*args.masters, *status.masters} - {status.leader_address})
        told: dict[str, bool] = {first.master_uuid: first.forgotten}
        for address in others:
            reply = await master_call_at(address, api.MASTER_UNREGISTER_TSERVER,
                                         api.UnregisterTServerRequest(args.uuid, False),
                                         api.UnregisterTServerReply, options)
            told[reply.master_uuid] = reply.forgotten
        if not any(told.values()):
            return Outcome(1, {"uuid": args.uuid, "masters": told}, "",
                           complaint=f"no master knew tablet server {args.uuid}")
        return Outcome(0, {"uuid": args.uuid, "masters": told},
                       f"tablet server {args.uuid} unregistered ({len(told)} masters told)")

    return execute("revivify tserver unregister", args, work)


# ---------------------------------------------------------------------------- retire


RETIRE_PROG = "revivify tserver retire"
RETIRE_DEADLINE = 600.0


def tserver_retire_main(argv: list[str]) -> int:
    """``revivify tserver retire UUID --masters ...`` (argv after 'retire')."""
    parser = Parser(prog=RETIRE_PROG,
                    parents=[common_flags(), masters_flags(), call_timeout_flag()],
                    description="move every replica off a tablet server (then it can be "
                                "stopped for good); resumable: run it again to continue")
    parser.add_argument("uuid", help="the tablet server's UUID")
    parser.set_defaults(deadline=RETIRE_DEADLINE)
    args = parse_args(parser, argv)
    if isinstance(args, int):
        return args
    from .moves import retire

    async def work() -> Outcome:
        return await retire(list(args.masters), args.uuid, args.deadline,
                            bar=not args.json, call_timeout=args.call_timeout)

    return execute(RETIRE_PROG, args, work)


# ---------------------------------------------------------------------------- wipe


WIPE_PROG = "revivify tserver wipe"


def _confirm(root: str, uuid: str | None) -> bool:
    who = f"server {uuid}" if uuid else "the server"
    sys.stderr.write(f"wipe {root}? {who} will be gone for good and the next start formats "
                     "a new UUID [y/N] ")
    sys.stderr.flush()
    return sys.stdin.readline().strip().lower() in ("y", "yes")


def _wipe_doc(result: WipeResult) -> dict[str, Any]:
    return {"fs_root": result.root, "old_uuid": result.old_uuid,
            "removed": {"instance": result.instance, "superblocks": result.superblocks,
                        "cmetas": result.cmetas, "wals": result.wals, "blocks": result.blocks,
                        "quarantine_dirs": result.quarantine_dirs, "files": result.files,
                        "bytes": result.bytes},
            "kept": list(result.kept)}


def _wipe_text(result: WipeResult) -> str:
    from .local_replica import _size as size

    who = f"server {result.old_uuid} is gone for good" if result.old_uuid else \
        "no valid instance file was found"
    return "\n".join([
        f"wiped {result.root}: {who}",
        f"removed: {'the instance file, ' if result.instance else ''}"
        f"{result.superblocks} superblocks, {result.cmetas} cmeta files, {result.wals} WALs, "
        f"{result.blocks} data blocks, {result.quarantine_dirs} quarantine directories "
        f"({result.files} files, {size(result.bytes)})",
        f"kept: {', '.join(result.kept) or 'nothing'}",
        "the next 'revivify tserver run' formats it with a new UUID",
    ])


def tserver_wipe_main(argv: list[str]) -> int:
    """``revivify tserver wipe --fs-root DIR [--yes] [--json]``."""
    parser = Parser(prog=WIPE_PROG, parents=[json_flag()],
                     description="Clear a stopped tablet server's directory (instance file, "
                                 "superblocks, cmeta, WALs, data blocks, quarantine) so that "
                                 "its next start formats it with a new UUID. Keeps DIR/LOCK "
                                 "and DIR/traces (the old UUID's traces, history the trace "
                                 "checker needs). Refuses while a server runs on DIR, and on "
                                 "a directory that is not a revivify data directory.")
    parser.add_argument("--fs-root", required=True, metavar="DIR",
                        help="the tablet server's directory (its --fs-root)")
    parser.add_argument("--yes", action="store_true",
                        help="do not ask for confirmation (required without a terminal)")
    args = parse_args(parser, argv)
    if isinstance(args, int):
        return args
    from revivify.impl.storage.dirlock import lock_directory
    from revivify.impl.storage.errors import DirectoryLocked
    from revivify.impl.storage.offline import check_wipe, wipe_directory

    from .local_replica import _layout, _Refused, _run

    def work() -> Outcome:
        layout = _layout(args.fs_root)
        check = check_wipe(layout)
        if not check.is_data_directory:
            why = (f"its instance file does not verify ({check.instance_problem.error})"
                   if check.instance_problem else "it has no instance file")
            raise _Refused(f"{layout.root} is not a revivify data directory: {why} and it "
                           f"holds {', '.join(check.unknown[:5])}"
                           f"{', ...' if len(check.unknown) > 5 else ''}; refusing to wipe it",
                           1)
        if not check.to_remove:
            doc = {"fs_root": layout.root, "old_uuid": None, "removed": None,
                   "kept": list(check.kept + check.unknown)}
            return Outcome(0, doc, f"{layout.root}: nothing to wipe (not formatted)")
        if not args.yes and not sys.stdin.isatty():
            raise _Refused("refusing to wipe without --yes (no terminal to confirm on)", 2)
        try:
            lock = lock_directory(layout.root)
        except DirectoryLocked as exc:
            raise _Refused(f"{exc}: stop the server first", 1) from None
        with lock:
            if not args.yes:
                uuid = check.instance.server_uuid if check.instance else None
                if not _confirm(layout.root, uuid):
                    raise _Refused("not confirmed; nothing was removed", 1)
            check = check_wipe(layout)  # again, under the lock
            if not check.is_data_directory:
                raise _Refused(f"{layout.root} changed: it is no longer a revivify data "
                               "directory; refusing to wipe it", 1)
            result = wipe_directory(layout, check)
        complaint = None
        if check.instance_problem is not None:
            complaint = (f"note: the instance file did not verify "
                         f"({check.instance_problem.error}); the old UUID is unknown")
        return Outcome(0, _wipe_doc(result), _wipe_text(result), complaint)

    return _run(WIPE_PROG, args, work)
