"""Shared helpers for the tablet tests (imported as a top-level module, like storage_helpers).

SimDisk moved from revivify.impl.storage.simdisk to revivify.impl.testing.simdisk; either
location is accepted so these tests run on both sides of the move.
"""

from __future__ import annotations

from collections.abc import Iterable

from revivify.impl.storage.blocks import BlockManager
from revivify.impl.storage.layout import ServerLayout
from revivify.impl.storage.metadata import MetadataStore
from revivify.impl.storage.values import DataState, Superblock
from revivify.impl.tablet.ops import RowOp, WriteBatch
from revivify.impl.tablet.store import StoreOptions, TabletStore

try:
    from revivify.impl.testing.simdisk import (
        ExplorationReport,
        SimDisk,
        SimulatedCrash,
        explore_crashes,
    )
except ImportError:  # before the move
    from revivify.impl.storage.simdisk import (  # type: ignore[no-redef, import-not-found]
        ExplorationReport,
        SimDisk,
        SimulatedCrash,
        explore_crashes,
    )

__all__ = [
    "ROOT",
    "TABLET",
    "ExplorationReport",
    "SimDisk",
    "SimulatedCrash",
    "explore_crashes",
    "new_tablet_disk",
    "open_store",
    "put_batch",
]

ROOT = "/srv"
TABLET = "tablet-a"


def new_tablet_disk(torn_write_size: int | None = None, **fields: object) -> SimDisk:
    """A formatted SimDisk holding an empty READY tablet, everything durable."""
    disk = SimDisk(torn_write_size=torn_write_size)
    layout = ServerLayout(ROOT, disk)
    layout.format("server-1", 1_700_000_000_000_000_000)
    MetadataStore(layout).write_superblock(
        Superblock(TABLET, DataState.READY, **fields)  # type: ignore[arg-type]
    )
    return disk


def open_store(disk: SimDisk, options: StoreOptions | None = None) -> TabletStore:
    layout = ServerLayout(ROOT, disk)
    return TabletStore.open(layout, MetadataStore(layout), BlockManager(layout), TABLET, options)


def put_batch(client: str, seq: int, rows: Iterable[tuple[bytes, bytes | None]]) -> WriteBatch:
    """A batch of puts, and deletes where the value is None."""
    return WriteBatch(
        client,
        seq,
        [RowOp("put", k, v) if v is not None else RowOp("delete", k) for k, v in rows],
    )
