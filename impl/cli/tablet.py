"""``revivify tablet ...``: one tablet's replicas, through its servers.

  revivify tablet create --tservers HOST:PORT,... [--replicas N] [--tablet-id ID]
  revivify tablet status (--tservers ... | --masters ... | --root DIR) --tablet ID
  revivify tablet change-config (--tservers ... | --masters ... | --root DIR) --tablet ID
                                [--cas-config-index N]
                                add UUID HOST:PORT [--non-voter [--promote]] | remove UUID
                                | promote UUID
  revivify tablet step-down (--tservers ... | --masters ... | --root DIR) --tablet ID
                            [--new-leader UUID]

Every command takes ``--json`` (one JSON document on stdout) and ``--deadline SECONDS``
(default 10: the whole command, retries included, runs under a trio cancel scope with that
deadline, and the client library's retry deadline is the same). status, change-config and
step-down also take ``--call-timeout SECONDS`` (default 2, impl/client/options.py): the
most one call to one server may take, so a stalled server costs one of these, not the
deadline.

The servers of a tablet are named by ``--tservers``, or found through the masters
(``--masters`` or ``--root DIR``, or ``$REVIVIFY_MASTERS``): the tablet's replicas as the
leader master's catalog records them (``Master.GetTabletLocations``), their addresses then
used as ``--tservers`` would be. The client library finds the tablet's leader among them
and follows the peers they report, so a catalog a little behind a move is still enough.

Exit codes, one rule: 0 success; 1 a definite "no" (a config change refused, a server
refusing a request it understood: the tablet already exists, an invalid argument; an
unknown tablet: every server that answered said it does not host it, or the masters know no
such tablet); 2 bad usage (a malformed HOST:PORT, a missing flag) or nothing reachable (no
server answered, no leader within the deadline).

``tablet status`` asks every server at once, each within the call timeout, and shows each
one's answer in its own column (ANSWER: ok, not hosted, no answer, unreachable, refused;
``"answer"`` in JSON): exit 0 if any server answered with the tablet's state, 1 if every
server that answered does not host it, 2 if none answered.
"""

from __future__ import annotations

import argparse
import os
import sys

from revivify.impl.client import (
    ChangeRefused,
    ClientOptions,
    change_config,
    create_tablet,
    step_down,
    tablet_status,
)
from revivify.impl.client.errors import TabletUnknownToMasters, outcome_of
from revivify.impl.consensus.messages import NON_VOTER, VOTER, ConfigChange, MemberType, Peer

from . import render
from .common import (
    MASTERS_ENV,
    Outcome,
    Parser,
    UsageError,
    address_arg,
    addresses_arg,
    call_timeout_flag,
    client_options,
    common_flags,
    execute,
    non_negative_int,
    one_line,
    parse_args,
    positive_int,
)


def _cluster() -> Parser:
    """The flags of the tablet commands but create: ``--tablet ID`` and where its servers
    are, ``--tservers HOST:PORT,...`` or the masters (``--masters``, ``--root DIR``, or
    ``$REVIVIFY_MASTERS`` with none of the three), which find them (`_tservers`)."""
    p = Parser(add_help=False)
    group = p.add_mutually_exclusive_group()
    group.add_argument("--tservers", type=addresses_arg, metavar="HOST:PORT,...",
                       help="tablet servers to ask, comma-separated (any that host the "
                            "tablet; the leader is found among them)")
    group.add_argument("--masters", type=addresses_arg, metavar="HOST:PORT,...",
                       help="instead of --tservers: the masters, which find the tablet's "
                            f"servers in their catalog; default: ${MASTERS_ENV}")
    group.add_argument("--root", dest="cluster_root", metavar="DIR",
                       help="instead of --tservers: the masters of the local cluster in DIR "
                            "(DIR/cluster.json, written by 'revivify cluster start')")
    p.add_argument("--tablet", required=True, metavar="ID", help="the tablet's id")
    return p


def _servers_named(args: argparse.Namespace) -> str | None:
    """A usage error for a command given neither --tservers nor masters (no --masters, no
    --root, no $REVIVIFY_MASTERS), else None. parse_args has already turned --root into
    ``args.masters``; the environment's masters are read here, the command line first."""
    if args.tservers is not None or args.masters is not None:
        return None
    env = os.environ.get(MASTERS_ENV, "")
    if not env:
        return (f"revivify tablet {args.cmd}: one of --tservers, --masters or --root is "
                f"required (or ${MASTERS_ENV})")
    try:
        args.masters = addresses_arg(env)
    except argparse.ArgumentTypeError as exc:
        return f"revivify tablet {args.cmd}: {MASTERS_ENV}: {exc}"
    return None


async def _tservers(args: argparse.Namespace, options: ClientOptions) -> list[str]:
    """The servers to ask: --tservers as given, else the tablet's replicas as the masters'
    catalog records them (TabletUnknownToMasters when it holds no such tablet)."""
    if args.tservers is not None:
        return list(args.tservers)
    from revivify.impl.client.master import locate_tablet

    found = await locate_tablet(args.masters, args.tablet, options)
    if not found:  # a tablet the catalog knows, placed nowhere yet (being created)
        raise TabletUnknownToMasters(args.tablet, 0)
    return found


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
    problem = _servers_named(args)
    if problem is not None:
        print(problem, file=sys.stderr)
        return 2
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
    try:
        servers = await _tservers(args, options)
    except TabletUnknownToMasters as exc:
        return Outcome(1, {"tablet_id": args.tablet, "replicas": []}, "", exc.message)
    status = await tablet_status(servers, args.tablet, options=options)
    doc, text = render.tablet_status_doc(status), render.tablet_status_text(status)
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
        servers = await _tservers(args, options)
    except TabletUnknownToMasters as exc:
        return Outcome(1, {"tablet_id": args.tablet}, "", exc.message)
    try:
        changed = await change_config(servers, args.tablet, change,
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
    try:
        servers = await _tservers(args, options)
    except TabletUnknownToMasters as exc:
        return Outcome(1, {"tablet_id": args.tablet}, "", exc.message)
    former = await step_down(servers, args.tablet, args.new_leader, options=options)
    towards = f" in favour of {args.new_leader}" if args.new_leader else ""
    doc = {"tablet_id": args.tablet, "stepped_down": former, "new_leader": args.new_leader}
    return Outcome(0, doc, f"leader {former} asked to step down{towards}")


