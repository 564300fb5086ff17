"""Delta debugging of a violating trace set: a finding becomes a small regression case.

``revivify trace minimize DIR... --out CASE`` (checker/cli.py) shrinks the trace files of a
run the checker rejects to a small set it still rejects for the same reason, and writes it
in the corpus format (``traces/bad/<case>/``: the files and ``expected.json``).

Theory
------
The *target* is one finding of the original report (the first violation in report order,
or the first of ``--kind``). It is pinned to an *event*, not to a line: (the file's node,
its incarnation, the event's original ``seq``). A candidate is a subset of the original
events; it *reproduces* when the checker, run on the candidate's files, reports

* a finding of the target's kind (its own kind or one folded into it: ``also``), at the
  line that holds the target event (mapped through the removals), and
* no unusable input (no finding of severity ``error``: a malformed candidate is a
  different finding, never a reproduction), and
* no more non-warning findings than the current best candidate holds (so a removal may
  shed other faults but not trade them for new ones: the case converges to the fault it
  is about, "one fault, one finding" as the corpus wants, whenever the original allows).

Well-formedness is kept by construction where the reader's rules are about the numbers,
and left to the predicate where they are about meaning:

* each file keeps its events in their original order; an event's new ``seq`` is its old
  one minus the number of removed events of its file with a lower seq, so a gapless file
  stays gapless and whatever order defect the original had (a gap, a swap, a duplicate)
  is kept exactly, in case it is the finding;
* ``lamport`` is untouched: a subsequence of a strictly increasing sequence is strictly
  increasing, and the clocks across files keep their relation (the causality checks);
* files are written ``<node>.<inc:04d>.jsonl``, one line per event, so the line of an
  event is its position among the kept events of its file;
* what a removal may break in meaning (a file without its ``server_start``, an incarnation
  gone from the middle of a node's history, a tablet without its ``create_tablet``) the
  checker itself reports: that candidate does not reproduce, or gains a finding, and is
  refused.

The search is hierarchical delta debugging (Zeller's ddmin, complement tests only: a
trace's fault almost never lives in one chunk alone, so "keep only chunk i" tests are
skipped): first whole tablets (every event of a tablet id, on every node), then whole
nodes, then whole files (incarnations), then the events themselves in chunks halving down
to single events. At each level a removal that still reproduces is kept and the chunks
are recomputed; the level ends when no single chunk of the finest granularity can go.
The event holding the target is never offered for removal (it cannot go). Each distinct
candidate is tested at most once (a memo on the kept set). Everything is in a fixed
order and the checker is deterministic, so two runs give the same case byte for byte.
The number of checker runs is bounded by ``max_tests``: when the budget is spent the
best candidate so far is the result (it reproduces: only reproducing candidates are
ever kept).
"""

from __future__ import annotations

import argparse
import bisect
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Final

import attrs
import msgspec

from revivify.checker.local import check_paths, group_files
from revivify.checker.replay import Violation
from revivify.checker.report import Report
from revivify.checker.traces import discover, read_bytes

DEFAULT_MAX_TESTS: Final = 2000

_DECODE = msgspec.json.Decoder().decode
_ENCODE = msgspec.json.Encoder().encode


class MinimizeError(Exception):
    """Unusable input or output: the message names what was wrong (the CLI's exit 2)."""


class NoFinding(Exception):
    """The input's traces are clean: there is nothing to minimize (the CLI's exit 1)."""


@attrs.frozen
class TraceFile:
    """One incarnation's file: its events (decoded lines, in file order)."""

    path: str  # where it was read
    node: str
    inc: int
    events: tuple[dict[str, Any], ...]

    @property
    def name(self) -> str:
        return f"{self.node}.{self.inc:04d}.jsonl"


@attrs.frozen
class Target:
    """The finding to keep: its kind and its event (file index, position in that file)."""

    kind: str
    file: int
    pos: int
    message: str


