"""Test-only fault injection: a JSON file, named by an environment variable, that a test
harness (the nemesis, impl/testing/nemesis) rewrites atomically while servers run.

Off unless ``REVIVIFY_FAULT_FILE`` is set when the process starts: then ``ACTIVE`` is None
and every hook (impl/rpc/faults.py, impl/storage/faults.py) is one ``is None`` test, so
production pays nothing. On, ``ACTIVE.current()`` returns the faults in force, re-reading
the file only when it changed (an ``os.stat`` at most every ``POLL_SECONDS``; the harness
replaces the file with rename, so a new inode or mtime means new contents, and a reader
never sees a half-written file). A missing file means no faults; a file that does not
parse is logged once and means no faults (the harness's bug must not crash a server).

The file (every key optional)::

    {"cuts": [["uuid-a", "uuid-b"], ...],      # a and b drop every RPC frame between them
     "disk": [{"prefix": "/abs/dir/", "op": "fsync" | "write", "errno": "EIO" | "ENOSPC"}]}

A cut is symmetric and applies to both ends (impl/rpc/faults.py): the sender drops what it
would send, the receiver drops what arrives, so a partition holds as both servers see it,
with no root, namespace or firewall rule. A disk fault makes every matching operation on a
path under ``prefix`` raise OSError(errno) (impl/storage/faults.py): ``write`` covers
pwrite, truncate and fallocate (ENOSPC: a full file system), ``fsync`` covers fsync,
fdatasync and a directory fsync.
"""

from __future__ import annotations

import errno as errno_module
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from typing import Final

import attrs

logger = logging.getLogger(__name__)

ENV: Final = "REVIVIFY_FAULT_FILE"
POLL_SECONDS: Final = 0.05
DISK_OPS: Final = ("fsync", "write")
ERRNOS: Final = {"EIO": errno_module.EIO, "ENOSPC": errno_module.ENOSPC}


@attrs.frozen
class DiskFault:
    """Operations `op` on paths under `prefix` fail with OSError(`errno`)."""

    prefix: str
    op: str
    errno: int


@attrs.frozen
class Faults:
    """The faults in force: cut pairs of server UUIDs (both orders), disk faults."""

    cuts: frozenset[tuple[str, str]] = frozenset()
    disk: tuple[DiskFault, ...] = ()

    def cut(self, a: str, b: str) -> bool:
        return (a, b) in self.cuts

    def disk_error(self, op: str, path: str) -> OSError | None:
        """The error an operation `op` on `path` must raise now, if any."""
        for fault in self.disk:
            if fault.op == op and path.startswith(fault.prefix):
                return OSError(fault.errno, f"{os.strerror(fault.errno)} (injected)", path)
        return None


NO_FAULTS: Final = Faults()


def parse_faults(text: str) -> Faults:
    """The Faults a fault file's text describes; ValueError naming what is wrong."""
    doc = json.loads(text)
    if not isinstance(doc, dict):
        raise ValueError("a fault file holds a JSON object")
    cuts: set[tuple[str, str]] = set()
    for pair in doc.get("cuts", []):
        if not (isinstance(pair, list) and len(pair) == 2
                and all(isinstance(u, str) and u for u in pair)):
            raise ValueError(f"a cut is a pair of server UUIDs, not {pair!r}")
        cuts.add((pair[0], pair[1]))
        cuts.add((pair[1], pair[0]))
    disk: list[DiskFault] = []
    for item in doc.get("disk", []):
        if not isinstance(item, dict):
            raise ValueError(f"a disk fault is an object, not {item!r}")
        prefix, op, name = item.get("prefix"), item.get("op"), item.get("errno", "EIO")
        if not isinstance(prefix, str) or not prefix.startswith("/"):
            raise ValueError(f"a disk fault's prefix is an absolute path, not {prefix!r}")
        if op not in DISK_OPS:
            raise ValueError(f"a disk fault's op is one of {DISK_OPS}, not {op!r}")
        if name not in ERRNOS:
            raise ValueError(f"a disk fault's errno is one of {sorted(ERRNOS)}, not {name!r}")
        disk.append(DiskFault(prefix, op, ERRNOS[name]))
    return Faults(frozenset(cuts), tuple(disk))


class FaultFile:
    """The fault file at `path`, re-read when it changes (see the module docstring).
    Safe to call from worker threads (the WAL's appender) and the trio thread alike."""

    def __init__(self, path: str, *, clock: Callable[[], float] = time.monotonic,
                 poll_seconds: float = POLL_SECONDS) -> None:
        self.path = path
        self._clock = clock
        self._poll_seconds = poll_seconds
        self._lock = threading.Lock()
        self._next_poll = float("-inf")
        self._stamp: tuple[int, int, int] | None = None  # (inode, mtime ns, size)
        self._faults = NO_FAULTS
        self._warned: tuple[int, int, int] | None = None

    def current(self) -> Faults:
        now = self._clock()
        if now < self._next_poll:
            return self._faults
        with self._lock:
            self._next_poll = now + self._poll_seconds
            try:
                st = os.stat(self.path)
            except OSError:
                self._stamp, self._faults = None, NO_FAULTS
                return self._faults
            stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
            if stamp != self._stamp:
                self._stamp = stamp
                self._faults = self._read(stamp)
            return self._faults

    def _read(self, stamp: tuple[int, int, int]) -> Faults:
        try:
            with open(self.path, encoding="utf-8") as f:
                return parse_faults(f.read())
        except FileNotFoundError:
            return NO_FAULTS
        except (OSError, ValueError) as exc:
            if self._warned != stamp:
                self._warned = stamp
                logger.warning("fault file %s unusable, ignored: %s", self.path, exc)
            return NO_FAULTS


def from_environment(environ: Mapping[str, str] = os.environ) -> FaultFile | None:
    path = environ.get(ENV)
    return FaultFile(path) if path else None


ACTIVE: Final[FaultFile | None] = from_environment()
"""The process's fault file: None (the hooks cost nothing) unless ``REVIVIFY_FAULT_FILE``
named one when the process started."""


__all__ = ["ACTIVE", "ENV", "ERRNOS", "NO_FAULTS", "DiskFault", "FaultFile", "Faults",
           "from_environment", "parse_faults"]
