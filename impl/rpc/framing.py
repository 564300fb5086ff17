"""Frames on a byte stream: a 4-byte big-endian length, then that many payload bytes.

No I/O here (the h11 shape): the trio shell feeds whatever bytes a socket returned into a
FrameDecoder and gets back the complete payloads, in order; it writes what encode_frame
returns. Both sides of a connection use the same rules:

* The length counts the payload only, so an empty payload is a valid frame (the codec above
  rejects it). A length above the decoder's `max_frame_size` is refused as soon as the four
  prefix bytes have arrived (FrameTooLarge), before any of the payload is buffered: garbage
  or a hostile peer cannot make a server allocate more than one frame's worth of memory.
* Chunk boundaries mean nothing: any split of the same byte stream yields the same frames.
* End of stream inside a frame (or inside a length prefix) is a MalformedFrame, reported by
  `feed_eof`; end of stream between frames is a clean close.
* A decoder that raised is dead: a stream that broke the framing once has no trustworthy
  frame boundary left, so the connection it came from must be closed. Further calls raise
  MalformedFrame again instead of guessing.

The framing carries no checksum: TCP already protects the bytes in transit, and every
payload is a typed msgpack document that the codec verifies field by field.
"""

from __future__ import annotations

import struct
from typing import Final, NoReturn

from .errors import FrameTooLarge, MalformedFrame

LENGTH_PREFIX: Final = struct.Struct(">I")
PREFIX_SIZE: Final = LENGTH_PREFIX.size  # 4
DEFAULT_MAX_FRAME_SIZE: Final = 16 * 1024 * 1024
_LARGEST_ENCODABLE: Final = 2**32 - 1


def _check_limit(max_frame_size: int) -> int:
    if not 0 <= max_frame_size <= _LARGEST_ENCODABLE:
        raise ValueError(f"max_frame_size must be in [0, 2**32 - 1], got {max_frame_size}")
    return max_frame_size


def encode_frame(payload: bytes, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> bytes:
    """Prefix `payload` with its length; FrameTooLarge if it exceeds `max_frame_size`."""
    _check_limit(max_frame_size)
    if len(payload) > max_frame_size:
        raise FrameTooLarge(len(payload), max_frame_size)
    return LENGTH_PREFIX.pack(len(payload)) + payload


class FrameDecoder:
    """Reassembles frames from arbitrarily split chunks of one byte stream."""

    def __init__(self, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> None:
        self.max_frame_size = _check_limit(max_frame_size)
        self._buffer = bytearray()
        self._failure: MalformedFrame | None = None

    @property
    def buffered(self) -> int:
        """Bytes received that do not yet form a complete frame."""
        return len(self._buffer)

    def feed(self, data: bytes | bytearray | memoryview) -> list[bytes]:
        """Add `data`; return every payload it completes (possibly none), in order."""
        self._check_alive()
        buffer = self._buffer
        buffer += data
        frames: list[bytes] = []
        start = 0
        while len(buffer) - start >= PREFIX_SIZE:
            (length,) = LENGTH_PREFIX.unpack_from(buffer, start)
            if length > self.max_frame_size:
                # Fail before buffering the payload; frames completed by this same chunk
                # are dropped with the connection, as they came from a broken stream.
                self._fail(FrameTooLarge(length, self.max_frame_size))
            end = start + PREFIX_SIZE + length
            if end > len(buffer):
                break
            frames.append(bytes(buffer[start + PREFIX_SIZE : end]))
            start = end
        if start:
            del buffer[:start]  # one compaction per feed, not per frame
        return frames

    def feed_eof(self) -> None:
        """The stream ended: fine between frames, MalformedFrame inside one."""
        self._check_alive()
        have = len(self._buffer)
        if have == 0:
            return
        if have < PREFIX_SIZE:
            self._fail(MalformedFrame(
                f"stream ended inside a length prefix ({have} of {PREFIX_SIZE} bytes)"))
        (length,) = LENGTH_PREFIX.unpack_from(self._buffer, 0)
        self._fail(MalformedFrame(
            f"stream ended inside a frame ({have - PREFIX_SIZE} of {length} payload bytes)"))

    def _check_alive(self) -> None:
        if self._failure is not None:
            raise MalformedFrame(f"decoder already failed: {self._failure.reason}")

    def _fail(self, error: MalformedFrame) -> NoReturn:
        self._failure = error
        self._buffer = bytearray()
        raise error
