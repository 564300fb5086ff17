"""Data blocks: immutable, checksummed files of rows flushed from memory.

A block is `data/<block-id>`: one codec frame (magic b"RVBK", version 1) whose payload is
msgpack of BlockWire(block_id, rows). Blocks are never modified after they are written.

Flush order: write `data/<id>.tmp.new`, fsync, rename to `data/<id>`, fsync `data/`. A
block is durable when `flush` returns; it becomes *live* only when a superblock listing it
in `live_blocks` is durable (`add_live_blocks`). A crash in between leaves an unreferenced
block file: harmless (nothing reads it), reported by `unreferenced_blocks` for a sweeper.

Deletion protocol (what makes deletion retryable after a crash):

    1. superblock' = live_blocks - ids, orphaned_blocks + ids; write it durably
    2. unlink data/<id> for each id (a missing file is fine), fsync data/
    3. superblock'' = orphaned_blocks - ids; write it durably
    startup: finish_orphan_deletion() redoes 2 and 3 for whatever orphaned_blocks lists.

A compaction (`replace_live_blocks`) is the same protocol whose step 1 also lists the new,
already durable blocks as live: one superblock write swaps the old blocks for the new ones.

Invariant: a block file is unlinked only while a durable superblock lists it as orphaned;
so after any crash every block is either live (listed, present, verifies), orphaned (listed
as orphaned, maybe present), or unreferenced. `delete_blocks` enforces step 1 having
happened by requiring the caller's superblock to list the ids as orphaned.
"""

from __future__ import annotations

import posixpath
import secrets
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import attrs

from .codec import FrameVerifier, decode_whole, encode_value
from .disk import Buffer, atomic_replace, is_temp_name
from .errors import BlockCorrupt, BlockNotFound, BlockProtocolError, CorruptionKind, CorruptRecord
from .layout import ServerLayout, validate_name
from .metadata import MetadataStore
from .values import Superblock

BLOCK_MAGIC = b"RVBK"
FORMAT_VERSION = 1

Row = tuple[Any, ...]


@attrs.frozen
class BlockWire:
    block_id: str
    rows: list[list[Any]]


def encode_block(block_id: str, rows: Sequence[Sequence[Any]]) -> bytes:
    return encode_value(BLOCK_MAGIC, FORMAT_VERSION, BlockWire(block_id, [list(r) for r in rows]))


def decode_block(data: Buffer, *, path: str, block_id: str | None = None) -> list[Row]:
    """Verify and decode a block file; BlockCorrupt on any problem."""
    try:
        wire = decode_whole(data, BlockWire, path=path, magic=BLOCK_MAGIC)
    except CorruptRecord as exc:
        raise BlockCorrupt(path, exc.offset, exc.reason, exc.kind) from None
    if block_id is not None and wire.block_id != block_id:
        raise BlockCorrupt(
            path, 0, f"file holds block {wire.block_id!r}", CorruptionKind.INCONSISTENT
        )
    return [tuple(row) for row in wire.rows]


def _new_block_id() -> str:
    return secrets.token_hex(16)


class BlockManager:
    """Writes, reads and deletes block files under the layout's data/ directory."""

    def __init__(self, layout: ServerLayout, *, new_id: Callable[[], str] = _new_block_id) -> None:
        self.layout = layout
        self.disk = layout.disk
        self._new_id = new_id

    def path(self, block_id: str) -> str:
        return posixpath.join(self.layout.data_dir, validate_name(block_id))

    def flush(self, rows: Sequence[Sequence[Any]]) -> str:
        """Durably write a new block holding `rows`; return its id (not yet live)."""
        block_id = validate_name(self._new_id())
        path = self.path(block_id)
        if self.disk.exists(path):
            raise FileExistsError(path)
        atomic_replace(self.disk, path, encode_block(block_id, rows))
        return block_id

    def read(self, block_id: str) -> list[Row]:
        path = self.path(block_id)
        try:
            data = self.disk.map_file(path)  # immutable: mapped, verified, decoded, dropped
        except FileNotFoundError:
            raise BlockNotFound(block_id, path) from None
        return decode_block(data, path=path, block_id=block_id)

    def exists(self, block_id: str) -> bool:
        return self.disk.exists(self.path(block_id))

    def list_blocks(self) -> list[str]:
        return [n for n in self.disk.listdir(self.layout.data_dir) if not is_temp_name(n)]

    def unreferenced_blocks(self, referenced: Iterable[str]) -> list[str]:
        """Block files no superblock lists (live or orphaned): leaks from crashed flushes."""
        known = set(referenced)
        return [b for b in self.list_blocks() if b not in known]

    def delete_blocks(self, block_ids: Sequence[str], *, superblock: Superblock) -> list[str]:
        """Step 2 of the protocol: unlink blocks `superblock` (durable) lists as orphaned."""
        ids = tuple(block_ids)
        missing = [b for b in ids if b not in superblock.orphaned_blocks]
        if missing:
            raise BlockProtocolError(
                tuple(missing), "not recorded as orphaned in the superblock before deletion"
            )
        deleted: list[str] = []
        for block_id in ids:
            path = self.path(block_id)
            if self.disk.exists(path):
                self.disk.unlink(path)
                deleted.append(block_id)
        if deleted:
            self.disk.fsync_dir(self.layout.data_dir)
        return deleted


