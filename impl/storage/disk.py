"""The disk seam: every byte storage writes goes through a `Disk`.

Two implementations exist: `OsDisk` (the real operating system: os.pwrite, os.fsync,
os.fdatasync, posix_fallocate, rename, directory fsync) and `SimDisk` (a test double in
revivify.impl.testing: an in-memory disk whose crash keeps only what was made durable, or
any allowed subset of the unsynced operations). Storage code is written against the protocol
only and is synchronous; async callers run it in a worker thread (the WAL appender does).

The durability contract the protocol promises, and that SimDisk enforces in tests:

* `DiskFile.fsync()` / `fdatasync()` make the file's *contents and size* durable. They do
  NOT make the file's *name* durable: a created, renamed or unlinked name is durable only
  after `Disk.fsync_dir(parent)` (POSIX; ext4 is more generous, we do not rely on it).
* `rename(src, dst)` atomically replaces dst in the running system; after a crash either the
  old or the new name binding is visible, never a mix.
* Hence the one correct way to replace a file (`atomic_replace` below): write a temporary in
  the same directory, fsync it, rename it over the target, fsync the directory. Renaming
  before the fsync can leave an empty or partial file under the real name after a crash;
  skipping the directory fsync can lose the replacement (or a creation) entirely.

Paths are POSIX strings; helpers here build on the protocol and work on either disk.
"""

from __future__ import annotations

import errno
import mmap
import os
import posixpath
from collections.abc import Callable
from typing import Protocol, TypeAlias

from .syncpoll import SyncPoller

Buffer: TypeAlias = bytes | mmap.mmap  # what map_file returns: both read as buffers


class DiskFile(Protocol):
    """An open read-write file. Offsets are explicit: callers track their append position."""

    @property
    def path(self) -> str: ...

    def pwrite(self, offset: int, data: bytes) -> None: ...

    def pread(self, offset: int, length: int) -> bytes: ...

    def size(self) -> int: ...

    def truncate(self, size: int) -> None: ...

    def fallocate(self, offset: int, length: int) -> None:
        """Reserve space so the file is at least offset+length bytes (new bytes read as zero)."""
        ...

    def fsync(self) -> None: ...

    def fdatasync(self) -> None: ...

    def close(self) -> None: ...


class Disk(Protocol):
    """Namespace and file operations storage needs; see the module docstring for durability."""

    def open(self, path: str, *, create: bool = False, exclusive: bool = False) -> DiskFile: ...

    def read_file(self, path: str) -> bytes: ...

    def map_file(self, path: str) -> Buffer:
        """The file's bytes as a read-only buffer, without copying them where the disk can
        (a memory map of an immutable file: blocks). Valid while referenced."""
        ...

    def file_size(self, path: str) -> int: ...

    def exists(self, path: str) -> bool: ...

    def is_dir(self, path: str) -> bool: ...

    def listdir(self, path: str) -> list[str]:
        """Names in directory `path`, sorted."""
        ...

    def mkdir(self, path: str) -> None: ...

    def rmdir(self, path: str) -> None: ...

    def rename(self, src: str, dst: str) -> None: ...

    def unlink(self, path: str) -> None: ...

    def fsync_dir(self, path: str) -> None: ...


# --------------------------------------------------------------------------- the real OS


def _sync(fn: Callable[[int], None], fd: int, poller: SyncPoller | None) -> None:
    if poller is None:
        fn(fd)
    else:
        poller.sync(fn, fd)


class OsFile:
    """A real file descriptor opened O_RDWR."""

    def __init__(self, path: str, fd: int, poller: SyncPoller | None = None) -> None:
        self._path = path
        self._fd = fd
        self._poller = poller

    @property
    def path(self) -> str:
        return self._path

    def pwrite(self, offset: int, data: bytes) -> None:
        view = memoryview(data)
        while view:
            written = os.pwrite(self._fd, view, offset)
            view = view[written:]
            offset += written

    def pread(self, offset: int, length: int) -> bytes:
        parts: list[bytes] = []
        while length > 0:
            chunk = os.pread(self._fd, length, offset)
            if not chunk:
                break
            parts.append(chunk)
            offset += len(chunk)
            length -= len(chunk)
        return b"".join(parts)

    def size(self) -> int:
        return os.fstat(self._fd).st_size

    def truncate(self, size: int) -> None:
        os.ftruncate(self._fd, size)

    def fallocate(self, offset: int, length: int) -> None:
        if length <= 0:
            return
        try:
            os.posix_fallocate(self._fd, offset, length)
        except (AttributeError, OSError) as exc:
            # Unsupported here (tmpfs on some kernels, macOS): extending the size still
            # gives the zero-filled region the WAL expects, only without reserved extents.
            if isinstance(exc, OSError) and exc.errno not in (
                errno.EOPNOTSUPP,
                errno.ENOTSUP,
                errno.EINVAL,
                errno.ENOSYS,
            ):
                raise
            if self.size() < offset + length:
                os.ftruncate(self._fd, offset + length)

    def fsync(self) -> None:
        _sync(os.fsync, self._fd, self._poller)

    def fdatasync(self) -> None:
        _sync(getattr(os, "fdatasync", os.fsync), self._fd, self._poller)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


