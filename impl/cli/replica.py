"""``revivify replica ...``: one server's replicas, in the manner of ``kudu remote_replica``.

  revivify replica list --tserver HOST:PORT [--json]
  revivify replica delete --tserver HOST:PORT --tablet ID [--mode tombstone|deleted]
                          [--cas-config-index N] [--json]
  revivify replica copy --from HOST:PORT --to HOST:PORT --tablet ID [--wait] [--json]
  revivify copy list --tserver HOST:PORT [--json]
  revivify copy cancel --tserver HOST:PORT --tablet ID [--json]

``list`` prints every replica the server knows with its lifecycle state (STARTING, RUNNING,
FAILED with its reason, COPYING, DELETING, TOMBSTONED: what the server is doing with the
replica, not the superblock's data state READY / DELETED / COPYING that ``local-replica
list`` shows), role, term, vote, last OpId, committed index and committed config index;
with --json ``{"replicas": [...]}``, each replica the same document as in ``tserver status
--json`` (the replica vocabulary ``uuid``, ``address``, ``member_type``, ``role``,
``live``; then ``tablet_id``, ``state``, ``reason``, ``term``, ``voted_for``,
``leader_uuid``, ``last_opid``, ``commit_index``, ``applied_index``, ``config_index``,
``peers``). ``delete`` tombstones a
replica (its cmeta and last logged OpId are kept: it goes on voting); a replica whose
committed config index is above ``--cas-config-index`` is not deleted (exit 1); ``--mode
deleted`` also removes the cmeta and the superblock (the table was dropped). ``copy`` has
the destination copy the tablet from the source now (StartTabletCopy on an operator's
behalf; a READY replica there is tombstoned first); with ``--wait`` it shows the copy's
progress until it ends: on a terminal a live bar on stderr (phase, bytes done of the
total, rate, elapsed: render.progress), and in either case a line on stderr when the phase,
the retry count or the error changes; with ``--json`` nothing on stderr, and at the end
``{"tablet_id", "state", "bytes"}`` (the replica's lifecycle state there: exit 0 if RUNNING).
``copy list`` shows each copy running on a server (a table) with its phase, bytes done,
total and rate; ``copy cancel`` stops one (the replica becomes a tombstone).
Exit codes and errors as every admin command (impl/cli/common.py).
"""

from __future__ import annotations

import argparse
from typing import Any

import trio

from revivify.impl.client import (
    copy_replica,
    delete_replica,
    list_copies,
    server_status,
)
from revivify.impl.tserver.api import CopyInfo, ReplicaInfo

from . import render
from .common import (
    Outcome,
    Parser,
    address_arg,
    common_flags,
    execute,
    non_negative_int,
    parse_args,
)


def _replica_parser() -> Parser:
    """The parser of ``revivify replica``: list, delete, copy."""
    parser = Parser(prog="revivify replica", description="one tablet server's replicas")
    sub = parser.add_subparsers(dest="cmd", required=True, metavar="{list,delete,copy}")
    listing = sub.add_parser("list", parents=[common_flags()], help="list a server's replicas",
                             description="Every replica on the server: its lifecycle "
                                         "state (STARTING, RUNNING, FAILED with its reason, "
                                         "COPYING, DELETING, TOMBSTONED), role, term, vote, "
                                         "last OpId, committed index and config index.")
    listing.add_argument("--tserver", type=address_arg, required=True, metavar="HOST:PORT",
                         help="the server to ask")
    delete = sub.add_parser("delete", parents=[common_flags()], help="delete (tombstone) a replica",
                            description="Tombstone the replica: its data and WAL move to "
                                        "the quarantine; its cmeta and last OpId stay, and it "
                                        "keeps voting.")
    delete.add_argument("--tserver", type=address_arg, required=True, metavar="HOST:PORT",
                        help="the server holding the replica")
    delete.add_argument("--tablet", required=True, metavar="ID", help="the tablet's id")
    delete.add_argument("--mode", choices=("tombstone", "deleted"), default="tombstone",
                        help="tombstone (default) keeps the cmeta and votes on; deleted also "
                             "drops the cmeta (the table was dropped)")
    delete.add_argument("--cas-config-index", type=non_negative_int, default=None,
                        metavar="N", help="refuse if the replica's committed config index "
                                          "is above N")
    copy = sub.add_parser("copy", parents=[common_flags()], help="copy a replica between servers",
                          description="Have the destination copy the tablet from the source "
                                      "now (a READY replica there is tombstoned first).")
    copy.add_argument("--from", dest="source", type=address_arg, required=True,
                      metavar="HOST:PORT", help="the server to copy from (READY replica)")
    copy.add_argument("--to", dest="destination", type=address_arg, required=True,
                      metavar="HOST:PORT", help="the server to copy to")
    copy.add_argument("--tablet", required=True, metavar="ID", help="the tablet's id")
    copy.add_argument("--wait", action="store_true",
                      help="show progress until the copy ends (exit 1 if it failed); "
                           "without --deadline it waits as long as the copy takes")
    return parser


def replica_main(argv: list[str]) -> int:
    args = parse_args(_replica_parser(), argv)
    if isinstance(args, int):
        return args
    if args.cmd == "copy":
        if args.wait and "--deadline" not in argv:
            args.deadline = 24 * 3600.0  # --wait: as long as the copy takes
        return execute("revivify replica copy", args, lambda: _replica_copy_work(args))
    if args.cmd == "list":
        return execute("revivify replica list", args, lambda: _replica_list_work(args))
    return execute("revivify replica delete", args, lambda: _replica_delete_work(args))


