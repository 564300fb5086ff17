"""Record framing shared by every durable file: instance, superblock, cmeta, WAL, blocks.

A frame is a fixed 16-byte header followed by a payload::

    offset  size  field
    0       4     magic     which kind of record this is (b"RVSB", b"RVWB", ...)
    4       2     version   format version of the payload schema (little endian)
    6       2     reserved  zero
    8       4     length    payload length in bytes
    12      4     crc       zlib.crc32 over header bytes 0..11, then the payload

Invariants a reader relies on:

* The checksum covers the header too, so a flipped length or version is a checksum error,
  never a silent misparse; the length is additionally bounded by MAX_PAYLOAD so garbage
  cannot make a reader allocate gigabytes.
* A frame is verified completely (length, checksum) before its payload is decoded, and the
  payload is decoded with a typed msgspec schema, so a decoder sees only well-formed data.
* Every failure is a CorruptRecord naming the path, the offset of the frame and the reason;
  truncation says how many of the needed bytes exist ("truncated at N of M bytes").

Writing a frame once and reusing it everywhere is the point: one verified decoder to fuzz.
"""

from __future__ import annotations

import mmap
import struct
import zlib
from typing import TypeVar

import attrs
import msgspec

from .errors import CorruptionKind, CorruptRecord

HEADER = struct.Struct("<4sHHII")
HEADER_SIZE = HEADER.size  # 16
MAX_PAYLOAD = 256 * 1024 * 1024

T = TypeVar("T")


@attrs.frozen
class Frame:
    """One verified frame: where it starts and ends in its buffer, and its payload."""

    magic: bytes
    version: int
    payload: memoryview  # a view into the buffer decoded (which it keeps alive)
    offset: int
    end: int


def encode_frame(magic: bytes, version: int, payload: bytes) -> bytes:
    """Frame `payload` under `magic` and `version`."""
    if len(magic) != 4:
        raise ValueError("magic must be 4 bytes")
    if len(payload) > MAX_PAYLOAD:
        raise ValueError(f"payload of {len(payload)} bytes exceeds {MAX_PAYLOAD}")
    head = struct.pack("<4sHHI", magic, version, 0, len(payload))
    crc = zlib.crc32(payload, zlib.crc32(head))
    return head + struct.pack("<I", crc) + payload


def encode_value(magic: bytes, version: int, value: object) -> bytes:
    """Frame the msgpack encoding of `value` (attrs classes, enums, tuples...)."""
    return encode_frame(magic, version, msgspec.msgpack.encode(value))


def decode_frame(
    data: bytes | bytearray | memoryview | mmap.mmap,
    offset: int,
    *,
    path: str,
    magics: frozenset[bytes],
    versions: frozenset[int] = frozenset({1}),
) -> Frame:
    """Verify and return the frame at `offset` of `data`; raise CorruptRecord otherwise."""
    available = len(data) - offset
    if available < HEADER_SIZE:
        raise CorruptRecord(
            path,
            offset,
            f"truncated at {max(available, 0)} of {HEADER_SIZE} header bytes",
            CorruptionKind.TRUNCATED,
        )
    magic, version, reserved, length, crc = HEADER.unpack_from(data, offset)
    if magic not in magics:
        raise CorruptRecord(
            path,
            offset,
            f"bad magic {bytes(magic)!r}, expected one of {sorted(magics)}",
            CorruptionKind.BAD_MAGIC,
        )
    if length > MAX_PAYLOAD:
        raise CorruptRecord(
            path,
            offset,
            f"payload length {length} exceeds {MAX_PAYLOAD}",
            CorruptionKind.BAD_LENGTH,
        )
    end = offset + HEADER_SIZE + length
    if end > len(data):
        raise CorruptRecord(
            path,
            offset,
            f"truncated at {len(data) - offset} of {HEADER_SIZE + length} bytes",
            CorruptionKind.TRUNCATED,
        )
    # A view, not a copy: a block's payload is tens of MB, decoded once and dropped.
    view = memoryview(data)
    payload = view[offset + HEADER_SIZE : end]
    actual = zlib.crc32(payload, zlib.crc32(view[offset : offset + 12]))
    if actual != crc:
        raise CorruptRecord(
            path,
            offset,
            f"checksum mismatch (stored {crc:#010x}, computed {actual:#010x})",
            CorruptionKind.CHECKSUM,
        )
    if reserved != 0 or version not in versions:
        # Checked after the checksum: a verified frame with a version we do not know was
        # written by newer software, which is a different message from "bits flipped".
        raise CorruptRecord(
            path,
            offset,
            f"unknown format version {version} (reserved {reserved}); known {sorted(versions)}",
            CorruptionKind.UNKNOWN_VERSION,
        )
    return Frame(magic=bytes(magic), version=version, payload=payload, offset=offset, end=end)