@attrs.define
class Outcome:
    """What ``minimize`` found: the kept events, the target's place in them, the sizes."""

    files: list[TraceFile]
    kept: frozenset[tuple[int, int]]
    target: Target
    tests: int
    exhausted: bool
    before: tuple[int, int]  # (files, events)
    crashes: int = 0  # candidates on which the checker raised (a checker bug), and the first
    crash: str | None = None

    @property
    def after(self) -> tuple[int, int]:
        return (len({f for f, _ in self.kept}), len(self.kept))

    def case_files(self) -> dict[str, bytes]:
        """The case's trace files: name -> bytes."""
        return render(self.files, self.kept)

    def at(self) -> tuple[str, int]:
        """The target's file name and line in the case."""
        return line_of(self.files, self.kept, self.target.file, self.target.pos)


def load(paths: Sequence[str]) -> list[TraceFile]:
    """The trace files under ``paths``, each decoded; a file or line the minimizer cannot
    use is a ``MinimizeError`` naming it."""
    files, errors = discover(paths)
    if errors:
        e = errors[0]
        raise MinimizeError(f"{e.where()}: {e.message}")
    out: list[TraceFile] = []
    for _, group in group_files(files):
        for path in group:
            f = _load_file(path)
            if f is not None:  # an empty file (killed before its first event) has none
                out.append(f)
    if not out:
        raise MinimizeError(f"{', '.join(paths)}: the trace files hold no event")
    keys = [(f.node, f.inc) for f in out]
    for key in keys:
        if keys.count(key) > 1:
            raise MinimizeError(f"{key[0]} incarnation {key[1]} is in two files")
    return out


def _load_file(path: str) -> TraceFile | None:
    try:
        data = read_bytes(path)
    except OSError as e:
        raise MinimizeError(f"{path}: cannot read: {e.strerror or e}") from e
    lines = data.split(b"\n")
    events: list[dict[str, Any]] = []
    for n, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        try:
            ev = _DECODE(raw)
        except msgspec.DecodeError as e:
            if n == len(lines):  # a torn last line (a killed writer): not an event
                continue
            raise MinimizeError(f"{path}:{n}: not a JSON line: {e}") from e
        if not isinstance(ev, dict) or not isinstance(ev.get("node"), str) or \
                not isinstance(ev.get("inc"), int) or not isinstance(ev.get("seq"), int):
            raise MinimizeError(f"{path}:{n}: not a trace event (node, inc, seq)")
        events.append(ev)
    if not events:
        return None
    node, inc = events[0]["node"], events[0]["inc"]
    return TraceFile(path=path, node=node, inc=inc, events=tuple(events))


def render(files: Sequence[TraceFile], kept: frozenset[tuple[int, int]]) -> dict[str, bytes]:
    """The candidate's files: each file's kept events, seqs renumbered (see the module)."""
    out: dict[str, bytes] = {}
    for fi, f in enumerate(files):
        pos = [p for p in range(len(f.events)) if (fi, p) in kept]
        if not pos:
            continue
        removed = sorted(f.events[p]["seq"] for p in range(len(f.events))
                         if (fi, p) not in kept)
        lines = []
        for p in pos:
            ev = dict(f.events[p])
            ev["seq"] = ev["seq"] - _count_below(removed, ev["seq"])
            lines.append(_ENCODE(ev))
        out[f.name] = b"\n".join(lines) + b"\n"
    return out


def _count_below(sorted_values: list[int], x: int) -> int:
    return bisect.bisect_left(sorted_values, x)


def line_of(files: Sequence[TraceFile], kept: frozenset[tuple[int, int]], fi: int,
            pos: int) -> tuple[str, int]:
    """Where event ``(fi, pos)`` is in the candidate: its file's name and 1-based line."""
    return files[fi].name, sum(1 for p in range(pos) if (fi, p) in kept) + 1


def _findings(report: Report) -> list[Violation]:
    return [v for v in report.sorted() if v.severity != "warning"]


def pick_target(files: Sequence[TraceFile], report: Report, kind: str | None) -> Target:
    """The finding to keep: the first violation (in report order) whose kind is ``kind``
    (any kind when None) and whose line is an event of the input."""
    errors = [v for v in report.sorted() if v.severity == "error"]
    if errors:
        e = errors[0]
        raise MinimizeError(f"{e.file}:{e.line}: {e.kind}: {e.message} (unusable input: "
                            "the traces must be readable to be minimized)")
    found = _findings(report)
    if not found:
        raise NoFinding("the traces check clean: there is no finding to minimize")
    by_path = {os.path.abspath(f.path): i for i, f in enumerate(files)}
    for v in found:
        if kind is not None and kind not in (v.kind, *v.also):
            continue
        fi = by_path.get(os.path.abspath(v.file))
        if fi is None or v.line <= 0:
            continue
        pos = _position(files[fi].path, v.line)
        if pos is not None:
            return Target(kind=kind or v.kind, file=fi, pos=pos, message=v.message)
    kinds = ", ".join(sorted({v.kind for v in found}))
    if kind is not None:
        raise NoFinding(f"no finding of kind {kind} at an event (found: {kinds})")
    raise NoFinding(f"no finding is at an event line (found: {kinds})")


