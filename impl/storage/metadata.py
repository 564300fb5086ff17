"""Superblock and consensus metadata: versioned, checksummed, replaced atomically.

File format (metafile.py): exactly one codec frame (magic b"RVSB" superblock, b"RVCM"
cmeta, b"RVIN" instance; version 1) whose payload is the msgpack of the value in values.py.

Write path (`atomic_replace`): temp file in the same directory, fsync, rename over the
target, fsync the directory. Invariant: after any crash the target holds a complete old or
complete new value; once `write_*` returns, the new value is durable.

Read path: a missing file is `None` (for a superblock that *is* the DOES_NOT_EXIST state).
Anything else that does not verify raises MetadataCorrupt(path, reason): bad magic, unknown
version, checksum mismatch, "truncated at N of M bytes", undecodable payload, or a tablet id
that does not match the file name. A corrupt file is never deleted or overwritten by this
module; the caller keeps the tablet offline and an operator inspects the evidence.
Leftover temp files (a crash between create and rename) are ignored by readers and removed
by `ServerLayout.remove_stale_temps` at startup; they never shadow a real file.
"""

from __future__ import annotations

from .disk import atomic_replace, read_optional
from .errors import CorruptionKind, MetadataCorrupt
from .layout import ServerLayout

# The formats live in metafile.py (the layout needs the instance format, and this module
# needs the layout); they are re-exported here, where callers have always found them.
from .metafile import (
    CMETA_MAGIC,
    FORMAT_VERSION,
    INSTANCE_MAGIC,
    SUPERBLOCK_MAGIC,
    decode_cmeta,
    decode_instance,
    decode_superblock,
    encode_cmeta,
    encode_instance,
    encode_superblock,
)
from .values import ConsensusMeta, Superblock


class MetadataStore:
    """Reads and atomically replaces the per-tablet metadata files of one server layout."""

    def __init__(self, layout: ServerLayout) -> None:
        self.layout = layout
        self.disk = layout.disk

    def write_superblock(self, superblock: Superblock) -> None:
        """Durably replace tablet-meta/<tablet_id> (seed 001 deletion step 4, copy steps 1, 5)."""
        path = self.layout.superblock_path(superblock.tablet_id)
        atomic_replace(self.disk, path, encode_superblock(superblock))

    def load_superblock(self, tablet_id: str) -> Superblock | None:
        """The superblock, or None when the tablet is DOES_NOT_EXIST here."""
        path = self.layout.superblock_path(tablet_id)
        data = read_optional(self.disk, path)
        if data is None:
            return None
        superblock = decode_superblock(data, path=path)
        _check_tablet_id(path, tablet_id, superblock.tablet_id)
        return superblock

    def write_cmeta(self, cmeta: ConsensusMeta) -> None:
        path = self.layout.cmeta_path(cmeta.tablet_id)
        atomic_replace(self.disk, path, encode_cmeta(cmeta))

    def load_cmeta(self, tablet_id: str) -> ConsensusMeta | None:
        path = self.layout.cmeta_path(tablet_id)
        data = read_optional(self.disk, path)
        if data is None:
            return None
        cmeta = decode_cmeta(data, path=path)
        _check_tablet_id(path, tablet_id, cmeta.tablet_id)
        return cmeta


def _check_tablet_id(path: str, expected: str, found: str) -> None:
    if expected != found:
        raise MetadataCorrupt(
            path,
            0,
            f"file names tablet {expected!r} but holds tablet {found!r}",
            CorruptionKind.INCONSISTENT,
        )


__all__ = [
    "CMETA_MAGIC",
    "FORMAT_VERSION",
    "INSTANCE_MAGIC",
    "SUPERBLOCK_MAGIC",
    "MetadataStore",
    "decode_cmeta",
    "decode_instance",
    "decode_superblock",
    "encode_cmeta",
    "encode_instance",
    "encode_superblock",
    "read_optional",
]
