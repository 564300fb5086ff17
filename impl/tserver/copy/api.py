"""The tablet copy source's RPC interface: method names, request and response bodies, errors.

A destination server (the copy *client*, download.py) pulls a replica from a source server
(source.py) through a *session* that pins a consistent snapshot of the source's tablet:

    Copy.BeginSession   BeginTabletCopySession(tablet_id, requester_uuid) -> CopySessionInfo
    Copy.FetchData      FetchData(session_id, kind, name, offset, max_length) -> DataChunk
    Copy.EndSession     EndTabletCopySession(session_id)                   -> Ack
    Copy.KeepAlive      KeepAlive(session_id)                              -> Ack

`CopySessionInfo` describes the snapshot: the encoded superblock (metadata.py's frame, as
read when the session began), the encoded consensus metadata (read *after* the WAL was
snapshotted, so its term is at least the last logged term), the WAL segments and data
blocks with their sizes (each file is served only up to that size, so the sizes stay true
while the source keeps appending; the files carry their own checksums, written by the
server that made them, which the destination verifies), and the last OpId in the
snapshot's WAL (``None`` for an empty log). ``expires_in_seconds`` is how long the session
lives without a FetchData or KeepAlive.

A `DataChunk` carries at most `MAX_CHUNK` bytes (4 MiB, well below the RPC frame limit) and
the CRC-32 of exactly those bytes; the client refuses a chunk whose checksum, offset or total
length is wrong and asks for it again.

Errors (AppError subclasses; a client registers ``COPY_ERRORS``): NoSuchSession(session_id)
(never begun, ended, or expired), CopySourceUnavailable(tablet_id, reason) (no READY
replica to copy, or no consistent snapshot could be pinned), BadFetch(detail) (an unknown
file, an offset past the end, a non-positive length).
"""

from __future__ import annotations

from typing import Final, Literal

import msgspec

from revivify.impl.rpc.errors import AppError
from revivify.impl.tserver.api import Ack

COPY_BEGIN_SESSION: Final = "Copy.BeginSession"
COPY_FETCH_DATA: Final = "Copy.FetchData"
COPY_END_SESSION: Final = "Copy.EndSession"
COPY_KEEP_ALIVE: Final = "Copy.KeepAlive"

MAX_CHUNK: Final = 4 << 20
"""The most bytes one FetchData returns (a larger max_length is capped to this)."""

FileKind = Literal["wal", "block"]


class BeginTabletCopySession(msgspec.Struct, frozen=True):
    tablet_id: str
    requester_uuid: str


class FileInfo(msgspec.Struct, frozen=True):
    """One file of the snapshot: a WAL segment (``wal-000000001``) or a block (its id)."""

    name: str
    size: int


class CopySessionInfo(msgspec.Struct, frozen=True):
    session_id: str
    tablet_id: str
    source_uuid: str
    superblock: bytes  # encode_superblock() of the READY superblock as of the snapshot
    cmeta: bytes  # encode_cmeta() of the consensus metadata, read after the WAL snapshot
    wal_segments: list[FileInfo]  # oldest first; every one but the last is closed
    blocks: list[FileInfo]  # exactly the superblock's live_blocks, in its order
    last_opid: tuple[int, int] | None  # (term, index) of the snapshot's last WAL entry
    expires_in_seconds: float


class FetchData(msgspec.Struct, frozen=True):
    session_id: str
    kind: FileKind
    name: str
    offset: int
    max_length: int = MAX_CHUNK


class DataChunk(msgspec.Struct, frozen=True):
    data: bytes
    offset: int
    total_length: int  # the file's size in the snapshot
    crc32: int  # zlib.crc32 of `data`


class EndTabletCopySession(msgspec.Struct, frozen=True):
    session_id: str


class KeepAlive(msgspec.Struct, frozen=True):
    session_id: str


# ---------------------------------------------------------------------------- errors


class NoSuchSession(AppError):
    code = "copy.no_such_session"
    fields = ("session_id",)

    def __init__(self, session_id: str) -> None:
        super().__init__(f"no tablet copy session {session_id!r} (never begun, ended or expired)")
        self.session_id = session_id


class CopySourceUnavailable(AppError):
    code = "copy.source_unavailable"
    fields = ("tablet_id", "reason")

    def __init__(self, tablet_id: str, reason: str) -> None:
        super().__init__(f"cannot copy tablet {tablet_id} from here: {reason}")
        self.tablet_id = tablet_id
        self.reason = reason


class BadFetch(AppError):
    code = "copy.bad_fetch"
    fields = ("detail",)

    def __init__(self, detail: str) -> None:
        super().__init__(f"bad fetch: {detail}")
        self.detail = detail


COPY_ERRORS: Final[tuple[type[AppError], ...]] = (NoSuchSession, CopySourceUnavailable, BadFetch)

__all__ = [
    "COPY_BEGIN_SESSION", "COPY_END_SESSION", "COPY_ERRORS", "COPY_FETCH_DATA",
    "COPY_KEEP_ALIVE", "MAX_CHUNK", "Ack", "BadFetch", "BeginTabletCopySession",
    "CopySessionInfo", "CopySourceUnavailable", "DataChunk", "EndTabletCopySession",
    "FetchData", "FileInfo", "FileKind", "KeepAlive", "NoSuchSession",
]
