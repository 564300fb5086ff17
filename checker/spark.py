"""The Spark driver: the same core, many keys per task.

Plan of the job
---------------
1. *Parse.* A DataFrame of file paths, spread over tasks; ``mapInArrow`` reads each file
   with the local reader (``traces.FileReader``: the same line classification, the same
   per-file order checks, exact line numbers and the torn-last-line rule, which the JVM
   JSON reader cannot give) and emits rows with an explicit Arrow schema built from
   ``traces.ENVELOPE_FIELDS``; ``args`` and ``state`` travel as raw JSON bytes.
2. *Replay.* ``repartition(node, tablet)`` + ``sortWithinPartitions(node, tablet, inc,
   line)``, then ``mapInArrow`` walks each partition's keys in order and calls
   ``Replayer.feed_raw`` -- the fixed cost is per partition, not per key (a grouped
   ``applyInPandas`` costs ~2 ms per group, ``applyInArrow`` ~0.5 ms: too much for
   millions of keys). It emits findings, global facts and per-task statistics.
3. *Global checks* as aggregations: leaders grouped by (tablet, term), commits by
   (tablet, index), formats by node.
4. *Report*: the same ``Report`` as the local engine; with ``--out`` also ``report.json``
   and Parquet (``findings.parquet``).

Running on a cluster: see traces/README.md ("Spark"). Trace paths must be readable by the
executors (a shared file system).
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import attrs
from revivify.checker.global_checks import commit_violation, leader_violation, uuid_violation
from revivify.checker.replay import DEFAULT_MAX_FRONTIER, KeyState, Replayer, Violation
from revivify.checker.report import Report, from_input_error
from revivify.checker.traces import (
    ENVELOPE_FIELDS,
    ORDER_KINDS,
    Envelope,
    FileReader,
    InputError,
    discover,
    open_trace,
)

_ARROW_TYPES = {"int": "int64", "string": "string", "string?": "string",
                "object": "binary", "object?": "binary"}


def event_schema() -> Any:
    """The parse stage's Arrow schema: provenance + the envelope fields (from the reader's
    one list) + an error slot."""
    import pyarrow as pa

    fields = [pa.field("kind", pa.string()), pa.field("file", pa.string()),
              pa.field("line", pa.int64())]
    for name, typ in ENVELOPE_FIELDS:
        fields.append(pa.field(name, getattr(pa, _ARROW_TYPES[typ])()))
    fields += [pa.field("err_kind", pa.string()), pa.field("err_field", pa.string()),
               pa.field("err_message", pa.string()), pa.field("err_severity", pa.string())]
    return pa.schema(fields)


_OUT_FIELDS = ("rtype", "kind", "severity", "file", "line", "subject", "node", "tablet",
               "event", "payload", "a", "b")


def out_schema() -> Any:
    import pyarrow as pa

    return pa.schema([pa.field("rtype", pa.string()), pa.field("kind", pa.string()),
                      pa.field("severity", pa.string()), pa.field("file", pa.string()),
                      pa.field("line", pa.int64()), pa.field("subject", pa.string()),
                      pa.field("node", pa.string()), pa.field("tablet", pa.string()),
                      pa.field("event", pa.string()), pa.field("payload", pa.string()),
                      pa.field("a", pa.int64()), pa.field("b", pa.int64())])


def parse_files(batches: Iterator[Any]) -> Iterator[Any]:
    """mapInArrow: file paths -> event and error rows."""
    import pyarrow as pa

    schema = event_schema()
    names = schema.names
    for batch in batches:
        for path in batch.column(0).to_pylist():
            cols: dict[str, list[Any]] = {n: [] for n in names}

            def err(e: InputError, severity: str, cols: dict[str, list[Any]] = cols) -> None:
                for n in names:
                    cols[n].append(None)
                cols["kind"][-1] = "err"
                cols["file"][-1] = e.file
                cols["line"][-1] = e.line
                cols["err_kind"][-1] = e.kind
                cols["err_field"][-1] = e.field
                cols["err_message"][-1] = e.message
                cols["err_severity"][-1] = severity

            try:
                with open_trace(path) as fh:
                    items = list(FileReader(path).lines(fh))
            except (OSError, EOFError, ValueError) as exc:
                err(InputError("UnreadableFile", path, 0, "path", str(exc)), "error")
                yield pa.RecordBatch.from_pydict(cols, schema=schema)
                continue
            if not items:
                err(InputError("EmptyFile", path, 0, "path", "empty trace file (a process "
                               "that wrote nothing before it died?)", warning=True), "warning")
            for lineno, item in items:
                if isinstance(item, Envelope):
                    cols["kind"].append("ev")
                    cols["file"].append(path)
                    cols["line"].append(lineno)
                    cols["v"].append(item.v)
                    cols["node"].append(item.node)
                    cols["inc"].append(item.inc)
                    cols["seq"].append(item.seq)
                    cols["lamport"].append(item.lamport)
                    cols["wall_ns"].append(item.wall_ns)
                    cols["tablet"].append(item.tablet)
                    cols["event"].append(item.event)
                    cols["args"].append(bytes(item.args))
                    cols["state"].append(bytes(item.state))
                    for n in ("err_kind", "err_field", "err_message", "err_severity"):
                        cols[n].append(None)
                else:
                    sev = ("warning" if item.warning else "violation"
                           if item.kind in ORDER_KINDS and item.kind != "MixedFile"
                           else "error")
                    err(item, sev)
            yield pa.RecordBatch.from_pydict(cols, schema=schema)


def make_replay(max_frontier: int, clean_stops: frozenset[tuple[str, int]]) -> Any:
    def replay(batches: Iterator[Any]) -> Iterator[Any]:
        """mapInArrow: one partition's events, sorted by (node, tablet, inc, line)."""
        import pyarrow as pa

        schema = out_schema()
        r = Replayer(max_frontier=max_frontier)
        k: KeyState | None = None
        rows: dict[str, list[Any]] = {n: [] for n in _OUT_FIELDS}

        def emit(**kw: Any) -> None:
            for n in _OUT_FIELDS:
                rows[n].append(kw.get(n))

        def flush() -> Any:
            nonlocal rows
            b = pa.RecordBatch.from_pydict(rows, schema=schema)
            rows = {n: [] for n in _OUT_FIELDS}
            return b

        feed = r.feed_raw
        keys = 0
        for batch in batches:
            cols = [batch.column(batch.schema.get_field_index(n)).to_pylist()
                    for n in ("file", "line", "node", "tablet", "inc", "event", "args",
                              "state")]
            for file, line, node, tablet, inc, event, args_b, st_b in zip(*cols,
                                                                          strict=True):
                if k is None or k.tablet != tablet or k.node != node:
                    k = r.new_key(node, tablet)
                    keys += 1
                found = feed(k, file, line, inc, event, args_b, st_b, clean_stops)
                if found:
                    for v in found:
                        emit(rtype="finding", kind=v.kind, severity=v.severity, file=v.file,
                             line=v.line, subject=v.subject, node=v.node, tablet=v.tablet,
                             event=v.event, payload=json.dumps(v.to_json()))
            for kind, tab, a, b, node_, f, ln in r.facts:
                emit(rtype=kind, file=f, line=ln, node=node_, tablet=tab, a=a, b=b)
            r.facts.clear()
            if len(rows["rtype"]) >= 10_000:
                yield flush()
        for (action, branch), n in r.coverage.items():
            emit(rtype="coverage", event=action, kind=branch, a=n)
        for size, n in r.frontiers.items():
            emit(rtype="frontier", a=size, b=n)
        emit(rtype="stats", a=r.events, b=keys)
        yield flush()

    return replay


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
                   spark: Any = None) -> Report:
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
    from pyspark.sql import functions as F

    n = partitions or max(2, spark.sparkContext.defaultParallelism)
    paths_df = spark.createDataFrame([(f,) for f in files], "path string").repartition(
        min(n * 4, len(files)))
    parsed = paths_df.mapInArrow(parse_files, _spark_type(event_schema())).persist()
    for row in parsed.filter(F.col("kind") == "err").collect():
        report.add(from_input_error(InputError(row.err_kind, row.file, row.line,
                                               row.err_field, row.err_message,
                                               warning=row.err_severity == "warning"),
                                    violation=row.err_severity == "violation"))
    ev = parsed.filter(F.col("kind") == "ev")
    server = ev.filter(F.col("tablet").isNull())
    stops = frozenset((r.node, r.inc) for r in
                      server.filter(F.col("event") == "server_stop").select("node", "inc")
                      .collect())
    for row in (server.filter(F.col("event") == "server_format").groupBy("node")
                .agg(F.collect_list(F.struct("file", "line")).alias("w"))
                .filter(F.size("w") > 1).collect()):
        report.add(uuid_violation(row.node, [(w.file, w.line) for w in row.w]))
    report.server_events = server.count()
    tablet_ev = (ev.filter(F.col("tablet").isNotNull())
                 .select("file", "line", "node", "tablet", "inc", "event", "args", "state")
                 .repartition(n, "node", "tablet")
                 .sortWithinPartitions("node", "tablet", "inc", "file", "line"))
    replayed = tablet_ev.mapInArrow(make_replay(max_frontier, stops),
                                    _spark_type(out_schema())).persist()
    for row in replayed.filter(F.col("rtype") == "finding").select("payload").collect():
        report.add(Violation(**_tuples(json.loads(row.payload))))
    leaders = (replayed.filter(F.col("rtype") == "leader")
               .groupBy("tablet", "a")
               .agg(F.countDistinct("node").alias("n"),
                    F.collect_list(F.struct("node", "file", "line")).alias("w"))
               .filter(F.col("n") > 1))
    for row in leaders.collect():
        report.add(leader_violation(row.tablet, row.a, [(w.node, w.file, w.line)
                                                       for w in row.w]))
    commits = (replayed.filter(F.col("rtype") == "commit")
               .groupBy("tablet", "a")
               .agg(F.countDistinct("b").alias("n"),
                    F.collect_list(F.struct("b", "node", "file", "line")).alias("w"))
               .filter(F.col("n") > 1))
    for row in commits.collect():
        report.add(commit_violation(row.tablet, row.a, [(w.b, w.node, w.file, w.line)
                                                       for w in row.w]))
    cov: Counter[tuple[str, str]] = Counter()
    fr: Counter[int] = Counter()
    for row in replayed.filter(F.col("rtype").isin("coverage", "frontier", "stats")).collect():
        if row.rtype == "coverage":
            cov[(row.event, row.kind)] += row.a
        elif row.rtype == "frontier":
            fr[row.a] += row.b
        else:
            report.events += row.a
            report.keys += row.b
    report.coverage = dict(cov)
    report.frontiers = dict(fr)
    report.timings["job_s"] = round(time.perf_counter() - t1, 3)
    if out:
        write_report_files(report, out, parquet=True, spark=spark)
    parsed.unpersist()
    replayed.unpersist()
    return report


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
