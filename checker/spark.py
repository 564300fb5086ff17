"""The Spark driver: the same streaming driver, whole nodes per task, no shuffle of events.

Plan of the job
---------------
A key is (node UUID, tablet), and a node's events live only in that node's files. So the
driver groups the files by node (``local.group_files``: the first line of each names its
node and incarnation), packs the groups into ``P`` bins of about equal bytes (largest
first, each into the lightest bin; ``P`` = 2 x the cores by default, so a slow bin can be
balanced by the scheduler), and runs one task per bin (``parallelize(range(P), P)`` +
``mapPartitions``). Each task reads its files and replays them with
``local.stream_node`` -- the same code, the same per-event cost as the local checker, with
one warm ``Replayer`` per Python worker -- and yields only small rows: findings, the facts
the global checks need (leaders, formats, one row per run of commits of a key) and its
statistics. Events never leave the Python worker: no event DataFrame, no repartition, no
sort, no caching of anything big: a single pass over the traces.

Global checks. By default the facts are collected and merged on the driver by
``GlobalChecks`` -- the local engine's own code, so both engines decide alike by
construction; its memory is the local engine's (tablets x terms). With
``global_in_spark=True`` they are Spark aggregations over the (small, cached) facts
DataFrame instead (``global_findings``): leaders grouped by (tablet, term), formats by
node, commit runs self-joined per tablet on overlapping indices of different terms. Both
give the same findings (``tests/trace/test_differential.py``); on one machine the
aggregations cost seconds of stage overhead, on a cluster they keep the driver small.

Running on a cluster: see traces/README.md ("Spark"). Trace paths must be readable by the
driver (it reads each file's first line to group them) and by the executors.
"""

from __future__ import annotations

import contextlib
import heapq
import json
import os
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import attrs

from revivify.checker.global_checks import (
    GlobalChecks,
    commit_violation,
    leader_violation,
    uuid_violation,
)
from revivify.checker.local import group_files, stream_node
from revivify.checker.replay import DEFAULT_MAX_FRONTIER, Replayer, Violation
from revivify.checker.report import Report, from_input_error
from revivify.checker.traces import discover

_OUT_FIELDS = ("rtype", "kind", "severity", "file", "line", "subject", "node", "tablet",
               "event", "payload", "a", "b", "c")


def out_schema() -> Any:
    """A task's rows: ``rtype`` finding | leader | commit | format | coverage | frontier |
    stats; ``a``/``b``/``c`` the numbers (term; lo, hi, term; ...)."""
    import pyarrow as pa

    return pa.schema([pa.field("rtype", pa.string()), pa.field("kind", pa.string()),
                      pa.field("severity", pa.string()), pa.field("file", pa.string()),
                      pa.field("line", pa.int64()), pa.field("subject", pa.string()),
                      pa.field("node", pa.string()), pa.field("tablet", pa.string()),
                      pa.field("event", pa.string()), pa.field("payload", pa.string()),
                      pa.field("a", pa.int64()), pa.field("b", pa.int64()),
                      pa.field("c", pa.int64())])


class _Rows:
    """A task's output rows (tuples in ``_OUT_FIELDS`` order); also its ``FactSink``."""

    def __init__(self) -> None:
        self.rows: list[tuple[Any, ...]] = []

    def emit(self, **kw: Any) -> None:
        self.rows.append(tuple(kw.get(n) for n in _OUT_FIELDS))

    def finding(self, v: Violation) -> None:
        self.emit(rtype="finding", kind=v.kind, severity=v.severity, file=v.file,
                  line=v.line, subject=v.subject, node=v.node, tablet=v.tablet,
                  event=v.event, payload=json.dumps(v.to_json()))

    def leader(self, tablet: str, term: int, node: str, file: str, line: int) -> None:
        self.emit(rtype="leader", tablet=tablet, a=term, node=node, file=file, line=line)

    def commit_run(self, tablet: str, lo: int, hi: int, term: int, node: str, file: str,
                   line: int) -> None:
        self.rows.append(("commit", None, None, file, line, None, node, tablet, None, None,
                          lo, hi, term))

    def server_format(self, node: str, file: str, line: int) -> None:
        self.emit(rtype="format", node=node, file=file, line=line)

    def take(self) -> list[tuple[Any, ...]]:
        out, self.rows = self.rows, []
        return out


def pack(groups: list[tuple[str, list[str]]], bins: int) -> list[list[tuple[str, list[str]]]]:
    """Groups into ``bins`` lists of about equal bytes: largest first, each into the
    lightest bin so far (a gzip'd byte counts as 5)."""
    def size(files: list[str]) -> int:
        total = 0
        for f in files:
            with contextlib.suppress(OSError):
                total += os.path.getsize(f) * (5 if f.endswith(".gz") else 1)
        return total

    sized = sorted(((size(fs), n, fs) for n, fs in groups), key=lambda x: (-x[0], x[1]))
    heap = [(0, b) for b in range(max(1, min(bins, len(groups))))]
    out: list[list[tuple[str, list[str]]]] = [[] for _ in heap]
    for sz, node, fs in sized:
        load, b = heapq.heappop(heap)
        out[b].append((node, fs))
        heapq.heappush(heap, (load + sz, b))
    return out


