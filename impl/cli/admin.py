"""The server commands of ``revivify``: tserver, tablet, row.

  revivify tserver status --tserver HOST:PORT
  revivify tserver run ...                     (the tablet server; revivify.impl.servers.tserver)
  revivify tablet create --tservers HOST:PORT,... [--replicas N] [--tablet-id ID]
  revivify tablet status --tservers ... --tablet ID
  revivify tablet change-config --tservers ... --tablet ID [--cas-config-index N]
                                add UUID HOST:PORT [--non-voter [--promote]] | remove UUID
                                | promote UUID
  revivify tablet step-down --tservers ... --tablet ID [--new-leader UUID]
  revivify row put KEY VALUE | get KEY | delete KEY | scan [--start K] [--end K] [--limit N]
                                (each with --tservers ... --tablet ID, or --masters ...
                                --table NAME: the key's tablet by hash, a scan of every
                                tablet merged in key order; [--hex])

Every command takes ``--json`` (one JSON document on stdout) and ``--deadline SECONDS``
(default 10: the whole command, retries included, runs under a trio cancel scope with that
deadline, and the client library's retry deadline is the same). The tablet and row
commands also take ``--call-timeout SECONDS`` (default 2, impl/client/options.py): the
most one call to one server may take, so a stalled server costs one of these, not the
deadline.

Exit codes, one rule: 0 success; 1 a definite "no" (a key not found, a config change
refused, a server refusing a request it understood: the tablet already exists, an invalid
argument; an unknown tablet or table: every server that answered said it does not host
it); 2 bad usage (a malformed HOST:PORT, a missing flag, bad hex) or nothing reachable (no
server answered, no leader within the deadline, a write whose outcome is unknown). Errors
are one line on stderr naming the command and what was wrong, never a traceback.

A write (``row put``/``row delete``) that fails says which kind of failure it was: in its
message ("it may or may not have been applied" when an attempt may have been applied) and,
with ``--json``, in a document on stdout: ``{"key", "value" (put), "outcome", "error"}``
with ``"outcome": "unknown"`` (it may or may not have been applied: an attempt was cut off
after it was sent) or ``"failed"`` (it was not applied: refused before it was sent,
refused by the leader, or never sent to a server that could apply it).

``tablet status`` asks every server at once, each within the call timeout, and shows each
one's answer in its own column (ANSWER: ok, not hosted, no answer, unreachable, refused;
``"answer"`` in JSON): exit 0 if any server answered with the tablet's state, 1 if every
server that answered does not host it, 2 if none answered.

Everything talks to the servers through revivify.impl.client; this module only parses,
calls and prints (render.py).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import sys
from collections.abc import AsyncIterator, Callable
from typing import Any

import attrs

from revivify.impl.client import (
    ChangeRefused,
    ClientError,
    ClientOptions,
    Rejected,
    TableClient,
    TableNotFoundError,
    TabletClient,
    TabletNotFoundError,
    TabletStatus,
    Unavailable,
    WrongServerKind,
    change_config,
    create_tablet,
    open_table_client,
    open_tablet_client,
    server_status,
    step_down,
    tablet_status,
)
from revivify.impl.client.admin import ANSWER_NO_ANSWER, ANSWER_OK
from revivify.impl.client.errors import OUTCOME_FAILED, outcome_of
from revivify.impl.consensus.messages import NON_VOTER, VOTER, ConfigChange, MemberType, Peer
from revivify.impl.master.api import CATALOG_TABLET_ID
from revivify.impl.rpc import AppError

from . import render
from .common import (
    Outcome,
    Parser,
    UsageError,
    address_arg,
    addresses_arg,
    call_timeout_flag,
    client_options,
    common_flags,
    execute,
    fail,
    non_negative_int,
    one_line,
    parse_args,
    positive_int,
)

TSERVER_MAIN = "revivify.impl.servers.tserver"


def _cluster() -> Parser:
    """``--tservers HOST:PORT,... --tablet ID``: the flags of the tablet and row commands."""
    p = Parser(add_help=False)
    p.add_argument("--tservers", type=addresses_arg, required=True, metavar="HOST:PORT,...",
                   help="tablet servers to ask, comma-separated (any that host the tablet; "
                        "the leader is found among them)")
    p.add_argument("--tablet", required=True, metavar="ID", help="the tablet's id")
    return p


# ---------------------------------------------------------------------------- tserver


def tserver_main(argv: list[str]) -> int:
    """``revivify tserver ...``: status here; run is the tablet server's own entry point."""
    if argv and argv[0] == "run":
        return _tserver_run(argv[1:])
    if argv and argv[0] == "wipe":
        from .local import tserver_wipe_main

        return tserver_wipe_main(argv[1:])
    parser = Parser(prog="revivify tserver", description="tablet server commands")
    sub = parser.add_subparsers(dest="cmd", required=True, metavar="{status,run,wipe}")
    status = sub.add_parser("status", parents=[common_flags()],
                            help="a server's UUID, address and replicas",
                            description="Print a tablet server's UUID, address and "
                                        "replicas (role, term, last and committed OpId).")
    status.add_argument("--tserver", type=address_arg, required=True, metavar="HOST:PORT",
                        help="the server to ask")
    sub.add_parser("run", add_help=False,
                   help="run a tablet server ('revivify tserver run --help' for its flags)")
    sub.add_parser("wipe", add_help=False,
                   help="clear a stopped server's directory: its next start formats a new "
                        "UUID ('revivify tserver wipe --help')")
    args = parse_args(parser, argv)
    if isinstance(args, int):
        return args

    async def work() -> Outcome:
        reply = await server_status(args.tserver)
        if any(r.tablet_id == CATALOG_TABLET_ID for r in reply.replicas):
            # A master embeds a tablet server that hosts the catalog: answering as one would
            # show a master as a tablet server ('replica list' shows its catalog replica).
            raise WrongServerKind(args.tserver, "master", "tablet server")
        return Outcome(0, render.server_status_doc(reply), render.server_status_text(reply))

    return execute("revivify tserver status", args, work)


