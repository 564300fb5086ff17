"""``revivify copy ...``: the tablet copies running on a server.

  revivify copy list --tserver HOST:PORT [--json]
  revivify copy cancel --tserver HOST:PORT --tablet ID [--json]

``copy list`` shows each copy running on a server (a table) with its phase, bytes done,
total and rate; ``copy cancel`` stops one (the replica becomes a tombstone). Starting a
copy is ``replica copy`` (replica.py). Exit codes and errors as every admin command
(common.py).
"""

from __future__ import annotations

from revivify.impl.client import cancel_copy, list_copies
from revivify.impl.client.documents import copy_info_doc
from revivify.impl.tserver.api import CopyInfo

from . import render
from .common import Outcome, Parser, address_arg, common_flags, execute, parse_args


def _copy_list_text(copies: list[CopyInfo]) -> str:
    """``copy list``: a row per copy (sizes in MiB, as in the progress lines)."""
    mb = 1 << 20
    return render.table(
        ["TABLET", "PHASE", "DONE MB", "TOTAL MB", "MB/S", "FILES", "FROM", "RETRIES",
         "ERROR"],
        [[c.tablet_id, c.phase, f"{c.bytes_done / mb:.1f}", f"{c.total_bytes / mb:.1f}",
          f"{c.rate_bytes_per_second / mb:.1f}", f"{c.files_done}/{c.files_total}",
          c.source_address, c.retries, c.error] for c in copies])


def copy_main(argv: list[str]) -> int:
    parser = Parser(prog="revivify copy", description="tablet copies running on a server")
    sub = parser.add_subparsers(dest="cmd", required=True, metavar="{list,cancel}")
    listing = sub.add_parser("list", parents=[common_flags()], help="list running copies",
                             description="Each copy running on the server (the destination) "
                                         "with its phase, bytes done, total and rate.")
    listing.add_argument("--tserver", type=address_arg, required=True, metavar="HOST:PORT",
                         help="the server to ask")
    cancel = sub.add_parser("cancel", parents=[common_flags()], help="cancel a copy",
                            description="Cancel the copy: the replica becomes a tombstone "
                                        "with its previous last OpId and cmeta.")
    cancel.add_argument("--tserver", type=address_arg, required=True, metavar="HOST:PORT",
                        help="the server running the copy")
    cancel.add_argument("--tablet", required=True, metavar="ID", help="the tablet's id")
    args = parse_args(parser, argv)
    if isinstance(args, int):
        return args
    if args.cmd == "list":
        async def list_work() -> Outcome:
            reply = await list_copies(args.tserver)
            rows = [copy_info_doc(c) for c in reply.copies]
            text = _copy_list_text(reply.copies) if reply.copies else \
                f"no copies running (at most {reply.max_concurrent} at once)"
            return Outcome(0, {"copies": rows, "max_concurrent": reply.max_concurrent}, text)
        return execute("revivify copy list", args, list_work)

    async def cancel_work() -> Outcome:
        await cancel_copy(args.tserver, args.tablet)
        return Outcome(0, {"tablet_id": args.tablet, "cancelled": True},
                       f"copy of {args.tablet} on {args.tserver} cancelled")
    return execute("revivify copy cancel", args, cancel_work)