_REPLAYERS: dict[int, Replayer] = {}


def _replayer(max_frontier: int) -> Replayer:
    """One replayer per Python worker process (Spark reuses workers across tasks and
    jobs), so its memo tables stay warm: a pattern costs a spec evaluation once per
    worker, not once per task."""
    r = _REPLAYERS.get(max_frontier)
    if r is None:
        r = _REPLAYERS[max_frontier] = Replayer(max_frontier=max_frontier)
    return r


def make_task(bins: list[list[tuple[str, list[str]]]], max_frontier: int) -> Any:
    def task(bin_ids: Iterator[int]) -> Iterator[tuple[Any, ...]]:
        """mapPartitions over bin numbers: replay each bin's nodes, yield the small rows."""
        t0, c0 = time.time(), time.process_time()
        r = _replayer(max_frontier)
        r.reset_counts()
        rows = _Rows()
        events = server_events = keys = 0
        for b in bin_ids:
            for _, files in bins[b]:
                st = stream_node(r, files, rows, rows.finding)
                events += st.events
                server_events += st.server_events
                keys += st.keys
                r.maybe_reset()
                yield from rows.take()
        for (action, branch), n in r.coverage.items():
            rows.emit(rtype="coverage", event=action, kind=branch, a=n)
        for size, n in r.frontiers.items():
            rows.emit(rtype="frontier", a=size, b=n)
        rows.emit(rtype="stats", a=events, b=keys, c=server_events,
                  payload=json.dumps({"start": t0, "end": time.time(), "pid": os.getpid(),
                                      "cpu": time.process_time() - c0}))
        yield from rows.take()

    return task


def spark_session(master: str = "local[*]", shuffle_partitions: int = 8) -> Any:
    import sys

    from pyspark.sql import SparkSession

    # Python workers must run this interpreter (the one that can import revivify).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    spark = (SparkSession.builder.master(master).appName("revivify-trace-validate")
            .config("spark.ui.enabled", "false")
            .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
            .config("spark.sql.execution.arrow.pyspark.enabled", "true")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.driver.memory", "2g")
            .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def validate_spark(paths: list[str], master: str = "local[*]", out: str | None = None,
                   max_frontier: int = DEFAULT_MAX_FRONTIER, partitions: int | None = None,
                   spark: Any = None, global_in_spark: bool = False) -> Report:
    report = Report(engine="spark")
    files, errors = discover(paths)
    for e in errors:
        report.add(from_input_error(e))
    report.files = len(files)
    if not files:
        return report
    t0 = time.perf_counter()
    if spark is None:
        spark = spark_session(master)
    report.timings["spark_start_s"] = round(time.perf_counter() - t0, 3)
    t1 = time.perf_counter()
    job_start = time.time()
    n = partitions or 2 * max(1, spark.sparkContext.defaultParallelism)
    bins = pack(group_files(files), n)
    task_out = spark.sparkContext.parallelize(range(len(bins)), len(bins)).mapPartitions(
        make_task(bins, max_frontier))
    if global_in_spark:
        from pyspark import StorageLevel

        facts = spark.createDataFrame(task_out, _spark_type(out_schema())).persist(
            StorageLevel.MEMORY_AND_DISK)
        try:
            # One pass over the traces: materialise the (small) task output first, so the
            # aggregations read the cache instead of racing to compute it.
            facts.count()
            report.timings["replay_s"] = round(time.perf_counter() - t1, 3)
            rows = [r.asDict() for r in global_findings(facts).collect()]
        finally:
            facts.unpersist()
    else:
        rows = [dict(zip(_OUT_FIELDS, t, strict=True)) for t in task_out.collect()]
        report.timings["replay_s"] = round(time.perf_counter() - t1, 3)
    g = GlobalChecks()
    tasks: list[dict[str, Any]] = []
    cov: Counter[tuple[str, str]] = Counter()
    fr: Counter[int] = Counter()
    for row in rows:
        rtype = row["rtype"]
        if rtype == "commit":
            g.commit_run(row["tablet"], row["a"], row["b"], row["c"], row["node"], row["file"],
                         row["line"])
        elif rtype == "leader":
            g.leader(row["tablet"], row["a"], row["node"], row["file"], row["line"])
        elif rtype == "format":
            g.server_format(row["node"], row["file"], row["line"])
        elif rtype == "finding":
            report.add(Violation(**_tuples(json.loads(row["payload"]))))
        elif rtype == "leaders":
            report.add(leader_violation(row["tablet"], row["a"], [
                (x["node"], x["file"], x["line"]) for x in json.loads(row["payload"])]))
        elif rtype == "commits":
            report.add(commit_violation(row["tablet"], row["a"], [
                (x["c"], x["node"], x["file"], x["line"]) for x in json.loads(row["payload"])]))
        elif rtype == "formats":
            report.add(uuid_violation(row["node"], [
                (x["file"], x["line"]) for x in json.loads(row["payload"])]))
        elif rtype == "coverage":
            cov[(row["event"], row["kind"])] += row["a"]
        elif rtype == "frontier":
            fr[row["a"]] += row["b"]
        elif rtype == "stats":
            report.events += row["a"]
            report.keys += row["b"]
            report.server_events += row["c"]
            tasks.append(json.loads(row["payload"]))
    for v in g.violations():
        report.add(v)
    report.coverage = dict(cov)
    report.frontiers = dict(fr)
    if tasks:
        # Where the job's time went: the tasks' span (first start to last end, wall clock
        # of the workers) and their CPU time, against the job's wall time.
        report.timings["tasks"] = len(tasks)
        if os.environ.get("REVIVIFY_SPARK_TASKS"):
            for t in sorted(tasks, key=lambda t: t["start"]):
                print(f"task pid={t['pid']} start=+{t['start'] - job_start:.2f}s "
                      f"end=+{t['end'] - job_start:.2f}s cpu={t['cpu']:.2f}s")
        report.timings["task_cpu_s"] = round(sum(t["cpu"] for t in tasks), 3)
        report.timings["task_span_s"] = round(max(t["end"] for t in tasks)
                                              - min(t["start"] for t in tasks), 3)
        report.timings["first_task_start_s"] = round(min(t["start"] for t in tasks)
                                                     - job_start, 3)
    report.timings["job_s"] = round(time.perf_counter() - t1, 3)
    if out:
        write_report_files(report, out, parquet=True, spark=spark)
    return report


