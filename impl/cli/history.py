"""``revivify history check``: is a recorded client history linearizable?

  revivify history check FILE --model register|kv [--format jsonl|jepsen]
                              [--timeout SECONDS] [--json] [--quiet] [--html FILE]

The model: ``register``, one value starting as nil, read, written and compare-and-set;
``kv``, the same per key (each key checked on its own). The format: ``jsonl`` (the
project's, the default) or ``jepsen`` (Jepsen's log lines); both are described in
``revivify.checker.linearizability.formats`` and the README.

Exit codes: 0 linearizable; 1 not linearizable, with the smallest failing window of each
failing key (the operations of a stretch of the history that has no linearization on its
own, as a table, or in ``--json``); 2 unusable input (one line naming the file, the line and
the fault) or no verdict within ``--timeout``. A check longer than a second reports its
progress on stderr every two seconds; ``--quiet`` silences it. ``--html FILE`` also writes
the verdict as one self-contained page, each failing window drawn as a timeline (one lane
per process, operations as bars: ``revivify.checker.history_timeline``).

The algorithm lives in ``revivify.checker.linearizability`` (pure; this module reads the
file and prints).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

from revivify.checker.linearizability import (
    FORMATS,
    CheckResult,
    CheckTimeout,
    History,
    HistoryError,
    Window,
    check_history,
    pair_events,
    read_events,
    show,
)
from revivify.checker.linearizability.history import Argument, Key

from .common import Parser, parse_args

# Progress lines start after this long, then come every PROGRESS_SECONDS.
PROGRESS_AFTER = 1.0
PROGRESS_SECONDS = 2.0


def _parser() -> argparse.ArgumentParser:
    p = Parser(prog="revivify history",
                description="check a recorded client history for linearizability")
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("check", help="is the history linearizable? (exit 0 yes, 1 no)")
    s.add_argument("file", metavar="FILE")
    s.add_argument("--model", choices=("register", "kv"), required=True,
                   help="register: one value starting as nil (read, write, cas); kv: the "
                        "same per key")
    s.add_argument("--format", choices=FORMATS, default="jsonl",
                   help="jsonl (the default: one JSON object per event) or jepsen (Jepsen's "
                        "'INFO  jepsen.util - PROCESS :type :f VALUE' log lines)")
    s.add_argument("--timeout", type=float, default=None, metavar="SECONDS",
                   help="give up (exit 2) without a verdict after this long")
    s.add_argument("--json", action="store_true", help="machine-readable report")
    s.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    s.add_argument("--html", default=None, metavar="FILE",
                   help="also write the verdict as an HTML page (the failing windows drawn)")
    return p


def history_main(argv: list[str]) -> int:
    args = parse_args(_parser(), argv)
    if isinstance(args, int):
        return args
    prog = "revivify history check"
    if args.timeout is not None and args.timeout <= 0:
        print(f"{prog}: --timeout must be positive", file=sys.stderr)
        return 2
    if args.html is not None and (os.path.isdir(args.html) or not os.path.isdir(
            os.path.dirname(os.path.abspath(args.html)))):
        print(f"{prog}: --html {args.html}: "
              f"{'is a directory' if os.path.isdir(args.html) else 'no such directory'}",
              file=sys.stderr)
        return 2
    started = time.monotonic()
    try:
        with open(args.file, encoding="utf-8", newline="") as lines:
            events = read_events(args.file, lines, args.format, keyed=args.model == "kv")
            history = pair_events(args.file, events)
    except HistoryError as e:
        print(f"{prog}: {e}", file=sys.stderr)
        return 2
    except UnicodeDecodeError as e:
        print(f"{prog}: {args.file}: not UTF-8 text ({e.reason} at byte {e.start})",
              file=sys.stderr)
        return 2
    except OSError as e:
        print(f"{prog}: {args.file}: {e.strerror or e}", file=sys.stderr)
        return 2

    def progress(line: str) -> None:
        if time.monotonic() - started >= PROGRESS_AFTER:
            print(f"{prog}: {line}", file=sys.stderr, flush=True)

    remaining = None if args.timeout is None else args.timeout - (time.monotonic() - started)
    try:
        result = check_history(history, timeout=remaining,
                               progress=None if args.quiet else progress,
                               progress_seconds=PROGRESS_SECONDS)
    except CheckTimeout:
        print(f"{prog}: {args.file}: no verdict within {args.timeout:g} s (--timeout)",
              file=sys.stderr)
        return 2
    elapsed = time.monotonic() - started
    if args.json:
        print(json.dumps(_document(args, history, result, elapsed), ensure_ascii=False,
                         separators=(",", ":")))
    else:
        print(_text(args, history, result, elapsed))
    if args.html is not None:
        from revivify.checker.history_timeline import write_history_html

        try:
            write_history_html(args.html, args.file, args.model, history, result)
        except OSError as e:
            print(f"{prog}: --html {args.html}: {e.strerror or e}", file=sys.stderr)
            return 2
    return 0 if result.linearizable else 1


# ---------------------------------------------------------------------------- the report


def _document(args: argparse.Namespace, history: History, result: CheckResult,
              elapsed: float) -> dict[str, Any]:
    return {
        "file": args.file,
        "model": args.model,
        "format": args.format,
        "linearizable": result.linearizable,
        "operations": result.operations,
        "events": history.events,
        "failed_dropped": history.failed,
        "unknown_reads_dropped": history.unknown_reads,
        "keys": len(result.keys),
        "elapsed_s": round(elapsed, 3),
        "failures": [
            {"key": k.key, "operations": k.operations,
             "window": _window_doc(k.window) if k.window is not None else None}
            for k in result.failures
        ],
    }


def _window_doc(window: Window) -> dict[str, Any]:
    return {
        "first_line": window.first_line,
        "last_line": window.last_line,
        "initial_value": "nil" if window.from_nil else "any",
        "minimal": window.minimal,
        "operations": [
            {"process": w.op.process, "f": w.op.f, "value": _json_value(w.op.value),
             "invoke_line": w.op.invoke_line, "complete_line": w.op.complete_line,
             "outcome": "ok" if w.op.ret is not None else "unknown", "role": w.role}
            for w in window.operations
        ],
    }


def _json_value(value: Argument) -> Any:
    return list(value) if isinstance(value, tuple) else value


def _text(args: argparse.Namespace, history: History, result: CheckResult,
          elapsed: float) -> str:
    keys = len(result.keys)
    where = f"{result.operations} operations" + (f" on {keys} keys" if args.model == "kv"
                                                  else "")
    dropped = []
    if history.failed:
        dropped.append(f"{history.failed} failed")
    if history.unknown_reads:
        dropped.append(f"{history.unknown_reads} unknown reads")
    if dropped:
        where += f"; {' and '.join(dropped)} ignored"
    if result.linearizable:
        return (f"{args.file}: linearizable ({args.model} model, {where}, "
                f"{elapsed:.2f} s)")
    failures = result.failures
    out = [f"{args.file}: NOT linearizable ({args.model} model, {where}, {elapsed:.2f} s)"]
    if args.model == "kv":
        out[0] += f": {len(failures)} of {keys} keys fail"
    for k in failures:
        assert k.window is not None
        out.append("")
        out.append(_window_text(args.model, k.key, k.window))
    return "\n".join(out)


ROLE_TEXT = {
    "complete": "",
    "pending": "completes after the window: may take effect in it, or not",
    "straddling": "invoked before the window: may have taken effect before it",
}


def _window_text(model: str, key: Key, window: Window) -> str:
    n = len(window.operations)
    whose = f"key {show(key)}: the" if model == "kv" else "The"
    start = ("from the initial nil" if window.from_nil
             else "from whatever value the register held before it")
    head = (f"{whose} smallest failing window is lines {window.first_line}-"
            f"{window.last_line} ({n} operation{'s' if n != 1 else ''}): no order of "
            f"them, {start}, gives every result")
    if not window.minimal:
        head += " (the search for a smaller window ran out of time)"
    rows = [("process", "op", "value", "invoked", "completed", "outcome", "note")]
    for w in window.operations:
        op = w.op
        outcome = "ok" if op.ret is not None else ("info" if op.complete_line else "open")
        rows.append((str(op.process), op.f, show(op.value), str(op.invoke_line),
                     str(op.complete_line) if op.complete_line is not None else "-",
                     outcome, ROLE_TEXT[w.role]))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    table = ["  " + "  ".join(c.ljust(wd) for c, wd in zip(row, widths, strict=True)).rstrip()
             for row in rows]
    return "\n".join([head + ":", *table])
