"""The ``revivify`` command.

Subcommands:
  prove                   z3 proofs of the spec (revivify.checker.prove)
  explore                 exhaustive bounded exploration of the spec (revivify.checker.explore)
  trace check PATH...     replay traces against the spec, single process (--state FILE:
                          resume from and save to FILE)
  trace follow PATH...    the same while servers write them, findings as they come
  trace validate PATH...  the same on Spark (--engine spark)
  trace minimize PATH...  shrink a violating trace set to a corpus case (--out CASE_DIR)
  history check FILE      is a client history linearizable? (revivify.impl.cli.history)
  tserver status | run    a tablet server's state; run one (revivify.impl.servers.tserver)
  tserver wipe            clear a stopped server's directory: a new UUID (cli.tserver)
  local-replica ...       list, purge-quarantine: a server's directory (cli.local_replica)
  tserver list            the tablet servers the masters hear from (revivify.impl.cli.tserver)
  tserver retire UUID     move every replica off a tablet server (revivify.impl.cli.moves)
  master status | list | run  the masters (revivify.impl.cli.master, revivify.impl.servers.master)
  master add | remove     a master joins or leaves the catalog's Raft config (cli.moves)
  table ...               create, delete, list, describe tables via the masters (cli.table)
  tablet ...              create, status, change-config, step-down (revivify.impl.cli.tablet)
  row ...                 put, get, delete, scan rows of a tablet or table (cli.row)
  cluster ...             start, status, stop, kill, restart a local cluster (cli.cluster)
  ksck                    a cluster's health, like 'kudu cluster ksck' (cli.ksck)
  completion bash | zsh   a shell completion script: nouns, verbs, flags (cli.completion)

The CLI is the one part of impl/ that may call the checker (docs/sources.md, "The
implementation never imports the spec"): the servers never do.

Optional extras: a tablet server and the client install without the checker's heavy
dependencies (pyproject.toml: base dependencies only). ``prove``, ``explore`` and ``trace``
need the ``check`` extra (z3-solver, hypothesis: the spec evaluates its guards with z3), and
``trace validate --engine spark`` needs the ``spark`` extra too (pyspark, pyarrow, pandas).
Every import of the checker, z3, Hypothesis or Spark is made here lazily, inside the
command that needs it, so ``revivify --help``, ``tserver``, ``tablet``, ``row``, ``replica``,
``copy`` and ``local-replica`` never load them; a command whose extra is missing exits 2
with one line naming it: ``pip install 'revivify[check]'``.

Exit codes: 0 success, 1 a check failed (a violation, a failed proof), 2 unusable input or
bad arguments. Errors are one line naming what was wrong, never a traceback.

Output into a pipe that closes early (``revivify ... | head``): the command stops quietly,
exit 141 (128 + SIGPIPE, what a program killed by SIGPIPE reports), no traceback. It is
handled here once for every command; the servers keep Python's default (SIGPIPE ignored,
EPIPE an error on the socket it concerns).
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import NamedTuple

# The import name of each module an optional extra provides -> that extra's name
# (pyproject.toml [project.optional-dependencies]).
EXTRA_OF_MODULE: dict[str, str] = {
    "z3": "check",
    "hypothesis": "check",
    "pyspark": "spark",
    "pyarrow": "spark",
    "pandas": "spark",
}


class MissingExtra(Exception):
    """A command needs `module`, which the optional extra `extra` installs."""

    def __init__(self, command: str, module: str, extra: str) -> None:
        super().__init__(f"revivify {command}: needs the '{extra}' extra ({module} is not "
                         f"installed): pip install 'revivify[{extra}]'")
        self.command = command
        self.module = module
        self.extra = extra


@contextlib.contextmanager
def _extras(command: str, *needs: str) -> Iterator[None]:
    """Around a command's lazy imports: MissingExtra when one of the modules in `needs` is
    not installed (checked first, importing none), or when an import inside the block fails
    for want of an extra's module."""
    for module in needs:
        if importlib.util.find_spec(module) is None:
            raise MissingExtra(command, module, EXTRA_OF_MODULE[module])
    try:
        yield
    except ModuleNotFoundError as exc:
        root = (exc.name or "").split(".")[0]
        if root not in EXTRA_OF_MODULE:
            raise
        raise MissingExtra(command, root, EXTRA_OF_MODULE[root]) from None


