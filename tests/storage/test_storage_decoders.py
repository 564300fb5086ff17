"""Bad input: every decoder answers random bytes, bit flips and truncation with a clear
CorruptRecord (path, offset, reason) and never with an unhandled exception."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from revivify.impl.storage.blocks import decode_block, encode_block
from revivify.impl.storage.codec import HEADER_SIZE, decode_frame, encode_frame, encode_value
from revivify.impl.storage.errors import CorruptRecord
from revivify.impl.storage.metadata import (
    decode_cmeta,
    decode_instance,
    decode_superblock,
    encode_cmeta,
    encode_instance,
    encode_superblock,
)
from revivify.impl.storage.values import (
    ConsensusMeta,
    DataState,
    InstanceInfo,
    MemberType,
    OpId,
    RaftConfig,
    RaftPeer,
    Superblock,
)
from revivify.impl.storage.wal import (
    FOOTER_MAGIC,
    HEADER_MAGIC,
    LogEntry,
    SegmentFooter,
    SegmentHeader,
    encode_batch,
    scan_segment,
)

FUZZ = settings(max_examples=200, deadline=None)
PATH = "/fuzz/file"

names = st.text(st.characters(codec="utf-8", exclude_characters="/\x00"), min_size=1, max_size=12)
opids = st.builds(OpId, st.integers(0, 2**40), st.integers(0, 2**40))
superblocks = st.builds(
    Superblock,
    tablet_id=names,
    data_state=st.sampled_from(DataState),
    tombstone_last_opid=st.none() | opids,
    quarantine_dir=st.none() | names,
    live_blocks=st.lists(names, max_size=4).map(tuple),
    orphaned_blocks=st.lists(names, max_size=4).map(tuple),
)
cmetas = st.builds(
    ConsensusMeta,
    tablet_id=names,
    current_term=st.integers(0, 2**40),
    voted_for=st.none() | names,
    committed_config=st.builds(
        RaftConfig,
        opid_index=st.none() | st.integers(0, 2**40),
        peers=st.lists(
            st.builds(RaftPeer, names, names, st.sampled_from(MemberType)), max_size=3
        ).map(tuple),
    ),
)


def _segment(entries: list[list[LogEntry]], close: bool) -> bytes:
    import zlib

    data = encode_value(HEADER_MAGIC, 1, SegmentHeader("t", 1))
    crc = 0
    flat: list[int] = []
    for batch in entries:
        frame = encode_batch(batch)
        crc = zlib.crc32(frame, crc)
        data += frame
        flat += [e.index for e in batch]
    if close:
        footer = SegmentFooter(len(flat), min(flat, default=None), max(flat, default=None), crc)
        data += encode_value(FOOTER_MAGIC, 1, footer)
    return data


batches = st.lists(
    st.builds(
        lambda start, n, term, payload: [LogEntry(term, start + i, payload) for i in range(n)],
        st.integers(1, 1000),
        st.integers(1, 3),
        st.integers(0, 5),
        st.binary(max_size=30),
    ),
    min_size=1,
    max_size=4,
)

Decoder = Callable[[bytes], object]
DECODERS: dict[str, Decoder] = {
    "superblock": lambda b: decode_superblock(b, path=PATH),
    "cmeta": lambda b: decode_cmeta(b, path=PATH),
    "instance": lambda b: decode_instance(b, path=PATH),
    "block": lambda b: decode_block(b, path=PATH),
    "segment": lambda b: scan_segment(b, PATH),
    "frame": lambda b: decode_frame(b, 0, path=PATH, magics=frozenset({b"RVSB"})),
}


def _valid(kind: str, data: st.DataObject) -> bytes:
    if kind == "superblock":
        return encode_superblock(data.draw(superblocks))
    if kind == "cmeta":
        return encode_cmeta(data.draw(cmetas))
    if kind == "instance":
        return encode_instance(InstanceInfo(data.draw(names), data.draw(st.integers(0, 2**62))))
    if kind == "block":
        rows = data.draw(
            st.lists(st.tuples(st.integers(-(2**63), 2**63 - 1), st.text(max_size=5)), max_size=5)
        )
        return encode_block("blk", rows)
    if kind == "segment":
        return _segment(data.draw(batches), data.draw(st.booleans()))
    return encode_frame(b"RVSB", 1, data.draw(st.binary(max_size=64)))


def _decode_or_clear_error(kind: str, blob: bytes) -> None:
    try:
        result = DECODERS[kind](blob)
    except CorruptRecord as exc:
        assert exc.path == PATH and exc.reason and 0 <= exc.offset <= max(len(blob), 0)
        return
    if kind == "segment":  # a scan may stop at a bad frame: it must say where and why
        problem = result.problem  # type: ignore[attr-defined]
        if problem is not None:
            assert problem.path == PATH and problem.reason


@pytest.mark.parametrize("kind", sorted(DECODERS))
@FUZZ
@given(blob=st.binary(max_size=300))
def test_random_bytes(kind: str, blob: bytes) -> None:
    _decode_or_clear_error(kind, blob)


@pytest.mark.parametrize("kind", sorted(DECODERS))
@FUZZ
@given(data=st.data())
def test_bit_flips_are_detected(kind: str, data: st.DataObject) -> None:
    valid = _valid(kind, data)
    DECODERS[kind](valid)  # the unmodified encoding decodes
    position = data.draw(st.integers(0, len(valid) * 8 - 1))
    flipped = bytearray(valid)
    flipped[position // 8] ^= 1 << (position % 8)
    if kind == "segment":
        # A flip lands in the header (WalCorrupt), a batch/footer (a problem or error).
        try:
            scan = scan_segment(bytes(flipped), PATH)
        except CorruptRecord:
            return
        assert scan.problem is not None
        return
    with pytest.raises(CorruptRecord):
        DECODERS[kind](bytes(flipped))


@pytest.mark.parametrize("kind", sorted(DECODERS))
@FUZZ
@given(data=st.data())
def test_truncation_is_detected(kind: str, data: st.DataObject) -> None:
    valid = _valid(kind, data)
    cut = data.draw(st.integers(0, len(valid) - 1))
    if kind == "segment":
        try:
            scan = scan_segment(valid[:cut], PATH)
        except CorruptRecord as exc:
            assert exc.offset == 0  # only a cut header is an error by itself
            return
        # A cut at a frame boundary is a shorter (unclosed) segment; otherwise a problem.
        assert scan.footer is None
        return
    with pytest.raises(CorruptRecord) as raised:
        DECODERS[kind](valid[:cut])
    if cut < HEADER_SIZE or kind != "frame":
        assert "truncated" in raised.value.reason


@FUZZ
@given(superblocks)
def test_superblock_round_trip(superblock: Superblock) -> None:
    assert decode_superblock(encode_superblock(superblock), path=PATH) == superblock


@FUZZ
@given(cmetas)
def test_cmeta_round_trip(cmeta: ConsensusMeta) -> None:
    assert decode_cmeta(encode_cmeta(cmeta), path=PATH) == cmeta


def test_huge_length_is_refused_before_allocating() -> None:
    import struct

    blob = struct.pack("<4sHHII", b"RVSB", 1, 0, 0xFFFFFFFF, 0)
    with pytest.raises(CorruptRecord, match="exceeds"):
        decode_frame(blob, 0, path=PATH, magics=frozenset({b"RVSB"}))
