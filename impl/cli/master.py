"""``revivify master ...``: the masters, every verb of them.

  revivify master run ...                    (the master; revivify.impl.servers.master)
  revivify master status --master HOST:PORT
  revivify master list --masters HOST:PORT,...
  revivify master add HOST:PORT --masters ... [--cas INDEX]
  revivify master remove UUID --masters ... [--cas INDEX]

Every ``--masters HOST:PORT,...`` may be ``--root DIR`` instead: the masters of the local
cluster in DIR (its cluster.json, written by ``revivify cluster start``). Every command
takes ``--json`` and ``--deadline SECONDS`` (common.py). ``status`` is one call to one
master and takes the fast path (oneshot.py, no trio) when the master answers plainly, the
client library otherwise (its errors are the reference); so does ``list`` when every
master it asks answers plainly (oneshot.py `master_statuses`). ``add`` and ``remove`` are
described in moves.py's docstring, with ``tserver retire``. Exit codes: 0 success; 1 the
master refused the request; 2 bad usage or no master answered.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import time
from typing import TYPE_CHECKING, Any

from . import render
from .common import (
    BACKSTOP_SLACK,
    DEFAULT_CALL_TIMEOUT,
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
    masters_flags,
    non_negative_int,
    parse_args,
    print_outcome,
)

CLIENT_UUID = "revivify-client"  # impl/client/master.py's: whom the calls are from

if TYPE_CHECKING:
    from revivify.impl.master.api import MasterStatus
MASTER_MAIN = "revivify.impl.servers.master"


# ---------------------------------------------------------------------------- master


def master_main(argv: list[str]) -> int:
    if argv and argv[0] == "run":
        module = importlib.import_module(MASTER_MAIN)
        code: int = module.run_main(argv[1:])
        return code
    parser = Parser(prog="revivify master", description="master commands")
    sub = parser.add_subparsers(dest="cmd", required=True, metavar="{run,status,list}")
    sub.add_parser("run", add_help=False,
                   help="run a master ('revivify master run --help' for its flags)")
    status = sub.add_parser("status", parents=[common_flags()],
                            help="one master's role, term, leader and readiness")
    status.add_argument("--master", type=address_arg, required=True, metavar="HOST:PORT")
    sub.add_parser("list", parents=[common_flags(), masters_flags(), call_timeout_flag()],
                   help="the catalog's Raft config: every member, its member type, role, "
                        "term and whether it answers")
    args = parse_args(parser, argv)
    if isinstance(args, int):
        return args
    prog = f"revivify master {args.cmd}"
    spent = 0.0
    if args.cmd == "status":
        fast = _status_fast(prog, args)
        if fast is not None:
            return fast
    else:
        listed, spent = fast_first(args, lambda seconds: _list_fast(args, seconds))
        if listed is not None:
            return print_outcome(prog, args, listed)
    from revivify.impl.client.master import master_config, master_status

    async def status_work() -> Outcome:
        st = await master_status(args.master)
        doc = _status_doc(st)
        return Outcome(0, doc, _status_text(doc))

    async def list_work() -> Outcome:
        # The catalog's Raft config, every member (issue 31), not just the addresses named.
        view = await master_config(args.masters, client_options(args, spent))
        return _list_outcome(args, view.config, view.answers)

    return execute(prog, args, status_work if args.cmd == "status" else list_work,
                   spent=spent)


def _list_fast(args: argparse.Namespace, seconds: float) -> Outcome | None:
    """``master list`` through oneshot.py, when every master named and every member of the
    newest config they name answers (master_config's two rounds, each at once); None for
    the trio path, which says what the others did."""
    from . import oneshot

    deadline = time.monotonic() + seconds  # both rounds together
    answers = oneshot.master_statuses(args.masters, call_timeout=call_timeout(args),
                                      seconds=seconds)
    if answers is None:
        return None
    config = max((st for st in answers.values() if st.members),
                 key=lambda st: st.masters_index, default=None)
    if config is not None:
        members = [m.address for m in config.members if m.address not in answers]
        more = oneshot.master_statuses(members, call_timeout=call_timeout(args),
                                       seconds=deadline - time.monotonic()) if members else {}
        if more is None:
            return None
        answers.update(more)
    return _list_outcome(args, config, dict(answers))


def _list_outcome(args: argparse.Namespace, config: MasterStatus | None,
                  answers: dict[str, MasterStatus | str]) -> Outcome:
    """``master list``'s outcome: ``config`` the answer naming the newest committed config
    (None: none did), ``answers`` every master asked, its status or why it gave none
    (impl/client/master.py MasterConfigView)."""
    from revivify.impl.client.documents import master_list_docs
    from revivify.impl.client.errors import masters_unreachable_text

    rows = master_list_docs(config, answers)
    outside = "not a member" if config is not None else None  # config unknown
    cells = [[r["address"], r["uuid"], r["member_type"] or outside,
              r["role"], r["term"], "yes" if r["live"] else "DEAD"] for r in rows]
    text = render.table(["ADDRESS", "UUID", "MEMBER", "ROLE", "TERM", "LIVE"], cells)
    errors = [f"{r['address']}: {r['error']}" for r in rows if r["error"]]
    if errors and not args.json:
        text += "\n" + "\n".join(errors)
    doc: dict[str, Any] = {"masters": rows,
                           "masters_index": config.masters_index
                           if config is not None else None}
    if any(r["live"] for r in rows):
        return Outcome(0, doc, text)
    return Outcome(2, doc, text, complaint=masters_unreachable_text(
        [(r["address"], r["error"] or "no answer") for r in rows]))


def _status_fast(prog: str, args: argparse.Namespace) -> int | None:
    """``master status`` through oneshot.py: the exit code, or None for the trio path. The
    client bounds the call by its default call timeout (NoAnswer), and by the deadline."""
    from revivify.impl.master.api import MASTER_STATUS, Empty, MasterStatus

    from . import oneshot

    deadline: float = args.deadline
    try:
        st = oneshot.call(args.master, CLIENT_UUID, MASTER_STATUS, Empty(), MasterStatus,
                          min(deadline + BACKSTOP_SLACK, DEFAULT_CALL_TIMEOUT))
    except oneshot.OutOfTime:
        if deadline + BACKSTOP_SLACK < DEFAULT_CALL_TIMEOUT:
            return fail(prog, f"no answer within the deadline of {deadline:g}s", 2)
        return fail(prog, f"cannot reach {args.master}: no answer within "
                          f"{DEFAULT_CALL_TIMEOUT:g}s", 2)
    if st is None:
        return None
    doc = _status_doc(st)
    return print_outcome(prog, args, Outcome(0, doc, _status_text(doc)))


def _status_text(doc: dict[str, Any]) -> str:
    """``master status``'s line: key=value, the catalog's config as address/member_type."""
    members = ",".join(f"{m['address']}/{m['member_type'] or '?'}" for m in doc["masters"])
    return " ".join(f"{k}={v}" if k != "masters" else f"masters={members}"
                    for k, v in doc.items())


def _status_doc(st: MasterStatus) -> dict[str, Any]:
    from revivify.impl.client.documents import master_status_doc

    return master_status_doc(st)


# ---------------------------------------------------------------------------- table


# ---------------------------------------------------------------------------- tserver list


# ---------------------------------------------------------------------------- tserver unregister




def _master_change(kind: str, argv: list[str]) -> int:
    prog = f"revivify master {kind}"
    parser = Parser(prog=prog, parents=[common_flags(), masters_flags(), call_timeout_flag()],
                    description="add a master (running with 'master run --join') to the "
                                "catalog's Raft config" if kind == "add" else
                                "remove a master from the catalog's Raft config")
    parser.add_argument("target", metavar="HOST:PORT" if kind == "add" else "UUID",
                        help="the new master's address" if kind == "add"
                        else "the master's UUID")
    parser.add_argument("--cas", type=non_negative_int, default=None, metavar="INDEX",
                        help="the committed config index this change was planned on")
    args = parse_args(parser, argv)
    if isinstance(args, int):
        return args
    from revivify.impl.client.errors import Rejected, ServerUnreachable
    from revivify.impl.client.master import master_status, open_master_client
    from revivify.impl.master import api
    from revivify.impl.rpc.address import parse_address

    if kind == "add":
        try:
            parse_address(args.target)
        except ValueError as exc:
            print(f"{prog}: {exc}", file=sys.stderr)
            return 2
        request = api.MasterChangeRequest(address=args.target, cas_config_index=args.cas)
        method = api.MASTER_ADD_MASTER
    else:
        request = api.MasterChangeRequest(uuid=args.target, cas_config_index=args.cas)
        method = api.MASTER_REMOVE_MASTER

    async def work() -> Outcome:
        options = client_options(args)
        if kind == "add":
            # The new master must be running (with --join) before the leader can copy the
            # catalog to it. Asked first, within one call timeout, so that a typo in the
            # address or a master not started yet is named at once, in one line, and not
            # after the whole deadline as a timeout of the call to the leader (which waits
            # on the new master's answer). Any answer will do, a refusal too (a joining
            # master may still be starting): only silence is named.
            try:
                await master_status(args.target, options)
            except Rejected:
                pass
            except ServerUnreachable as exc:
                return Outcome(2, {"address": args.target, "error": exc.message}, "",
                               f"no master answers at {args.target} ({exc.message}); start "
                               "it with 'revivify master run --join' first")
        async with open_master_client(list(args.masters), options=options) as client:
            reply = await client.call(method, request, api.MasterChangeReply)
        document = {"uuid": reply.uuid, "address": reply.address,
                    "config_index": reply.config_index, "already_done": reply.already_done}
        verb = "added" if kind == "add" else "removed"
        who = " ".join(filter(None, [reply.uuid, reply.address]))
        text = (f"master {who} was already "
                f"{'a member' if kind == 'add' else 'not a member'}"
                if reply.already_done else
                f"master {who} {verb} (config index "
                f"{reply.config_index})")
        return Outcome(0, document, text)

    return execute(prog, args, work)


def master_add_main(argv: list[str]) -> int:
    """``revivify master add HOST:PORT --masters ...`` (argv after 'add')."""
    return _master_change("add", argv)


def master_remove_main(argv: list[str]) -> int:
    """``revivify master remove UUID --masters ...`` (argv after 'remove')."""
    return _master_change("remove", argv)


__all__ = ["master_add_main", "master_main", "master_remove_main"]
