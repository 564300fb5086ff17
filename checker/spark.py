"""The Spark engine: the same streaming driver on Spark tasks, in one of two plans.

A key is (node UUID, tablet), and a node's events live only in that node's files. So both
plans give each task whole nodes: the driver groups the files by node
(``local.group_files``: the first line of each names its node and incarnation) and packs the
groups into ``P`` bins of about equal bytes (largest first, each into the lightest bin;
``P`` = 4 x the cores by default, so the scheduler can even out a slow bin). A task walks its
nodes' keys in order with ``local.stream_node`` -- the same code, the same per-event cost as
the local checker, one warm ``Replayer`` per Python worker -- and emits only small rows:
findings, the facts the global checks need (leaders, formats, one row per run of commits of
a key) and statistics.

Plan "files" (the default): one task per bin (``parallelize(range(P), P)`` +
``mapPartitions``), and the task reads its nodes' files itself. Events never leave the
Python worker: no event DataFrame, no shuffle, a single pass. This is the plan that beats the
single-process checker on one machine (bench/checker.py): the JVM never touches an event.
It needs the trace paths readable by the driver and the executors alike (a shared file
system).

Plan "dataframe": Spark reads the lines (text source, ``.gz`` by suffix; blank lines kept,
so a line's position is its line number) and tags each with its file's rank and its bin
(a broadcast join on the file's URI); the lines are repartitioned so that each bin is one
partition (``hash_keys`` picks partitioning keys that land bin ``b`` in partition ``b``),
sorted within the partition by (file rank, position), and a ``mapInArrow`` task feeds them,
file by file, to ``stream_node`` (``_PartitionLines`` is its opener). The envelope is decoded
in the Python worker by the same reader as the local engine (``traces.ENVELOPE_DECODE``) rather
than by Spark's JSON source: Spark's reader would coerce a number into a string field, drop
blank lines and lose line numbers, so the two engines would classify malformed lines
differently; decoding once, in Python, also avoids paying for a second parse. It costs a
shuffle of every line, so on one 2-core machine it is several times slower than the files
plan; it is the plan for inputs the executors cannot open as local paths, and the
differential tests hold it to the same findings.

Global checks. In the files plan they are merged on the driver by ``GlobalChecks`` by
default -- the local engine's own code, its memory the local engine's (tablets x terms).
With ``global_in_spark`` (the dataframe plan's default) they are Spark aggregations over the
(small, cached) facts DataFrame (``global_findings``): leaders grouped by (tablet, term),
formats by node, commit runs self-joined per tablet on overlapping indices of different
terms. Both give the same findings (``tests/trace/test_differential.py``).

Running on a cluster: see traces/README.md ("Spark"). The driver reads each file's first line
to group the files by node, so it must see the trace paths.
"""

from __future__ import annotations

import contextlib
import heapq
import json
import os
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Final

import attrs
import msgspec

from revivify.checker.facts import (
    COLUMN_NAMES,
    DRIVER_KINDS,
    RECORDS,
    GlobalFact,
    from_columns,
    to_columns,
)
from revivify.checker.gcpause import paused as gc_paused
from revivify.checker.global_checks import (
    GlobalChecks,
    commit_violation,
    leader_violation,
    uuid_violation,
)
from revivify.checker.local import group_files, stream_node
from revivify.checker.replay import DEFAULT_MAX_FRONTIER, Replayer, Violation
from revivify.checker.report import Report, from_input_error
from revivify.checker.traces import ENVELOPE_DECODE, InputError, discover, open_trace

_OUT_FIELDS = ("rtype", "kind", "severity", "file", "line", "subject", "node", "tablet",
               "event", "payload", "a", "b", "c", "d")


