"""One server's metrics: Prometheus families in a registry of its own.

A registry per server, never the library's global one: tests run several servers in one
process, and each server's ``/metrics`` must show only its own numbers. A master's embedded
tablet server and the master share one registry (the master's families are added to it).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest


class ServerMetrics:
    """The registry and the families registered in it (added by the rooms that count)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=False)

    def exposition(self) -> bytes:
        """The Prometheus text format of every family, as ``/metrics`` serves it."""
        return generate_latest(self.registry)
