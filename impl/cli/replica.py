"""``revivify replica ...``: one server's replicas, in the manner of ``kudu remote_replica``.

  revivify replica list --tserver HOST:PORT [--json]
  revivify replica delete --tserver HOST:PORT --tablet ID [--mode tombstone|deleted]
                          [--cas-config-index N] [--json]

``list`` prints every replica the server knows with its state (RUNNING, FAILED with its
reason, TOMBSTONED), last OpId, term and vote; with --json ``{"replicas": [{"tablet_id",
"state", "reason", "last_opid", "term", "voted_for"}, ...]}``. ``delete`` tombstones a
replica (its cmeta and last logged OpId are kept: it goes on voting); a replica whose
committed config index is above ``--cas-config-index`` is not deleted (exit 1). Exit codes
and errors as every admin command (impl/cli/admin.py).
"""

from __future__ import annotations

from typing import Any

from revivify.impl.client import delete_replica, server_status

from .admin import Outcome, _address, _common, _execute, _non_negative_int, _parse, _Parser


def replica_main(argv: list[str]) -> int:
    parser = _Parser(prog="revivify replica", description="one tablet server's replicas")
    sub = parser.add_subparsers(dest="cmd", required=True, metavar="{list,delete}")
    listing = sub.add_parser("list", parents=[_common()], help="list a server's replicas",
                             description="Every replica on the server: state (RUNNING, "
                                         "FAILED with its reason, TOMBSTONED), last OpId, "
                                         "term and vote.")
    listing.add_argument("--tserver", type=_address, required=True, metavar="HOST:PORT",
                         help="the server to ask")
    delete = sub.add_parser("delete", parents=[_common()], help="delete (tombstone) a replica",
                            description="Tombstone the replica: its data and WAL move to "
                                        "the quarantine; its cmeta and last OpId stay, and it "
                                        "keeps voting.")
    delete.add_argument("--tserver", type=_address, required=True, metavar="HOST:PORT",
                        help="the server holding the replica")
    delete.add_argument("--tablet", required=True, metavar="ID", help="the tablet's id")
    delete.add_argument("--mode", choices=("tombstone", "deleted"), default="tombstone",
                        help="tombstone (default) keeps the cmeta and votes on; deleted also "
                             "drops the cmeta (the table was dropped)")
    delete.add_argument("--cas-config-index", type=_non_negative_int, default=None,
                        metavar="N", help="refuse if the replica's committed config index "
                                          "is above N")
    args = _parse(parser, argv)
    if isinstance(args, int):
        return args

    if args.cmd == "list":
        async def list_work() -> Outcome:
            reply = await server_status(args.tserver)
            rows: list[dict[str, Any]] = [
                {"tablet_id": r.tablet_id, "state": r.state, "reason": r.reason,
                 "last_opid": list(r.last_opid), "term": r.term, "voted_for": r.voted_for}
                for r in reply.replicas]
            text = "\n".join(
                f"{r['tablet_id']}  {r['state']:<10}  term {r['term']:<4} "
                f"last {r['last_opid'][0]}.{r['last_opid'][1]:<8} "
                f"vote {r['voted_for'] or '-'}"
                + (f"  ({r['reason']})" if r["reason"] else "") for r in rows) \
                or "no replicas"
            return Outcome(0, {"replicas": rows}, text)
        return _execute("revivify replica list", args, list_work)

    async def delete_work() -> Outcome:
        await delete_replica(args.tserver, args.tablet, args.mode.upper(),
                             args.cas_config_index)
        return Outcome(0, {"tablet_id": args.tablet, "state": "TOMBSTONED"},
                       f"tablet {args.tablet} tombstoned on {args.tserver}")
    return _execute("revivify replica delete", args, delete_work)


__all__ = ["replica_main"]
