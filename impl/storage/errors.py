"""The one error hierarchy of durable storage.

Every error carries the data a caller (or an operator reading a log line) needs to act:
the path, the byte offset, and a human-readable reason. Corruption is never "handled" by
deleting or rewriting the evidence: storage raises one of these and the tablet server decides
(for a tablet, that means going offline with the reason; the files stay where they are).

    StorageError
    ├── CorruptRecord(path, offset, reason, kind)   a frame or payload failed verification
    │   ├── MetadataCorrupt                         instance / superblock / cmeta file
    │   ├── WalCorrupt                              a WAL segment (tablet must go offline)
    │   └── BlockCorrupt                            a data block
    ├── NotFormatted(path)                          no instance file under the server root
    ├── AlreadyFormatted(path)                      format() over an existing instance file
    ├── InvalidName(name, reason)                   tablet / block id unusable as a file name
    ├── BlockNotFound(block_id, path)
    ├── BlockProtocolError(block_ids, reason)       deletion not recorded in the superblock first
    ├── LogNotFound(path)                           WAL directory missing (and not to be created)
    ├── LogClosed(tablet_id)                        append after close
    ├── LogFailed(tablet_id, cause)                 an earlier write or sync failed; the log is dead
    ├── DirectoryLocked(root, pid)                  another process holds the root's LOCK
    └── WipeInterrupted(root)                       a wipe of the root began and did not finish
"""

from __future__ import annotations

import enum


class StorageError(Exception):
    """Base of every error raised by revivify.impl.storage."""


class CorruptionKind(enum.Enum):
    """Why a record failed verification (machine-readable twin of the reason text)."""

    TRUNCATED = "truncated"
    BAD_MAGIC = "bad magic"
    UNKNOWN_VERSION = "unknown version"
    BAD_LENGTH = "implausible length"
    CHECKSUM = "checksum mismatch"
    UNDECODABLE = "undecodable payload"
    INCONSISTENT = "inconsistent contents"
    TRAILING_DATA = "trailing data"


class CorruptRecord(StorageError):
    """A record at `offset` in `path` failed verification for `reason`."""

    def __init__(
        self,
        path: str,
        offset: int,
        reason: str,
        kind: CorruptionKind = CorruptionKind.INCONSISTENT,
    ) -> None:
        super().__init__(f"{path}: corrupt record at offset {offset}: {reason}")
        self.path = path
        self.offset = offset
        self.reason = reason
        self.kind = kind

    def relocated(self, path: str, offset_base: int = 0) -> CorruptRecord:
        """The same error, reported against `path` (and shifted by `offset_base`)."""
        return type(self)(path, self.offset + offset_base, self.reason, self.kind)


class MetadataCorrupt(CorruptRecord):
    """An instance, superblock or consensus-metadata file is corrupt or truncated."""


class WalCorrupt(CorruptRecord):
    """A WAL segment is corrupt somewhere a crash cannot explain: the tablet goes offline."""


class BlockCorrupt(CorruptRecord):
    """A data block failed verification."""


class NotFormatted(StorageError):
    def __init__(self, path: str) -> None:
        super().__init__(f"{path}: no instance file; the server directory is not formatted")
        self.path = path


class AlreadyFormatted(StorageError):
    def __init__(self, path: str) -> None:
        super().__init__(f"{path}: already formatted (instance file exists)")
        self.path = path


class InvalidName(StorageError):
    def __init__(self, name: str, reason: str) -> None:
        super().__init__(f"invalid name {name!r}: {reason}")
        self.name = name
        self.reason = reason


class BlockNotFound(StorageError):
    def __init__(self, block_id: str, path: str) -> None:
        super().__init__(f"block {block_id} not found at {path}")
        self.block_id = block_id
        self.path = path


class BlockProtocolError(StorageError):
    def __init__(self, block_ids: tuple[str, ...], reason: str) -> None:
        super().__init__(f"blocks {list(block_ids)}: {reason}")
        self.block_ids = block_ids
        self.reason = reason


class LogNotFound(StorageError):
    def __init__(self, path: str) -> None:
        super().__init__(f"{path}: WAL directory does not exist")
        self.path = path


class LogClosed(StorageError):
    def __init__(self, tablet_id: str) -> None:
        super().__init__(f"log of tablet {tablet_id} is closed")
        self.tablet_id = tablet_id


class LogFailed(StorageError):
    """A write or sync failed; nothing after it was acknowledged and the log accepts no more."""

    def __init__(self, tablet_id: str, cause: BaseException) -> None:
        super().__init__(f"log of tablet {tablet_id} failed: {cause!r}")
        self.tablet_id = tablet_id
        self.cause = cause


class DirectoryLocked(StorageError):
    """Another process holds the exclusive lock of the server root (dirlock.py)."""

    def __init__(self, root: str, pid: int | None) -> None:
        holder = f"pid {pid}" if pid is not None else "pid unknown"
        super().__init__(f"{root} is in use by another process ({holder})")
        self.root = root
        self.pid = pid


class WipeInterrupted(StorageError):
    """The root still has its instance file but a wipe already took its tablets away."""

    def __init__(self, root: str) -> None:
        super().__init__(f"{root}: a wipe of this directory was interrupted; run "
                         f"'revivify tserver wipe --fs-root {root}' again to finish it")
        self.root = root
