"""Framing: length prefix + payload; any chunking reassembles; bad streams raise only
MalformedFrame (FrameTooLarge included), and a failed decoder stays failed."""

from __future__ import annotations

import itertools
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from revivify.impl.rpc import FrameDecoder, FrameTooLarge, MalformedFrame, encode_frame
from revivify.impl.rpc.framing import PREFIX_SIZE

payload_lists = st.lists(st.binary(max_size=300), max_size=12)


def split(data: bytes, cuts: list[int]) -> list[bytes]:
    """`data` cut at the given offsets (any order, duplicates allowed)."""
    points = sorted({0, len(data), *(c % (len(data) + 1) for c in cuts)})
    return [data[a:b] for a, b in itertools.pairwise(points)]


class TestEncodeFrame:
    """encode_frame writes a 4-byte big-endian length, then the payload."""

    def test_layout(self) -> None:
        assert encode_frame(b"abc") == b"\x00\x00\x00\x03abc"
        assert encode_frame(b"") == b"\x00\x00\x00\x00"

    def test_refuses_oversized_payload(self) -> None:
        with pytest.raises(FrameTooLarge) as info:
            encode_frame(b"x" * 11, max_frame_size=10)
        assert (info.value.size, info.value.limit) == (11, 10)
        assert encode_frame(b"x" * 10, max_frame_size=10)[PREFIX_SIZE:] == b"x" * 10

    def test_limit_must_fit_the_prefix(self) -> None:
        with pytest.raises(ValueError):
            FrameDecoder(max_frame_size=2**32)
        with pytest.raises(ValueError):
            encode_frame(b"", max_frame_size=-1)


class TestFrameDecoder:
    """FrameDecoder.feed / feed_eof on hand-made streams."""

    def test_byte_at_a_time(self) -> None:
        stream = encode_frame(b"hello") + encode_frame(b"") + encode_frame(b"world")
        decoder = FrameDecoder()
        frames = [frame for byte in stream for frame in decoder.feed(bytes([byte]))]
        assert frames == [b"hello", b"", b"world"]
        assert decoder.buffered == 0
        decoder.feed_eof()  # between frames: a clean end

    def test_oversized_prefix_refused_before_the_payload(self) -> None:
        decoder = FrameDecoder(max_frame_size=100)
        assert decoder.feed(encode_frame(b"ok")) == [b"ok"]
        with pytest.raises(FrameTooLarge) as info:
            decoder.feed(struct.pack(">I", 101))  # only the prefix: no payload sent yet
        assert (info.value.size, info.value.limit) == (101, 100)
        assert decoder.buffered == 0

    def test_failed_decoder_stays_failed(self) -> None:
        decoder = FrameDecoder(max_frame_size=4)
        with pytest.raises(FrameTooLarge):
            decoder.feed(b"\xff\xff\xff\xff")
        with pytest.raises(MalformedFrame, match="already failed"):
            decoder.feed(encode_frame(b"ok"))
        with pytest.raises(MalformedFrame, match="already failed"):
            decoder.feed_eof()

    def test_eof_inside_prefix(self) -> None:
        decoder = FrameDecoder()
        assert decoder.feed(b"\x00\x00") == []
        with pytest.raises(MalformedFrame, match=r"inside a length prefix \(2 of 4 bytes\)"):
            decoder.feed_eof()

    def test_eof_inside_payload(self) -> None:
        decoder = FrameDecoder()
        assert decoder.feed(encode_frame(b"0123456789")[:7]) == []
        with pytest.raises(MalformedFrame, match=r"inside a frame \(3 of 10 payload bytes\)"):
            decoder.feed_eof()


class TestFrameDecoderFuzz:
    """Hypothesis: chunking never matters; garbage never raises anything but MalformedFrame."""

    @given(payloads=payload_lists, cuts=st.lists(st.integers(0, 10_000), max_size=20))
    def test_any_chunking_reassembles_exactly(self, payloads: list[bytes], cuts: list[int]) -> None:
        stream = b"".join(encode_frame(p) for p in payloads)
        decoder = FrameDecoder(max_frame_size=300)
        frames = [frame for chunk in split(stream, cuts) for frame in decoder.feed(chunk)]
        assert frames == payloads
        assert decoder.buffered == 0
        decoder.feed_eof()

    @given(payloads=st.lists(st.binary(max_size=50), min_size=1, max_size=5), data=st.data())
    def test_truncated_stream_fails_at_eof(
        self, payloads: list[bytes], data: st.DataObject
    ) -> None:
        stream = b"".join(encode_frame(p) for p in payloads)
        boundaries = {0}
        for p in payloads:
            boundaries.add(max(boundaries) + PREFIX_SIZE + len(p))
        cut = data.draw(st.integers(1, len(stream) - 1).filter(lambda c: c not in boundaries))
        decoder = FrameDecoder()
        complete = decoder.feed(stream[:cut])
        assert complete == payloads[: len(complete)]
        with pytest.raises(MalformedFrame):
            decoder.feed_eof()

    @given(
        garbage=st.binary(max_size=400),
        cuts=st.lists(st.integers(0, 10_000), max_size=10),
        limit=st.integers(0, 64),
    )
    def test_random_bytes_raise_only_framing_errors(
        self, garbage: bytes, cuts: list[int], limit: int
    ) -> None:
        decoder = FrameDecoder(max_frame_size=limit)
        frames: list[bytes] = []
        try:
            for chunk in split(garbage, cuts):
                frames.extend(decoder.feed(chunk))
        except MalformedFrame as exc:
            # Only an oversized length can break a stream mid-way; it is reported exactly.
            assert isinstance(exc, FrameTooLarge)
            assert exc.limit == limit and exc.size > limit
            return
        # Accepted: the frames re-encode to exactly the consumed prefix of the input.
        consumed = b"".join(encode_frame(f) for f in frames)
        assert garbage.startswith(consumed)
        assert decoder.buffered == len(garbage) - len(consumed)
        assert all(len(f) <= limit for f in frames)
        try:
            decoder.feed_eof()
        except MalformedFrame:
            assert decoder.buffered == 0 and len(garbage) > len(consumed)
        else:
            assert len(garbage) == len(consumed)