class OsDisk:
    """The real operating system's file system. ``poller``: keeps a CPU awake during each
    sync (syncpoll.py); None, a sync is a plain system call."""

    def __init__(self, poller: SyncPoller | None = None) -> None:
        self.poller = poller

    def open(self, path: str, *, create: bool = False, exclusive: bool = False) -> OsFile:
        flags = os.O_RDWR | getattr(os, "O_CLOEXEC", 0)
        if create:
            flags |= os.O_CREAT
        if exclusive:
            flags |= os.O_CREAT | os.O_EXCL
        return OsFile(path, os.open(path, flags, 0o644), self.poller)

    def read_file(self, path: str) -> bytes:
        with open(path, "rb") as f:
            return f.read()

    def map_file(self, path: str) -> Buffer:
        # Mapped, not read: the page cache's pages are the buffer (no copy, no fresh
        # allocation to fault in). The map outlives the descriptor and is unmapped when the
        # last view of it goes; only immutable files are mapped (a file truncated under a
        # map would fault), so this serves blocks.
        with open(path, "rb") as f:
            if os.fstat(f.fileno()).st_size == 0:
                return b""
            return mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ,
                             flags=mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0))

    def file_size(self, path: str) -> int:
        return os.stat(path).st_size

    def exists(self, path: str) -> bool:
        return os.path.lexists(path)

    def is_dir(self, path: str) -> bool:
        return os.path.isdir(path)

    def listdir(self, path: str) -> list[str]:
        return sorted(os.listdir(path))

    def mkdir(self, path: str) -> None:
        os.mkdir(path, 0o755)

    def rmdir(self, path: str) -> None:
        os.rmdir(path)

    def rename(self, src: str, dst: str) -> None:
        os.rename(src, dst)

    def unlink(self, path: str) -> None:
        os.unlink(path)

    def fsync_dir(self, path: str) -> None:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        try:
            _sync(os.fsync, fd, self.poller)
        finally:
            os.close(fd)


# --------------------------------------------------------------------------- helpers


def parent_of(path: str) -> str:
    return posixpath.dirname(path.rstrip("/")) or "/"


TEMP_MARKER = ".tmp."


def temp_path_for(path: str) -> str:
    """The temporary name used while replacing `path` (same directory, so rename is atomic)."""
    head, tail = posixpath.split(path)
    return posixpath.join(head, f"{tail}{TEMP_MARKER}new")


def is_temp_name(name: str) -> bool:
    return TEMP_MARKER in name


def read_optional(disk: Disk, path: str) -> bytes | None:
    """The file's bytes, or None when there is no file at `path` (other errors propagate)."""
    try:
        return disk.read_file(path)
    except FileNotFoundError:
        return None


def write_new_file(disk: Disk, path: str, data: bytes) -> None:
    """Create (or overwrite) `path` with `data` and fsync its contents (not its name)."""
    f = disk.open(path, create=True)
    try:
        f.truncate(0)
        f.pwrite(0, data)
        f.fsync()
    finally:
        f.close()


def atomic_replace(disk: Disk, path: str, data: bytes) -> None:
    """Durably make `path` hold exactly `data`: temp, fsync, rename, fsync dir.

    After any crash, `path` holds either its previous contents (or does not exist, if it did
    not before) or `data`; never a prefix or a mix. After return, `data` is durable.
    """
    temp = temp_path_for(path)
    write_new_file(disk, temp, data)
    disk.rename(temp, path)
    disk.fsync_dir(parent_of(path))


def mkdir_durably(disk: Disk, path: str) -> None:
    """Create directory `path` (if missing) and make its name durable."""
    if not disk.exists(path):
        disk.mkdir(path)
    disk.fsync_dir(parent_of(path))


def makedirs_durably(disk: Disk, path: str) -> None:
    """Create `path` and any missing ancestors, each made durable top-down."""
    missing: list[str] = []
    cursor = path.rstrip("/") or "/"
    while cursor != "/" and not disk.exists(cursor):
        missing.append(cursor)
        cursor = parent_of(cursor)
    for directory in reversed(missing):
        disk.mkdir(directory)
        disk.fsync_dir(parent_of(directory))