def _tserver_run(argv: list[str]) -> int:
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
    run_main: Callable[[list[str]], int] | None = getattr(module, "run_main", None)
    if run_main is None:
        print(f"revivify tserver run: not available in this build ({TSERVER_MAIN}.run_main "
              f"is missing)", file=sys.stderr)
        return 2
    return int(run_main(argv))


# ---------------------------------------------------------------------------- tablet


def _change(args: argparse.Namespace) -> ConfigChange:
    """The ConfigChange the positional arguments describe (UsageError if inconsistent)."""
    action: str = args.action
    prog = "revivify tablet change-config"
    if args.promote and not args.non_voter:
        raise UsageError(f"{prog}: --promote applies to 'add ... --non-voter' only")
    if action == "add":
        if args.address is None:
            raise UsageError(f"{prog}: add needs UUID and HOST:PORT")
        member: MemberType = NON_VOTER if args.non_voter else VOTER
        return ConfigChange("ADD", Peer(args.uuid, args.address, member, bool(args.promote)))
    if args.address is not None:
        raise UsageError(f"{prog}: {action} takes a UUID only, not {args.address!r}")
    if args.non_voter:
        raise UsageError(f"{prog}: --non-voter applies to add only")
    if action == "remove":
        return ConfigChange("REMOVE", Peer(args.uuid, ""))
    return ConfigChange("CHANGE_ROLE", Peer(args.uuid, "", VOTER))