def _prove(argv: list[str]) -> int:
    with _extras("prove", "z3"):
        from revivify.checker.prove import prove_main
    return prove_main(argv)


def _explore(argv: list[str]) -> int:
    with _extras("explore", "z3"):
        from revivify.checker.explore import explore_main
    return explore_main(argv)


def _wants_spark(argv: list[str]) -> bool:
    """Whether ``trace validate`` is asked for the Spark engine (--engine spark, or
    --engine=spark, or an abbreviation argparse would accept)."""
    if not argv or argv[0] != "validate":
        return False
    for i, token in enumerate(argv):
        flag, eq, value = token.partition("=")
        if len(flag) >= 3 and "--engine".startswith(flag):
            if eq:
                return value == "spark"
            return i + 1 < len(argv) and argv[i + 1] == "spark"
    return False


def _trace(argv: list[str]) -> int:
    # The spec, which every trace check replays through, evaluates its guards with z3.
    needs = ["z3"] + (["pyspark", "pyarrow", "pandas"] if _wants_spark(argv) else [])
    with _extras("trace", *needs):
        from revivify.checker.cli import trace_main
    if argv[:1] == ["follow"] and any(a == "--web" or a.startswith("--web=") for a in argv):
        from . import follow_web  # the follower's pages: impl/web's, handed to the checker

        return trace_main(argv, web=follow_web)
    return trace_main(argv)


class Verb(NamedTuple):
    """One verb of a noun: its name, its line in the usage text, and the function of the
    noun's module that runs it with the arguments after the verb ("" when the noun's own
    `main` parses every verb: its argparse subcommands)."""

    name: str
    summary: str
    function: str = ""


class Noun(NamedTuple):
    """One command of ``revivify``: the module under revivify.impl.cli that holds it (or
    a function of this module, "main:NAME", for the checker's commands) and its verbs."""

    name: str
    summary: str
    target: str
    verbs: tuple[Verb, ...] = ()