def decode_payload(frame: Frame, kind: type[T], *, path: str) -> T:
    """Decode a verified frame's payload into `kind` with msgspec's strict typed decoder."""
    try:
        return msgspec.msgpack.decode(frame.payload, type=kind)
    except (msgspec.DecodeError, msgspec.ValidationError, ValueError, TypeError) as exc:
        raise CorruptRecord(
            path, frame.offset, f"undecodable payload: {exc}", CorruptionKind.UNDECODABLE
        ) from None


def decode_whole(
    data: bytes | mmap.mmap,
    kind: type[T],
    *,
    path: str,
    magic: bytes,
    versions: frozenset[int] = frozenset({1}),
) -> T:
    """Decode a file that holds exactly one frame (metadata files, blocks)."""
    frame = decode_frame(data, 0, path=path, magics=frozenset({magic}), versions=versions)
    if frame.end != len(data):
        raise CorruptRecord(
            path,
            frame.end,
            f"{len(data) - frame.end} trailing bytes after the record",
            CorruptionKind.TRAILING_DATA,
        )
    return decode_payload(frame, kind, path=path)


class FrameVerifier:
    """Verify a file that holds exactly one frame (a block) from its bytes in file order,
    without holding them: what `decode_whole` checks before decoding (header, length bound,
    version, checksum, no trailing bytes), for a file that arrives in chunks (a tablet
    copy). The frame's own checksum was computed by the writer that made the file, so a
    file that passes is the writer's file, whichever copies it went through."""

    def __init__(self, *, path: str, magic: bytes, versions: frozenset[int] = frozenset({1})
                 ) -> None:
        self.path = path
        self._magic = magic
        self._versions = versions
        self._head = b""
        self._length = -1  # the payload length, once the header is in
        self._stored = 0
        self._crc = 0
        self._seen = 0  # payload bytes fed so far
        self._version = self._reserved = 0

    def feed(self, data: bytes | memoryview) -> None:
        """The next bytes of the file; CorruptRecord as soon as the header is wrong."""
        if self._length < 0:
            need = HEADER_SIZE - len(self._head)
            self._head += bytes(data[:need])
            data = data[need:]
            if len(self._head) == HEADER_SIZE:
                self._check_header()
        if data:
            self._crc = zlib.crc32(data, self._crc)
        self._seen += len(data)

    def _check_header(self) -> None:
        magic, version, reserved, length, crc = HEADER.unpack(self._head)
        if magic != self._magic:
            raise CorruptRecord(self.path, 0, f"bad magic {bytes(magic)!r}, expected "
                                f"{self._magic!r}", CorruptionKind.BAD_MAGIC)
        if length > MAX_PAYLOAD:
            raise CorruptRecord(self.path, 0, f"payload length {length} exceeds {MAX_PAYLOAD}",
                                CorruptionKind.BAD_LENGTH)
        self._length, self._stored = length, crc
        self._version, self._reserved = version, reserved
        self._crc = zlib.crc32(self._head[:12])

    def finish(self) -> None:
        """Every byte was fed: CorruptRecord unless they were exactly one good frame."""
        if self._length < 0:
            raise CorruptRecord(self.path, 0, f"truncated at {len(self._head)} of {HEADER_SIZE} "
                                "header bytes", CorruptionKind.TRUNCATED)
        if self._seen < self._length:
            raise CorruptRecord(self.path, 0, f"truncated at {HEADER_SIZE + self._seen} of "
                                f"{HEADER_SIZE + self._length} bytes", CorruptionKind.TRUNCATED)
        if self._seen > self._length:
            raise CorruptRecord(self.path, HEADER_SIZE + self._length,
                                f"{self._seen - self._length} trailing bytes after the record",
                                CorruptionKind.TRAILING_DATA)
        if self._crc != self._stored:
            raise CorruptRecord(self.path, 0, f"checksum mismatch (stored {self._stored:#010x},"
                                f" computed {self._crc:#010x})", CorruptionKind.CHECKSUM)
        if self._reserved != 0 or self._version not in self._versions:  # as decode_frame
            raise CorruptRecord(self.path, 0, f"unknown format version {self._version} "
                                f"(reserved {self._reserved}); known {sorted(self._versions)}",
                                CorruptionKind.UNKNOWN_VERSION)