def _position(path: str, line: int) -> int | None:
    """The event index (among the file's decodable, non-blank lines) of a 1-based line."""
    lines = read_bytes(path).split(b"\n")
    if not 1 <= line <= len(lines) or not lines[line - 1].strip():
        return None
    pos = 0
    for raw in lines[:line - 1]:
        if raw.strip():
            pos += 1
    return pos


@attrs.define
class _Search:
    files: list[TraceFile]
    target: Target
    max_tests: int
    progress: Callable[[str], None] | None
    workdir: str
    tests: int = 0
    best: frozenset[tuple[int, int]] = frozenset()
    best_count: int = 0
    exhausted: bool = False
    memo: dict[frozenset[tuple[int, int]], bool] = attrs.Factory(dict)
    step: str = ""
    crash: str | None = None  # the first checker exception a candidate raised
    crashes: int = 0  # candidates on which the checker raised

    def reproduces(self, kept: frozenset[tuple[int, int]]) -> bool:
        got = self.memo.get(kept)
        if got is not None:
            return got
        if self.tests >= self.max_tests:
            self.exhausted = True
            return False
        self.tests += 1
        ok, count = self._check(kept)
        self.memo[kept] = ok
        if ok:
            self.best, self.best_count = kept, count
            self._say()
        return ok

    def _check(self, kept: frozenset[tuple[int, int]]) -> tuple[bool, int]:
        case = os.path.join(self.workdir, f"t{self.tests}")
        os.mkdir(case)
        try:
            for name, data in render(self.files, kept).items():
                with open(os.path.join(case, name), "wb") as fh:
                    fh.write(data)
            try:
                report = check_paths([case])
            except Exception as e:  # a checker crash is no reproduction
                # The checker must never raise on a well-formed set; a candidate that makes
                # it raise does not reproduce the finding (it is another fault, of the
                # checker), and is named once so the bug can be chased.
                self.crashes += 1
                if self.crash is None:
                    self.crash = f"{type(e).__name__}: {e}"
                    if self.progress is not None:
                        self.progress(f"minimize: the checker raised on a candidate "
                                      f"({self.crash}); counted as not reproducing")
                return False, 0
        finally:
            shutil.rmtree(case, ignore_errors=True)
        return judge(report, self.files, kept, self.target, self.best_count or None)

    def _say(self) -> None:
        if self.progress is not None:
            files = len({f for f, _ in self.best})
            self.progress(f"minimize: {self.step}: test {self.tests}, {files} files, "
                          f"{len(self.best)} events left")


def judge(report: Report, files: Sequence[TraceFile], kept: frozenset[tuple[int, int]],
          target: Target, most: int | None) -> tuple[bool, int]:
    """(whether the candidate reproduces the target, its count of non-warning findings):
    the target's kind at the target event's line, no unusable input, and at most ``most``
    findings (None: any number)."""
    found = _findings(report)
    if any(v.severity == "error" for v in found):
        return False, len(found)
    if most is not None and len(found) > most:
        return False, len(found)
    name, line = line_of(files, kept, target.file, target.pos)
    hit = any(target.kind in (v.kind, *v.also) and Path(v.file).name == name
              and v.line == line for v in found)
    return hit, len(found)


