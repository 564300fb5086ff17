"""``revivify trace ...``: check traces against the spec.

  revivify trace check PATH... [--json] [--max-frontier K] [--state FILE] [--html FILE]
  revivify trace follow PATH... [--until-idle SECONDS] [--json] [--max-frontier K]
                               [--web HOST:PORT]
  revivify trace validate PATH... --engine {local,spark} [--master URL] [--out DIR]
                                  [--json] [--max-frontier K] [--partitions N]
                                  [--plan {files,dataframe}] [--global-in-spark]
                                  [--checkpoint DIR]
  revivify trace minimize PATH... --out CASE_DIR [--name NAME] [--description TEXT]
                                  [--kind KIND] [--max-tests N] [--quiet]

``follow`` tails the trace files under the paths as servers write them (checker/follow.py:
when each finding is printed) until SIGINT or SIGTERM, or with ``--until-idle`` until no
file grew for that long; then it prints the final verdict as ``check`` does. With ``--web``
it serves its page, JSON twin and ``/metrics`` there (impl/cli/follow_web.py, handed in as
``web``: the checker never imports impl) and prints
``revivify follower web on http://HOST:PORT`` first. ``minimize``
shrinks a violating trace set to a small case in the corpus format (checker/minimize.py;
exit 0 minimized, 1 no finding to minimize, 2 bad input). ``check
--state FILE`` resumes from the state a previous ``check --state FILE`` saved and saves its
own (checker/resume.py); a state it cannot use is one line, exit 2. ``check --html FILE``
also writes each finding as a timeline page (checker/timeline.py), whatever the verdict.

Exit codes: 0 clean (warnings allowed), 1 violations, 2 unusable input or bad arguments.
Every failure is reported as a message naming the file, line and field; never a traceback.
A run longer than five seconds reports its progress on stderr every five seconds (files and
bytes read for ``check``, Spark tasks done for ``validate --engine spark``); ``--quiet``
silences it.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from revivify.checker.replay import DEFAULT_MAX_FRONTIER, Violation

if TYPE_CHECKING:
    from revivify.checker.report import Report


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise _UsageError(f"{self.prog}: {message}")


class _UsageError(Exception):
    pass


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="revivify trace", description="check traces against the spec")
    sub = p.add_subparsers(dest="cmd", required=True, metavar="{check,validate,follow,minimize}")
    for name in ("check", "validate", "follow"):
        s = sub.add_parser(name, help=f"trace {name}")
        s.add_argument("paths", nargs="*", metavar="PATH")
        s.add_argument("--json", action="store_true", help="machine-readable report")
        s.add_argument("--quiet", action="store_true",
                       help="no progress lines on stderr during a long run")
        s.add_argument("--max-frontier", type=int, default=DEFAULT_MAX_FRONTIER,
                       help="unlogged steps accepted per key before a crash (default "
                            f"{DEFAULT_MAX_FRONTIER}: the writer loses at most the event "
                            "of the step in flight)")
        if name == "check":
            s.add_argument("--state", default=None, metavar="FILE",
                           help="resume from FILE (if it exists) and save there what a "
                                "later run needs to go on from here")
            s.add_argument("--html", default=None, metavar="FILE",
                           help="also write the findings as one self-contained HTML page "
                                "(a timeline of the servers around each)")
        if name == "follow":
            s.add_argument("--until-idle", type=float, default=None, metavar="SECONDS",
                           help="exit once no trace file grew for SECONDS (default: run "
                                "until SIGINT or SIGTERM)")
            s.add_argument("--interval", type=float, default=0.15, metavar="SECONDS",
                           help="how often the files are polled (default 0.15)")
            s.add_argument("--web", default=None, metavar="HOST:PORT",
                           help="serve the follower's page, /api/v1/follower and /metrics "
                                "here (port 0: any free port; the address is printed)")
        if name == "validate":
            s.add_argument("--engine", choices=("local", "spark"), default="local")
            s.add_argument("--master", "--spark-master", dest="master", default="local[*]",
                           metavar="URL",
                           help="Spark master URL: local[*] (the default), local[N], "
                                "spark://HOST:PORT (a standalone cluster), yarn, ...")
            s.add_argument("--out", default=None, help="write report.json and Parquet here")
            s.add_argument("--checkpoint", default=None, metavar="DIR",
                           help="--engine spark, files plan: resume from DIR and save "
                                "there what a later run needs (a path every worker "
                                "shares)")
            s.add_argument("--partitions", type=int, default=0,
                           help="Spark tasks (default 4 x the cores)")
            s.add_argument("--plan", choices=("files", "dataframe"), default="files",
                           help="files: each task reads whole nodes' files (no shuffle; "
                                "the default); dataframe: Spark reads the lines and "
                                "shuffles them to the tasks by node")
            g = s.add_mutually_exclusive_group()
            g.add_argument("--global-in-spark", action="store_true", default=None,
                           help="global checks as Spark aggregations over the facts "
                                "(the dataframe plan's default)")
            g.add_argument("--global-on-driver", dest="global_in_spark",
                           action="store_false",
                           help="global checks merged on the driver (the files plan's "
                                "default)")
    from revivify.checker.minimize import add_parser as add_minimize

    add_minimize(sub)
    return p


class WebFront(Protocol):
    """What ``trace follow --web`` needs of the pages' module (impl/cli/follow_web.py)."""

    def parse_bind(self, text: str) -> tuple[str, int]: ...

    def follow_web(self, paths: list[str], tell: Callable[[Violation], None], host: str,
                   port: int, *, until_idle: float | None, interval: float,
                   max_frontier: int, progress: Callable[[str], None] | None,
                   progress_seconds: float) -> Report: ...