def global_findings(task_out: Any) -> Any:
    """The tasks' own rows (findings, statistics) plus the global checks as aggregations
    over the facts, as one DataFrame of the task-output shape (witnesses as JSON)."""
    from pyspark.sql import functions as F

    own = task_out.filter(F.col("rtype").isin("finding", "coverage", "frontier", "stats"))
    cols = own.columns

    def shaped(df: Any, rtype: str) -> Any:
        return df.select(*[F.lit(rtype).alias(c) if c == "rtype" else
                           (F.col(c) if c in df.columns else F.lit(None)).cast(
                               own.schema[c].dataType).alias(c) for c in cols])

    leaders = (task_out.filter(F.col("rtype") == "leader")
               .groupBy("tablet", "a")
               .agg(F.countDistinct("node").alias("n"),
                    F.to_json(F.collect_list(F.struct("node", "file", "line"))).alias(
                        "payload"))
               .filter(F.col("n") > 1))
    formats = (task_out.filter(F.col("rtype") == "format")
               .groupBy("node")
               .agg(F.count(F.lit(1)).alias("n"),
                    F.to_json(F.collect_list(F.struct("file", "line"))).alias("payload"))
               .filter(F.col("n") > 1))
    runs = task_out.filter(F.col("rtype") == "commit").select(
        "tablet", "a", "b", "c", "node", "file", "line")
    x, y = runs.alias("x"), runs.alias("y")
    overlap = (x.join(y, (F.col("x.tablet") == F.col("y.tablet"))
                      & (F.col("x.c") < F.col("y.c"))
                      & (F.col("x.a") <= F.col("y.b")) & (F.col("y.a") <= F.col("x.b")))
               .select(F.col("x.tablet").alias("tablet"),
                       F.explode(F.sequence(F.greatest("x.a", "y.a"),
                                            F.least("x.b", "y.b"))).alias("index"),
                       F.array(F.struct("x.c", "x.node", "x.file", "x.line"),
                               F.struct("y.c", "y.node", "y.file", "y.line")).alias("w")))
    commits = (overlap.select("tablet", "index", F.explode("w").alias("w"))
               .groupBy("tablet", "index")
               .agg(F.to_json(F.array_sort(F.collect_set("w"))).alias("payload"))
               .withColumnRenamed("index", "a"))
    return (own.unionByName(shaped(leaders, "leaders"))
            .unionByName(shaped(formats, "formats"))
            .unionByName(shaped(commits, "commits")))


def _spark_type(schema: Any) -> Any:
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(schema)


def _tuples(d: dict[str, Any]) -> dict[str, Any]:
    for k in ("expected", "context", "witnesses"):
        d[k] = tuple(d.get(k, ()))
    return d


def write_report_files(report: Report, out: str, parquet: bool = True,
                       spark: Any = None) -> None:
    """``report.json`` always; ``findings.parquet`` (via pyarrow) when asked."""
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "report.json"), "w") as f:
        f.write(report.dumps())
    if parquet:
        import pyarrow as pa
        import pyarrow.parquet as pq

        rows = [attrs.asdict(v) for v in report.sorted()]
        cols = {k: [r[k] if not isinstance(r[k], tuple) else list(r[k]) for r in rows]
                for k in attrs.fields_dict(Violation)}
        pq.write_table(pa.table(cols) if rows else pa.table({"kind": pa.array([], pa.string())}),
                       os.path.join(out, "findings.parquet"))