def _ddmin(units: list[frozenset[tuple[int, int]]], search: _Search) -> None:
    """Remove as many of ``units`` (disjoint event sets) from ``search.best`` as keeps the
    target: complement-only ddmin, ``n`` chunks, doubled while none can go, down to single
    units; after a removal ``n`` shrinks by one (Zeller's rule) and the scan goes on from
    the same chunk (the ones before it were just tried at that granularity)."""
    units = [u for u in units if u & search.best]
    n = 2
    start = 0
    while units and not search.exhausted:
        n = min(n, len(units))
        size = -(-len(units) // n)
        chunks = [units[i:i + size] for i in range(0, len(units), size)]
        removed = False
        for k in range(len(chunks)):
            i = (start + k) % len(chunks)
            drop = frozenset().union(*chunks[i])
            if search.reproduces(search.best - drop):
                units = [u for u in units if u & search.best]
                n = max(n - 1, 2)
                start = i
                removed = True
                break
            if search.exhausted:
                return
        if not removed:
            if n >= len(units):
                return
            n = min(2 * n, len(units))
            start = 0


def minimize(paths: Sequence[str], *, kind: str | None = None,
             max_tests: int = DEFAULT_MAX_TESTS,
             progress: Callable[[str], None] | None = None) -> Outcome:
    """Shrink the traces under ``paths`` to a small set that still gives the target
    finding (module docstring). Raises ``MinimizeError`` (unusable input) or ``NoFinding``."""
    if max_tests < 1:
        raise MinimizeError("--max-tests must be at least 1")
    files = load(paths)
    all_events = frozenset((fi, p) for fi, f in enumerate(files)
                           for p in range(len(f.events)))
    with tempfile.TemporaryDirectory(prefix="revivify-minimize-") as tmp:
        # The target is chosen on the input as the minimizer sees it (rendered: torn last
        # lines dropped, one line per event), so its lines are the candidates' lines.
        whole = os.path.join(tmp, "whole")
        os.mkdir(whole)
        for name, data in render(files, all_events).items():
            with open(os.path.join(whole, name), "wb") as fh:
                fh.write(data)
        report = check_paths([whole])
        rendered = [attrs.evolve(f, path=os.path.join(whole, f.name)) for f in files]
        target = pick_target(rendered, report, kind)
        search = _Search(files=files, target=target, max_tests=max_tests,
                         progress=progress, workdir=tmp)
        search.best = all_events
        search.best_count = len(_findings(report))
        search.memo[all_events] = True
        pin = (target.file, target.pos)
        levels: list[tuple[str, list[frozenset[tuple[int, int]]]]] = [
            ("tablets", _by(files, lambda f, ev: ev.get("tablet"), pin)),
            ("nodes", _by(files, lambda f, ev: f.node, pin)),
            ("files", _by(files, lambda f, ev: (f.node, f.inc), pin)),
            ("events", [frozenset({e}) for e in sorted(all_events) if e != pin]),
        ]
        for step, units in levels:
            search.step = step
            if progress is not None:
                progress(f"minimize: {step}: {len(search.best)} events left")
            _ddmin(units, search)
            if search.exhausted:
                break
        outcome = Outcome(files=files, kept=search.best, target=target, tests=search.tests,
                          exhausted=search.exhausted, before=(len(files), len(all_events)),
                          crashes=search.crashes, crash=search.crash)
    return outcome


def _by(files: Sequence[TraceFile], key: Callable[[TraceFile, dict[str, Any]], Any],
        pin: tuple[int, int]) -> list[frozenset[tuple[int, int]]]:
    """The events grouped by ``key`` (groups in order of first appearance; a None key is no
    group), leaving out the group that holds the pinned event."""
    groups: dict[Any, set[tuple[int, int]]] = {}
    for fi, f in enumerate(files):
        for p, ev in enumerate(f.events):
            k = key(f, ev)
            if k is not None:
                groups.setdefault(json.dumps(k), set()).add((fi, p))
    return [frozenset(g) for g in groups.values() if pin not in g]


def write_case(outcome: Outcome, case_dir: str, description: str) -> Violation:
    """Write the case (files + expected.json) into ``case_dir`` (created; it must not hold
    files already) and check it: the finding as the checker reports it there."""
    os.makedirs(case_dir, exist_ok=True)
    if any(Path(case_dir).iterdir()):
        raise MinimizeError(f"{case_dir}: exists and is not empty")
    name, line = outcome.at()
    for fname, data in outcome.case_files().items():
        with open(os.path.join(case_dir, fname), "wb") as fh:
            fh.write(data)
    expected = {"kind": outcome.target.kind, "description": description, "exit_code": 1,
                "at": {"file": name, "line": line}}
    with open(os.path.join(case_dir, "expected.json"), "w", encoding="utf-8") as fh:
        fh.write(json.dumps(expected, indent=2) + "\n")
    report = check_paths([case_dir])
    hit = [v for v in report.findings.values() if outcome.target.kind in (v.kind, *v.also)
           and Path(v.file).name == name and v.line == line]
    if not hit:  # the search only keeps reproducing candidates: this is a bug
        raise AssertionError(f"the written case {case_dir} does not reproduce "
                             f"{outcome.target.kind} at {name}:{line}")
    return hit[0]


def add_parser(sub: Any) -> None:
    """The ``trace minimize`` subcommand (``sub``: the ``trace`` parser's subparsers)."""
    s = sub.add_parser("minimize", help="shrink a violating trace set to a corpus case")
    s.add_argument("paths", nargs="*", metavar="PATH")
    s.add_argument("--out", default=None, metavar="CASE_DIR",
                   help="write the case here (with --name: into CASE_DIR/NAME)")
    s.add_argument("--name", default=None,
                   help="the case's name: a directory NAME under --out")
    s.add_argument("--description", default=None, metavar="TEXT",
                   help="expected.json's description (default: the finding's message "
                        "and the sizes)")
    s.add_argument("--kind", default=None,
                   help="minimize the first finding of this kind (default: the first "
                        "violation in report order)")
    s.add_argument("--max-tests", type=int, default=DEFAULT_MAX_TESTS, metavar="N",
                   help=f"candidates checked at most (default {DEFAULT_MAX_TESTS}); then "
                        "the smallest reproducing set so far is written")
    s.add_argument("--quiet", action="store_true", help="no progress lines on stderr")


def minimize_main(args: argparse.Namespace) -> int:
    """``revivify trace minimize``: 0 minimized, 1 no finding, 2 bad input."""
    def fail(msg: str, code: int = 2) -> int:
        print(f"revivify trace minimize: {msg}", file=sys.stderr)
        return code

    if not args.paths:
        return fail("no PATH given")
    if not args.out:
        return fail("--out CASE_DIR is required")
    if args.max_tests < 1:
        return fail(f"--max-tests must be at least 1, not {args.max_tests}")
    if args.name is not None and (not args.name or os.sep in args.name
                                  or args.name in (".", "..")):
        return fail(f"--name {args.name!r}: a case name is one directory name")
    for p in args.paths:
        if not os.path.exists(p):
            return fail(f"{p}: no such file or directory")
    case_dir = os.path.join(args.out, args.name) if args.name else args.out
    if os.path.exists(case_dir) and (not os.path.isdir(case_dir)
                                     or any(Path(case_dir).iterdir())):
        return fail(f"{case_dir}: exists and is not an empty directory")

    def say(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    try:
        outcome = minimize(args.paths, kind=args.kind, max_tests=args.max_tests,
                           progress=None if args.quiet else say)
    except MinimizeError as e:
        return fail(str(e))
    except NoFinding as e:
        return fail(f"nothing to minimize: {e}", 1)
    (f0, e0), (f1, e1) = outcome.before, outcome.after
    description = args.description or (
        f"minimized ({f0} files, {e0} events -> {f1} files, {e1} events): "
        f"{outcome.target.message}")
    try:
        found = write_case(outcome, case_dir, description)
    except MinimizeError as e:
        return fail(str(e))
    except OSError as e:
        return fail(f"{case_dir}: cannot write the case: {e.strerror or e}")
    name, line = outcome.at()
    ratio = e1 / e0 if e0 else 0.0
    print(f"{found.kind} at {name}:{line}")
    print(f"before: {f0} files, {e0} events")
    print(f"after:  {f1} files, {e1} events ({ratio:.1%})")
    print(f"tests:  {outcome.tests}" + (" (budget spent: --max-tests)"
                                        if outcome.exhausted else ""))
    print(f"case:   {case_dir}")
    if outcome.crashes:
        print(f"note:   the checker raised on {outcome.crashes} candidate(s), counted as not "
              f"reproducing (a checker bug; the first: {outcome.crash})")
    return 0


__all__ = ["DEFAULT_MAX_TESTS", "MinimizeError", "NoFinding", "Outcome", "Target", "TraceFile",
           "add_parser", "judge", "load", "minimize", "minimize_main", "write_case"]
