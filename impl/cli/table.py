"""``revivify table ...``: tables, through the leader master (or any fresh one).

  revivify table create NAME --masters ... [--tablets N] [--replicas R]
  revivify table delete NAME --masters ...
  revivify table alter NAME --masters ... [--add-column COL[:TYPE]]... [--drop-column COL]...
                                           [--rename NEW]
  revivify table list --masters ... [--freshness SECONDS]
  revivify table describe NAME --masters ... [--freshness SECONDS]

Every ``--masters HOST:PORT,...`` may be ``--root DIR`` instead: the masters of the local
cluster in DIR (its cluster.json, written by ``revivify cluster start``).
Every command takes ``--json`` and ``--deadline SECONDS`` (common.py). The catalog commands
go to the ready leader master (impl/client/master.py: hints followed, retried until the
deadline), except ``table list`` and ``table describe`` with ``--freshness S``: then any
master whose applied catalog is known to be no older than S seconds answers (a follower
read, KUDU-500; impl/master/queries.py), and the answer says which master served it and
how stale it may be (text: a last line "served by ..."; --json: "served_by"). Exit codes:
0 success; 1 the master refused the request (no such table, a name already taken, not
enough live tablet servers...); 2 bad usage or no master answered.

``list`` and ``describe`` are reads: they try the blocking fast path first (oneshot.py
`master_read`: the leader found as the trio client finds it, no trio imported), with half
the deadline, and take the trio client's path for anything but a plain answer. The
document and the text are built from the reply by the same functions on either path.
"""

from __future__ import annotations

import argparse
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from revivify.impl.client.documents import table_info_doc, table_locations_doc
from revivify.impl.master import api
from revivify.impl.tablet.columns import COLUMN_TYPES, Column

from . import render
from .common import (
    Outcome,
    Parser,
    call_timeout,
    client_options,
    common_flags,
    execute,
    fast_first,
    masters_flags,
    parse_args,
    positive_float,
    positive_int,
    print_outcome,
)

if TYPE_CHECKING:
    from revivify.impl.client import ClientOptions

# The trio client (impl/client/master.py master_call) is imported by the work functions
# that use it, and `secrets` (hashlib, hmac, random: a request id) by the writes: `list` and
# `describe` answered by the fast path never load them (issue 31;
# tests/cli/test_import_budget.py).


def _column_arg(text: str) -> Column:
    """COL or COL:TYPE (a non-key column; the master validates the name)."""
    name, _, kind = text.partition(":")
    kind = kind or "binary"
    if not name or kind not in COLUMN_TYPES:
        raise argparse.ArgumentTypeError(
            f"expected COL or COL:TYPE with TYPE one of {', '.join(COLUMN_TYPES)}, got "
            f"{text!r}")
    return Column(name, kind)  # msgspec checks the Literal on decode; checked above


def _table_parser() -> Parser:
    """The parser of ``revivify table``: create, delete, alter, list, describe."""
    parser = Parser(prog="revivify table", description="table commands (via the masters)")
    sub = parser.add_subparsers(dest="cmd", required=True,
                                metavar="{create,delete,alter,list,describe}")
    create = sub.add_parser("create", parents=[common_flags(), masters_flags()],
                            help="create a hash-partitioned table")
    create.add_argument("name")
    create.add_argument("--tablets", type=positive_int, default=1, metavar="N")
    create.add_argument("--replicas", type=positive_int, default=3, metavar="R")
    delete = sub.add_parser("delete", parents=[common_flags(), masters_flags()],
                            help="delete a table and its replicas")
    delete.add_argument("name")
    alter = sub.add_parser("alter", parents=[common_flags(), masters_flags()],
                           help="add or drop columns (a schema version bump), or rename",
                           description="Alter a table: a schema change bumps its schema "
                                       "version and the table is ALTERING until every "
                                       "tablet has the new version. Prints the table id "
                                       "and the new schema version.")
    alter.add_argument("name")
    alter.add_argument("--add-column", action="append", default=[], type=_column_arg,
                       metavar="COL[:TYPE]",
                       help=f"add a column (TYPE one of {', '.join(COLUMN_TYPES)}; default "
                            "binary); repeatable")
    alter.add_argument("--drop-column", action="append", default=[], metavar="COL",
                       help="drop a column (not the key); repeatable")
    alter.add_argument("--rename", default=None, metavar="NEW", help="the table's new name")
    listing = sub.add_parser("list", parents=[common_flags(), masters_flags()],
                             help="the live tables")
    describe = sub.add_parser("describe", parents=[common_flags(), masters_flags()],
                              help="a table's tablets, replicas, roles and leaders")
    describe.add_argument("name")
    for read in (listing, describe):
        read.add_argument("--freshness", type=_freshness_arg, default=None,
                          metavar="SECONDS",
                          help="let any master answer from a catalog known to be at most "
                               "this old (a follower read); default: the leader only")
    return parser


