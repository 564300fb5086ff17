"""``trace validate --engine spark --checkpoint DIR``: the Spark files plan, resumable.

The local ``--state`` (checker/resume.py) saves one follower; on Spark the state is split
the way the work is: each task resumes, for every node it is given, a follower of that
node's files alone (``Follower`` over the node's files; its saved state under
``DIR/gen-N/nodes/``), reads on from the offsets, saves the node's new state, then ends the
node (``Follower.finish(judge=False)``) and sends the driver what it found. The global
tables live on the driver (``DIR/gen-N/globals``): the facts a node's replay emits while
reading are *durable* (the driver merges them into the saved tables); those its end emits
(every key flushed, the current file closed) are *final*: merged only into this run's copy,
after the tables were saved, since the next run will read on past that end. So every run
judges the global checks on exactly the facts one run over everything would have, and the
per-node replay is the local follower's, whose verdict is the batch check's.

A run writes generation N+1 beside N and then moves ``DIR/CURRENT`` to it (an atomic
rename): a run that fails midway leaves N, which the next run resumes from. The task
writes its nodes' states itself, so ``DIR`` must be a path every worker and the driver
share (local[N], or a shared file system on a cluster). Each node's replayer starts with
cold memo tables on every run (they are caches, not saved). Only the files plan, global
checks on the driver.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import shutil
from collections.abc import Iterator
from typing import Any

import attrs

from revivify.checker.facts import GlobalFact
from revivify.checker.follow import Follower
from revivify.checker.global_checks import GlobalChecks
from revivify.checker.local import group_files
from revivify.checker.replay import DEFAULT_MAX_FRONTIER, Violation
from revivify.checker.report import Report, from_input_error
from revivify.checker.resume import StateError, dumps, loads, pack, unwrap, write_state
from revivify.checker.traces import InputError, discover


@attrs.define
class NodeResult:
    """What a task sends the driver for one node (pickled)."""

    durable: list[GlobalFact]
    final: list[GlobalFact]
    findings: list[Violation]
    events: int
    keys: int
    server_events: int
    coverage: dict[tuple[str, str], int]
    frontiers: dict[int, int]


def node_name(node: str, files: list[str]) -> str:
    """The file name of a node's state (a group of no node: its one file's path)."""
    return hashlib.sha256((node or "?" + files[0]).encode()).hexdigest()[:32]


def resume_node(node: str, files: list[str], max_frontier: int, old: str | None,
                new: str) -> NodeResult:
    """One node: restore its follower from ``old`` (if saved there), read on, save it to
    ``new``, end it; the facts split into durable and final (module docstring)."""
    name = node_name(node, files)
    fol: Follower | None = None
    if old is not None and os.path.exists(os.path.join(old, name)):
        with open(os.path.join(old, name), "rb") as fh:
            fol = loads(fh.read(), files, max_frontier, what=f"node {node} state")
    fol = fol or Follower(list(files), max_frontier=max_frontier)
    fol.global_every = float("inf")
    durable: list[GlobalFact] = []
    final: list[GlobalFact] = []
    fol.fact_tap = durable.append
    fol.poll()
    data = dumps(fol)
    write_state(os.path.join(new, name), data)
    fol.fact_tap = final.append
    report = fol.finish(judge=False)
    return NodeResult(durable, final, list(report.findings.values()), report.events,
                      report.keys, report.server_events, dict(report.coverage),
                      dict(report.frontiers))


def make_resume_task(bins: list[list[tuple[str, list[str]]]], max_frontier: int,
                     old: str | None, new: str) -> Any:
    def task(bin_ids: Iterator[int]) -> Iterator[bytes]:
        """mapPartitions over bin numbers: each node resumed, one pickled result each."""
        for b in bin_ids:
            for node, files in bins[b]:
                res = resume_node(node, files, max_frontier, old, new)
                yield pickle.dumps(res, protocol=pickle.HIGHEST_PROTOCOL)

    return task


def _generation(ckpt: str) -> int:
    """The generation ``DIR/CURRENT`` names (0: none yet)."""
    try:
        with open(os.path.join(ckpt, "CURRENT")) as fh:
            return int(fh.read().strip())
    except FileNotFoundError:
        return 0
    except (OSError, ValueError) as exc:
        raise StateError(f"{ckpt}/CURRENT: unreadable ({exc})") from exc


def _load_globals(path: str, max_frontier: int) -> GlobalChecks:
    if not os.path.exists(path):
        return GlobalChecks(max_frontier=max_frontier)
    with open(path, "rb") as fh:
        g = unwrap(fh.read(), path)
    if not isinstance(g, GlobalChecks) or g.max_frontier != max_frontier:
        raise StateError(f"{path}: not global tables saved with --max-frontier "
                         f"{max_frontier}")
    return g


def validate_spark_resumed(paths: list[str], checkpoint: str, spark: Any,
                           max_frontier: int = DEFAULT_MAX_FRONTIER,
                           partitions: int | None = None) -> Report:
    """The files plan over ``paths``, resuming from and saving to ``checkpoint``."""
    from revivify.checker.spark import pack_bins, ship_package

    report = Report(engine="spark")
    files, errors = discover(paths)
    for e in errors:
        report.add(from_input_error(e))
    report.files = len(files)
    gen = _generation(checkpoint)
    old = os.path.join(checkpoint, f"gen-{gen}") if gen else None
    g = _load_globals(os.path.join(old, "globals"), max_frontier) if old else \
        GlobalChecks(max_frontier=max_frontier)
    new = os.path.join(checkpoint, f"gen-{gen + 1}")
    shutil.rmtree(new, ignore_errors=True)  # a run that failed before moving CURRENT
    os.makedirs(os.path.join(new, "nodes"))
    dups: list[InputError] = []
    groups = group_files(files, dups)
    for e in dups:
        report.add(from_input_error(e))
    results: list[NodeResult] = []
    if groups:
        ship_package(spark)
        n = partitions or 4 * max(1, spark.sparkContext.defaultParallelism)
        bins = pack_bins(groups, n)
        task = make_resume_task(bins, max_frontier,
                                None if old is None else os.path.join(old, "nodes"),
                                os.path.join(new, "nodes"))
        blobs = spark.sparkContext.parallelize(range(len(bins)), len(bins)) \
            .mapPartitions(task).collect()
        results = [pickle.loads(b) for b in blobs]
    for res in results:
        for f in res.durable:
            g.fact(f)
    write_state(os.path.join(new, "globals"), pack(g))
    write_state(os.path.join(checkpoint, "CURRENT"), b"%d\n" % (gen + 1))
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
    _verdict(report, g, results)
    return report


def _verdict(report: Report, g: GlobalChecks, results: list[NodeResult]) -> None:
    """This run's verdict: the final facts into the (already saved) tables, the global
    checks, the nodes' findings and counts."""
    coverage: dict[tuple[str, str], int] = {}
    frontiers: dict[int, int] = {}
    for res in results:
        for f in res.final:
            g.fact(f)
        for v in res.findings:
            report.add(v)
        report.events += res.events
        report.keys += res.keys
        report.server_events += res.server_events
        for k, c in res.coverage.items():
            coverage[k] = coverage.get(k, 0) + c
        for k2, c2 in res.frontiers.items():
            frontiers[k2] = frontiers.get(k2, 0) + c2
    for v in g.violations():
        report.add(v)
    report.coverage = coverage
    report.frontiers = frontiers


__all__ = ["validate_spark_resumed"]