def out_schema() -> Any:
    """A task's rows: ``rtype`` finding | leader | commit | format | coverage | frontier |
    stats | the ``KIND`` of a fact (checker/facts.py); ``a``/``b``/``c``/``d`` the numbers
    (term; lo, hi, term; ...; ``d`` a Lamport clock)."""
    import pyarrow as pa

    return pa.schema([pa.field("rtype", pa.string()), pa.field("kind", pa.string()),
                      pa.field("severity", pa.string()), pa.field("file", pa.string()),
                      pa.field("line", pa.int64()), pa.field("subject", pa.string()),
                      pa.field("node", pa.string()), pa.field("tablet", pa.string()),
                      pa.field("event", pa.string()), pa.field("payload", pa.string()),
                      pa.field("a", pa.int64()), pa.field("b", pa.int64()),
                      pa.field("c", pa.int64()), pa.field("d", pa.int64())])


class _Rows:
    """A task's output rows (tuples in ``_OUT_FIELDS`` order); also its ``FactSink``: a fact
    is the row of its columns (``facts.to_columns``; ``_fact_of`` reads it back)."""

    def __init__(self) -> None:
        self.rows: list[tuple[Any, ...]] = []

    def emit(self, **kw: Any) -> None:
        self.rows.append(tuple(kw.get(n) for n in _OUT_FIELDS))

    def finding(self, v: Violation) -> None:
        self.emit(rtype="finding", kind=v.kind, severity=v.severity, file=v.file,
                  line=v.line, subject=v.subject, node=v.node, tablet=v.tablet,
                  event=v.event, payload=json.dumps(v.to_json()))

    def fact(self, f: GlobalFact) -> None:
        tablet, node, file, line, payload, a, b, c, d = to_columns(f)
        self.rows.append((f.KIND, None, None, file, line, None, node, tablet, None, payload,
                          a, b, c, d))

    def take(self) -> list[tuple[Any, ...]]:
        out, self.rows = self.rows, []
        return out


def pack_bins(groups: list[tuple[str, list[str]]], bins: int) -> list[list[tuple[str, list[str]]]]:
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


def _task_summary(r: Replayer, rows: _Rows, events: int, keys: int, server_events: int,
                  t0: float, c0: float) -> None:
    """A task's last rows: its coverage, frontier sizes and statistics (wall span, CPU)."""
    for (action, branch), n in r.coverage.items():
        rows.emit(rtype="coverage", event=action, kind=branch, a=n)
    for size, n in r.frontiers.items():
        rows.emit(rtype="frontier", a=size, b=n)
    rows.emit(rtype="stats", a=events, b=keys, c=server_events,
              payload=json.dumps({"start": t0, "end": time.time(), "pid": os.getpid(),
                                  "cpu": time.process_time() - c0}))


# A task's rows packed into one (``make_task(packed=True)``): the files plan merging on the
# driver moves about ten facts per key, and a million small rows cost seconds to pass from
# the Python workers through the JVM to the driver; one msgpack blob per node costs little.
_PACKED: Final = "packed"


def make_task(bins: list[list[tuple[str, list[str]]]], max_frontier: int,
              packed: bool = False) -> Any:
    def out(rows: list[tuple[Any, ...]]) -> Iterator[tuple[Any, ...]]:
        if not packed:
            yield from rows
        elif rows:
            yield (_PACKED, msgspec.msgpack.encode(rows))

    def task(bin_ids: Iterator[int]) -> Iterator[tuple[Any, ...]]:
        """mapPartitions over bin numbers: replay each bin's nodes, yield the small rows
        (packed: one row per node, holding them)."""
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
                yield from out(rows.take())
        _task_summary(r, rows, events, keys, server_events, t0, c0)
        yield from out(rows.take())

    return task


def _unpacked(collected: Iterable[Any]) -> Iterator[Any]:
    """The rows of a packed task output, as sequences in ``_OUT_FIELDS`` order."""
    decode = msgspec.msgpack.Decoder().decode
    for t in collected:
        yield from decode(t[1])


# --- The dataframe plan --------------------------------------------------------------------


def _spark_file_uri(path: str) -> str:
    """How Spark's file sources name a local file in ``_metadata.file_path`` once it is
    URL-decoded (see ``_read_lines``): the driver's absolute path behind ``file:``."""
    return "file:" + path