# The one table of commands: dispatch, the usage text, did-you-mean and shell completion
# are all built from it. A noun's module is imported only when that noun runs.
COMMAND_TABLE: tuple[Noun, ...] = (
    Noun("prove", "prove the spec's invariants with z3 (inductive + bounded model checking)",
         "main:_prove"),
    Noun("explore", "enumerate every reachable spec state within bounds and check invariants",
         "main:_explore"),
    Noun("trace", "check traces against the spec", "main:_trace", (
        Verb("check", "PATH...: replay traces, single process (--state FILE to resume)"),
        Verb("follow", "PATH...: the same while servers write them (live)"),
        Verb("validate", "PATH... --engine spark: the same on Spark"),
        Verb("minimize", "PATH... --out CASE_DIR: a finding shrunk into a corpus case"))),
    Noun("history", "is a client history linearizable?", "history:history_main", (
        Verb("check", "FILE --model register|kv"),)),
    Noun("tserver", "a tablet server", "tserver", (
        Verb("status", "--tserver HOST:PORT: its UUID, address and replicas", "status_main"),
        Verb("run", "run one ('revivify tserver run --help' for its flags)", "run_main"),
        Verb("list", "--masters ...: liveness as the masters see it", "tserver_list_main"),
        Verb("retire", "UUID --masters ...: move every replica off it",
             "tserver_retire_main"),
        Verb("unregister", "UUID --masters ...: forget a dead server hosting nothing",
             "tserver_unregister_main"),
        Verb("wipe", "--fs-root DIR: a stopped server's directory, next start = new UUID",
             "tserver_wipe_main"))),
    Noun("master", "the masters", "master", (
        Verb("status", "--master HOST:PORT: role, term, leader, readiness", "master_main"),
        Verb("list", "--masters ...: every master's role and term", "master_main"),
        Verb("run", "run one ('revivify master run --help' for its flags)", "master_main"),
        Verb("add", "HOST:PORT --masters ...: a master joins the catalog's Raft config",
             "master_add_main"),
        Verb("remove", "UUID --masters ...: a master leaves it", "master_remove_main"))),
    Noun("table", "tables, via the masters (--masters HOST:PORT,... or --root DIR)",
         "table:table_main", (
             Verb("create", "NAME [--tablets N] [--replicas R]"),
             Verb("delete", "NAME"),
             Verb("alter", "NAME [--add-column COL[:TYPE]] [--drop-column COL] [--rename N]"),
             Verb("list", "[--freshness SECONDS]"),
             Verb("describe", "NAME [--freshness SECONDS]"))),
    Noun("tablet", "a tablet's replicas (--tservers HOST:PORT,... or --masters ... / --root)",
         "tablet:tablet_main", (
             Verb("create", "--tservers ... [--replicas N]"),
             Verb("status", "--tablet ID: every replica's answer, role, term, OpIds"),
             Verb("change-config", "--tablet ID add|remove|promote UUID [HOST:PORT]"),
             Verb("step-down", "--tablet ID [--new-leader UUID]"))),
    Noun("row", "rows of a tablet (--tservers, --tablet) or a table (--masters, --table)",
         "row:row_main", (
             Verb("put", "KEY VALUE | KEY --value-file FILE|-"),
             Verb("get", "KEY"),
             Verb("delete", "KEY"),
             Verb("scan", "[--start K] [--end K] [--limit N]"))),
    Noun("replica", "one server's replicas (--tserver HOST:PORT)", "replica:replica_main", (
        Verb("list", "lifecycle state, role, term, committed index, config index"),
        Verb("delete", "--tablet ID [--mode tombstone|deleted]"),
        Verb("copy", "--from HOST:PORT --to HOST:PORT --tablet ID [--wait]"))),
    Noun("copy", "the tablet copies running on a server (--tserver HOST:PORT)",
         "copy:copy_main", (
             Verb("list", "phase, MB done / total, MB/s"),
             Verb("cancel", "--tablet ID: the replica becomes a tombstone"))),
    Noun("local-replica", "a server's directory, offline (--fs-root DIR)",
         "local_replica:local_replica_main", (
             Verb("list", "data state, term/vote, WAL, quarantine"),
             Verb("purge-quarantine", "[--tablet ID] [--dry-run]"))),
    Noun("cluster", "a local cluster of masters and tablet servers (--root DIR)",
         "cluster:cluster_main", (
             Verb("start", "[--num-masters N] [--num-tservers N]"),
             Verb("status", "every server: name, UUID, address, pid, alive, web, logs"),
             Verb("stop", "SIGTERM every server"),
             Verb("kill", "NAME: SIGKILL one server"),
             Verb("restart", "NAME: start it again"))),
    Noun("ksck", "a cluster's health, like 'kudu cluster ksck' (--masters ... | --root DIR)",
         "ksck:ksck_main"),
    Noun("completion", "a shell completion script: nouns, verbs and flags",
         "main:_completion", (
             Verb("bash", "> ~/.local/share/bash-completion/completions/revivify"),
             Verb("zsh", "> FILE, sourced by ~/.zshrc after compinit"))),
)

NOUNS: dict[str, Noun] = {noun.name: noun for noun in COMMAND_TABLE}


def usage() -> str:
    """The top-level usage text, from COMMAND_TABLE."""
    lines = ["usage: revivify COMMAND [ARGS...]", "", "commands:"]
    for noun in COMMAND_TABLE:
        lines.append(f"  {noun.name:<15}{noun.summary}")
        if noun.verbs:
            lines.append(f"  {'':<15}  {' | '.join(verb.name for verb in noun.verbs)}")
    lines += ["",
              "Every command that takes --masters HOST:PORT,... also takes --root DIR (a "
              "local cluster's",
              "masters, from DIR/cluster.json); with neither, $REVIVIFY_MASTERS names the "
              "masters.",
              "",
              "'revivify COMMAND --help' and 'revivify COMMAND VERB --help' describe each "
              "command;",
              "'revivify --version' names the installed version."]
    return "\n".join(lines) + "\n"


def noun_usage(noun: Noun) -> str:
    lines = [f"usage: revivify {noun.name} VERB [ARGS...]", "", noun.summary, "", "verbs:"]
    lines.extend(f"  {verb.name:<18}{verb.summary}" for verb in noun.verbs)
    return "\n".join(lines) + "\n"


def _did_you_mean(word: str, choices: Sequence[str]) -> str:
    import difflib  # only on this path: the CLI's start stays lean

    close = difflib.get_close_matches(word, list(choices), n=1)
    return f"; did you mean {close[0]!r}?" if close else ""


