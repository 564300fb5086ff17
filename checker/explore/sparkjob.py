"""``revivify explore --engine spark``: the level-synchronous breadth-first search as a Spark
job, for bounds whose visited set outgrows one machine's memory.

A state is a record of stable bytes (``Node.stable``: the budget counters and the least,
over the server permutations, tuple of its servers' ``codec.encode_server`` encodings): the
same orbit gives the same bytes in every Python worker, so Spark can deduplicate on them.
The visited set is an RDD of (state, (0, parent state)) partitioned by ``_partition`` (a
digest of the bytes, never ``hash``, which is salted per process). A level:

1. ``_expand`` runs on each partition of the frontier: a Python worker keeps one warm
   ``Node`` per search (its caches outlive a task), decodes each state into its own sids,
   expands it with the single process's expansion and emits each successor new to the
   task as (successor, parent), each invariant or step-property violation, and the task's
   transitions, coverage and newly interned server states (by digest);
2. the successors are deduplicated against each other and against the visited set in one
   shuffle (both tagged, reduced by key: a visited tag wins, else the least parent, so the
   recorded parent does not depend on task order), and what only the frontier tagged is
   the next level, added to the visited set.

Each orbit is expanded once, at its level: the counts are the single process's (``node``'s
docstring). A violation's path is looked up parent by parent in the visited set and replayed
on the driver. ``max_states`` is checked between levels (a partial search then ends with a
whole level). A task that Spark retries emits again what it emitted: the shuffle
deduplicates it, and its counts are taken from the successful attempt only (they are
collected results, not accumulators).
"""

from __future__ import annotations

import functools
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

from revivify.spec.actions import Bounds
from revivify.spec.system import Spec

from .codec import decode_server, digest, unpack_state
from .counterexample import replay
from .engine import Explorer
from .node import Node, SpecSource, distributed_result, initial_violation, property_docs
from .results import ExploreProgress, ExploreResult, ExploreViolation

# One warm Node per Python worker: (the search's token, its node), and how many of its
# server states a finished task has reported (a task that fails reports nothing; the next
# one reports them again: the driver keeps a set).
_NODE: list[tuple[str, Node]] = []
_REPORTED: list[int] = [0]


def _partition(key: bytes) -> int:
    return digest(key)


def _node(token: str, source: SpecSource, bounds: Bounds, symmetry: bool) -> Node:
    if not _NODE or _NODE[0][0] != token:
        _NODE[:] = [(token, Node(source.build(), bounds, symmetry, False))]
        _REPORTED[0] = 0
    return _NODE[0][1]


def _expand(token: str, source: SpecSource, bounds: Bounds, symmetry: bool,
            rows: Iterator[bytes]) -> Iterator[tuple[Any, ...]]:
    """One task: expand a partition of the frontier (see the module's docstring).

    Rows out: ("s", successor, parent), ("v", kind, name, state, parent or None) and one
    ("t", transitions, coverage, new server-state digests)."""
    node = _node(token, source, bounds, symmetry)
    search = node.search
    search.take_tally()  # zero what an attempt that failed in this worker left counted
    seen: dict[int, int] = {}
    search.parents = seen
    for row in rows:
        key = node.local(row)
        found: list[int] = []
        search.violation_at = None
        bad = search.expand(key, found.append)
        node.fill()
        for k in found:
            yield ("s", node.stable(k), row)
        if bad:
            assert search.violation_at is not None
            chain, (kind, name) = search.violation_at
            if kind == "step":
                yield ("v", kind, name, row, None)
            else:
                yield ("v", kind, name, node.stable(chain[0]), row)
            break
    transitions, coverage = search.take_tally()
    node.fill()
    yield ("t", transitions, coverage, node.digests[_REPORTED[0]:])
    _REPORTED[0] = len(node.digests)


def _pick(a: tuple[int, bytes | None], b: tuple[int, bytes | None]) -> tuple[int, bytes | None]:
    """Of two records of one state: the visited one (tag 0), else the least parent."""
    if a[0] != b[0]:
        return a if a[0] < b[0] else b
    if a[1] is None or b[1] is None:
        return a if a[1] is None else b
    return a if a[1] <= b[1] else b


def _is_successor(row: tuple[Any, ...]) -> bool:
    return bool(row[0] == "s")


def _is_report(row: tuple[Any, ...]) -> bool:
    return bool(row[0] != "s")


