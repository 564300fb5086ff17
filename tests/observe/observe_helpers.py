"""Reading a server's metrics and log lines in tests (imported as a top-level module)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

from prometheus_client.parser import text_string_to_metric_families

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def parse(exposition: bytes) -> Samples:
    """Every sample of an exposition, by (name, sorted labels); the parser refuses text
    that is not the Prometheus format, so each call also checks the exposition."""
    out: Samples = {}
    for family in text_string_to_metric_families(exposition.decode()):
        for s in family.samples:
            out[s.name, tuple(sorted(s.labels.items()))] = s.value
    return out


def value(samples: Samples, name: str, **labels: str) -> float:
    """One sample's value (0 when absent: a counter never moved, a family not exported)."""
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def total(samples: Samples, name: str) -> float:
    """A family's samples summed over every label value."""
    return sum(v for (n, _), v in samples.items() if n == name)


class Lines(logging.Handler):
    """The records logged while installed, formatted."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def messages(self, start: int = 0) -> list[str]:
        return [r.getMessage() for r in self.records[start:]]


@contextmanager
def captured_logs() -> Iterator[Lines]:
    """The root logger at INFO, its records kept (restored afterwards)."""
    root = logging.getLogger()
    handler = Lines()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    try:
        yield handler
    finally:
        root.removeHandler(handler)
        root.setLevel(level)
