"""What every ``revivify`` command shares: parsing, argument types, running, printing.

The commands (admin.py: tserver, tablet, row; replica.py: replica, copy; local.py:
local-replica, tserver wipe) each build an argparse tree from the pieces here and end in
`execute` (a command that talks to servers, under a trio deadline) or `print_outcome` (an
offline one). This module imports none of them, so they never import each other for their
plumbing (an import-linter contract forbids cycles between the CLI's modules).

The conventions it holds in one place (docs/sources.md, "The CLI's conventions"):

* ``--json`` prints one JSON document on stdout instead of text;
* exit 0 yes / 1 no / 2 bad usage or unusable input, `Outcome.code` otherwise;
* every error is one line on stderr, ``"<prog>: <what was wrong>"``, never a traceback
  (`one_line` folds a multi-line message).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, NoReturn

from revivify.impl.flagfile import (
    CLIENT_ENV_FLAGS,
    FlagfileError,
    add_flagfile_flag,
    apply_flagfiles,
)
from revivify.impl.rpc.address import BadAddress, parse_address

if TYPE_CHECKING:
    from revivify.impl.client import ClientOptions

# Start-up cost (issue 31, tests/cli/test_import_budget.py): this module is on every
# command's path, so it imports the standard library's argparse and impl/rpc/address.py
# only. trio, the client library and cluster.json's reader are imported by the functions
# that use them: `--help`, `cluster status` and the one-shot calls never load them.

DEFAULT_DEADLINE = 10.0
# The client library's default (impl/client/options.py DEFAULT_CALL_TIMEOUT), repeated so
# that building a parser does not import the client; tests/cli/test_import_budget.py
# checks that the two agree.
DEFAULT_CALL_TIMEOUT = 2.0
BACKSTOP_SLACK = 0.25  # seconds the command's own cancel scope allows beyond --deadline


# ---------------------------------------------------------------------------- parsing


class UsageError(Exception):
    """Bad arguments: the message is the whole line printed (exit 2)."""


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors raise UsageError instead of printing and exiting."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: {message}")


class Outcome(NamedTuple):
    """What a command found: its exit code, JSON document, text, and stderr line if any."""

    code: int
    document: Any
    text: str
    complaint: str | None = None


MASTERS_ENV = "REVIVIFY_MASTERS"


def parse_args(parser: argparse.ArgumentParser, argv: Sequence[str]
               ) -> argparse.Namespace | int:
    """The parsed arguments, or the exit code when there is nothing to run (help, error).

    A command given ``--root DIR`` (`masters_flags`) gets ``args.masters`` from
    ``DIR/cluster.json`` here; a missing or malformed file is exit 2, one line naming it.
    """
    try:
        # parse_known_args, not parse_args: argparse reports arguments left over after a
        # subcommand in the name of the top parser ("revivify table: unrecognized ..."),
        # and every error here names the command that was run ("revivify table list: ...").
        argv = apply_flagfiles(argv, parser, os.environ, CLIENT_ENV_FLAGS)
        args, extra = parser.parse_known_args(list(argv))
        if extra:
            raise UsageError(f"{_command_prog(parser, args)}: unrecognized arguments: "
                             f"{' '.join(extra)}{_flag_hint(parser, args, extra)}")
    except UsageError as exc:
        print(one_line(str(exc)), file=sys.stderr)
        return 2
    except FlagfileError as exc:
        return fail(parser.prog, str(exc), 2)
    except SystemExit as exc:  # --help printed its text
        return 0 if exc.code in (0, None) else 2
    root = getattr(args, "cluster_root", None)
    if root is not None:
        from . import clusterfile

        try:
            args.masters = clusterfile.master_addresses(root)
        except clusterfile.ClusterFileError as exc:
            return fail(_command_prog(parser, args), str(exc), 2)
    elif getattr(args, "masters_from_env", False) and args.masters is None:
        try:
            args.masters = addresses_arg(os.environ.get(MASTERS_ENV, ""))
        except argparse.ArgumentTypeError as exc:
            return fail(_command_prog(parser, args), f"{MASTERS_ENV}: {exc}", 2)
    return args


def _command_prog(parser: argparse.ArgumentParser, args: argparse.Namespace) -> str:
    """``"<prog> <subcommand>"`` for a parser with subcommands (``dest="cmd"``), else prog."""
    cmd = getattr(args, "cmd", None)
    return parser.prog + (f" {cmd}" if isinstance(cmd, str) else "")


def _flag_hint(parser: argparse.ArgumentParser, args: argparse.Namespace,
               extra: Sequence[str]) -> str:
    """"; did you mean --json?" for the first unrecognized flag close to one the command
    takes (its subcommand's flags included), else ""."""
    flags = [token.partition("=")[0] for token in extra if token.startswith("--")]
    if not flags:
        return ""
    known = list(parser._option_string_actions)
    cmd = getattr(args, "cmd", None)
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction) and isinstance(cmd, str):
            chosen = action.choices.get(cmd)
            if chosen is not None:
                known += list(chosen._option_string_actions)
    import difflib  # only on this path

    for flag in flags:
        close = difflib.get_close_matches(flag, [k for k in known if k.startswith("--")], n=1)
        if close:
            return f"; did you mean {close[0]}?"
    return ""


