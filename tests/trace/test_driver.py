"""The streaming driver's shortcut for memo hits does exactly what ``Replayer.feed`` does.

``reference`` is the plain driver: ``FileReader.lines`` (every check, one line at a time)
and ``Replayer.feed`` for every tablet event. ``check_paths`` (the inlined hot loop of
``local.stream_node``) must give the same findings, coverage, frontiers and counts.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from revivify.checker.catalog import CatalogReplay, catalog_replica
from revivify.checker.facts import CommitRun, Incarnation, ServerFormat
from revivify.checker.global_checks import GlobalChecks
from revivify.checker.local import _input_error, check_paths, drain_facts, group_files
from revivify.checker.replay import KeyState, NodeState, Replayer
from revivify.checker.report import Report, from_input_error
from revivify.checker.traces import (
    Envelope,
    FileReader,
    InputError,
    discover,
    name_incarnation,
    open_trace,
)
from revivify.checker.walks import random_walk
from revivify.contract.events import CATALOG_TABLET, MASTER_EVENTS

from .conftest import TRACES


def reference(paths: list[str]) -> Report:
    report = Report(engine="reference")
    files, errors = discover(paths)
    for e in errors:
        report.add(from_input_error(e))
    r = Replayer()
    g = GlobalChecks()
    dups: list[InputError] = []
    groups = group_files(files, dups)
    for e in dups:
        report.add(from_input_error(e))
    for _, group in groups:
        keys: dict[str, KeyState] = {}
        clean: set[tuple[str, int]] = set()
        ns = NodeState("")
        masters: CatalogReplay | None = None
        for f in group:
            empty = True
            # The file's (node, incarnation, first and highest Lamport clock).
            head: tuple[str, int, int] | None = None
            top = 0
            stop = 0
            with open_trace(f) as fh:
                for lineno, item in FileReader(f).lines(fh):
                    empty = False
                    if not isinstance(item, Envelope):
                        report.add(_input_error(item))
                        continue
                    if head is None:
                        head = (item.node, item.inc, item.lamport)
                        ns.node = ns.node or item.node
                        for v in r.begin_file(ns, keys, f, lineno, item.inc) or ():
                            report.add(v)
                    top = max(top, item.lamport)
                    if item.tablet is None:
                        report.server_events += 1
                        if item.event == "server_stop":
                            clean.add((item.node, item.inc))
                            stop = lineno
                        elif item.event == "server_format":
                            g.fact(ServerFormat(item.node, f, lineno))
                            ns.born = ns.born or item.inc == 1
                        elif item.event in MASTER_EVENTS:
                            if masters is None:
                                masters = CatalogReplay(item.node, g, report.add)
                            replica = catalog_replica(
                                r, keys.get(CATALOG_TABLET), item.node, item.inc) \
                                if item.event == "master_ready" else None
                            masters.feed(f, lineno, item.inc, item.lamport, item.event,
                                         bytes(item.args), replica)
                        continue
                    k = keys.get(item.tablet)
                    if k is None or k.node != item.node:
                        if k is not None:
                            r.finish_key(k)
                        k = keys[item.tablet] = r.new_key(item.node, item.tablet, ns.born)
                        report.keys += 1
                    for v in r.feed(k, f, lineno, item, clean) or ():
                        report.add(v)
            if head is not None and stop:
                for v in r.end_file(ns, keys, f, stop, head[1], clean) or ():
                    report.add(v)
            drain_facts(r, g)
            if head is not None:
                g.fact(Incarnation(head[0], head[1], head[2], top,
                                   (head[0], head[1]) in clean))
            elif ns.node:
                named = name_incarnation(f)
                if named is not None and named[0] == ns.node:
                    ns.inc = max(ns.inc, named[1])
                    g.fact(Incarnation(ns.node, named[1], 0, 0, True))
            if empty:
                report.add(from_input_error(InputError("EmptyFile", f, 0, "path", "",
                                                       warning=True)))
        for k in keys.values():
            r.finish_key(k)
        drain_facts(r, g)
    for v in g.violations():
        report.add(v)
    report.events = r.events
    report.coverage = dict(r.coverage)
    report.frontiers = dict(r.frontiers)
    return report


def _same(paths: list[str]) -> None:
    fast = check_paths(paths)
    ref = reference(paths)
    assert fast.identities() == ref.identities()
    assert fast.counts == ref.counts
    assert (fast.events, fast.server_events, fast.keys) == (ref.events, ref.server_events,
                                                            ref.keys)
    assert fast.coverage == ref.coverage
    assert fast.frontiers == ref.frontiers


@pytest.mark.parametrize("sub", ["spec-walks", "bad"])
def test_corpus_same_as_reference(sub: str) -> None:
    _same([str(TRACES / sub)])


def test_mutated_walks_same_as_reference(tmp_path: Path) -> None:
    rng = random.Random(11)
    for seed in range(200, 212):
        random_walk(seed, steps=160, drop_before_crash=0.5).write(str(tmp_path / f"w{seed}"))
    files = sorted(tmp_path.rglob("*.jsonl"))
    for f in rng.sample(files, 16):
        lines = f.read_text().splitlines()
        i = rng.randrange(len(lines))
        d = json.loads(lines[i])
        roll = rng.random()
        if d["state"] and d["state"]["cmeta"] and roll < 0.3:
            d["state"]["cmeta"]["term"] += rng.choice([-1, 1])
        elif d["event"] == "commit":
            d["args"]["op_term"] += 1
        elif roll < 0.5:
            d["seq"] += 2
        elif roll < 0.7:
            d["lamport"] -= 3
        elif roll < 0.8:
            lines.insert(i, "")
        lines[i] = json.dumps(d)
        if rng.random() < 0.2:
            lines[-1] = lines[-1][:10]
        f.write_text("\n".join(lines) + ("\n" if rng.random() < 0.5 else ""))
    _same([str(tmp_path)])


def test_commit_runs_match_single_commits() -> None:
    """Runs of commits give the same mismatches as one fact per commit."""
    rng = random.Random(3)
    events = [(f"t{rng.randrange(3)}", rng.randrange(40), rng.randrange(3), f"n{n}")
              for n in range(6) for _ in range(60)]
    single, runs = GlobalChecks(), GlobalChecks()
    for tablet, index, term, node in events:
        single.fact(CommitRun(tablet, index, index, term, node, "f", 1))
    by_key: dict[tuple[str, str], list[tuple[int, int]]] = {}
    for tablet, index, term, node in events:
        by_key.setdefault((tablet, node), []).append((index, term))
    for (tablet, node), seq in by_key.items():
        lo, hi, t = seq[0][0], seq[0][0], seq[0][1]
        for index, term in seq[1:]:
            if index == hi + 1 and term == t:
                hi = index
            else:
                runs.fact(CommitRun(tablet, lo, hi, t, node, "f", 1))
                lo = hi = index
                t = term
        runs.fact(CommitRun(tablet, lo, hi, t, node, "f", 1))
    assert single.bad_commits.keys() == runs.bad_commits.keys()
    truth = {(tablet, index) for tablet, index, _, _ in events
             if len({te for ta, i, te, _ in events if (ta, i) == (tablet, index)}) > 1}
    assert set(runs.bad_commits) == truth


@pytest.mark.parametrize("sub", ["spec-walks", "bad", "legal"])
def test_memo_resets_within_a_node_change_nothing(sub: str,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Memory follows the live keys: with tables of 64 entries dropped every 16 lines in
    the middle of a node (the live keys' states carried over), every finding, count,
    coverage and frontier is as with the default tables."""
    import functools

    import revivify.checker.local as local

    want = check_paths([str(TRACES / sub)])
    monkeypatch.setattr(local, "RESET_EVERY", 16)
    monkeypatch.setattr(local, "Replayer", functools.partial(Replayer, max_memo=64))
    got = check_paths([str(TRACES / sub)])
    assert got.identities() == want.identities()
    assert got.counts == want.counts
    assert (got.events, got.keys) == (want.events, want.keys)
    assert got.coverage == want.coverage
    assert got.frontiers == want.frontiers