def hash_keys(spark: Any, n: int) -> list[int]:
    """For each partition number ``p < n``, an integer key that Spark's hash partitioning
    (``pmod(murmur3(key), n)``, the same hash as ``F.hash``) sends to ``p``: repartitioning
    on a column of these keys puts each bin in its own partition, exactly (a plain hash of
    the bin numbers collides)."""
    from pyspark.sql import functions as F

    found: dict[int, int] = {}
    rows = (spark.range(0, 64 * n + 64).select(
        "id", F.expr(f"pmod(hash(id), {n})").alias("p")).collect())
    for row in rows:
        found.setdefault(int(row["p"]), int(row["id"]))
    if len(found) < n:
        raise RuntimeError(f"no hash key found for some of {n} partitions")
    return [found[p] for p in range(n)]


def _read_lines(spark: Any, bins: list[list[tuple[str, list[str]]]]) -> Any:
    """The dataframe plan's input: every line of every file as Spark's text source reads it
    (``.gz`` by suffix; blank lines kept, so positions are line numbers), tagged with its
    file's global rank and its bin, repartitioned so each bin is one partition (a shuffle
    of the events), ordered within it by (file rank, position in file)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    files: list[tuple[str, int, int]] = []  # (uri, file rank, bin key)
    keys = hash_keys(spark, len(bins))
    rank = 0
    for b, groups in enumerate(bins):
        for _, fs in groups:
            for f in fs:
                files.append((_spark_file_uri(f), rank, keys[b]))
                rank += 1
    table = spark.createDataFrame(files, StructType([
        StructField("uri", StringType(), False), StructField("frank", LongType(), False),
        StructField("bin", LongType(), False)]))
    paths = [f for groups in bins for _, fs in groups for f in fs]
    lines = spark.read.text(paths).select(
        # file_path is URL-encoded; '+' is literal in it, so protect it from url_decode.
        F.concat(F.lit("file:"), F.url_decode(F.regexp_replace(
            F.expr("substring(_metadata.file_path, 6)"), r"\+", "%2B"))).alias("uri"),
        F.col("_metadata.file_block_start").alias("block"),
        F.monotonically_increasing_id().alias("pos"),  # increasing in read order
        F.col("value").cast("binary").alias("raw"))
    return (lines.join(F.broadcast(table), "uri", "left")
            .repartition(len(bins), "bin")
            .sortWithinPartitions("frank", "block", "pos")
            .select("frank", "raw"))


class _PartitionLines:
    """A partition's rows (file rank, raw line), in order, as ``stream_node``'s opener: each
    file's lines with their newline, except a torn last line (one that does not decode and
    that the file really ends without a newline)."""

    def __init__(self, batches: Iterator[Any], rank_of: dict[str, int]) -> None:
        self._rows = self._each(batches)
        self.head: tuple[int, bytes] | None = next(self._rows, None)
        self._rank_of = rank_of

    @staticmethod
    def _each(batches: Iterator[Any]) -> Iterator[tuple[int, bytes]]:
        for batch in batches:
            ranks = batch.column(0)
            if ranks.null_count:
                # The join on the file URI missed: Spark named a file differently from the
                # driver's listing. Never guess which file a line belongs to.
                raise RuntimeError("Spark read lines from a file the driver did not list "
                                   "(file URI mismatch); use --plan files")
            yield from zip(ranks.to_pylist(), batch.column(1).to_pylist(), strict=True)

    @contextlib.contextmanager
    def open(self, path: str) -> Iterator[Iterator[bytes]]:
        yield self._lines(path, self._rank_of[path])

    def _lines(self, path: str, rank: int) -> Iterator[bytes]:
        while self.head is not None and self.head[0] < rank:  # a file left unfinished
            self.head = next(self._rows, None)
        while self.head is not None and self.head[0] == rank:
            raw = self.head[1]
            self.head = next(self._rows, None)
            if (self.head is None or self.head[0] != rank) and not _ends_line(raw, path):
                yield raw
            else:
                yield raw + b"\n"


def _ends_line(last: bytes, path: str) -> bool:
    """Whether a file's last line had its newline. Only a line that does not decode needs
    the answer (torn or malformed), so only then is the file itself asked."""
    try:
        ENVELOPE_DECODE(last)
        return True
    except msgspec.MsgspecError:
        pass
    try:
        with open_trace(path) as fh:
            if path.endswith(".gz"):
                tail = b""
                for chunk in iter(lambda: fh.read(1 << 20), b""):
                    tail = chunk
            else:
                fh.seek(0, os.SEEK_END)
                if fh.tell() == 0:
                    return True
                fh.seek(-1, os.SEEK_END)
                tail = fh.read(1)
        return tail.endswith(b"\n")
    except OSError:
        return True  # cannot tell: a malformed line, not a torn one


def make_dataframe_task(bins: list[list[tuple[str, list[str]]]], max_frontier: int) -> Any:
    """mapInArrow over one bin's rows: the same streaming driver as every other engine,
    with Spark's rows in place of the files."""
    import pyarrow as pa

    node_files: dict[int, list[str]] = {}  # first file rank of a node -> its files
    rank_of: dict[str, int] = {}
    rank = 0
    for groups in bins:
        for _, fs in groups:
            node_files[rank] = fs
            for f in fs:
                rank_of[f] = rank
                rank += 1
    schema = out_schema()

    def batch(rows: list[tuple[Any, ...]]) -> Any:
        cols: list[Any] = list(zip(*rows, strict=True)) if rows else [[] for _ in _OUT_FIELDS]
        return pa.RecordBatch.from_arrays(
            [pa.array(c, type=schema.field(i).type) for i, c in enumerate(cols)],
            schema=schema)

    def task(batches: Iterator[Any]) -> Iterator[Any]:
        t0, c0 = time.time(), time.process_time()
        r = _replayer(max_frontier)
        r.reset_counts()
        rows = _Rows()
        src = _PartitionLines(batches, rank_of)
        events = server_events = keys = 0
        while src.head is not None:
            first = src.head[0]
            while first not in node_files:  # the node's first file: walk back to it
                first -= 1
            st = stream_node(r, node_files[first], rows, rows.finding, opener=src.open)
            events += st.events
            server_events += st.server_events
            keys += st.keys
            r.maybe_reset()
            yield batch(rows.take())
        _task_summary(r, rows, events, keys, server_events, t0, c0)
        yield batch(rows.take())

    return task