def add_live_blocks(
    store: MetadataStore, superblock: Superblock, block_ids: Sequence[str]
) -> Superblock:
    """Durably list flushed blocks as live."""
    updated = attrs.evolve(
        superblock,
        live_blocks=superblock.live_blocks
        + tuple(b for b in block_ids if b not in superblock.live_blocks),
    )
    store.write_superblock(updated)
    return updated


def retire_blocks(
    store: MetadataStore, blocks: BlockManager, superblock: Superblock, block_ids: Sequence[str]
) -> Superblock:
    """The whole deletion protocol (steps 1-3) for `block_ids`; returns the final superblock."""
    ids = tuple(block_ids)
    unknown = [b for b in ids if b not in superblock.live_blocks]
    if unknown:
        raise BlockProtocolError(tuple(unknown), "not live in the superblock")
    recorded = attrs.evolve(
        superblock,
        live_blocks=tuple(b for b in superblock.live_blocks if b not in ids),
        orphaned_blocks=superblock.orphaned_blocks + ids,
    )
    store.write_superblock(recorded)
    return finish_orphan_deletion(store, blocks, recorded)


def replace_live_blocks(
    store: MetadataStore,
    blocks: BlockManager,
    superblock: Superblock,
    old_ids: Sequence[str],
    new_ids: Sequence[str],
) -> Superblock:
    """Swap live blocks `old_ids` for flushed blocks `new_ids` (a compaction), then delete.

    The deletion protocol with step 1 also listing `new_ids` as live: ONE durable superblock
    write is the commit point, so a crash leaves either the old blocks live (the new files
    unreferenced) or the new ones live and the old ones orphaned (startup finishes them).
    `new_ids` take the place, in `live_blocks` order (oldest first), of the first of `old_ids`;
    merging blocks that are not adjacent in that order is the caller's responsibility.
    """
    old = tuple(old_ids)
    new = tuple(new_ids)
    unknown = [b for b in old if b not in superblock.live_blocks]
    if unknown:
        raise BlockProtocolError(tuple(unknown), "not live in the superblock")
    clash = [b for b in new if b in superblock.live_blocks or b in superblock.orphaned_blocks]
    if clash:
        raise BlockProtocolError(tuple(clash), "already listed in the superblock")
    live: list[str] = []
    placed = False
    for block_id in superblock.live_blocks:
        if block_id not in old:
            live.append(block_id)
        elif not placed:
            live.extend(new)
            placed = True
    if not placed:
        live.extend(new)
    recorded = attrs.evolve(
        superblock,
        live_blocks=tuple(live),
        orphaned_blocks=superblock.orphaned_blocks + old,
    )
    store.write_superblock(recorded)
    return finish_orphan_deletion(store, blocks, recorded)


def finish_orphan_deletion(
    store: MetadataStore, blocks: BlockManager, superblock: Superblock
) -> Superblock:
    """Steps 2-3 for every orphan the superblock records (also the startup retry)."""
    if not superblock.orphaned_blocks:
        return superblock
    blocks.delete_blocks(superblock.orphaned_blocks, superblock=superblock)
    cleared = attrs.evolve(superblock, orphaned_blocks=())
    store.write_superblock(cleared)
    return cleared


def block_verifier(path: str) -> FrameVerifier:
    """A streaming check of a block file's frame (a block arriving in chunks): header and
    checksum as `decode_block` verifies them, without decoding the rows."""
    return FrameVerifier(path=path, magic=BLOCK_MAGIC, versions=frozenset({FORMAT_VERSION}))
