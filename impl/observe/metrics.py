"""One server's metrics: Prometheus families in a registry of its own.

A registry per server, never the library's global one: tests run several servers in one
process, and each server's ``/metrics`` must show only its own numbers. A master's embedded
tablet server and the master share one registry (the master's families are added to it).

Two kinds of numbers, kept apart on purpose:

* **Events** (a write appended, an election started, a call answered) are counted where
  they happen, by the trio shells that see them: counters and histograms. The hot paths
  (every RPC call, every WAL group) use children bound once (``RpcMetrics.method`` binds a
  method's children the first time the method is seen, the WAL's are bound when the
  server starts), so a write costs no label lookup, only the increment itself; and the
  counters and histograms are revivify's own single-threaded ones (families.py says why),
  exported in the Prometheus format at scrape time.
* **State** (replicas by lifecycle state and by Raft role, tablets by health, live and dead
  tablet servers, the ready flag) is read at scrape time by a ``SnapshotCollector`` from a
  function of the shell that owns the state. Nothing keeps such a gauge up to date, so it
  can never drift from the state it describes, and it costs nothing between scrapes.

The sans-I/O cores (Raft's core, the tablet store, the lifecycle core, the master core)
never count anything: the shells that run them observe their outputs (a role change is seen
by the replica driver after a batch, a heartbeat by the heartbeater).

``enabled=False`` (``--no-metrics``) replaces every family with ``NULL``, whose methods do
nothing: the same code runs, the registry stays empty. It exists to measure what metrics
cost (bench/tserver.py ``--metrics both``).
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from .families import NULL, CounterFamily, Families, Inc, Observe, SnapshotCollector

if TYPE_CHECKING:  # (imported when a server with metrics starts: families.py says why)
    from prometheus_client import CollectorRegistry
    from prometheus_client.core import GaugeMetricFamily

# Latency buckets in seconds: 100 us to 10 s (an fsync on a loaded disk, a tablet copy's
# FetchData of 4 MiB).
LATENCY_BUCKETS: tuple[float, ...] = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
    1.0, 2.5, 5.0, 10.0)
# Group-commit batch sizes: reservations (one per Raft append step) per WAL group.
BATCH_BUCKETS: tuple[float, ...] = (1, 2, 4, 8, 16, 32, 64, 128, 256)
BYTES_BUCKETS: tuple[float, ...] = tuple(float(1 << n) for n in range(8, 27, 2))  # 256 B..64 MiB
COPY_SECONDS_BUCKETS: tuple[float, ...] = (0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 3600)


def gauge(name: str, doc: str, label: str | None, values: dict[str, float]
          ) -> GaugeMetricFamily:
    """A gauge family for a collector: one sample per label value (or one, unlabelled,
    under the key "")."""
    from prometheus_client.core import GaugeMetricFamily

    if label is None:
        return GaugeMetricFamily(name, doc, value=values.get("", 0.0))
    family = GaugeMetricFamily(name, doc, labels=[label])
    for value, n in sorted(values.items()):
        family.add_metric([value], n)
    return family


class RaftMetrics:
    """Elections and leadership, counted by the replica drivers (impl/tserver/replica.py),
    summed over the server's tablets; per tablet only as scrape-time gauges, behind
    ``--metrics-per-tablet``."""

    def __init__(self, f: Families) -> None:
        self.elections_started = f.counter(
            "revivify_raft_elections_started_total",
            "Elections this server's replicas started (as candidates, after pre-votes)")
        self.elections_won = f.counter(
            "revivify_raft_elections_won_total", "Elections this server's replicas won")
        self.elections_lost = f.counter(
            "revivify_raft_elections_lost_total",
            "Elections this server's replicas lost (or gave up: a leader of the term or "
            "a higher term appeared)")
        self.leader_changes = f.counter(
            "revivify_raft_leader_changes_total",
            "Times a replica here saw its tablet's leader change to another known leader")


class WalMetrics:
    """The WAL's group commit (impl/storage/wal.py): one observation per group."""

    def __init__(self, f: Families) -> None:
        self.append_seconds = f.histogram(
            "revivify_wal_append_seconds",
            "One group commit: write and sync, as the appending task waits for it",
            LATENCY_BUCKETS)
        self.fsync_seconds = f.histogram(
            "revivify_wal_fsync_seconds", "One fsync or fdatasync of a WAL group",
            LATENCY_BUCKETS)
        self.group_batches = f.histogram(
            "revivify_wal_group_batches", "Reservations (append steps) per group commit",
            BATCH_BUCKETS)
        self.group_bytes = f.histogram(
            "revivify_wal_group_bytes", "Bytes written per group commit", BYTES_BUCKETS)
        self.appended_bytes = f.counter(
            "revivify_wal_appended_bytes_total", "Bytes appended to WAL segments")


