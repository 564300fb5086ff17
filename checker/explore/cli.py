"""``revivify explore``: the command line over ``explore``."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import Final, NoReturn

import attrs

from revivify.spec.actions import Bounds
from revivify.spec.system import Spec, default_spec

from .moves import MAX_BUDGET
from .results import ExploreProgress, ExplorerError, ExploreResult
from .search import explore
from .symmetry import MAX_SERVERS

# The default: two terms (a stale leader, a leader that stepped down, a tombstone voting in a
# later term) and one log entry (an entry committed, then a deletion and a copy that must not
# lose it: CommittedNeverLost, CommittedInLaterLeaders), with two lifecycle requests (a
# DeleteTablet and a StartTabletCopy of the tombstone, or a StartTabletCopy of a READY
# replica, or a config change and one of those) and one in flight at a time; no crash and
# no fault. 1.9 million states, about two minutes and a half on one core. The complementary
# run ``--max-term 1 --crashes 1 --wipes 1`` (1.5 million states, about a minute and a
# half) adds crashes, startups, wipes, damage, the drop and full deletes, and aborted
# copies: every action but create_tablet (the initial state has the tablet created
# everywhere) fires. Measured figures are in README.md.
DEFAULT_SERVERS: Final = 3
DEFAULT_BOUNDS: Final = Bounds(max_term=2, max_index=1, max_crashes=0, max_wipes=0,
                               max_ops_in_flight=1, max_requests=2)
ENGINES: Final = ("local", "spark")

USAGE: Final = """usage: revivify explore [--servers N] [--max-term T] [--max-index I] [--crashes C]
                        [--wipes W] [--requests R] [--in-flight F] [--mutant NAME]
                        [--max-states M] [--no-symmetry] [--workers N]
                        [--engine local|spark] [--master URL] [--json] [--quiet]"""


class _ArgError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise _ArgError(message)


def _parser() -> _Parser:
    d = DEFAULT_BOUNDS
    p = _Parser(
        prog="revivify explore", usage=USAGE.removeprefix("usage: "),
        description="Enumerate every reachable state of the spec within bounds, check every "
                    "invariant in every state and every step property on every transition.",
        epilog="Exit status: 0 no violation, 1 a violation (the shortest counterexample is "
               "printed), 2 bad arguments.")
    p.add_argument("--servers", type=int, default=DEFAULT_SERVERS,
                   help=f"servers hosting the tablet (default {DEFAULT_SERVERS})")
    p.add_argument("--max-term", type=int, default=d.max_term,
                   help=f"highest Raft term an election may reach (default {d.max_term})")
    p.add_argument("--max-index", type=int, default=d.max_index,
                   help=f"highest log index a leader may append (default {d.max_index})")
    p.add_argument("--crashes", type=int, default=d.max_crashes,
                   help=f"crashes allowed per run, over all servers (default {d.max_crashes})")
    p.add_argument("--wipes", type=int, default=d.max_wipes,
                   help=f"faults (wipes, damage, the table's drop, aborted copies) allowed "
                        f"per run (default {d.max_wipes})")
    p.add_argument("--requests", type=int, default=d.max_requests,
                   help=f"requests (DeleteTablet, StartTabletCopy accepted, full delete, "
                        f"ChangeConfig accepted) allowed per run (default {d.max_requests})")
    p.add_argument("--in-flight", type=int, default=d.max_ops_in_flight,
                   help=f"lifecycle requests are sent only while fewer than this many other "
                        f"servers have one in flight (default {d.max_ops_in_flight})")
    p.add_argument("--mutant", default=None,
                   help="explore a deliberately broken spec variant (see spec.mutants)")
    p.add_argument("--max-states", type=int, default=None,
                   help="stop after this many distinct states (the result is then partial)")
    p.add_argument("--no-symmetry", action="store_true",
                   help="explore every state, not one per permutation of the servers")
    p.add_argument("--workers", type=int, default=1,
                   help="processes that share the search (local engine; default 1: this one)")
    p.add_argument("--engine", choices=ENGINES, default="local",
                   help="local (this machine, --workers processes) or spark (a Spark job, "
                        "for bounds that outgrow one machine; default local)")
    p.add_argument("--master", default=None,
                   help="the Spark master of --engine spark (default local[*])")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    return p


def _table(rows: list[tuple[str, str]]) -> str:
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"  {k:<{width}}  {v:>12}" for k, v in rows)


def format_result(result: ExploreResult, spec: Spec, bounds: Bounds) -> str:
    lines = [
        f"revivify explore: {spec.n_servers} servers, max term {bounds.max_term}, "
        f"max index {bounds.max_index}, crashes {bounds.max_crashes}, "
        f"wipes {bounds.max_wipes}, requests {bounds.max_requests}, "
        f"in flight {bounds.max_ops_in_flight}, symmetry {'on' if result.symmetry else 'off'}, "
        f"engine {result.engine}"
        + (f", {result.workers} workers" if result.workers > 1 else ""),
        _table([
            ("distinct states", f"{result.distinct_states:,}"),
            ("transitions", f"{result.transitions:,}"),
            ("depth", str(result.depth)),
            ("seconds", f"{result.seconds:.2f}"),
            ("states/s", f"{result.states_per_second:,.0f}"),
            ("server states", f"{result.server_states:,}"),
        ]),
        "frontier by level (new states at each depth): "
        + ", ".join(f"{n:,}" for n in result.levels),
        "coverage (transitions per action):",
    ]
    width = max(len(a) for a in result.coverage)
    for name, count in result.coverage.items():
        flag = "  DEAD (never enabled)" if count == 0 else ""
        lines.append(f"  {name:<{width}}  {count:>12,}{flag}")
    if result.dead_actions:
        lines.append(f"dead actions: {', '.join(result.dead_actions)}")
    if result.violation is not None:
        lines.append("VIOLATION: " + result.violation.describe())
    else:
        done = "all reachable states" if result.complete else "a partial search (--max-states)"
        lines.append(f"no violation: {len(spec.invariants)} invariants and "
                     f"{len(spec.step_properties)} step properties hold in {done}")
    return "\n".join(lines)


def _explore_spark(spec: Spec, bounds: Bounds, master: str, max_states: int | None,
                   progress: Callable[[ExploreProgress], None] | None,
                   symmetry: bool) -> ExploreResult:
    from revivify.checker.spark import spark_session

    from .sparkjob import explore_spark

    spark = spark_session(master)
    try:
        return explore_spark(spec, bounds, spark, max_states=max_states, progress=progress,
                             symmetry=symmetry)
    finally:
        spark.stop()


def explore_main(argv: list[str], spec: Spec | None = None) -> int:
    """``revivify explore``: exit 0 clean, 1 on a violation, 2 on bad arguments."""
    try:
        args = _parser().parse_args(argv)
        for name in ("servers", "max_term", "max_index", "crashes", "wipes", "requests",
                     "in_flight"):
            if getattr(args, name) < 0:
                raise _ArgError(f"--{name.replace('_', '-')} must be >= 0")
        if args.servers < 1:
            raise _ArgError("--servers must be >= 1")
        if not args.no_symmetry and args.servers > MAX_SERVERS:
            raise _ArgError(f"--servers above {MAX_SERVERS} needs --no-symmetry")
        if max(args.crashes, args.wipes, args.requests) > MAX_BUDGET:
            raise _ArgError(f"--crashes, --wipes and --requests must be at most {MAX_BUDGET}")
        if args.max_states is not None and args.max_states < 1:
            raise _ArgError("--max-states must be >= 1")
        if args.workers < 1:
            raise _ArgError("--workers must be >= 1")
        if args.engine == "spark" and args.workers != 1:
            raise _ArgError("--workers is for the local engine (Spark's parallelism is its "
                            "master's: --master)")
        if args.master is not None and args.engine != "spark":
            raise _ArgError("--master needs --engine spark")
    except _ArgError as e:
        print(f"revivify explore: error: {e}", file=sys.stderr)
        return 2
    if spec is None and args.mutant:
        from revivify.spec.mutants import MUTANTS

        if args.mutant not in MUTANTS:
            print(f"revivify explore: error: unknown mutant {args.mutant!r}; known: "
                  f"{', '.join(sorted(MUTANTS))}", file=sys.stderr)
            return 2
        spec = MUTANTS[args.mutant].build(args.servers)
    if spec is None:
        spec = default_spec(args.servers)
    else:
        spec = attrs.evolve(spec, n_servers=args.servers)
    bounds = Bounds(max_term=args.max_term, max_index=args.max_index,
                    max_crashes=args.crashes, max_wipes=args.wipes,
                    max_ops_in_flight=args.in_flight, max_requests=args.requests)

    def report(p: ExploreProgress) -> None:
        rate = f"{p.distinct_states / max(p.seconds, 1e-9):,.0f} states/s"
        if p.level is not None:
            print(f"explore: level {p.level}: {p.frontier:,} new states; "
                  f"{p.distinct_states:,} states, {p.transitions:,} transitions, "
                  f"{p.seconds:.0f}s ({rate})", file=sys.stderr, flush=True)
        else:
            print(f"explore: {p.distinct_states:,} states, {p.transitions:,} transitions, "
                  f"depth {p.depth}, frontier {p.frontier:,}, {p.seconds:.0f}s ({rate})",
                  file=sys.stderr, flush=True)

    progress = None if args.quiet or args.json else report
    try:
        if args.engine == "spark":
            result = _explore_spark(spec, bounds, args.master or "local[*]", args.max_states,
                                    progress, not args.no_symmetry)
        else:
            result = explore(spec, bounds, max_states=args.max_states, progress=progress,
                             symmetry=not args.no_symmetry, workers=args.workers)
    except ExplorerError as e:
        # A spec that cannot travel to the workers (NotDistributable), a worker that died,
        # or the explorer's own cross-check failing: one line that says which, exit 2.
        print(f"revivify explore: error: {e}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(result.to_json(), indent=2))
    else:
        print(format_result(result, spec, bounds))
    return 1 if result.violation is not None else 0


__all__ = ["DEFAULT_BOUNDS", "DEFAULT_SERVERS", "explore_main", "format_result"]
