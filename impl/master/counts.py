"""The master's event counters (impl/observe): catalog writes, calls to tablet servers,
replica moves and the healing policy's changes, in the embedded tablet server's registry.
The rooms that do these things count them (runner.py, delivery.py, healing.py); the state
gauges are monitor.py's, read at scrape time. A module of its own, importing nothing of the
master's, so that every room may take it without an import cycle."""

from __future__ import annotations

from revivify.impl.observe.metrics import NULL, Families, Inc, Observe, ServerMetrics

CALL_RESULTS: tuple[str, ...] = ("done", "retry")
# catalog writes: up to the write timeout (10 s by default)
WRITE_BUCKETS: tuple[float, ...] = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                    0.5, 1.0, 2.5, 5.0, 10.0)


class MasterMetrics:
    """The master's event families (the state gauges are monitor.py's)."""

    def __init__(self, metrics: ServerMetrics) -> None:
        f: Families = metrics.families
        self.catalog_writes = f.counters(
            "revivify_master_catalog_writes_total", "Catalog writes by result", "result",
            ("ok", "failed"))
        self.catalog_write_seconds: Observe = f.histogram(
            "revivify_master_catalog_write_seconds",
            "Time for a catalog write to commit (or fail)", WRITE_BUCKETS)
        self.moves_started: Inc = f.counter(
            "revivify_master_moves_started_total",
            "Replica moves (healing, MoveReplica) seen recorded in the catalog")
        self.moves_finished: Inc = f.counter(
            "revivify_master_moves_finished_total",
            "Replica moves seen cleared from the catalog (done or abandoned)")
        self.heal_changes: Inc = f.counter(
            "revivify_master_heal_changes_total",
            "ChangeConfig calls the healing policy released")
        self._calls = f.labelled_counter(
            "revivify_master_calls_total",
            "Calls this master made to tablet servers, by method and result (done: "
            "answered or moot; retry: to be tried again)", ["method", "result"])
        self._bound: dict[tuple[str, str], Inc] = {}

    def call(self, method: str, result: str) -> Inc:
        """The counter of ``method`` calls that ended in ``result`` (bound once each)."""
        child = self._bound.get((method, result))
        if child is None:
            child = self._bound[method, result] = (
                self._calls.labels(method, result) if self._calls is not None else NULL)
        return child


__all__ = ["CALL_RESULTS", "MasterMetrics"]
