"""Shared helpers for the storage tests (plain functions; no pytest-trio here).

Imported as a top-level module: pytest's default import mode puts tests/storage on sys.path.
"""

from __future__ import annotations

from hypothesis import settings

from revivify.impl.storage.layout import ServerLayout
from revivify.impl.storage.wal import LogEntry
from revivify.impl.testing import SimDisk

settings.register_profile("storage-fast", max_examples=150, deadline=None)

ROOT = "/srv"


def formatted_disk(torn_write_size: int | None = None) -> SimDisk:
    """A SimDisk holding a freshly formatted server root, everything durable."""
    disk = SimDisk(torn_write_size=torn_write_size)
    ServerLayout(ROOT, disk).format("server-1", 1_700_000_000_000_000_000)
    return disk


def entries(first: int, count: int, term: int = 1, size: int = 40) -> list[LogEntry]:
    return [
        LogEntry(term, index, f"op-{index}-".encode().ljust(size, b"."))
        for index in range(first, first + count)
    ]
