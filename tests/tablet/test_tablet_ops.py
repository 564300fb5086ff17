"""The write payload: round trips, limits with typed errors, garbage never escapes as anything
but MalformedWrite."""

from __future__ import annotations

import contextlib

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from revivify.impl.tablet.errors import InvalidWrite, MalformedWrite, WriteError
from revivify.impl.tablet.ops import (
    MAX_BATCH_BYTES,
    MAX_KEY_BYTES,
    MAX_OPS,
    MAX_VALUE_BYTES,
    RowOp,
    WriteBatch,
    decode_write,
    delete,
    encode_write,
    put,
    validate_write,
)

FUZZ = settings(max_examples=300, deadline=None)

row_ops = st.one_of(
    st.builds(put, st.binary(min_size=1, max_size=20), st.binary(max_size=40)),
    st.builds(delete, st.binary(min_size=1, max_size=20)),
)
batches = st.builds(
    WriteBatch,
    client_id=st.text(min_size=1, max_size=20),
    seq=st.integers(0, 2**63 - 1),
    ops=st.lists(row_ops, max_size=20),
)


@FUZZ
@given(batches)
def test_round_trip(batch: WriteBatch) -> None:
    validate_write(batch)
    assert decode_write(encode_write(batch)) == batch


@FUZZ
@given(st.binary(max_size=200))
def test_random_bytes_are_malformed_or_a_batch(data: bytes) -> None:
    try:
        batch = decode_write(data)
    except MalformedWrite as exc:
        assert exc.reason
    else:
        assert isinstance(batch, WriteBatch)


@FUZZ
@given(batches, st.data())
def test_bit_flips_and_truncation(batch: WriteBatch, data: st.DataObject) -> None:
    encoded = bytearray(encode_write(batch))
    cut = data.draw(st.integers(0, len(encoded) - 1))
    with pytest.raises(MalformedWrite):
        decode_write(bytes(encoded[:cut]))
    position = data.draw(st.integers(0, len(encoded) - 1))
    encoded[position] ^= 1 << data.draw(st.integers(0, 7))
    with contextlib.suppress(MalformedWrite):  # a flip may still decode; nothing else escapes
        decode_write(bytes(encoded))


@pytest.mark.parametrize(
    "payload",
    [
        b"",
        b"\xc1",  # never-used msgpack byte
        msgspec.msgpack.encode([1, 2, 3]),
        msgspec.msgpack.encode({"client_id": "c", "seq": "one", "ops": []}),
        msgspec.msgpack.encode({"client_id": "c", "seq": 1, "ops": [["upsert", b"k", b""]]}),
        msgspec.msgpack.encode({"client_id": "c", "seq": 1, "ops": [["put", "text", b""]]}),
        msgspec.msgpack.encode({"client_id": "c", "seq": 1}),
        encode_write(WriteBatch("c", 1, [])) + b"\x00",  # trailing bytes
        b"\x91" * 5000,  # deep nesting
    ],
)
def test_malformed_payloads(payload: bytes) -> None:
    with pytest.raises(MalformedWrite) as exc:
        decode_write(payload)
    assert isinstance(exc.value, WriteError) and "malformed write payload" in str(exc.value)


def test_not_bytes_is_malformed() -> None:
    with pytest.raises(MalformedWrite):
        decode_write("text")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("batch", "op_index", "fragment"),
    [
        (WriteBatch("", 1, []), None, "client id is 0 bytes"),
        (WriteBatch("c" * 257, 1, []), None, "client id is 257 bytes"),
        (WriteBatch("\udc80", 1, []), None, "not valid UTF-8"),
        (WriteBatch("c", -1, []), None, "seq -1"),
        (WriteBatch("c", 2**63, []), None, "seq"),
        (WriteBatch("c", 1, [put(b"k", b"")] * (MAX_OPS + 1)), None, "10001 ops"),
        (WriteBatch("c", 1, [put(b"k", b""), put(b"", b"v")]), 1, "key is 0 bytes"),
        (WriteBatch("c", 1, [put(b"k" * (MAX_KEY_BYTES + 1), b"")]), 0, "key is 4097 bytes"),
        (WriteBatch("c", 1, [put(b"k", b"v" * (MAX_VALUE_BYTES + 1))]), 0, "value is 1048577"),
        (WriteBatch("c", 1, [RowOp("delete", b"k", b"v")]), 0, "delete carries"),
        (
            WriteBatch("c", 1, [put(b"k%d" % i, b"v" * MAX_VALUE_BYTES) for i in range(65)]),
            None,
            "total",
        ),
    ],
)
def test_limits(batch: WriteBatch, op_index: int | None, fragment: str) -> None:
    with pytest.raises(InvalidWrite) as exc:
        validate_write(batch)
    assert exc.value.op_index == op_index
    assert fragment in str(exc.value)
    with pytest.raises(InvalidWrite):
        encode_write(batch)


def test_limits_are_inclusive() -> None:
    validate_write(
        WriteBatch(
            "c" * 256,
            2**63 - 1,
            [put(b"k" * MAX_KEY_BYTES, b"v" * MAX_VALUE_BYTES)] + [delete(b"k")] * (MAX_OPS - 1),
        )
    )
    assert MAX_BATCH_BYTES >= 64 * MAX_VALUE_BYTES


def test_encoding_is_compact() -> None:
    # RowOp is an array: a put of a 1-byte key and value costs a handful of bytes.
    one = len(encode_write(WriteBatch("c", 1, [put(b"k", b"v")])))
    two = len(encode_write(WriteBatch("c", 1, [put(b"k", b"v")] * 2)))
    assert two - one <= 11  # [kind, key, value]: 1 + 4 + 3 + 3 bytes, no field names