def on_loopback(master: str) -> bool:
    """Whether a Spark master URL keeps the job on this machine's loopback interface:
    ``local``, ``local[N]``, ``local-cluster[...]``, or ``spark://`` URLs (one master or
    several, comma-separated) whose hosts are all loopback addresses or ``localhost``."""
    if master.startswith("local"):
        return True
    if not master.startswith("spark://"):
        return False
    import ipaddress
    from urllib.parse import urlsplit

    for hostport in master[len("spark://"):].split(","):
        host = urlsplit(f"spark://{hostport}").hostname or ""
        if host == "localhost":
            continue
        try:
            if not ipaddress.ip_address(host).is_loopback:
                return False
        except ValueError:  # a host name: it may resolve anywhere
            return False
    return True


def spark_session(master: str = "local[*]", shuffle_partitions: int = 8) -> Any:
    import sys

    from pyspark.sql import SparkSession

    # Python workers must run this interpreter (the one that can import revivify).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = SparkSession.builder.master(master).appName("revivify-trace-validate")
    if on_loopback(master):
        # A local session, or a cluster whose masters all listen on the loopback interface
        # (a standalone cluster on this machine, checker/spark_cluster.py), talks to this
        # machine only: keep the driver on the loopback interface too (Spark otherwise
        # picks the host's first non-loopback address, which executors bound to 127.0.0.1
        # may not reach).
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        builder = (builder.config("spark.driver.host", "127.0.0.1")
                   .config("spark.driver.bindAddress", "127.0.0.1"))
    spark = (builder
            .config("spark.ui.enabled", "false")
            .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
            .config("spark.sql.execution.arrow.pyspark.enabled", "true")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.driver.memory", "2g")
            .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return spark


_SHIPPED: set[str] = set()


def package_zip() -> str:
    """A zip of the code the executors run (``spark.sparkContext.addPyFile``):
    ``revivify/{contract,spec,checker}`` plus a ``revivify/__init__.py``. The installed
    ``revivify`` is a namespace package (setuptools' package-dir mapping), and Python's
    zipimport cannot import a namespace package, so the wheel itself will not do as a
    ``--py-files`` archive. Named by content, written once per content."""
    import hashlib
    import tempfile
    import zipfile

    import revivify.checker
    import revivify.contract
    import revivify.spec

    members: list[tuple[str, bytes]] = [("revivify/__init__.py", b"")]
    for pkg in (revivify.contract, revivify.spec, revivify.checker):
        root = next(iter(pkg.__path__))
        name = pkg.__name__.replace(".", "/")
        for d, dirs, fs in os.walk(root):
            dirs[:] = sorted(x for x in dirs if x != "__pycache__")
            for f in sorted(fs):
                if f.endswith(".py") or f == "py.typed":
                    full = os.path.join(d, f)
                    with open(full, "rb") as fh:
                        members.append((f"{name}/{os.path.relpath(full, root)}", fh.read()))
    digest = hashlib.sha256()
    for arc, data in members:
        digest.update(arc.encode() + b"\0" + data + b"\0")
    path = os.path.join(tempfile.gettempdir(), f"revivify-{digest.hexdigest()[:16]}.zip")
    if not os.path.exists(path):
        tmp = f"{path}.{os.getpid()}.tmp"
        with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as z:
            for arc, data in members:
                z.writestr(zipfile.ZipInfo(arc, date_time=(1980, 1, 1, 0, 0, 0)), data)
        os.replace(tmp, path)
    return path


def ship_package(spark: Any) -> None:
    """Make ``revivify`` importable on every executor, whatever is installed there: the
    same job then runs on ``local[*]`` and under ``spark-submit`` on a cluster, where the
    executors need only the third-party dependencies. Once per SparkContext."""
    sc = spark.sparkContext
    ident = f"{sc.applicationId}"
    if ident not in _SHIPPED:
        sc.addPyFile(package_zip())
        _SHIPPED.add(ident)


PLANS: Final = ("files", "dataframe")


@contextlib.contextmanager
def _spark_progress(spark: Any, report: Callable[[str], None] | None,
                    every: float) -> Iterator[None]:
    """While the body runs, tell ``report`` every ``every`` seconds how the active Spark
    stages stand (tasks done / all, running), from the status tracker."""
    if report is None:
        yield
        return
    import threading

    stop = threading.Event()
    t0 = time.monotonic()

    def poll() -> None:
        tracker = spark.sparkContext.statusTracker()
        while not stop.wait(every):
            parts = []
            for sid in sorted(tracker.getActiveStageIds()):
                info = tracker.getStageInfo(sid)
                if info is not None:
                    parts.append(f"stage {sid}: {info.numCompletedTasks}/{info.numTasks} "
                                 f"tasks done, {info.numActiveTasks} running")
            report(f"trace validate: {'; '.join(parts) or 'between stages'}, "
                   f"{time.monotonic() - t0:.0f} s")

    thread = threading.Thread(target=poll, name="spark-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def validate_spark(paths: list[str], master: str = "local[*]", out: str | None = None,
                   max_frontier: int = DEFAULT_MAX_FRONTIER, partitions: int | None = None,
                   spark: Any = None, global_in_spark: bool | None = None,
                   plan: str = "files", progress: Callable[[str], None] | None = None,
                   progress_seconds: float = 5.0) -> Report:
    """Validate on Spark. ``plan`` "files": tasks read whole nodes' files (no shuffle);
    "dataframe": Spark reads the lines and shuffles them to the tasks by node. Global
    checks are Spark aggregations when ``global_in_spark`` (the dataframe plan's default),
    else merged on the driver. ``progress`` hears the Spark stages' task counts about every
    ``progress_seconds`` while the job runs."""
    if plan not in PLANS:
        raise ValueError(f"unknown plan {plan!r} (one of {', '.join(PLANS)})")
    if global_in_spark is None:
        global_in_spark = plan == "dataframe"
    report = Report(engine="spark" if plan == "files" else "spark-dataframe")
    files, errors = discover(paths)
    for e in errors:
        report.add(from_input_error(e))
    report.files = len(files)
    if not files:
        return report
    t0 = time.perf_counter()
    if spark is None:
        spark = spark_session(master)
    ship_package(spark)
    report.timings["spark_start_s"] = round(time.perf_counter() - t0, 3)
    t1 = time.perf_counter()
    job_start = time.time()
    n = partitions or 4 * max(1, spark.sparkContext.defaultParallelism)
    dups: list[InputError] = []
    groups = group_files(files, dups)
    for e in dups:
        report.add(from_input_error(e))
    task_out = _job(spark, groups, n, plan, max_frontier, global_in_spark, report)
    with _spark_progress(spark, progress, progress_seconds):
        rows = _collect(task_out, plan, global_in_spark, report, t1)
    t_merge = time.perf_counter()
    tasks = _merge(rows, report, max_frontier)
    # The driver's serial part: the tasks' facts merged and the global checks decided.
    report.timings["driver_merge_s"] = round(time.perf_counter() - t_merge, 3)
    if tasks:
        _task_timings(report, tasks, job_start)
    report.timings["job_s"] = round(time.perf_counter() - t1, 3)
    if out:
        write_report_files(report, out, parquet=True, spark=spark)
    return report


def _job(spark: Any, groups: list[tuple[str, list[str]]], n: int, plan: str,
         max_frontier: int, global_in_spark: bool, report: Report) -> Any:
    """The job of the plan, not yet run: an RDD of the tasks' rows (packed when the
    driver merges them), or a DataFrame of them when the global checks run in Spark."""
    if plan == "files":
        bins = pack_bins(groups, n)
        task_out = spark.sparkContext.parallelize(range(len(bins)), len(bins)).mapPartitions(
            make_task(bins, max_frontier, packed=not global_in_spark))
        if global_in_spark:
            task_out = spark.createDataFrame(task_out, _spark_type(out_schema()))
        return task_out
    # Files with no decodable line name no node: nothing to shuffle, so the driver reads
    # them itself (their findings are all there is to them).
    r = Replayer(max_frontier=max_frontier)
    for _, fs in (g for g in groups if not g[0]):
        report.server_events += stream_node(r, fs, GlobalChecks(), report.add).server_events
    bins = pack_bins([g for g in groups if g[0]], n)
    return (_read_lines(spark, bins) if bins else spark.createDataFrame(
        [], "frank long, raw binary")).mapInArrow(
        make_dataframe_task(bins, max_frontier), _spark_type(out_schema()))


_FACT_KINDS: Final = frozenset(r.KIND for r in RECORDS)
# The positions of a row's fact columns (``facts.COLUMN_NAMES``) in ``_OUT_FIELDS``.
_FACT_COLUMNS: Final = tuple(_OUT_FIELDS.index(c) for c in COLUMN_NAMES)


def _merge(rows: Iterable[Any], report: Report, max_frontier: int) -> list[dict[str, Any]]:
    """The driver's part: every row of the tasks (facts back into records, merged by
    ``GlobalChecks``; findings; the global findings Spark aggregated; coverage, frontier
    sizes and statistics) into ``report``, then the global checks decided. Returns the
    tasks' statistics."""
    g = GlobalChecks(max_frontier=max_frontier)  # what a crash may hide, per key
    tasks: list[dict[str, Any]] = []
    cov: Counter[tuple[str, str]] = Counter()
    fr: Counter[int] = Counter()
    (RTYPE, KIND, _SEVERITY, _FILE, _LINE, _SUBJECT, NODE, TABLET, EVENT, PAYLOAD, A, B, C,
     _D) = range(len(_OUT_FIELDS))
    fact_kinds = _FACT_KINDS
    fact_columns = _FACT_COLUMNS
    with gc_paused():
        for row in rows:
            rtype = row[RTYPE]
            if rtype in fact_kinds:
                g.fact(from_columns(rtype, tuple(row[i] for i in fact_columns)))
            elif rtype == "finding":
                report.add(Violation(**_tuples(json.loads(row[PAYLOAD]))))
            elif rtype == "leaders":
                report.add(leader_violation(row[TABLET], row[A], [
                    (x["node"], x["file"], x["line"]) for x in json.loads(row[PAYLOAD])]))
            elif rtype == "commits":
                report.add(commit_violation(row[TABLET], row[A], [
                    (x["c"], x["node"], x["file"], x["line"]) for x in json.loads(row[PAYLOAD])]))
            elif rtype == "formats":
                report.add(uuid_violation(row[NODE], [
                    (x["file"], x["line"]) for x in json.loads(row[PAYLOAD])]))
            elif rtype == "coverage":
                cov[(row[EVENT], row[KIND])] += row[A]
            elif rtype == "frontier":
                fr[row[A]] += row[B]
            elif rtype == "stats":
                report.events += row[A]
                report.keys += row[B]
                report.server_events += row[C]
                tasks.append(json.loads(row[PAYLOAD]))
    for v in g.violations():
        report.add(v)
    report.coverage = dict(cov)
    report.frontiers = dict(fr)
    return tasks


def _task_timings(report: Report, tasks: list[dict[str, Any]], job_start: float) -> None:
    """Where the job's time went: the tasks' span (first start to last end, wall clock of
    the workers) and their CPU time, against the job's wall time."""
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


def _collect(task_out: Any, plan: str, global_in_spark: bool, report: Report,
             t1: float) -> Iterable[Any]:
    """Run the job: the tasks' rows, plus the global checks' findings when they run in
    Spark."""
    rows: Iterable[Any]
    if global_in_spark:
        from pyspark import StorageLevel

        facts = task_out.persist(StorageLevel.MEMORY_AND_DISK)
        try:
            # One pass over the traces: materialise the (small) task output first, so the
            # aggregations read the cache instead of racing to compute it.
            facts.count()
            report.timings["replay_s"] = round(time.perf_counter() - t1, 3)
            rows = [_ordered(r) for r in global_findings(facts).collect()]
        finally:
            facts.unpersist()
    elif plan == "files":
        rows = _unpacked(task_out.collect())
        report.timings["replay_s"] = round(time.perf_counter() - t1, 3)
    else:
        rows = [_ordered(r) for r in task_out.collect()]
        report.timings["replay_s"] = round(time.perf_counter() - t1, 3)
    return rows


def _ordered(row: Any) -> tuple[Any, ...]:
    """A DataFrame row as a sequence in ``_OUT_FIELDS`` order."""
    d = row.asDict()
    return tuple(d.get(f) for f in _OUT_FIELDS)


def global_findings(task_out: Any) -> Any:
    """The tasks' own rows (findings, statistics) plus the global checks as aggregations
    over the facts, as one DataFrame of the task-output shape (witnesses as JSON)."""
    from pyspark.sql import functions as F

    # The majority and causality checks' facts are already one per (key, term) or per
    # incarnation: they go to the driver as they are, where ``GlobalChecks`` (the local
    # engine's code) decides them, so both engines agree by construction.
    own = task_out.filter(F.col("rtype").isin("finding", "coverage", "frontier", "stats",
                                              *DRIVER_KINDS))
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
