"""The replicated write payload: one client write request, as Raft carries it in a log entry.

A `WriteBatch` is what a client sends and what the leader replicates: the client's identity
and sequence number, then row operations applied in order (a later op on the same key wins).
`(client_id, seq)` makes a write exactly-once (Kudu's result tracker): a retry of a write
carries the same pair, and the tablet store applies a pair at most once (store.py).

Encoding: msgspec msgpack. `WriteBatch` is a map (fields may be added with defaults, never
renamed: it lives in WAL segments); `RowOp` is an array ``[kind, key, value]`` because a
batch holds up to 10,000 of them and field names would dominate its size. Decoding is
strict and typed: anything that is not a WriteBatch of that shape raises
`MalformedWrite(reason)`, never another exception.

Limits (`validate_write`, raising `InvalidWrite(reason, op_index)` for the first violation):

    client id        1..256 UTF-8 bytes          seq         0 <= seq < 2**63
    ops per batch    at most 10,000              key         1..4096 bytes
    value            at most 1 MiB (delete: empty)
    batch            keys + values at most 64 MiB, so an encoded batch fits a WAL frame

Decoding and validation are separate on purpose: a leader validates before replicating (and
`encode_write` refuses to encode an invalid batch), while a replica applying a *committed*
entry must reach the same outcome as every other replica, so the store rejects an invalid
committed batch deterministically instead of raising (store.py, `TabletStore.apply`).
"""

from __future__ import annotations

from typing import Literal

import msgspec

from .errors import InvalidWrite, MalformedWrite

MAX_CLIENT_ID_BYTES = 256
MAX_SEQ = 2**63 - 1
MAX_OPS = 10_000
MAX_KEY_BYTES = 4096
MAX_VALUE_BYTES = 1 << 20
MAX_BATCH_BYTES = 64 << 20


class RowOp(msgspec.Struct, frozen=True, array_like=True):
    """Put `value` at `key`, or delete `key` (a delete carries no value)."""

    kind: Literal["put", "delete"]
    key: bytes
    value: bytes = b""


class WriteBatch(msgspec.Struct, frozen=True):
    """One client write request: ops applied in order, at most once per (client_id, seq)."""

    client_id: str
    seq: int
    ops: list[RowOp]


def put(key: bytes, value: bytes) -> RowOp:
    return RowOp("put", key, value)


def delete(key: bytes) -> RowOp:
    return RowOp("delete", key)


_ENCODER = msgspec.msgpack.Encoder()
_DECODER = msgspec.msgpack.Decoder(WriteBatch)


def validate_identity(client_id: str, seq: int) -> None:
    """Raise InvalidWrite if (client_id, seq) cannot identify a write for exactly-once."""
    try:
        client_bytes = len(client_id.encode("utf-8"))
    except UnicodeEncodeError:
        raise InvalidWrite("client id is not valid UTF-8") from None
    if not 1 <= client_bytes <= MAX_CLIENT_ID_BYTES:
        raise InvalidWrite(f"client id is {client_bytes} bytes, must be 1..{MAX_CLIENT_ID_BYTES}")
    if not 0 <= seq <= MAX_SEQ:
        raise InvalidWrite(f"seq {seq} outside 0..{MAX_SEQ}")


def validate_write(batch: WriteBatch) -> None:
    """Raise InvalidWrite naming the first limit `batch` breaks (see the module docstring)."""
    validate_identity(batch.client_id, batch.seq)
    validate_ops(batch.ops)


def validate_ops(ops: list[RowOp]) -> None:
    """The limits on a batch's ops (count, key and value sizes, total size)."""
    if len(ops) > MAX_OPS:
        raise InvalidWrite(f"{len(ops)} ops, at most {MAX_OPS} allowed")
    total = 0
    for position, op in enumerate(ops):
        if not 1 <= len(op.key) <= MAX_KEY_BYTES:
            raise InvalidWrite(f"key is {len(op.key)} bytes, must be 1..{MAX_KEY_BYTES}", position)
        if len(op.value) > MAX_VALUE_BYTES:
            raise InvalidWrite(
                f"value is {len(op.value)} bytes, at most {MAX_VALUE_BYTES} allowed", position
            )
        if op.kind == "delete" and op.value:
            raise InvalidWrite(f"delete carries a {len(op.value)}-byte value", position)
        total += len(op.key) + len(op.value)
    if total > MAX_BATCH_BYTES:
        raise InvalidWrite(f"keys and values total {total} bytes, at most {MAX_BATCH_BYTES}")


def encode_write(batch: WriteBatch, *, validate: bool = True) -> bytes:
    """The payload bytes of `batch` (validated first unless `validate=False`)."""
    if validate:
        validate_write(batch)
    return _ENCODER.encode(batch)


def decode_write(data: bytes | bytearray | memoryview) -> WriteBatch:
    """Decode a payload; MalformedWrite(reason) for anything that is not a WriteBatch.

    Only the shape is checked here; `validate_write` checks the limits.
    """
    try:
        return _DECODER.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise MalformedWrite(str(exc)) from None
    except (TypeError, ValueError, RecursionError) as exc:  # not a buffer; absurd nesting
        raise MalformedWrite(f"{type(exc).__name__}: {exc}") from None
