"""Server states and explored states as bytes that mean the same in every process.

A sid (``symmetry.SidInterner``) is a position in one process's interning order, and the
canonical representative of an orbit (``symmetry.make_canon``: the minimum over the packed
sids) depends on that order: two processes pick different representatives of one orbit and
give one server state different sids. What crosses a process boundary (the parallel
search's messages and owners, the Spark job's records) is therefore built from
``encode_server``: every field's value in declaration order, a ``logic.FMap`` as its items
and default, serialised by ``marshal`` format 2 (no back-references: the bytes depend on the
values only, never on which objects happen to be shared, and the values are ints, bools and
tuples of them, whose encoding no hash seed touches). ``decode_server`` inverts it.
"""

from __future__ import annotations

import hashlib
import marshal
import struct
from collections.abc import Sequence
from typing import Any, Final

import attrs

from revivify.spec.logic import FMap
from revivify.spec.model import ServerState

_FIELDS: Final = tuple(f.name for f in attrs.fields(ServerState))
_MARSHAL_VERSION: Final = 2  # format 2: no references between objects (see the docstring)


def encode_server(s: ServerState) -> bytes:
    """The server state's values, field by field, as stable bytes."""
    values: list[Any] = []
    for name in _FIELDS:
        v = getattr(s, name)
        values.append((1, v.items, v.default) if isinstance(v, FMap) else (0, v))
    return marshal.dumps(tuple(values), _MARSHAL_VERSION)


def decode_server(data: bytes) -> ServerState:
    values = marshal.loads(data)
    return ServerState(**{name: FMap(v[1], v[2]) if v[0] else v[1]
                          for name, v in zip(_FIELDS, values, strict=True)})


def digest(data: bytes) -> int:
    """A 64-bit digest of stable bytes, the same in every process (``hash`` of bytes is
    salted per process)."""
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "big")


_LEN: Final = struct.Struct(">I")


def pack_state(cw: int, encs: Sequence[bytes]) -> bytes:
    """An explored state (budget counters, each server's encoding) as one bytes value."""
    parts = [_LEN.pack(cw)]
    for e in encs:
        parts.append(_LEN.pack(len(e)))
        parts.append(e)
    return b"".join(parts)


def unpack_state(data: bytes) -> tuple[int, list[bytes]]:
    (cw,) = _LEN.unpack_from(data, 0)
    pos = _LEN.size
    encs: list[bytes] = []
    while pos < len(data):
        (size,) = _LEN.unpack_from(data, pos)
        pos += _LEN.size
        encs.append(data[pos:pos + size])
        pos += size
    return cw, encs


__all__ = ["decode_server", "digest", "encode_server", "pack_state", "unpack_state"]