def table_main(argv: list[str]) -> int:
    args = parse_args(_table_parser(), argv)
    if isinstance(args, int):
        return args
    prog = f"revivify table {args.cmd}"
    freshness: float | None = getattr(args, "freshness", None)
    spent = 0.0
    if args.cmd in ("list", "describe"):
        fast, spent = fast_first(args, lambda seconds: _read_fast(args, freshness, seconds))
        if fast is not None:
            return print_outcome(prog, args, fast)
    options = client_options(args, spent)
    works: dict[str, Callable[[], Awaitable[Outcome]]] = {
        "create": lambda: _create_table_work(args, options),
        "delete": lambda: _delete_table_work(args, options),
        "alter": lambda: _alter_table_work(args, options),
        "list": lambda: _list_tables_work(args, options, freshness),
        "describe": lambda: _describe_table_work(args, options, freshness),
    }
    return execute(prog, args, works[args.cmd], spent=spent)


def _read_fast(args: argparse.Namespace, freshness: float | None, seconds: float
               ) -> Outcome | None:
    """``list`` or ``describe`` through oneshot.py; None for the trio path."""
    from . import oneshot

    follower_read = freshness is not None
    if args.cmd == "list":
        listed = oneshot.master_read(args.masters, api.MASTER_LIST_TABLES,
                                     api.ListTablesRequest(freshness), api.TableList,
                                     call_timeout=call_timeout(args), seconds=seconds,
                                     any_master=follower_read)
        return None if listed is None else _list_outcome(listed, follower_read)
    located = oneshot.master_read(args.masters, api.MASTER_TABLE_LOCATIONS,
                                  api.TableLocationsRequest(args.name, freshness),
                                  api.TableLocationsReply, call_timeout=call_timeout(args),
                                  seconds=seconds, any_master=follower_read)
    return None if located is None else _describe_outcome(located, follower_read)


async def _create_table_work(args: argparse.Namespace, options: ClientOptions) -> Outcome:
    import secrets

    from revivify.impl.client.master import master_call

    request = api.CreateTableRequest(args.name, [], args.tablets, args.replicas,
                                     request_id=secrets.token_hex(16))
    reply = await master_call(args.masters, api.MASTER_CREATE_TABLE, request,
                              api.TableCreatedReply, options)
    doc = {"table_id": reply.table_id, "tablets": list(reply.tablet_ids)}
    return Outcome(0, doc, f"table {args.name} {reply.table_id}: "
                           f"{len(reply.tablet_ids)} tablets")


async def _delete_table_work(args: argparse.Namespace, options: ClientOptions) -> Outcome:
    import secrets

    from revivify.impl.client.master import master_call

    # The request id makes a retry after a lost reply (inside master_call) answer OK.
    request = api.DeleteTableRequest(args.name, request_id=secrets.token_hex(16))
    reply = await master_call(args.masters, api.MASTER_DELETE_TABLE, request,
                              api.TableDeletedReply, options)
    return Outcome(0, {"table_id": reply.table_id},
                   f"table {args.name} {reply.table_id} deleted")


