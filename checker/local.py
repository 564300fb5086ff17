"""The single-process driver: stream trace files through the core, node by node.

Files are grouped by node (each file's first line names its node and incarnation) and read
in incarnation order. Within a node, each line goes to its key's ``KeyState``; when the node
is done its keys are finished and dropped, so memory holds the keys of one node plus the
global-check tables (which grow with tablets and terms), never the events. Files whose
first line cannot be decoded are still read (their errors are reported), after the others.
"""

from __future__ import annotations

import os
from collections import defaultdict

import attrs
from revivify.checker.global_checks import GlobalChecks
from revivify.checker.replay import DEFAULT_MAX_FRONTIER, KeyState, Replayer, Violation
from revivify.checker.report import Report, from_input_error
from revivify.checker.traces import (
    ORDER_KINDS,
    Envelope,
    FileReader,
    InputError,
    discover,
    first_envelope,
    open_trace,
)


@attrs.define
class LocalChecker:
    max_frontier: int = DEFAULT_MAX_FRONTIER
    replayer: Replayer = attrs.field(init=False)
    globals_: GlobalChecks = attrs.field(init=False, factory=GlobalChecks)
    peak_keys: int = 0
    keys_total: int = 0

    def __attrs_post_init__(self) -> None:
        self.replayer = Replayer(max_frontier=self.max_frontier)

    def run(self, paths: list[str]) -> Report:
        report = Report(engine="local")
        files, errors = discover(paths)
        for e in errors:
            report.add(from_input_error(e))
        by_node: dict[str, list[tuple[int, str]]] = defaultdict(list)
        orphans: list[str] = []
        for f in files:
            head = first_envelope(f)
            if head is None:
                orphans.append(f)
            else:
                by_node[head[0]].append((head[1], f))
        report.files = len(files)
        for node in sorted(by_node):
            self._node(node, [f for _, f in sorted(by_node[node])], report)
        for f in orphans:
            self._node("", [f], report)
        for v in self.globals_.violations():
            report.add(v)
        r = self.replayer
        report.events = r.events
        report.coverage = dict(r.coverage)
        report.frontiers = dict(r.frontiers)
        report.keys = self.keys_total
        return report

    def _node(self, node: str, files: list[str], report: Report) -> None:
        r = self.replayer
        keys: dict[str, KeyState] = {}
        clean: set[tuple[str, int]] = set()
        g = self.globals_
        feed = r.feed
        for f in files:
            empty = True
            try:
                with open_trace(f) as fh:
                    for lineno, item in FileReader(f).lines(fh):
                        empty = False
                        if not isinstance(item, Envelope):
                            report.add(from_input_error(
                                item, violation=item.kind in ORDER_KINDS
                                and item.kind != "MixedFile"))
                            continue
                        tablet = item.tablet
                        if tablet is None:
                            ev = item.event
                            if ev == "server_stop":
                                clean.add((item.node, item.inc))
                            elif ev == "server_format":
                                g.server_format(item.node, f, lineno)
                            report.server_events += 1
                            continue
                        k = keys.get(tablet)
                        if k is None or k.node != item.node:
                            k = keys[tablet] = r.new_key(item.node, tablet)
                            self.keys_total += 1
                        found = feed(k, f, lineno, item, clean)
                        if found:
                            for v in found:
                                report.add(v)
            except (OSError, EOFError, ValueError) as exc:  # unreadable, bad gzip
                report.add(from_input_error(InputError("UnreadableFile", f, 0, "path",
                                                       str(exc))))
                continue
            if empty:
                report.add(from_input_error(InputError(
                    "EmptyFile", f, 0, "path", "empty trace file (a process that wrote "
                    "nothing before it died?)", warning=True)))
            if r.facts:
                for fact in r.facts:
                    g.fact(*fact)
                r.facts.clear()
        self.peak_keys = max(self.peak_keys, len(keys))
        keys.clear()
        r.maybe_reset()


def check_paths(paths: list[str], max_frontier: int = DEFAULT_MAX_FRONTIER) -> Report:
    return LocalChecker(max_frontier=max_frontier).run(paths)


def rel(path: str) -> str:
    try:
        return os.path.relpath(path)
    except ValueError:
        return path


__all__ = ["LocalChecker", "Violation", "check_paths"]
