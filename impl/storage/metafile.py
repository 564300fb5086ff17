"""The file formats of a server's metadata files: superblock, consensus metadata, instance.

Each file is exactly one codec frame (magic b"RVSB" superblock, b"RVCM" cmeta, b"RVIN"
instance; version 1) whose payload is the msgpack of the value in values.py. This module
only turns values into bytes and back; where the files live is layout.py, and writing them
(atomically) and reading them per tablet is metadata.py (MetadataStore).

Why a module of its own: the layout writes and reads the instance file (its `format` commit
point) and the metadata store needs the layout's paths; with the formats here, both depend
on this module and neither on the other (an import-linter contract forbids the cycle).

Decoding refuses anything that does not verify with MetadataCorrupt(path, offset, reason):
bad magic, unknown version, checksum mismatch, "truncated at N of M bytes", undecodable
payload. Nothing here deletes or rewrites a file.
"""

from __future__ import annotations

from typing import TypeVar

from .codec import decode_whole, encode_value
from .errors import CorruptRecord, MetadataCorrupt
from .values import ConsensusMeta, InstanceInfo, Superblock

SUPERBLOCK_MAGIC = b"RVSB"
CMETA_MAGIC = b"RVCM"
INSTANCE_MAGIC = b"RVIN"
FORMAT_VERSION = 1

T = TypeVar("T")


def _decode(data: bytes, kind: type[T], *, path: str, magic: bytes) -> T:
    try:
        return decode_whole(data, kind, path=path, magic=magic)
    except CorruptRecord as exc:
        raise MetadataCorrupt(path, exc.offset, exc.reason, exc.kind) from None


def encode_superblock(superblock: Superblock) -> bytes:
    return encode_value(SUPERBLOCK_MAGIC, FORMAT_VERSION, superblock)


def decode_superblock(data: bytes, *, path: str) -> Superblock:
    return _decode(data, Superblock, path=path, magic=SUPERBLOCK_MAGIC)


def encode_cmeta(cmeta: ConsensusMeta) -> bytes:
    return encode_value(CMETA_MAGIC, FORMAT_VERSION, cmeta)


def decode_cmeta(data: bytes, *, path: str) -> ConsensusMeta:
    return _decode(data, ConsensusMeta, path=path, magic=CMETA_MAGIC)


def encode_instance(info: InstanceInfo) -> bytes:
    return encode_value(INSTANCE_MAGIC, FORMAT_VERSION, info)


def decode_instance(data: bytes, *, path: str) -> InstanceInfo:
    return _decode(data, InstanceInfo, path=path, magic=INSTANCE_MAGIC)


__all__ = [
    "CMETA_MAGIC",
    "FORMAT_VERSION",
    "INSTANCE_MAGIC",
    "SUPERBLOCK_MAGIC",
    "decode_cmeta",
    "decode_instance",
    "decode_superblock",
    "encode_cmeta",
    "encode_instance",
    "encode_superblock",
]