def _tablet_parser() -> Parser:
    """The parser of ``revivify tablet``: one subcommand each for create, status,
    change-config and step-down."""
    parser = Parser(prog="revivify tablet", description="tablet administration")
    sub = parser.add_subparsers(dest="cmd", required=True)

    create = sub.add_parser(
        "create", parents=[common_flags()], help="create a tablet",
        description="Create a tablet replicated on the first N of the given servers (every "
                    "replica a voter) and print its id.")
    create.add_argument("--tservers", type=addresses_arg, required=True,
                        metavar="HOST:PORT,...", help="tablet servers, comma-separated")
    create.add_argument("--replicas", type=positive_int, default=3, metavar="N",
                        help="replicas: the first N servers (default 3)")
    create.add_argument("--tablet-id", default=None, metavar="ID",
                        help="the new tablet's id (default: a random uuid4 hex)")

    sub.add_parser(
        "status", parents=[_cluster(), common_flags(), call_timeout_flag()],
        help="every replica's state",
        description="Show each replica's role, term, last and committed OpId, and the "
                    "leader. Every server is asked at once, each within --call-timeout; "
                    "one that cannot be reached or does not answer in time is shown as "
                    "such (the ANSWER column). Exit 0 if any server answered with the "
                    "tablet's state, 1 if every server that answered does not host it, "
                    "2 if none answered.")

    _add_change_config_parser(sub)

    down = sub.add_parser(
        "step-down", parents=[_cluster(), common_flags(), call_timeout_flag()],
        help="ask the leader to step down",
        description="Ask the tablet's leader to step down, optionally handing leadership "
                    "to a given voter.")
    down.add_argument("--new-leader", default=None, metavar="UUID",
                      help="transfer leadership to this voter")
    return parser


def _add_change_config_parser(sub: argparse._SubParsersAction[Parser]) -> None:
    """``revivify tablet change-config``: its positional form and its flags."""
    changing = sub.add_parser(
        "change-config", parents=[_cluster(), common_flags(), call_timeout_flag()],
        help="add, remove or promote one member",
        description="One membership change, at the leader, compare-and-set on the "
                    "committed config's index. Forms: 'add UUID HOST:PORT [--non-voter "
                    "[--promote]]', 'remove UUID', 'promote UUID' (a NON_VOTER to VOTER). "
                    "Exit 1 if the leader refuses.")
    changing.add_argument("action", choices=("add", "remove", "promote"),
                        help="what to do to the member")
    changing.add_argument("uuid", metavar="UUID", help="the member's server UUID")
    changing.add_argument("address", nargs="?", type=address_arg, default=None,
                        metavar="HOST:PORT", help="add only: where the new member listens")
    changing.add_argument("--non-voter", action="store_true",
                        help="add only: add as a NON_VOTER (receives the log, no vote)")
    changing.add_argument("--promote", action="store_true",
                        help="with --non-voter: the leader promotes it to VOTER once it has "
                             "caught up")
    changing.add_argument("--cas-config-index", type=non_negative_int, default=None,
                        metavar="N",
                        help="apply only if the committed config is at index N (default: "
                             "the leader's current committed config index, read first)")


def tablet_main(argv: list[str]) -> int:
    """``revivify tablet create | status | change-config | step-down``."""
    args = parse_args(_tablet_parser(), argv)
    if isinstance(args, int):
        return args
    prog = f"revivify tablet {args.cmd}"
    options = client_options(args)
    if args.cmd == "create":
        return execute(prog, args, lambda: _tablet_create_work(args))
    if args.cmd == "status":
        return execute(prog, args, lambda: _tablet_status_work(args, options))
    if args.cmd == "step-down":
        return execute(prog, args, lambda: _step_down_work(args, options))
    try:
        change = _change(args)
    except UsageError as exc:
        print(one_line(str(exc)), file=sys.stderr)
        return 2
    return execute(prog, args, lambda: _change_config_work(args, options, change))


async def _tablet_create_work(args: argparse.Namespace) -> Outcome:
    created = await create_tablet(args.tservers, args.replicas, args.tablet_id)
    doc = {"tablet_id": created.tablet_id,
           "peers": [render.peer_doc(p) for p in created.peers]}
    return Outcome(0, doc, created.tablet_id)


