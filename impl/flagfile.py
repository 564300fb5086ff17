"""Flags from files (``--flagfile FILE``, as in Kudu) and from the environment, and the one
rule that orders them: **command line > environment > file**.

A flagfile holds one flag per line, written as on the command line but always joined to
its value by ``=``::

    # /etc/revivify/tserver.flags
    --fs-root=/var/lib/revivify/tserver
    --rpc-bind=0.0.0.0:7050
    --no-fsync

Blank lines and lines whose first non-blank character is ``#`` are skipped; ``#`` later in
a line is part of the value (a path may hold one). A flag that takes no value (``--no-fsync``)
is written alone. Every flag must be spelled in full (the command line's abbreviations are
refused in a file: a file outlives the flags it was written against, and a new flag could make
an abbreviation ambiguous or point it elsewhere). ``--flagfile`` may be given several times on
the command line; later files win over earlier ones. A flagfile may not name another one: one
level means no cycles to detect and no question of which nested file wins, and "a common file
plus one per server" is written as two ``--flagfile`` on the command line.

How the sources meet. The files' flags are checked against the parser (an unknown flag, or a
malformed line, is an error naming FILE:LINE) and appended to the command line's arguments,
except every flag the command line itself names, or an environment variable in force sets:
those are dropped from the files whole. Dropping rather than relying on argparse's "the last
value wins" is what makes the rule hold for every kind of flag: a file's ``--add-column``
(append) would otherwise add to the command line's, a file's ``--masters`` would collide with
the command line's ``--root`` (a mutually exclusive pair: naming either drops both from the
files), and a file's ``--no-fsync`` could not be undone. The environment itself is then read
where it always was (``REVIVIFY_MASTERS``: impl/cli/common.py fills ``--masters`` from it when
the command line names neither ``--masters`` nor ``--root``), so a variable wins over the files
and loses to the command line. The servers take no flag from the environment: a server's
configuration is its command line and its files, never whatever its starter's shell held.

This module is the bottom of impl's layers (argparse only): the servers and the CLI call
`apply_flagfiles` where they parse their arguments.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator, Mapping, Sequence
from typing import NamedTuple

FLAGFILE = "--flagfile"

# Environment variables that set a flag, for the commands that read them (the client
# commands: impl/cli/common.py). Each is read by the command's own parsing; here it only
# takes precedence over the files.
CLIENT_ENV_FLAGS: Mapping[str, str] = {"REVIVIFY_MASTERS": "--masters"}


class FlagfileError(Exception):
    """A flagfile that cannot be used: the message is one line naming the file (and the
    line) and what is wrong with it."""


# A NamedTuple, not attrs: every CLI command parses through this module, and attrs costs
# more at start-up than the command it would be part of (issue 31).
class _Option(NamedTuple):
    takes_value: bool
    # The destinations this flag sets, and those of the flags it is mutually exclusive with:
    # a command line (or an environment variable) naming any of them drops them all from the
    # files.
    keys: frozenset[str]


def add_flagfile_flag(parser: argparse.ArgumentParser) -> None:
    """Declare ``--flagfile FILE`` on `parser`, for its ``--help``. `apply_flagfiles` has
    taken every ``--flagfile`` out of the arguments before argparse sees them, so argparse
    meets the flag only abbreviated (``--flagf``), which is refused rather than ignored."""
    parser.add_argument(FLAGFILE, metavar="FILE", type=_spelled_out,
                        help="read more flags from FILE, one --flag=value a line ('#' "
                             "comments; may be repeated); the command line wins over the "
                             "environment, which wins over the files")


def _spelled_out(text: str) -> str:
    raise argparse.ArgumentTypeError(f"spell {FLAGFILE} in full")


def apply_flagfiles(argv: Sequence[str], parser: argparse.ArgumentParser,
                    env: Mapping[str, str] | None = None,
                    env_flags: Mapping[str, str] | None = None) -> list[str]:
    """`argv` with every ``--flagfile FILE`` replaced by the flags FILE holds, less those the
    command line or the environment sets (the module's docstring: command line >
    environment > file). `parser` is the one that will parse the result, subcommands
    included: a file's flag must be one it (or one of its subcommands) knows. `env_flags`
    maps an environment variable to the flag it sets (`CLIENT_ENV_FLAGS` for the client
    commands); a variable counts when it is set and not empty in `env`. Raises
    `FlagfileError`."""
    options = _options(parser)
    cli: list[str] = []
    files: list[str] = []
    args = list(argv)
    i = 0
    while i < len(args):
        token = args[i]
        if token == "--":
            cli.extend(args[i:])
            break
        if token == FLAGFILE or token.startswith(FLAGFILE + "="):
            if token == FLAGFILE:
                if i + 1 >= len(args):
                    raise FlagfileError(f"{FLAGFILE} needs a FILE")
                path = args[i + 1]
                i += 2
            else:
                path = token[len(FLAGFILE) + 1:]
                i += 1
            files.append(path)
            continue
        cli.append(token)
        i += 1
    if not files:
        return cli
    taken = set(_named_keys(cli, options))
    for var, flag in (env_flags or {}).items():
        if (env or {}).get(var) and flag in options:
            taken |= options[flag].keys
    from_files = [token for path in files
                  for flag, token in _read(path, options)
                  if not options[flag].keys & taken]
    # After the command line's own flags (argparse reads optionals anywhere after the
    # subcommand) but before a "--", behind which everything is positional.
    cut = cli.index("--") if "--" in cli else len(cli)
    return cli[:cut] + from_files + cli[cut:]


def read_flagfile(path: str, parser: argparse.ArgumentParser) -> list[str]:
    """The arguments `path` holds, checked against `parser` (for tools and tests)."""
    return [token for _, token in _read(path, _options(parser))]


def _read(path: str, options: Mapping[str, _Option]) -> Iterator[tuple[str, str]]:
    """(flag, argument) for each flag line of `path`."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError as exc:
        raise FlagfileError(f"{FLAGFILE} {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise FlagfileError(f"{FLAGFILE} {path}: not UTF-8 text") from None
    for number, raw in enumerate(lines, 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        where = f"{path}:{number}"
        if not line.startswith("--") or line == "--":
            raise FlagfileError(f"{where}: expected --flag=value, got {_clip(line)!r}")
        flag, eq, value = line.partition("=")
        if flag == FLAGFILE:
            raise FlagfileError(f"{where}: a flagfile cannot name another {FLAGFILE} (give "
                                f"each on the command line)")
        option = options.get(flag)
        if option is None:
            import difflib  # only on this path: every command's start stays lean

            close = difflib.get_close_matches(flag, list(options), n=1)
            hint = f"; did you mean {close[0]}?" if close else ""
            raise FlagfileError(f"{where}: unknown flag {_clip(flag)}{hint}")
        if option.takes_value and not eq:
            raise FlagfileError(f"{where}: {flag} needs a value: {flag}=VALUE")
        if not option.takes_value and eq:
            raise FlagfileError(f"{where}: {flag} takes no value (write {flag} alone)")
        yield flag, (f"{flag}={value}" if option.takes_value else flag)


def _clip(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


def _named_keys(cli: Sequence[str], options: Mapping[str, _Option]) -> Iterator[str]:
    """The keys of every flag the command line names, abbreviations resolved as argparse
    resolves them (a unique prefix)."""
    for token in cli:
        if token == "--":
            return
        if not token.startswith("--"):
            continue
        name = token.partition("=")[0]
        if name in options:
            yield from options[name].keys
            continue
        matches = [o for o in options if o.startswith(name)]
        if len(matches) == 1:
            yield from options[matches[0]].keys


def _options(parser: argparse.ArgumentParser) -> dict[str, _Option]:
    """Every long option `parser` and its subcommands take (help, version and --flagfile
    excluded), merged over the subcommands."""
    found: dict[str, _Option] = {}
    for p in _parsers(parser):
        exclusive: dict[int, frozenset[str]] = {}
        for group in p._mutually_exclusive_groups:
            dests = frozenset(a.dest for a in group._group_actions)
            for a in group._group_actions:
                exclusive[id(a)] = exclusive.get(id(a), frozenset()) | dests
        for action in p._actions:
            if isinstance(action, argparse._HelpAction | argparse._VersionAction):
                continue
            keys = exclusive.get(id(action), frozenset()) | {action.dest}
            takes_value = action.nargs != 0
            for flag in action.option_strings:
                if not flag.startswith("--") or flag == FLAGFILE:
                    continue
                known = found.get(flag)
                if known is not None:
                    keys = keys | known.keys
                    takes_value = takes_value or known.takes_value
                found[flag] = _Option(takes_value, keys)
    return found


def _parsers(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from _parsers(sub)


__all__ = [
    "CLIENT_ENV_FLAGS",
    "FLAGFILE",
    "FlagfileError",
    "add_flagfile_flag",
    "apply_flagfiles",
    "read_flagfile",
]
