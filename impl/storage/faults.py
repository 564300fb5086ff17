"""Test-only disk faults behind the disk seam (off unless ``REVIVIFY_FAULT_FILE`` is set:
see impl/faultfile.py, which also says how the file looks).

``os_disk()`` is the disk a server process uses: the plain ``OsDisk`` when no fault file was
named (production: nothing wraps it), else a ``FaultyDisk`` around it that, before each
operation, asks the fault file whether that operation on that path must fail, and raises
OSError(EIO or ENOSPC) instead of doing it:

    op in the file   operations that raise                       what it simulates
    "write"          DiskFile.pwrite / truncate / fallocate      a write error, a full disk
    "fsync"          DiskFile.fsync / fdatasync, fsync_dir       a failed sync

The operation is not attempted: bytes a failed write would have written are not there, and a
failed sync left the page cache as it was (Linux after a failed fsync may have dropped the
dirty pages; the servers must never rely on a retried fsync either way, so the difference
does not matter to them). Reads, renames, unlinks and directory listings are never failed.
"""

from __future__ import annotations

import os

from revivify.impl import faultfile

from . import lazy
from .disk import Buffer, Disk, DiskFile, OsDisk
from .lazy import LazyDisk
from .syncpoll import SyncPoller


class FaultyFile:
    """A DiskFile whose writes and syncs consult the fault file first."""

    def __init__(self, inner: DiskFile, faults: faultfile.FaultFile) -> None:
        self._inner = inner
        self._faults = faults

    def _check(self, op: str) -> None:
        error = self._faults.current().disk_error(op, self._inner.path)
        if error is not None:
            raise error

    @property
    def path(self) -> str:
        return self._inner.path

    def pwrite(self, offset: int, data: bytes) -> None:
        self._check("write")
        self._inner.pwrite(offset, data)

    def pread(self, offset: int, length: int) -> bytes:
        return self._inner.pread(offset, length)

    def size(self) -> int:
        return self._inner.size()

    def truncate(self, size: int) -> None:
        self._check("write")
        self._inner.truncate(size)

    def fallocate(self, offset: int, length: int) -> None:
        self._check("write")
        self._inner.fallocate(offset, length)

    def fsync(self) -> None:
        self._check("fsync")
        self._inner.fsync()

    def fdatasync(self) -> None:
        self._check("fsync")
        self._inner.fdatasync()

    def close(self) -> None:
        self._inner.close()


class FaultyDisk:
    """A Disk that fails what the fault file says (module docstring), else is `inner`."""

    def __init__(self, inner: Disk, faults: faultfile.FaultFile) -> None:
        self.inner = inner
        self._faults = faults

    def open(self, path: str, *, create: bool = False, exclusive: bool = False) -> DiskFile:
        return FaultyFile(self.inner.open(path, create=create, exclusive=exclusive),
                          self._faults)

    def read_file(self, path: str) -> bytes:
        return self.inner.read_file(path)

    def map_file(self, path: str) -> Buffer:
        return self.inner.map_file(path)

    def file_size(self, path: str) -> int:
        return self.inner.file_size(path)

    def exists(self, path: str) -> bool:
        return self.inner.exists(path)

    def is_dir(self, path: str) -> bool:
        return self.inner.is_dir(path)

    def listdir(self, path: str) -> list[str]:
        return self.inner.listdir(path)

    def mkdir(self, path: str) -> None:
        self.inner.mkdir(path)

    def rmdir(self, path: str) -> None:
        self.inner.rmdir(path)

    def rename(self, src: str, dst: str) -> None:
        self.inner.rename(src, dst)

    def unlink(self, path: str) -> None:
        self.inner.unlink(path)

    def fsync_dir(self, path: str) -> None:
        error = self._faults.current().disk_error("fsync", path.rstrip("/") + "/")
        if error is not None:
            raise error
        self.inner.fsync_dir(path)


def os_disk(poller: SyncPoller | None = None) -> Disk:
    """The real disk; in tests, wrapped in a LazyDisk (``REVIVIFY_LAZY_DISK=1``: a kill is
    then a power loss, lazy.py) and in a FaultyDisk when a fault file was named (outermost,
    so an injected sync error fails before anything reaches the operating system)."""
    disk: Disk = OsDisk(poller)
    if os.environ.get(lazy.ENV) == "1":
        disk = LazyDisk(disk)
    active = faultfile.ACTIVE
    return disk if active is None else FaultyDisk(disk, active)


__all__ = ["FaultyDisk", "FaultyFile", "os_disk"]