async def _replica_copy_work(args: argparse.Namespace) -> Outcome:
    """Start the copy; with --wait, show its progress and exit 1 unless the replica ends
    RUNNING."""
    expected = await copy_replica(args.source, args.destination, args.tablet)
    if not args.wait:
        return Outcome(0, {"tablet_id": args.tablet, "state": "COPYING",
                           "expected_state": expected},
                       f"tablet {args.tablet}: copy from {args.source} to "
                       f"{args.destination} started (its data state there was "
                       f"{expected})")
    with render.progress(f"copying {args.tablet}", 0, enabled=not args.json,
                         unit="bytes") as shown:
        last = await _watch_copy(args.destination, args.tablet, shown,
                                 lines=not args.json)
    state = await _settled_state(args.destination, args.tablet)
    ok = state == "RUNNING"
    return Outcome(0 if ok else 1, {"tablet_id": args.tablet, "state": state,
                                    "bytes": last.bytes_done if last else 0},
                   f"tablet {args.tablet} on {args.destination}: {state}"
                   + ("" if ok else " (the copy failed, or the replica was deleted "
                                     "after it, e.g. by the masters for not being a "
                                     "member: see the server's log)"))


async def _replica_list_work(args: argparse.Namespace) -> Outcome:
    reply = await server_status(args.tserver)
    rows: list[dict[str, Any]] = [render.replica_doc(r, reply.uuid, reply.address)
                                  for r in reply.replicas]
    return Outcome(0, {"replicas": rows}, _replica_list_text(reply.replicas))


async def _replica_delete_work(args: argparse.Namespace) -> Outcome:
    await delete_replica(args.tserver, args.tablet, args.mode.upper(),
                         args.cas_config_index)
    return Outcome(0, {"tablet_id": args.tablet, "state": "TOMBSTONED"},
                   f"tablet {args.tablet} tombstoned on {args.tserver}")


def _replica_list_text(replicas: list[ReplicaInfo]) -> str:
    if not replicas:
        return "no replicas"
    return render.table(
        ["TABLET", "STATE", "ROLE", "TERM", "VOTE", "LAST", "COMMITTED", "CONFIG", "MEMBER"],
        [[r.tablet_id, r.state if not r.reason else f"{r.state} ({r.reason})",
          render.member_role(r.role, r.member_type),
          r.term, r.voted_for, render.opid(r.last_opid), r.commit_index, r.config_index,
          r.member_type] for r in replicas])


COPY_POLL_SECONDS = 0.5


async def _watch_copy(destination: str, tablet_id: str, shown: render.Progress, *,
                      lines: bool) -> CopyInfo | None:
    """Follow the copy of ``tablet_id`` on ``destination`` (ListCopies every half second)
    until the server lists it no more; its last listing (None: it had ended already).

    The bar (a terminal) shows the phase, bytes done of the total and the rate at every
    look; a line (``lines``; above the bar, or alone in a pipe) is printed only when
    something an operator would act on changes: the phase, the retry count, the error.
    Polled, not pushed: a copy of a few seconds is seen a few times, which is all a
    progress display needs, and ListCopies is cheap for the server."""
    last: CopyInfo | None = None
    said: tuple[str, int, str | None] | None = None
    while True:
        copies = {c.tablet_id: c for c in (await list_copies(destination)).copies}
        info = copies.get(tablet_id)
        if info is None:
            return last
        last = info
        shown.describe(f"copying {tablet_id} ({info.phase})")
        shown.set_total(max(info.total_bytes, info.bytes_done))
        shown.update(info.bytes_done)
        now = (info.phase, info.retries, info.error)
        if lines and now != said:
            shown.note(f"  {_progress_line(info)}")
            said = now
        await trio.sleep(COPY_POLL_SECONDS)


# The states a replica passes through between a copy's end and its verdict.
UNSETTLED = frozenset({"COPYING", "STARTING"})
SETTLE_SECONDS = 30.0  # at most this long after the copy left the list


async def _settled_state(destination: str, tablet_id: str) -> str:
    """The replica's lifecycle state on ``destination`` once the copy's end has been
    applied: RUNNING (it started), TOMBSTONED (the copy failed, or the replica was deleted
    since), or whatever it is after SETTLE_SECONDS.

    Why wait: the server drops a copy from ListCopies when its download ends, and only then
    applies the end to the replica (copy_abort and the tombstone, or the replica's start),
    so a look right after the copy left the list can still see COPYING, then STARTING."""
    give_up = trio.current_time() + SETTLE_SECONDS
    while True:
        status = await server_status(destination)
        state = next((r.state for r in status.replicas if r.tablet_id == tablet_id),
                     "DOES_NOT_EXIST")
        if state not in UNSETTLED or trio.current_time() >= give_up:
            return state
        await trio.sleep(COPY_POLL_SECONDS / 5)


def _progress_line(c: CopyInfo) -> str:
    mb = 1 << 20
    return (f"{c.tablet_id}  {c.phase:<8} {c.bytes_done / mb:8.1f} / {c.total_bytes / mb:.1f} "
            f"MB  {c.rate_bytes_per_second / mb:6.1f} MB/s  files {c.files_done}/"
            f"{c.files_total}  from {c.source_address}"
            + (f"  retries {c.retries}" if c.retries else "")
            + (f"  ({c.error})" if c.error else ""))


__all__ = ["replica_main"]