def _as_new(row: tuple[Any, ...]) -> tuple[bytes, tuple[int, bytes | None]]:
    return row[1], (1, row[2])


def _as_visited(value: tuple[int, bytes | None]) -> tuple[int, bytes | None]:
    return 0, value[1]


def _only_new(kv: tuple[bytes, tuple[int, bytes | None]]) -> bool:
    return kv[1][0] == 1


def explore_spark(
    spec: Spec,
    bounds: Bounds,
    spark: Any,
    *,
    partitions: int | None = None,
    max_states: int | None = None,
    progress: Callable[[ExploreProgress], None] | None = None,
    symmetry: bool = True,
) -> ExploreResult:
    """The search as a Spark job on the session ``spark`` (see the module's docstring);
    ``partitions``: of the frontier and the visited set (default the context's default
    parallelism: one per core; each is a task per stage, and a level is two jobs)."""
    from revivify.checker.spark import ship_package

    t0 = time.perf_counter()
    cpu0 = time.process_time()
    sc = spark.sparkContext
    ship_package(spark)
    parts = partitions or sc.defaultParallelism
    source = SpecSource.of(spec)
    driver = Node(spec, bounds, symmetry, False)
    ex = driver.ex
    init_sids = [ex.interner.sid(s) for s in spec.initial()]
    init_key = ex.key(init_sids, 0)
    driver.fill()
    early = initial_violation(spec, ex, t0, cpu0, symmetry, "spark", 1)
    if early is not None:
        return early
    token = uuid.uuid4().hex
    task = functools.partial(_expand, token, source, bounds, symmetry)
    init = driver.stable(init_key)
    # the visited set: (state, (0, its parent)); a level's new states are tagged 1 until
    # the next level (``_as_visited``)
    visited = sc.parallelize([(init, (0, None))], 1).partitionBy(parts, _partition).cache()
    frontier = sc.parallelize([init], 1)
    levels = [1]
    transitions = 0
    coverage = [0] * len(spec.actions)
    server_states: set[int] = set(driver.digests)
    violation: ExploreViolation | None = None
    capped = False
    while True:
        out = frontier.mapPartitions(task).cache()
        hits: list[tuple[str, str, bytes, bytes | None]] = []
        for row in out.filter(_is_report).collect():
            if row[0] == "t":
                transitions += row[1]
                coverage = [a + b for a, b in zip(coverage, row[2], strict=True)]
                server_states.update(row[3])
            else:
                hits.append(row[1:])
        if hits:
            kind, name, state, parent = min(hits, key=lambda h: (h[2], h[3] or b""))
            # a step violation names the state it leaves (visited), an invariant violation
            # the new state that breaks it and the visited state it came from
            chain = (_ancestors(visited, state) if parent is None
                     else [state, *_ancestors(visited, parent)])
            keys = [_driver_key(ex, s) for s in reversed(chain)]
            violation = ExploreViolation(name, kind, replay(ex, keys, (kind, name)),
                                         property_docs(spec).get(name, ""))
            out.unpersist()
            break
        merged = (visited.mapValues(_as_visited)
                  .union(out.filter(_is_successor).map(_as_new))
                  .reduceByKey(_pick, parts, _partition).cache())
        merged.localCheckpoint()  # the lineage would otherwise grow by a level each time
        found = merged.filter(_only_new).count()
        out.unpersist()
        visited.unpersist()
        visited = merged
        if not found:
            break
        levels.append(found)
        frontier = merged.filter(_only_new).keys()
        if progress is not None:
            progress(ExploreProgress(sum(levels), transitions, len(levels) - 1, found,
                                     time.perf_counter() - t0, len(levels) - 1))
        if max_states is not None and sum(levels) >= max_states:
            capped = True
            break
    visited.unpersist()
    return distributed_result(spec, t0, sum(levels), transitions, coverage, len(levels) - 1,
                              levels, 1, violation, not capped and violation is None,
                              len(server_states), symmetry, time.process_time() - cpu0,
                              engine="spark")


def _ancestors(visited: Any, start: bytes) -> list[bytes]:
    """A visited state and its parents up to the initial state, nearest first."""
    out = [start]
    while (found := visited.lookup(out[-1])) and found[0][1] is not None:
        out.append(found[0][1])
    return out


def _driver_key(ex: Explorer, state: bytes) -> int:
    cw, encs = unpack_state(state)
    return ex.key([ex.interner.sid(decode_server(e)) for e in encs], cw)


__all__ = ["explore_spark"]