def one_line(text: str) -> str:
    return " ".join(text.split())


# ---------------------------------------------------------------------------- argument types


def address_arg(text: str) -> str:
    """A HOST:PORT argument, checked by the one parser (revivify.impl.rpc.address)."""
    try:
        parse_address(text)
    except BadAddress as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def addresses_arg(text: str) -> list[str]:
    """HOST:PORT,... (empty items between commas are skipped; at least one is needed)."""
    items = [item.strip() for item in text.split(",")]
    if not any(items):
        raise argparse.ArgumentTypeError("no address given; expected HOST:PORT,...")
    return [address_arg(item) for item in items if item]


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid number {text!r}") from None
    if not value > 0 or value != value or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {text}")
    return value


def _int_at_least(text: str, least: int) -> int:
    """An integer flag's value, or one reason naming the bound the flag has (the same bound
    for every wrong value: -1 and 0 for a flag that takes >= 1 both say ">= 1")."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid integer {text!r}") from None
    if value < least:
        raise argparse.ArgumentTypeError(f"must be >= {least}, got {value}")
    return value


def non_negative_int(text: str) -> int:
    return _int_at_least(text, 0)


def positive_int(text: str) -> int:
    return _int_at_least(text, 1)


def json_flag() -> Parser:
    """``--json``, for a parent parser."""
    p = Parser(add_help=False)
    p.add_argument("--json", action="store_true",
                   help="print one JSON document on stdout instead of text")
    add_flagfile_flag(p)  # every command has --json: --flagfile rides along
    return p


def common_flags() -> Parser:
    """``--json`` and ``--deadline SECONDS``: the flags of every command that calls servers."""
    p = Parser(add_help=False, parents=[json_flag()])
    p.add_argument("--deadline", type=positive_float, default=DEFAULT_DEADLINE,
                   metavar="SECONDS",
                   help=f"give up after this long, retries included (default "
                        f"{DEFAULT_DEADLINE:g})")
    return p


def masters_flags(help_masters: str = "the masters, comma-separated (the leader is found "
                                       "among them)") -> Parser:
    """``--masters HOST:PORT,...`` or ``--root DIR`` (a local cluster's directory: the
    masters of its ``cluster.json``), at most one; `parse_args` fills ``args.masters``. With
    neither, the masters come from ``REVIVIFY_MASTERS`` in the environment (as etcdctl's
    ``ETCDCTL_ENDPOINTS``): the command line wins over the environment."""
    p = Parser(add_help=False)
    group = p.add_mutually_exclusive_group(required=not os.environ.get(MASTERS_ENV))
    group.add_argument("--masters", type=addresses_arg, metavar="HOST:PORT,...",
                       help=f"{help_masters}; default: ${MASTERS_ENV}")
    group.add_argument("--root", dest="cluster_root", metavar="DIR",
                       help="instead of --masters: the masters of the local cluster in DIR "
                            "(DIR/cluster.json, written by 'revivify cluster start')")
    p.set_defaults(masters_from_env=True)  # parse_args: neither flag, the environment's
    return p


def call_timeout_flag() -> Parser:
    """``--call-timeout SECONDS``, for a parent parser: the client's bound on each single
    call (impl/client/options.py, "The call timeout"). The one definition every command
    that takes the flag uses; `client_options` reads it."""
    p = Parser(add_help=False)
    p.add_argument("--call-timeout", type=positive_float, default=DEFAULT_CALL_TIMEOUT,
                   metavar="SECONDS",
                   help=f"give up on one call to one server after this long and try "
                        f"elsewhere (default {DEFAULT_CALL_TIMEOUT:g}; a few times the "
                        f"servers' election timeout)")
    return p


def client_options(args: argparse.Namespace, spent: float = 0.0) -> ClientOptions:
    """The client library's retry policy for a command: its --deadline (less the seconds a
    fast attempt `spent`: `fast_first`), and its --call-timeout when the command takes that
    flag (`call_timeout_flag`)."""
    from revivify.impl.client import ClientOptions

    return ClientOptions(deadline=args.deadline - spent, call_timeout=call_timeout(args))


def call_timeout(args: argparse.Namespace) -> float:
    """The command's --call-timeout, or the client's default for a command without it."""
    seconds: float = getattr(args, "call_timeout", DEFAULT_CALL_TIMEOUT)
    return seconds


# ---------------------------------------------------------------------------- fast first

FAST_PATIENCE = 1.0
"""Seconds a blocking fast attempt (oneshot.py) may spend, at most half the --deadline:
the fast path is for servers that answer at once (in milliseconds); one that makes it
wait longer is the trio path's to retry, and it keeps most of the deadline for that."""