async def _tablet_status_work(args: argparse.Namespace, options: ClientOptions) -> Outcome:
    """Exit 0 if a server answered with the tablet's state, 1 if every server that
    answered does not host it, 2 if none answered (the module docstring)."""
    status = await tablet_status(args.tservers, args.tablet, options=options)
    doc, text = _status_doc(status), _status_text(status)
    if not status.reachable:
        return Outcome(2, doc, text, "no server answered: " + "; ".join(
            f"{r.address}: {r.error}" for r in status.replicas))
    if not status.hosted:
        answered = [r.address for r in status.replicas if r.reachable]
        silent = [r.address for r in status.silent]
        unsure = f" ({', '.join(silent)} did not answer)" if silent else ""
        return Outcome(1, doc, text, f"tablet {args.tablet} is not hosted by any of "
                                     f"{', '.join(answered)}{unsure}")
    return Outcome(0, doc, text)


async def _change_config_work(args: argparse.Namespace, options: ClientOptions,
                              change: ConfigChange) -> Outcome:
    """Exit 1 with the refusal in the document when the leader refuses the change."""
    try:
        changed = await change_config(args.tservers, args.tablet, change,
                                      args.cas_config_index, options=options)
    except ChangeRefused as refusal:
        doc = {"tablet_id": args.tablet, "refused": {
            "reason": refusal.reason, "detail": refusal.detail,
            "committed_index": refusal.committed_index,
            "outcome_unknown": refusal.outcome_unknown,
            "outcome": outcome_of(refusal)}}
        return Outcome(1, doc, "", refusal.message)
    doc = {"tablet_id": args.tablet, "config_index": changed.config_index,
           "change": {"kind": change.kind, **render.peer_doc(change.peer)}}
    return Outcome(0, doc, f"config change committed at index {changed.config_index}")


async def _step_down_work(args: argparse.Namespace, options: ClientOptions) -> Outcome:
    former = await step_down(args.tservers, args.tablet, args.new_leader, options=options)
    towards = f" in favour of {args.new_leader}" if args.new_leader else ""
    doc = {"tablet_id": args.tablet, "stepped_down": former, "new_leader": args.new_leader}
    return Outcome(0, doc, f"leader {former} asked to step down{towards}")


def _status_doc(status: TabletStatus) -> dict[str, Any]:
    """render.tablet_status_doc, each replica with its "answer" added (ok, not hosted, no
    answer, unreachable, refused)."""
    doc = render.tablet_status_doc(status)
    for row, replica in zip(doc["replicas"], status.replicas, strict=True):
        row["answer"] = replica.answer
    return doc


def _status_text(status: TabletStatus) -> str:
    """The replicas as a table: what each server answered in the ANSWER column, its
    replica's state in the others (left empty for a server that gave none), then why each
    server that gave no state gave none."""
    rows: list[list[object]] = []
    notes: list[str] = []
    for r in status.replicas:
        info = r.info
        answer = r.answer
        if info is None:
            rows.append([r.address, r.uuid, answer, None, None, None, None, None, None])
            if r.error and r.error != answer:
                notes.append(f"{r.address}: {r.error}")
            continue
        state = info.state if not info.reason else f"{info.state} ({info.reason})"
        rows.append([r.address, r.uuid, ANSWER_OK, state,
                     render.member_role(info.role, info.member_type), info.term,
                     render.opid(info.last_opid), info.commit_index, info.config_index])
    leader = status.leader
    said = "none" if leader is None else f"{leader.uuid} ({leader.address})"
    silent = [r for r in status.replicas if r.answer == ANSWER_NO_ANSWER]
    if leader is None and silent:
        said += " among the servers that answered"
    return "\n".join([
        f"tablet {status.tablet_id}",
        render.table(["ADDRESS", "UUID", "ANSWER", "STATE", "ROLE", "TERM", "LAST",
                      "COMMITTED", "CONFIG"], rows),
        *notes,
        f"leader: {said}",
    ])


# ---------------------------------------------------------------------------- row


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


__all__ = ["row_main", "tablet_main", "tserver_main"]
