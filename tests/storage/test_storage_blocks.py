"""Data blocks: flush, verify on read, and the orphan-recording deletion protocol."""

from __future__ import annotations

from typing import cast

import pytest
from storage_helpers import ROOT, formatted_disk

from revivify.impl.storage.blocks import (
    BlockManager,
    add_live_blocks,
    finish_orphan_deletion,
    retire_blocks,
)
from revivify.impl.storage.disk import write_new_file
from revivify.impl.storage.errors import BlockCorrupt, BlockNotFound, BlockProtocolError
from revivify.impl.storage.layout import ServerLayout
from revivify.impl.storage.metadata import MetadataStore
from revivify.impl.storage.values import DataState, Superblock
from revivify.impl.testing import SimDisk


def _setup() -> tuple[ServerLayout, BlockManager, MetadataStore]:
    layout = ServerLayout(ROOT, formatted_disk())
    return layout, BlockManager(layout), MetadataStore(layout)


def test_flush_read_round_trip_survives_crash() -> None:
    layout, blocks, _ = _setup()
    rows = [(1, "a", b"x", None, 2.5), (2, "b", b"", True, -1.0)]
    block_id = blocks.flush(rows)
    again = BlockManager(ServerLayout(ROOT, cast(SimDisk, layout.disk).crash()))
    assert again.read(block_id) == rows
    assert again.list_blocks() == [block_id]


def test_corrupt_block_detected() -> None:
    layout, blocks, _ = _setup()
    block_id = blocks.flush([(1, "a")])
    path = blocks.path(block_id)
    data = bytearray(layout.disk.read_file(path))
    data[-2] ^= 0x10
    write_new_file(layout.disk, path, bytes(data))
    with pytest.raises(BlockCorrupt) as exc:
        blocks.read(block_id)
    assert exc.value.path == path and "checksum" in exc.value.reason
    with pytest.raises(BlockNotFound):
        blocks.read("no-such-block")


def test_block_renamed_to_wrong_id_detected() -> None:
    layout, blocks, _ = _setup()
    block_id = blocks.flush([(1,)])
    layout.disk.rename(blocks.path(block_id), blocks.path("other"))
    with pytest.raises(BlockCorrupt, match="holds block"):
        blocks.read("other")


def test_deletion_requires_orphan_record_first() -> None:
    _, blocks, store = _setup()
    ids = [blocks.flush([(i,)]) for i in range(2)]
    superblock = add_live_blocks(store, Superblock("t", DataState.READY), ids)
    with pytest.raises(BlockProtocolError):
        blocks.delete_blocks(ids, superblock=superblock)
    final = retire_blocks(store, blocks, superblock, ids[:1])
    assert final.live_blocks == (ids[1],) and final.orphaned_blocks == ()
    assert not blocks.exists(ids[0]) and blocks.exists(ids[1])
    assert store.load_superblock("t") == final


def test_startup_retries_recorded_orphans() -> None:
    layout, blocks, store = _setup()
    ids = [blocks.flush([(i,)]) for i in range(3)]
    recorded = Superblock(
        "t", DataState.READY, live_blocks=(ids[0],), orphaned_blocks=tuple(ids[1:])
    )
    store.write_superblock(recorded)
    blocks.delete_blocks([ids[1]], superblock=recorded)  # crash happened after one unlink
    crashed = ServerLayout(ROOT, cast(SimDisk, layout.disk).crash())
    store2, blocks2 = MetadataStore(crashed), BlockManager(crashed)
    loaded = store2.load_superblock("t")
    assert loaded == recorded
    cleared = finish_orphan_deletion(store2, blocks2, loaded)
    assert cleared.orphaned_blocks == () and blocks2.list_blocks() == [ids[0]]
    assert blocks2.unreferenced_blocks(cleared.live_blocks) == []