def fast_first(args: argparse.Namespace, attempt: Callable[[float], Outcome | None]
               ) -> tuple[Outcome | None, float]:
    """Run `attempt`, a command's blocking fast path (oneshot.py: no trio), with the seconds
    it may spend (`FAST_PATIENCE`, at most half the --deadline): its outcome, or None and
    the seconds it spent, which the trio path then has less of (`client_options` and
    `execute` take them as ``spent``). The command has one deadline whichever path
    answers, and the trio path keeps enough of it to retry and to say in its own words
    what went wrong (but for a deadline shorter than about one call timeout plus
    `FAST_PATIENCE` with every master silent: its error is then the deadline's, not the
    round's "no master answered")."""
    started = time.monotonic()
    outcome = attempt(min(FAST_PATIENCE, args.deadline / 2))
    return outcome, time.monotonic() - started


# ---------------------------------------------------------------------------- running


def execute(prog: str, args: argparse.Namespace,
            work: Callable[[], Awaitable[Outcome]], *, spent: float = 0.0) -> int:
    """Run `work` under the deadline; print its outcome; map errors to exit codes.

    The client library gives up at the same deadline (ClientOptions.deadline) and says
    why (its last error); this scope, a little later, is the backstop for the calls that
    are not retried (server status, create, status), should a server never answer.
    ``spent``: seconds of the deadline a fast attempt used already (`fast_first`).
    """
    import trio

    from revivify.impl.client import ChangeRefused, ClientError, Rejected
    from revivify.impl.rpc import AppError

    from . import render

    deadline: float = args.deadline

    async def bounded() -> Outcome | None:
        outcome: Outcome | None = None
        failure: Exception | KeyboardInterrupt | None = None
        async with trio.open_nursery() as nursery:
            # A wait past render.WAIT_NOTICE_AFTER is said on stderr (issue 31).
            nursery.start_soon(render.announce_wait, prog, deadline,
                               render.WAIT_NOTICE_AFTER, spent)
            try:
                with trio.move_on_after(deadline - spent + BACKSTOP_SLACK):
                    outcome = await work()
            except (Exception, KeyboardInterrupt) as exc:  # raised below, not wrapped in
                failure = exc                               # the nursery's exception group
            finally:
                nursery.cancel_scope.cancel()
        if failure is not None:
            raise failure
        return outcome

    try:
        outcome = trio.run(bounded)
    except ChangeRefused as exc:
        return fail(prog, exc.message, 1)
    except Rejected as exc:
        return fail(prog, exc.message, 1 if isinstance(exc.error, AppError) else 2)
    except ClientError as exc:
        return fail(prog, exc.message, 2)
    except KeyboardInterrupt:
        raise
    except Exception as exc:  # the last line of defence: a message, not a traceback
        return fail(prog, f"internal error: {type(exc).__name__}: {exc}", 2)
    if outcome is None:
        return fail(prog, f"no answer within the deadline of {deadline:g}s", 2)
    return print_outcome(prog, args, outcome)


def print_outcome(prog: str, args: argparse.Namespace, outcome: Outcome) -> int:
    """Print `outcome` (its JSON document with --json, else its text; then its complaint on
    stderr) and return its exit code."""
    if args.json:
        from .render import dumps

        print(dumps(outcome.document))
    elif outcome.text:
        print(outcome.text)
    if outcome.complaint is not None:
        print(f"{prog}: {one_line(outcome.complaint)}", file=sys.stderr)
    return outcome.code


def fail(prog: str, message: str, code: int) -> int:
    """Print the one-line error ``"<prog>: <message>"`` and return `code`."""
    print(f"{prog}: {one_line(message)}", file=sys.stderr)
    return code


__all__ = [
    "BACKSTOP_SLACK",
    "DEFAULT_DEADLINE",
    "Outcome",
    "Parser",
    "UsageError",
    "address_arg",
    "addresses_arg",
    "call_timeout",
    "call_timeout_flag",
    "client_options",
    "common_flags",
    "execute",
    "fail",
    "fast_first",
    "json_flag",
    "masters_flags",
    "non_negative_int",
    "one_line",
    "parse_args",
    "positive_float",
    "positive_int",
    "print_outcome",
]