class MethodMetrics:
    """One RPC method's children, bound the first time the method is served."""

    __slots__ = ("_calls", "_method", "latency", "ok", "statuses")

    def __init__(self, calls: CounterFamily | None, latency: Observe, method: str) -> None:
        self._calls = calls
        self._method = method
        self.latency = latency
        self.ok: Inc = calls.labels(method, "OK") if calls is not None else NULL
        self.statuses: dict[str, Inc] = {}

    def status(self, status: str) -> Inc:
        """The counter of calls that ended with ``status`` (an error's code)."""
        child = self.statuses.get(status)
        if child is None:
            child = self._calls.labels(self._method, status) if self._calls is not None \
                else NULL
            self.statuses[status] = child
        return child


class RpcMetrics:
    """Calls served (impl/rpc/server.py), by method and status, with latency."""

    def __init__(self, f: Families) -> None:
        self._calls = f.labelled_counter(
            "revivify_rpc_server_calls_total",
            "RPC calls served, by method and status (OK or the error's code)",
            ["method", "status"])
        self._latency = f.labelled_histogram(
            "revivify_rpc_server_call_seconds",
            "Time from a call's start to its response being queued", ["method"],
            LATENCY_BUCKETS)
        self._methods: dict[str, MethodMetrics] = {}

    def method(self, name: str) -> MethodMetrics:
        m = self._methods.get(name)
        if m is None:
            latency: Observe = self._latency.labels(name) if self._latency is not None \
                else NULL
            m = self._methods[name] = MethodMetrics(self._calls, latency, name)
        return m


COPY_RESULTS: tuple[str, ...] = ("ok", "failed", "cancelled")
DELETE_MODES: tuple[str, ...] = ("TOMBSTONE", "DELETED")


class TServerMetrics:
    """A tablet server's event families beyond Raft, WAL and RPC."""

    def __init__(self, f: Families) -> None:
        self.copies_started = f.counter(
            "revivify_copy_sessions_started_total",
            "Tablet copies started here as the destination")
        self.copies_finished = f.counters(
            "revivify_copy_sessions_finished_total",
            "Tablet copies ended here as the destination, by result", "result", COPY_RESULTS)
        self.copy_bytes = f.counter("revivify_copy_bytes_total",
                                    "Bytes downloaded by tablet copies (or reused)")
        self.copy_seconds = f.histogram("revivify_copy_seconds",
                                        "Duration of finished tablet copies",
                                        COPY_SECONDS_BUCKETS)
        self.source_sessions = f.counter(
            "revivify_copy_source_sessions_total",
            "Tablet copy sessions begun here as the source")
        self.deletions = f.counters("revivify_tablet_deletions_total",
                                    "Replicas deleted here, by mode", "mode", DELETE_MODES)
        self.heartbeats_sent = f.counter("revivify_heartbeats_sent_total",
                                         "Heartbeats sent to masters")
        self.heartbeats_answered = f.counter("revivify_heartbeats_answered_total",
                                             "Heartbeats the masters answered")


class ServerMetrics:
    """The registry and the families registered in it (``enabled=False``: none, and every
    family a no-op). ``per_tablet``: the scrape-time collector adds a term and a role
    series per tablet (bounded by the tablets hosted: off by default)."""

    def __init__(self, *, enabled: bool = True, per_tablet: bool = False) -> None:
        # None when off: nothing to collect (and prometheus_client never imported)
        self.registry: CollectorRegistry | None = None
        if enabled:
            from prometheus_client import CollectorRegistry

            self.registry = CollectorRegistry(auto_describe=False)
        self.enabled = enabled
        self.per_tablet = per_tablet
        self.families = Families(self.registry, enabled)
        self.raft = RaftMetrics(self.families)
        self.wal = WalMetrics(self.families)
        self.rpc = RpcMetrics(self.families)
        self.tserver = TServerMetrics(self.families)

    def exposition(self) -> bytes:
        """The Prometheus text format of every family, as ``/metrics`` serves it (empty
        when metrics are off)."""
        if self.registry is None:
            return b""
        from prometheus_client import generate_latest

        return generate_latest(self.registry)


def add_metrics_flags(parser: argparse.ArgumentParser) -> None:
    """The metrics flags of a server command (``tserver run``, ``master run``)."""
    parser.add_argument("--no-metrics", action="store_true",
                        help="count nothing: every metric family a no-op (to measure what "
                             "metrics cost)")
    parser.add_argument("--metrics-per-tablet", action="store_true",
                        help="also export each tablet's Raft term and role (a few series "
                             "per tablet; by default only totals per server)")


# Metrics off: every family a no-op (the default of the rooms built without a server's
# metrics: test doubles, offline tools). Shared: it holds no state of its own.
OFF = ServerMetrics(enabled=False)


__all__ = [
    "NULL",
    "OFF",
    "Families",
    "Inc",
    "Observe",
    "RaftMetrics",
    "RpcMetrics",
    "ServerMetrics",
    "SnapshotCollector",
    "TServerMetrics",
    "WalMetrics",
    "add_metrics_flags",
    "gauge",
]
