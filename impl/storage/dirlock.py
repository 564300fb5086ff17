"""The server root's lock: one process at a time uses a server directory.

``<root>/LOCK`` is an ordinary file on which the user of the directory holds an exclusive
``fcntl.flock``. The tablet server takes it when it opens (or formats) its directory
(`ServerLayout.open` / `format`, on the real disk only) and keeps it for as long as its
layout lives, in practice the process lifetime; the kernel drops it when the process exits,
``kill -9`` included, so a crash never leaves a stale lock behind. The offline commands
(``revivify tserver wipe``, ``revivify local-replica purge-quarantine``) take the same lock
for the duration of their work, so they refuse a directory a server is running on, and a
server refuses to start while one of them runs.

The holder writes its pid into the file (informative only: the lock is the flock, never the
file's contents or existence), so a refusal can say who holds it::

    /var/lib/revivify/ts1 is in use by another process (pid 4242)

The lock excludes *other processes*. Within one process it is reentrant: a process-wide
registry counts the holders of each lock file, so a test that restarts a server in-process,
or runs an offline command in the process that ran the server, is not refused by itself.
The LOCK file is never removed (a wipe keeps it): unlinking a lock file other processes may
have open would let two of them lock two different files.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import posixpath
import threading

import attrs

from .errors import DirectoryLocked

LOCK = "LOCK"


@attrs.define
class _Held:
    fd: int
    dev: int
    ino: int
    count: int


_registry: dict[str, _Held] = {}
_mutex = threading.Lock()


class DirLock:
    """One reference to the held lock of a server root; `release()` drops it (idempotent)."""

    def __init__(self, root: str, key: str, held: _Held) -> None:
        self.root = root
        self._key = key
        self._held: _Held | None = held

    @property
    def released(self) -> bool:
        return self._held is None

    def release(self) -> None:
        with _mutex:
            held, self._held = self._held, None
            if held is None:
                return
            held.count -= 1
            if held.count <= 0:
                if _registry.get(self._key) is held:
                    del _registry[self._key]
                os.close(held.fd)  # closing the last descriptor drops the flock

    def __enter__(self) -> DirLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def lock_path(root: str) -> str:
    return posixpath.join(root.rstrip("/") or "/", LOCK)


def lock_directory(root: str) -> DirLock:
    """Take (or, in this process, take one more reference to) the exclusive lock of `root`.

    DirectoryLocked(root, pid) if another process holds it; OSError if the LOCK file cannot
    be created or opened (`root` missing, not a directory, not writable).
    """
    path = lock_path(root)
    key = os.path.realpath(path)
    with _mutex:
        held = _registry.get(key)
        if held is not None:
            try:
                st = os.stat(key)
            except FileNotFoundError:
                st = None
            if st is not None and (st.st_dev, st.st_ino) == (held.dev, held.ino):
                held.count += 1
                return DirLock(root, key, held)
            # The file we locked was removed or replaced behind our back: forget it (its
            # descriptor stays open while references to it remain) and lock the new one.
            del _registry[key]
        fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise DirectoryLocked(root, _read_pid(fd)) from None
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
            st = os.fstat(fd)
        except BaseException:
            os.close(fd)
            raise
        held = _Held(fd, st.st_dev, st.st_ino, 1)
        _registry[key] = held
        return DirLock(root, key, held)


def _read_pid(fd: int) -> int | None:
    with contextlib.suppress(OSError, ValueError):
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
        return int(text) if text else None
    return None


def held_here(root: str) -> bool:
    """Whether this process holds the lock of `root` (for tests and diagnostics)."""
    with _mutex:
        return os.path.realpath(lock_path(root)) in _registry


__all__ = ["LOCK", "DirLock", "held_here", "lock_directory", "lock_path"]
