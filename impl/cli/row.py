"""``revivify row ...``: rows of a tablet, or of a table through the masters.

  revivify row put KEY (VALUE | --value-file FILE|-) | get KEY | delete KEY
             | scan [--start K] [--end K] [--limit N]
      each with --tservers ... --tablet ID, or --masters ... (or --root DIR) --table NAME
      (the key's tablet by hash; a scan of every tablet merged in key order); [--hex]

Every command takes ``--json``, ``--deadline SECONDS`` and ``--call-timeout SECONDS`` (as
the tablet commands: impl/cli/tablet.py). ``put`` takes its value from the command line, or
with ``--value-file FILE`` from a file, ``-`` being stdin (the bytes as they are: a value
with a newline or binary data needs no quoting; with ``--hex`` the file holds hex text).

Exit codes: 0 success; 1 a definite "no" (a key not found, an unknown tablet or table, the
leader refusing a write); 2 bad usage (bad hex, an unreadable --value-file) or nothing
reachable, or a write whose outcome is unknown.

A write (``row put``/``row delete``) that fails says which kind of failure it was: in its
message ("it may or may not have been applied" when an attempt may have been applied) and,
with ``--json``, in a document on stdout: ``{"key", "value" (put), "outcome", "error"}``
with ``"outcome": "unknown"`` (it may or may not have been applied: an attempt was cut off
after it was sent) or ``"failed"`` (it was not applied: refused before it was sent,
refused by the leader, or never sent to a server that could apply it).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import AsyncIterator
from typing import Any

import attrs

from revivify.impl.client import (
    ClientError,
    ClientOptions,
    Rejected,
    TableClient,
    TableNotFoundError,
    TabletClient,
    TabletNotFoundError,
    Unavailable,
    open_table_client,
    open_tablet_client,
)
from revivify.impl.client.errors import OUTCOME_FAILED, outcome_of
from revivify.impl.rpc import AppError

from . import render
from .common import (
    Outcome,
    Parser,
    UsageError,
    addresses_arg,
    call_timeout_flag,
    client_options,
    common_flags,
    execute,
    non_negative_int,
    one_line,
    parse_args,
)


def _row_target() -> Parser:
    """Where the rows are: ``--tservers ... --tablet ID`` (one tablet, no masters) or
    ``--masters ... --table NAME`` (a table's tablets, found through the masters)."""
    p = Parser(add_help=False)
    p.add_argument("--tservers", type=addresses_arg, default=None, metavar="HOST:PORT,...",
                   help="tablet servers to ask, comma-separated (with --tablet)")
    p.add_argument("--tablet", default=None, metavar="ID", help="the tablet's id")
    masters = p.add_mutually_exclusive_group()
    masters.add_argument("--masters", type=addresses_arg, default=None,
                         metavar="HOST:PORT,...",
                         help="the masters, comma-separated (with --table: each key goes "
                              "to the table's tablet for its hash bucket)")
    masters.add_argument("--root", dest="cluster_root", default=None, metavar="DIR",
                         help="instead of --masters: the masters of the local cluster in "
                              "DIR (DIR/cluster.json, written by 'revivify cluster start')")
    p.add_argument("--table", default=None, metavar="NAME", help="the table's name")
    return p


def _check_target(args: argparse.Namespace, prog: str) -> None:
    """Exactly one of the two forms of _row_target (UsageError otherwise)."""
    by_tablet = args.tservers is not None or args.tablet is not None
    by_table = args.masters is not None or args.table is not None
    if by_tablet and by_table:
        raise UsageError(f"{prog}: give either --tservers and --tablet, or --masters and "
                         "--table, not both")
    if by_table:
        if args.masters is None or args.table is None:
            given, wanted = (("--table", "--masters or --root") if args.table is not None
                             else ("--root" if args.cluster_root else "--masters", "--table"))
            raise UsageError(f"{prog}: {given} needs {wanted} (they go together)")
    elif args.tservers is None or args.tablet is None:
        raise UsageError(f"{prog}: the following arguments are required: --tservers and "
                         "--tablet, or --masters (or --root) and --table")


def _data(text: str, hex_mode: bool, what: str, prog: str) -> bytes:
    if hex_mode:
        try:
            return bytes.fromhex(text)
        except ValueError:
            raise UsageError(f"{prog}: {what} {text!r} is not valid hex") from None
    return text.encode("utf-8", "surrogateescape")


def _row_parser() -> Parser:
    """The parser of ``revivify row``: put, get, delete and scan, each with a target
    (`_row_target`), ``--hex`` and the common flags."""
    parser = Parser(prog="revivify row",
                    description="read and write rows of a tablet, or of a table through "
                                "the masters")
    sub = parser.add_subparsers(dest="cmd", required=True)
    data = Parser(add_help=False)
    data.add_argument("--hex", action="store_true",
                      help="keys and values are given and printed as hex (default: UTF-8 "
                           "text)")
    parents = [_row_target(), data, common_flags(), call_timeout_flag()]
    put = sub.add_parser("put", parents=parents, help="write a row",
                         description="Write VALUE at KEY (exactly once, at the leader).")
    put.add_argument("key", metavar="KEY")
    put.add_argument("value", metavar="VALUE")
    get = sub.add_parser("get", parents=parents, help="read a row",
                         description="Print the value at KEY (a linearizable read at the "
                                     "leader). Exit 1 if there is none.")
    get.add_argument("key", metavar="KEY")
    delete = sub.add_parser("delete", parents=parents, help="delete a row",
                            description="Delete the row at KEY (exactly once).")
    delete.add_argument("key", metavar="KEY")
    scan = sub.add_parser("scan", parents=parents, help="read a range of rows",
                          description="Print the rows with START <= key < END in key "
                                      "order, one 'KEY<TAB>VALUE' line each.")
    scan.add_argument("--start", default=None, metavar="KEY",
                      help="first key (inclusive; default: the first)")
    scan.add_argument("--end", default=None, metavar="KEY",
                      help="end key (exclusive; default: no end)")
    scan.add_argument("--limit", type=non_negative_int, default=None, metavar="N",
                      help="at most N rows (default: all)")
    return parser


@attrs.frozen
class _RowCommand:
    """One parsed ``revivify row`` command: the bytes it names (None where its form has
    none: a scan has no KEY, only a put a VALUE), whether keys and values are shown as
    hex, and the client's retry policy."""

    args: argparse.Namespace
    key: bytes | None
    value: bytes | None
    start: bytes | None
    end: bytes | None
    hex_mode: bool
    options: ClientOptions

    @property
    def writing(self) -> bool:
        return bool(self.args.cmd in ("put", "delete"))

    def show(self, data: bytes) -> str:
        return render.show_bytes(data, self.hex_mode)


def _row_command(args: argparse.Namespace, prog: str) -> _RowCommand:
    """The command's target checked and its bytes decoded (UsageError if not)."""
    hex_mode: bool = args.hex
    _check_target(args, prog)
    key = None if args.cmd == "scan" else _data(args.key, hex_mode, "KEY", prog)
    value = _data(args.value, hex_mode, "VALUE", prog) if args.cmd == "put" else None
    start = (None if args.cmd != "scan" or args.start is None
             else _data(args.start, hex_mode, "--start", prog))
    end = (None if args.cmd != "scan" or args.end is None
           else _data(args.end, hex_mode, "--end", prog))
    return _RowCommand(args, key, value, start, end, hex_mode, client_options(args))


def row_main(argv: list[str]) -> int:
    """``revivify row put | get | delete | scan``."""
    args = parse_args(_row_parser(), argv)
    if isinstance(args, int):
        return args
    prog = f"revivify row {args.cmd}"
    try:
        command = _row_command(args, prog)
    except UsageError as exc:
        print(one_line(str(exc)), file=sys.stderr)
        return 2
    return execute(prog, args, lambda: _row_work(command))


@contextlib.asynccontextmanager
async def _row_client(command: _RowCommand) -> AsyncIterator[TabletClient | TableClient]:
    """The tablet (--tservers --tablet) or the table (--masters --table): the same
    put/delete/get/scan, the same documents."""
    args = command.args
    if args.table is not None:
        async with open_table_client(args.masters, args.table,
                                     options=command.options) as table:
            yield table
    else:
        async with open_tablet_client(args.tservers, args.tablet,
                                      options=command.options) as tablet:
            yield tablet


async def _row_work(command: _RowCommand) -> Outcome:
    """The command's outcome; exit 1 when every server (or the masters) answered that the
    tablet or table is not there."""
    try:
        async with _row_client(command) as client:
            if command.writing:
                return await _row_write(command, client)
            return await _row_read(command, client)
    except (TabletNotFoundError, TableNotFoundError) as exc:
        if command.writing:
            return _row_write_failure(command, exc, 1)
        return Outcome(1, {"error": exc.message}, "", exc.message)


async def _row_write(command: _RowCommand, client: TabletClient | TableClient) -> Outcome:
    """A put or a delete. Exit 1 when the leader said no, 2 when a server answered
    strangely or the write was refused before it was sent or given up on."""
    key, value, show = command.key, command.value, command.show
    assert key is not None
    try:
        if command.args.cmd == "put":
            assert value is not None
            written = await client.put(key, value)
        else:
            written = await client.delete(key)
    except Rejected as exc:  # the leader said no, or a server answered strangely
        return _row_write_failure(command, exc, 1 if isinstance(exc.error, AppError) else 2)
    except (TabletNotFoundError, TableNotFoundError):
        raise  # (_row_work: exit 1)
    except ClientError as exc:  # refused before sending (InvalidRequest), or gave up:
        return _row_write_failure(command, exc, 2)  # unreachable, no leader, out of time
    if command.args.cmd == "put":
        assert value is not None
        doc = {"key": show(key), "value": show(value), "index": written.index,
               "duplicate": written.duplicate}
        return Outcome(0, doc, f"written at index {written.index}")
    doc = {"key": show(key), "index": written.index, "duplicate": written.duplicate}
    return Outcome(0, doc, f"deleted at index {written.index}")


def _row_write_failure(command: _RowCommand, error: ClientError, code: int) -> Outcome:
    """A write that failed: its outcome in the message and, with --json, a document."""
    assert command.key is not None
    outcome = outcome_of(error)
    doc: dict[str, Any] = {"key": command.show(command.key)}
    if command.value is not None:
        doc["value"] = command.show(command.value)
    doc.update({"outcome": outcome, "error": error.message})
    message = error.message
    if outcome == OUTCOME_FAILED and isinstance(error, Unavailable):
        message += "; it was not applied"
    return Outcome(code, doc, "", message)


async def _row_read(command: _RowCommand, client: TabletClient | TableClient) -> Outcome:
    """A get (exit 1 when the key has no value) or a scan."""
    show = command.show
    if command.args.cmd == "get":
        key = command.key
        assert key is not None
        found = await client.get(key)
        if found is None:
            return Outcome(1, {"key": show(key), "value": None}, "",
                           f"key {show(key)!r} not found")
        return Outcome(0, {"key": show(key), "value": show(found)}, show(found))
    rows = await client.scan(command.start, command.end, command.args.limit)
    doc = {"rows": [{"key": show(k), "value": show(v)} for k, v in rows]}
    return Outcome(0, doc, "\n".join(f"{show(k)}\t{show(v)}" for k, v in rows))
