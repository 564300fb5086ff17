"""FrameVerifier: the streaming check of a one-frame file (a block arriving in chunks) must
give decode_whole's verdict, however the bytes are split."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from revivify.impl.storage.blocks import BLOCK_MAGIC, block_verifier, decode_block, encode_block
from revivify.impl.storage.codec import FrameVerifier, encode_frame
from revivify.impl.storage.errors import CorruptionKind, CorruptRecord

rows = st.lists(st.tuples(st.binary(min_size=1, max_size=20), st.binary(max_size=200)),
                max_size=20)


def feed_split(verifier: FrameVerifier, data: bytes, cuts: list[int]) -> None:
    """Feed `data` cut at the (sorted, deduplicated) offsets `cuts`."""
    edges = [0, *sorted({c % (len(data) + 1) for c in cuts}), len(data)]
    for start, end in itertools.pairwise(edges):
        verifier.feed(data[start:end])


@given(rows, st.lists(st.integers(min_value=0), max_size=8))
def test_a_good_block_passes_however_it_is_split(block_rows: list[tuple[bytes, bytes]],
                                                  cuts: list[int]) -> None:
    data = encode_block("b1", block_rows)
    verifier = block_verifier("b1")
    feed_split(verifier, data, cuts)
    verifier.finish()
    assert decode_block(data, path="b1", block_id="b1") == block_rows


@given(rows, st.integers(min_value=0), st.integers(min_value=1, max_value=255),
       st.lists(st.integers(min_value=0), max_size=8))
def test_any_changed_byte_is_refused(block_rows: list[tuple[bytes, bytes]], where: int,
                                     flip: int, cuts: list[int]) -> None:
    """CRC-32 catches every error burst of up to 32 bits: one changed byte, anywhere
    (header or payload), is always refused, as decode_block refuses it."""
    data = bytearray(encode_block("b1", block_rows))
    data[where % len(data)] ^= flip
    verifier = block_verifier("b1")
    with pytest.raises(CorruptRecord):
        feed_split(verifier, bytes(data), cuts)
        verifier.finish()
    with pytest.raises(CorruptRecord):
        decode_block(bytes(data), path="b1")


@pytest.mark.parametrize(("data", "kind"), [
    (b"", CorruptionKind.TRUNCATED),
    (encode_block("b1", [(b"k", b"v")])[:10], CorruptionKind.TRUNCATED),
    (encode_block("b1", [(b"k", b"v")])[:-1], CorruptionKind.TRUNCATED),
    (encode_block("b1", [(b"k", b"v")]) + b"\0", CorruptionKind.TRAILING_DATA),
    (encode_frame(b"RVSB", 1, b"x"), CorruptionKind.BAD_MAGIC),
    (encode_frame(BLOCK_MAGIC, 9, b"x"), CorruptionKind.UNKNOWN_VERSION),
])
def test_refusals_name_what_is_wrong(data: bytes, kind: CorruptionKind) -> None:
    verifier = block_verifier("data/b1")
    with pytest.raises(CorruptRecord) as refused:
        verifier.feed(data)
        verifier.finish()
    assert refused.value.kind is kind and refused.value.path == "data/b1"