async def _alter_table_work(args: argparse.Namespace, options: ClientOptions) -> Outcome:
    import secrets

    from revivify.impl.client.master import master_call

    request = api.AlterTableRequest(args.name, list(args.add_column),
                                    list(args.drop_column), args.rename,
                                    request_id=secrets.token_hex(16))
    reply = await master_call(args.masters, api.MASTER_ALTER_TABLE, request,
                              api.TableAlteredReply, options)
    return Outcome(0, {"table_id": reply.table_id,
                       "schema_version": reply.schema_version},
                   f"table {args.rename or args.name} {reply.table_id}: schema version "
                   f"{reply.schema_version}")


async def _list_tables_work(args: argparse.Namespace, options: ClientOptions,
                            freshness: float | None) -> Outcome:
    """The live tables; with ``freshness``, any master may answer (a follower read) and
    the answer says which one did."""
    from revivify.impl.client.master import master_call

    follower_read = freshness is not None
    reply = await master_call(args.masters, api.MASTER_LIST_TABLES,
                              api.ListTablesRequest(freshness), api.TableList, options,
                              any_master=follower_read)
    return _list_outcome(reply, follower_read)


def _list_outcome(reply: api.TableList, follower_read: bool) -> Outcome:
    tables = [table_info_doc(t) for t in reply.tables]
    text = "\n".join(f"{t['name']} {t['table_id']} {t['state']} "
                     f"v{t['schema_version']} tablets={t['tablets']}" for t in tables)
    if tables and render.is_terminal():  # a person: a table (scripts keep the lines)
        text = render.table(["NAME", "TABLE ID", "STATE", "VERSION", "TABLETS"], [
            [t["name"], t["table_id"], t["state"], f"v{t['schema_version']}",
             t["tablets"]] for t in tables])
    doc: dict[str, Any] = {"tables": tables}
    if follower_read:
        doc["served_by"] = _served_doc(reply.served_by)
        text = "\n".join(filter(None, [text, _served_text(reply.served_by)]))
    return Outcome(0, doc, text)


async def _describe_table_work(args: argparse.Namespace, options: ClientOptions,
                               freshness: float | None) -> Outcome:
    """A table's tablets, replicas, roles and leaders (a follower read with
    ``freshness``, as in _list_tables_work)."""
    from revivify.impl.client.master import master_call

    follower_read = freshness is not None
    r = await master_call(args.masters, api.MASTER_TABLE_LOCATIONS,
                          api.TableLocationsRequest(args.name, freshness),
                          api.TableLocationsReply, options, any_master=follower_read)
    return _describe_outcome(r, follower_read)


def _describe_outcome(r: api.TableLocationsReply, follower_read: bool) -> Outcome:
    doc = table_locations_doc(r)
    if follower_read:
        doc["served_by"] = _served_doc(r.served_by)
    lines = [render.table_locations_text(r)]
    if follower_read:
        lines.append(_served_text(r.served_by))
    return Outcome(0, doc, "\n".join(filter(None, lines)))


def _freshness_arg(text: str) -> float:
    """SECONDS >= 0 (0: only a master that knows it is up to date, in practice the leader)."""
    if text.strip() in ("0", "0.0"):
        return 0.0
    return positive_float(text)


def _served_doc(served: api.ServedBy | None) -> dict[str, Any] | None:
    if served is None:
        return None
    return {"uuid": served.uuid, "leader": served.leader, "staleness": served.staleness,
            "applied_index": served.applied_index}


def _served_text(served: api.ServedBy | None) -> str:
    if served is None:
        return ""
    who = "the leader" if served.leader else "a follower"
    return (f"served by {served.uuid} ({who}), at most {served.staleness:.3f} s stale, "
            f"catalog index {served.applied_index}")
