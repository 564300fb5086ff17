"""Counters and histograms cheap enough for the write path, exported at scrape time.

prometheus_client's own ``Counter`` and ``Histogram`` take a lock on every update (they
may be shared between threads) and find a histogram's bucket by a loop in Python: about
2 us per observation on this project's shared 2-core machine, measured, which a write
pays several times (its RPC call at the leader, the WAL groups on three servers, the Raft
casts). revivify's updates come from one thread, trio's, so these values are plain
attributes: a counter is an addition, a histogram a ``bisect`` (C) and two additions.

Invariant: every ``inc`` and ``observe`` runs in the trio thread of the server's process
(the WAL's appender thread measures its fsync and hands the duration back to the trio task
that observes it). A scrape reads the values, from that thread too (the web server is a
trio task); were it another thread, it would at worst read a histogram mid-update, one
observation's bucket ahead of its count, never a value that decreases.

``Families`` makes them (or ``NULL`` ones when metrics are off) and ``Exporter`` turns them
into Prometheus families when ``generate_latest`` collects the registry.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:  # prometheus_client is imported by the export side only, when it runs:
    # the client library and the CLI import the RPC layer, which counts, and never load it
    from prometheus_client import CollectorRegistry
    from prometheus_client.metrics_core import Metric


class Inc(Protocol):
    def inc(self, amount: float = 1) -> None: ...


class Observe(Protocol):
    def observe(self, amount: float) -> None: ...


class _Null:
    """A family or child that counts nothing (``--no-metrics``)."""

    def inc(self, amount: float = 1) -> None:
        pass

    def observe(self, amount: float) -> None:
        pass


NULL = _Null()


class CounterValue:
    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0.0

    def inc(self, amount: float = 1) -> None:
        self.value += amount


class HistogramValue:
    """Counts per bucket (not cumulative: the exporter sums them) and the sum. A value v
    falls in the first bucket whose bound b has v <= b (Prometheus' ``le``), else +Inf."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.sum = 0.0

    def observe(self, amount: float) -> None:
        self.counts[bisect_left(self.bounds, amount)] += 1
        self.sum += amount


class CounterFamily:
    """A counter and its children by label values (one child, (), when unlabelled)."""

    def __init__(self, name: str, doc: str, labels: Sequence[str]) -> None:
        self.name, self.doc, self.labelnames = name, doc, tuple(labels)
        self.children: dict[tuple[str, ...], CounterValue] = {}

    def labels(self, *values: str) -> CounterValue:
        """The child of ``values``, made on first use (bind it once, keep it)."""
        assert len(values) == len(self.labelnames), (self.name, values)
        child = self.children.get(values)
        if child is None:
            child = self.children[values] = CounterValue()
        return child

    def export(self) -> Metric:
        from prometheus_client.core import CounterMetricFamily

        family = CounterMetricFamily(self.name, self.doc, labels=self.labelnames)
        for values, child in sorted(self.children.items()):
            family.add_metric(list(values), child.value)
        return family


class HistogramFamily:
    def __init__(self, name: str, doc: str, labels: Sequence[str],
                 buckets: Sequence[float]) -> None:
        self.name, self.doc, self.labelnames = name, doc, tuple(labels)
        self.bounds = tuple(sorted(float(b) for b in buckets))
        self.children: dict[tuple[str, ...], HistogramValue] = {}

    def labels(self, *values: str) -> HistogramValue:
        assert len(values) == len(self.labelnames), (self.name, values)
        child = self.children.get(values)
        if child is None:
            child = self.children[values] = HistogramValue(self.bounds)
        return child

    def export(self) -> Metric:
        from prometheus_client.core import HistogramMetricFamily

        family = HistogramMetricFamily(self.name, self.doc, labels=self.labelnames)
        edges = [repr(b) for b in self.bounds] + ["+Inf"]  # le: a float, as Prometheus reads it
        for values, child in sorted(self.children.items()):
            running, buckets = 0, []
            for edge, n in zip(edges, list(child.counts), strict=True):
                running += n
                buckets.append((edge, float(running)))
            family.add_metric(list(values), buckets, child.sum)
        return family


class Exporter:
    """Every family of one server, as Prometheus families, when the registry is collected
    (a registry takes any object with ``collect``)."""

    def __init__(self) -> None:
        self.families: list[CounterFamily | HistogramFamily] = []

    def collect(self) -> Iterator[Metric]:
        for family in self.families:
            yield family.export()


class SnapshotCollector:
    """Gauges computed at scrape time from a snapshot of the state they describe."""

    def __init__(self, collect: Callable[[], Iterable[Metric]]) -> None:
        self._collect = collect

    def collect(self) -> Iterator[Metric]:
        yield from self._collect()


class Families:
    """Makes the families of one registry, or ``NULL`` ones when metrics are off."""

    def __init__(self, registry: CollectorRegistry | None, enabled: bool) -> None:
        assert registry is not None or not enabled
        self.registry = registry
        self.enabled = enabled
        self._exporter = Exporter()
        if registry is not None and enabled:
            registry.register(self._exporter)

    def _add(self, family: CounterFamily | HistogramFamily) -> None:
        if any(f.name == family.name for f in self._exporter.families):
            raise ValueError(f"metric family {family.name} registered twice")
        self._exporter.families.append(family)

    def counter(self, name: str, doc: str) -> Inc:
        family = self.labelled_counter(name, doc, ())
        return family.labels() if family is not None else NULL

    def counters(self, name: str, doc: str, label: str,
                 values: Iterable[str]) -> dict[str, Inc]:
        """A counter with one label whose values are known: every child bound now (so the
        series exist at 0 before the first event, as Prometheus advises)."""
        family = self.labelled_counter(name, doc, (label,))
        return {v: family.labels(v) if family is not None else NULL for v in values}

    def histogram(self, name: str, doc: str, buckets: Sequence[float]) -> Observe:
        family = self.labelled_histogram(name, doc, (), buckets)
        return family.labels() if family is not None else NULL

    def labelled_counter(self, name: str, doc: str, labels: Sequence[str]
                         ) -> CounterFamily | None:
        """A counter whose label values are learnt as they come (the caller binds and keeps
        each child); None when metrics are off."""
        if not self.enabled:
            return None
        family = CounterFamily(name, doc, labels)
        self._add(family)
        return family

    def labelled_histogram(self, name: str, doc: str, labels: Sequence[str],
                           buckets: Sequence[float]) -> HistogramFamily | None:
        if not self.enabled:
            return None
        family = HistogramFamily(name, doc, labels, buckets)
        self._add(family)
        return family

    def collect_with(self, collect: Callable[[], Iterable[Metric]]) -> None:
        """Register a scrape-time collector (state gauges): nothing when metrics are off."""
        if self.registry is not None and self.enabled:
            self.registry.register(SnapshotCollector(collect))


__all__ = ["NULL", "CounterFamily", "CounterValue", "Families", "HistogramFamily",
           "HistogramValue", "Inc", "Observe", "SnapshotCollector"]
