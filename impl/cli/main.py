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
  tserver wipe            clear a stopped server's directory: a new UUID (revivify.impl.cli.local)
  local-replica ...       list, purge-quarantine: a server's directory (revivify.impl.cli.local)
  tserver list            the tablet servers the masters hear from (revivify.impl.cli.master)
  tserver retire UUID     move every replica off a tablet server (revivify.impl.cli.moves)
  master status | list | run  the masters (revivify.impl.cli.master, revivify.impl.servers.master)
  master add | remove     a master joins or leaves the catalog's Raft config (cli.moves)
  table ...               create, delete, list, describe tables via the masters
  tablet ...              create, status, change-config, step-down (revivify.impl.cli.admin)
  row ...                 put, get, delete, scan rows of a tablet or table (cli.admin)
  cluster ...             start, status, stop, kill, restart a local cluster (cli.cluster)
  ksck                    a cluster's health, like 'kudu cluster ksck' (cli.ksck)

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

USAGE = """usage: revivify COMMAND [ARGS...]

commands:
  prove       prove the spec's invariants with z3 (inductive + bounded model checking)
  explore     enumerate every reachable spec state within bounds and check invariants
  trace       check traces against the spec: 'trace check PATH...',
              'trace follow PATH...' (live) or 'trace validate PATH... --engine spark';
              'trace minimize PATH... --out CASE_DIR' (a finding into a corpus case)
  history     'history check FILE --model register|kv': is a client history linearizable?
  tserver     'tserver status --tserver HOST:PORT', 'tserver run ...' (a tablet server),
              'tserver list --masters HOST:PORT,...' (liveness as the masters see it),
              'tserver retire UUID --masters ...' (move every replica off it),
              'tserver unregister UUID --masters ...' (forget a dead server hosting nothing),
              or 'tserver wipe --fs-root DIR' (a stopped server's directory: a new UUID)
  master      'master status --master HOST:PORT', 'master list --masters ...', 'master run ...'
  table       'table create NAME | delete NAME | alter NAME | list | describe NAME'
              (--masters HOST:PORT,...)
  tablet      'tablet create | status | change-config | step-down' (--tservers HOST:PORT,...)
  row         'row put | get | delete | scan' on a tablet (--tservers ... --tablet ID)
              or a table (--masters ... --table NAME)
  replica     'replica list | delete | copy' on one server (--tserver HOST:PORT)
  copy        'copy list | cancel': the tablet copies running on a server (--tserver)
  local-replica  'local-replica list | purge-quarantine' on a server's directory (--fs-root)
  cluster     'cluster start | status | stop | kill NAME | restart NAME' (--root DIR):
              a local cluster of masters and tablet servers on this machine
  ksck        'ksck --masters ... | --root DIR': masters, tablet servers, tables, tablets

Every command that takes --masters HOST:PORT,... also takes --root DIR (a local cluster's
masters, from DIR/cluster.json); with neither, $REVIVIFY_MASTERS names the masters.

'revivify COMMAND --help' describes each command.
"""


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
    return trace_main(argv)


def _history(argv: list[str]) -> int:
    from revivify.impl.cli.history import history_main

    return history_main(argv)


def _tserver(argv: list[str]) -> int:
    if argv and argv[0] == "list":
        from revivify.impl.cli.master import tserver_list_main

        return tserver_list_main(argv[1:])
    if argv and argv[0] == "retire":
        from revivify.impl.cli.moves import tserver_retire_main

        return tserver_retire_main(argv[1:])
    if argv and argv[0] == "unregister":
        from revivify.impl.cli.master import tserver_unregister_main

        return tserver_unregister_main(argv[1:])
    from revivify.impl.cli.admin import tserver_main

    return tserver_main(argv)


def _master(argv: list[str]) -> int:
    if argv and argv[0] in ("add", "remove"):
        from revivify.impl.cli.moves import master_add_main, master_remove_main

        return (master_add_main if argv[0] == "add" else master_remove_main)(argv[1:])
    from revivify.impl.cli.master import master_main

    return master_main(argv)


def _table(argv: list[str]) -> int:
    from revivify.impl.cli.master import table_main

    return table_main(argv)


def _tablet(argv: list[str]) -> int:
    from revivify.impl.cli.admin import tablet_main

    return tablet_main(argv)


def _row(argv: list[str]) -> int:
    from revivify.impl.cli.admin import row_main

    return row_main(argv)


def _cluster(argv: list[str]) -> int:
    from revivify.impl.cli.cluster import cluster_main

    return cluster_main(argv)


def _ksck(argv: list[str]) -> int:
    from revivify.impl.cli.ksck import ksck_main

    return ksck_main(argv)


def _replica(argv: list[str]) -> int:
    from revivify.impl.cli.replica import replica_main

    return replica_main(argv)


def _copy(argv: list[str]) -> int:
    from revivify.impl.cli.replica import copy_main

    return copy_main(argv)


def _local_replica(argv: list[str]) -> int:
    from revivify.impl.cli.local import local_replica_main

    return local_replica_main(argv)


COMMANDS: dict[str, Callable[[list[str]], int]] = {
    "prove": _prove,
    "explore": _explore,
    "trace": _trace,
    "history": _history,
    "tserver": _tserver,  # 'tserver run' hands over to revivify.impl.servers.tserver:run_main
    "master": _master,
    "table": _table,
    "tablet": _tablet,
    "row": _row,
    "replica": _replica,
    "copy": _copy,
    "local-replica": _local_replica,
    "cluster": _cluster,
    "ksck": _ksck,
}


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help", "help"):
        print(USAGE, end="")
        return 0 if args else 2
    if args[0] in ("--version", "version"):
        print(f"revivify {_version()}")
        return 0
    command = COMMANDS.get(args[0])
    if command is None:
        import difflib  # only on this path: the CLI's start stays lean

        close = difflib.get_close_matches(args[0], list(COMMANDS), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        print(f"revivify: unknown command {args[0]!r}{hint}\n\n{USAGE}", end="",
              file=sys.stderr)
        return 2
    try:
        code = command(args[1:])
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