def _function(module_name: str, function: str) -> Callable[[list[str]], int]:
    if module_name == "main":
        found: Callable[[list[str]], int] = globals()[function]
        return found
    # __import__ rather than importlib.import_module, so that -X importtime shows what the
    # noun's module imports nested under it (tests/cli/test_import_budget.py).
    name = f"revivify.impl.cli.{module_name}"
    __import__(name)
    found = getattr(sys.modules[name], function)
    return found


def _run_noun(noun: Noun, argv: list[str]) -> int:
    """Run `noun` with `argv` (after the noun): the verb's own function when it has one,
    else the noun's, which parses its verbs itself."""
    module_name, _, function = noun.target.partition(":")
    verbs = {verb.name: verb for verb in noun.verbs}
    if not function:  # a noun whose verbs are functions of its module
        if argv and argv[0] in ("-h", "--help"):
            print(noun_usage(noun), end="")
            return 0
        if not argv:
            print(f"revivify {noun.name}: the following arguments are required: VERB (one "
                  f"of {', '.join(verbs)})", file=sys.stderr)
            return 2
        verb = verbs.get(argv[0])
        if verb is None:
            return _unknown_verb(noun, argv[0])
        # A verb parsed by a function that takes every verb (master_main) gets the verb too.
        takes_verb = sum(v.function == verb.function for v in noun.verbs) > 1
        return _function(module_name, verb.function)(argv if takes_verb else argv[1:])
    if argv and verbs and not argv[0].startswith("-") and argv[0] not in verbs:
        return _unknown_verb(noun, argv[0])
    return _function(module_name, function)(argv)


def _unknown_verb(noun: Noun, word: str) -> int:
    verbs = [verb.name for verb in noun.verbs]
    # argparse's words for the same mistake (scripts and tests match them), plus a hint.
    print(f"revivify {noun.name}: invalid choice: {word!r}{_did_you_mean(word, verbs)} "
          f"(choose from {', '.join(verbs)})", file=sys.stderr)
    return 2


def _completion(argv: list[str]) -> int:
    """``revivify completion bash|zsh``: nouns and verbs from COMMAND_TABLE, flags from
    the commands' parsers (completion.py)."""
    from . import completion

    noun = NOUNS["completion"]
    if argv in (["-h"], ["--help"]):
        print(noun_usage(noun), end="")
        return 0
    if len(argv) != 1 or argv[0] not in completion.SHELLS:
        print(f"revivify completion: expected one shell, {' or '.join(completion.SHELLS)}",
              file=sys.stderr)
        return 2
    print(completion.script(argv[0], COMMAND_TABLE, _function), end="")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help", "help"):
        print(usage(), end="")
        return 0 if args else 2
    if args[0] in ("--version", "version"):
        print(f"revivify {_version()}")
        return 0
    noun = NOUNS.get(args[0])
    if noun is None:
        print(f"revivify: unknown command {args[0]!r}{_did_you_mean(args[0], list(NOUNS))}"
              f"\n\n{usage()}", end="", file=sys.stderr)
        return 2
    try:
        code = _run_noun(noun, args[1:])
        sys.stdout.flush()  # a closed pipe shows here, not at exit, where it is a traceback
        return code
    except MissingExtra as exc:
        print(str(exc), file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("revivify: interrupted", file=sys.stderr)
        return 130
    except BaseException as exc:
        if not _only_broken_pipes(exc):
            raise
        _silence_stdout()
        return EXIT_BROKEN_PIPE


def _version() -> str:
    """The installed distribution's version (a source tree without an install: unknown)."""
    import importlib.metadata

    try:
        return importlib.metadata.version("revivify")
    except importlib.metadata.PackageNotFoundError:
        return "unknown (not installed)"


EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE


def _only_broken_pipes(exc: BaseException) -> bool:
    """Whether `exc` is a BrokenPipeError, or a group (trio) of nothing else."""
    if isinstance(exc, BaseExceptionGroup):
        return all(_only_broken_pipes(e) for e in exc.exceptions)
    return isinstance(exc, BrokenPipeError)


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's last flush of what is still buffered
    does not fail again at exit (Python's documented recipe for SIGPIPE)."""
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


if __name__ == "__main__":
    raise SystemExit(main())
