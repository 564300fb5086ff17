"""Power loss in a real process: a disk that keeps every unsynced write in the process.

Test-only, off unless ``REVIVIFY_LAZY_DISK=1`` is in a server's environment when it starts
(``faults.os_disk``); production never wraps its disk in it.

Theory
------
A real power loss keeps what was fsynced and may drop anything else. ``kill -9`` alone does
not show that: whatever the process wrote has reached the kernel's page cache and survives
the process, so a server that forgets an fsync passes every kill test on a healthy kernel.
``LazyDisk`` moves the page cache into the process: ``pwrite``, ``truncate`` and
``fallocate`` are recorded per path and reach the operating system only when the file is
synced (``fsync`` / ``fdatasync`` replays them in order, then syncs). Killing the process
then drops exactly the unsynced contents, as a power loss would; the nemesis's power-loss
fault is ``kill -9`` of a server running on this disk.

While the process runs it reads its own writes: ``pread``, ``size``, ``read_file``,
``map_file`` and ``file_size`` see the recorded operations replayed over what the operating
system holds, on every handle and after a close and a re-open (the page cache is per file,
not per descriptor).

What it does not model (said where the nemesis is documented): names. ``open(create=True)``,
``rename``, ``unlink``, ``mkdir`` and ``rmdir`` reach the operating system at once, as if
each were followed by a directory fsync; a missing ``fsync_dir`` is therefore not lost here.
SimDisk's crash exploration (impl/testing/simdisk.py) covers names, in process; this disk
covers contents, in real processes under real kills. A file created and never synced
survives as an empty (or shorter) file, which a power loss on ext4 can also leave.

Memory: recorded operations are kept until the next sync of their file. The servers sync
their WAL at every group commit and every metadata file before using it, so what is
pending stays small; a server run with ``--no-fsync`` on this disk would grow without
bound (and lose everything at a kill, which is the point of ``--no-fsync``).
"""

from __future__ import annotations

import threading
from typing import Final

from .disk import Buffer, Disk, DiskFile

ENV: Final = "REVIVIFY_LAZY_DISK"

# A recorded operation: ("w", offset, data) a pwrite; ("t", size, b"") a truncate;
# ("f", end, b"") a fallocate reaching ``end`` (it only ever grows the file).
Op = tuple[str, int, bytes]


def _replay_size(size: int, ops: list[Op]) -> int:
    for kind, arg, data in ops:
        if kind == "w":
            size = max(size, arg + len(data))
        elif kind == "t":
            size = arg
        else:
            size = max(size, arg)
    return size


def _replay_window(base: bytes, base_size: int, ops: list[Op], offset: int,
                   length: int) -> bytes:
    """The bytes [offset, offset + length) after ``ops`` are applied to a file of
    ``base_size`` bytes whose bytes in that window are ``base``.

    Invariant while replaying: every byte of the window at or past the current size is
    zero, so a later extension (a write past the end, a fallocate) reads zeros there, as
    POSIX says it must."""
    window = bytearray(length)
    window[: len(base)] = base
    size = base_size
    end = offset + length
    for kind, arg, data in ops:
        if kind == "w":
            lo, hi = max(offset, arg), min(end, arg + len(data))
            if lo < hi:
                window[lo - offset: hi - offset] = data[lo - arg: hi - arg]
            size = max(size, arg + len(data))
        elif kind == "t":
            if arg < size and arg < end:
                cut = max(arg, offset)
                window[cut - offset:] = bytes(end - cut)
            size = arg
        else:
            size = max(size, arg)
    return bytes(window[: max(0, min(length, size - offset))])


class LazyFile:
    """A handle on one path; its unsynced operations live in the ``LazyDisk``."""

    def __init__(self, disk: LazyDisk, inner: DiskFile) -> None:
        self._disk = disk
        self._inner = inner

    @property
    def path(self) -> str:
        return self._inner.path

    def pwrite(self, offset: int, data: bytes) -> None:
        self._disk.record(self.path, ("w", offset, bytes(data)))

    def truncate(self, size: int) -> None:
        self._disk.record(self.path, ("t", size, b""))

    def fallocate(self, offset: int, length: int) -> None:
        if length > 0:
            self._disk.record(self.path, ("f", offset + length, b""))

    def pread(self, offset: int, length: int) -> bytes:
        with self._disk.lock:
            ops = list(self._disk.pending.get(self.path, ()))
            base_size = self._inner.size()
            base = self._inner.pread(offset, length) if offset < base_size else b""
        if not ops:
            return base
        return _replay_window(base, base_size, ops, offset, length)

    def size(self) -> int:
        with self._disk.lock:
            return _replay_size(self._inner.size(), self._disk.pending.get(self.path, []))

    def fsync(self) -> None:
        self._flush()
        self._inner.fsync()

    def fdatasync(self) -> None:
        self._flush()
        self._inner.fdatasync()

    def _flush(self) -> None:
        """Hand the recorded operations to the operating system, in order."""
        with self._disk.lock:
            ops = self._disk.pending.pop(self.path, [])
            for kind, arg, data in ops:
                if kind == "w":
                    self._inner.pwrite(arg, data)
                elif kind == "t":
                    self._inner.truncate(arg)
                else:
                    size = self._inner.size()
                    if arg > size:
                        self._inner.fallocate(size, arg - size)

    def close(self) -> None:
        self._inner.close()  # the recorded operations stay: the "page cache" outlives it


class LazyDisk:
    """``inner`` with unsynced contents kept in this process (module docstring)."""

    def __init__(self, inner: Disk) -> None:
        self.inner = inner
        # Threads: the WAL appends in a worker thread while the run loop's thread reads;
        # one lock over the recorded operations (test-only, so simplicity over throughput).
        self.lock = threading.Lock()
        self.pending: dict[str, list[Op]] = {}

    def record(self, path: str, op: Op) -> None:
        with self.lock:
            self.pending.setdefault(path, []).append(op)

    def unsynced_bytes(self) -> int:
        """What a power loss now would lose (written bytes not yet synced), for tests."""
        with self.lock:
            return sum(len(d) for ops in self.pending.values() for _k, _a, d in ops)

    def open(self, path: str, *, create: bool = False, exclusive: bool = False) -> DiskFile:
        return LazyFile(self, self.inner.open(path, create=create, exclusive=exclusive))

    def read_file(self, path: str) -> bytes:
        with self.lock:
            ops = list(self.pending.get(path, ()))
            base = self.inner.read_file(path)
        if not ops:
            return base
        size = _replay_size(len(base), ops)
        return _replay_window(base, len(base), ops, 0, size)

    def map_file(self, path: str) -> Buffer:
        with self.lock:
            if not self.pending.get(path):
                return self.inner.map_file(path)
        return self.read_file(path)

    def file_size(self, path: str) -> int:
        with self.lock:
            return _replay_size(self.inner.file_size(path), self.pending.get(path, []))

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
        with self.lock:
            self.inner.rename(src, dst)
            moved = self.pending.pop(src, None)
            self.pending.pop(dst, None)  # dst's old contents are gone with its old inode
            if moved:
                self.pending[dst] = moved

    def unlink(self, path: str) -> None:
        with self.lock:
            self.inner.unlink(path)
            self.pending.pop(path, None)

    def fsync_dir(self, path: str) -> None:
        self.inner.fsync_dir(path)


__all__ = ["ENV", "LazyDisk", "LazyFile"]