def trace_main(argv: list[str], web: WebFront | None = None) -> int:
    try:
        args = _parser().parse_args(argv)
    except _UsageError as e:
        print(str(e), file=sys.stderr)
        return 2
    except SystemExit as e:  # --help
        return 0 if e.code in (0, None) else 2
    if args.cmd == "minimize":
        from revivify.checker.minimize import minimize_main

        return minimize_main(args)
    if not args.paths:
        print(f"revivify trace {args.cmd}: no PATH given", file=sys.stderr)
        return 2
    if args.max_frontier < 0:
        print("revivify trace: --max-frontier must be >= 0", file=sys.stderr)
        return 2
    if _missing(args.cmd, args.paths):
        return 2
    if not _html_dir_ok(args):
        return 2
    t0 = time.perf_counter()
    every = float(os.environ.get("REVIVIFY_PROGRESS_SECONDS", "5"))

    def say(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    say_progress = None if args.quiet else say
    if args.cmd == "follow":
        return _follow(args, say_progress, every, web)
    try:
        if args.cmd == "check" and args.state:
            report = _check_state(args.paths, args.state, args.max_frontier)
        elif args.cmd == "validate" and args.checkpoint:
            report = _validate_checkpoint(args)
        elif args.cmd == "validate" and args.engine == "spark":
            from revivify.checker.spark import validate_spark

            report = validate_spark(args.paths, master=args.master, out=args.out,
                                    max_frontier=args.max_frontier,
                                    partitions=args.partitions or None,
                                    global_in_spark=args.global_in_spark,
                                    plan=args.plan, progress=say_progress,
                                    progress_seconds=every)
        else:
            from revivify.checker.local import check_paths

            report = check_paths(
                args.paths, max_frontier=args.max_frontier, progress_seconds=every,
                progress=None if args.quiet else (
                    lambda p: say(p.line(f"trace {args.cmd}"))))
            if getattr(args, "out", None):
                from revivify.checker.spark import write_report_files

                write_report_files(report, args.out, parquet=False)
    except KeyboardInterrupt:
        raise
    except _StateRefused as e:
        print(f"revivify trace {args.cmd}: {e}", file=sys.stderr)
        return 2
    except Exception as e:  # the last line of defence: a message, not a traceback
        print(f"revivify trace {args.cmd}: internal error: {type(e).__name__}: {e}",
              file=sys.stderr)
        return 2
    report.timings.setdefault("total_s", round(time.perf_counter() - t0, 3))
    if args.json:
        print(report.dumps())
    else:
        print(report.text())
    if getattr(args, "html", None) and not _write_html(args.html, report, args.paths):
        return 2
    return report.exit_code()


def _html_dir_ok(args: argparse.Namespace) -> bool:
    """``--html FILE`` whose directory does not exist: one line, exit 2, before the check."""
    html = getattr(args, "html", None)
    if html is None:
        return True
    where = os.path.dirname(os.path.abspath(html))
    if html and not os.path.isdir(html) and os.path.isdir(where):
        return True
    print(f"revivify trace {args.cmd}: --html {html}: "
          f"{'is a directory' if html and os.path.isdir(html) else 'no such directory'}",
          file=sys.stderr)
    return False


def _write_html(path: str, report: Report, paths: list[str]) -> bool:
    from revivify.checker.timeline import write_report_html

    try:
        write_report_html(path, report, paths)
    except OSError as e:
        print(f"revivify trace check: --html {path}: {e.strerror or e}", file=sys.stderr)
        return False
    return True


def _missing(cmd: str, paths: list[str]) -> bool:
    """A PATH that does not exist is unusable input: one line each, exit 2, before any
    check (not a MissingPath finding inside a whole report, coverage and all)."""
    missing = [p for p in paths if not os.path.exists(p)]
    for path in missing:
        print(f"revivify trace {cmd}: {path}: no such file or directory", file=sys.stderr)
    return bool(missing)


class _StateRefused(Exception):
    pass


def _check_state(paths: list[str], state: str, max_frontier: int) -> Report:
    """``check --state``: restore, read on, save the state, then judge (the save comes
    before ``finish``, which ends every file: checker/resume.py)."""
    from revivify.checker.resume import StateError, check_resumed, dumps, write_state

    try:
        fol = check_resumed(paths, state, max_frontier)
    except StateError as e:
        raise _StateRefused(str(e)) from e
    data = dumps(fol)
    report = fol.finish()
    try:
        write_state(state, data)
    except OSError as e:
        raise _StateRefused(f"{state}: cannot save the state: {e.strerror or e}") from e
    return report


def _validate_checkpoint(args: argparse.Namespace) -> Report:
    """``validate --engine spark --checkpoint DIR`` (checker/spark_resume.py)."""
    if args.engine != "spark" or args.plan != "files" or args.global_in_spark:
        raise _StateRefused("--checkpoint needs --engine spark with the files plan and "
                            "the global checks on the driver")
    from revivify.checker.resume import StateError
    from revivify.checker.spark import spark_session, write_report_files
    from revivify.checker.spark_resume import validate_spark_resumed

    os.makedirs(args.checkpoint, exist_ok=True)
    spark = spark_session(args.master)
    try:
        report = validate_spark_resumed(args.paths, args.checkpoint, spark,
                                        max_frontier=args.max_frontier,
                                        partitions=args.partitions or None)
    except StateError as e:
        raise _StateRefused(str(e)) from e
    finally:
        spark.stop()
    if args.out:
        write_report_files(report, args.out, parquet=False)
    return report


def _follow(args: argparse.Namespace, say: Callable[[str], None] | None,
            every: float, front: WebFront | None) -> int:
    """``trace follow``: tell each finding as it is found, the verdict at the end."""
    from revivify.checker.follow import follow
    from revivify.checker.report import format_violation

    web: tuple[str, int] | None = None
    if args.web is not None:
        if front is None:
            print("revivify trace follow: --web needs the revivify command's pages "
                  "(revivify.impl.cli); this entry point has none", file=sys.stderr)
            return 2
        try:
            web = front.parse_bind(args.web)
        except ValueError as e:
            print(f"revivify trace follow: --web: {e}", file=sys.stderr)
            return 2
    stop: list[int] = []

    def on_signal(signum: int, _frame: object) -> None:
        stop.append(signum)

    old = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}

    def tell(v: Violation) -> None:
        if args.json:
            print(json.dumps({"finding": v.to_json()}, default=str), flush=True)
        else:
            print(format_violation(v), flush=True)

    try:
        if web is not None and front is not None:
            report = front.follow_web(args.paths, tell, web[0], web[1],
                                until_idle=args.until_idle, interval=args.interval,
                                max_frontier=args.max_frontier, progress=say,
                                progress_seconds=every)
        else:
            report = follow(args.paths, tell, lambda: bool(stop),
                            until_idle=args.until_idle, interval=args.interval,
                            max_frontier=args.max_frontier, progress=say,
                            progress_seconds=every)
    except OSError as e:  # the web port: taken, or an address not of this machine
        print(f"revivify trace follow: --web {args.web}: {e.strerror or e}",
              file=sys.stderr)
        return 2
    except Exception as e:  # the last line of defence: a message, not a traceback
        print(f"revivify trace follow: internal error: {type(e).__name__}: {e}",
              file=sys.stderr)
        return 2
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
    if args.json:
        print(json.dumps({"report": report.to_json()}, default=str))
    else:
        print(report.text())
    return report.exit_code()
