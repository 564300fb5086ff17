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
     "disk": [{"prefix": "/abs/dir/", "op": "fsync" | "write", "errno": "EIO" | "ENOSPC"}],
     "clocks": [{"pid": 1234, "rate": 2.0, "ahead": 1.0}]}  # FaultClock

A cut is symmetric and applies to both ends (impl/rpc/faults.py): the sender drops what it
would send, the receiver drops what arrives, so a partition holds as both servers see it,
with no root, namespace or firewall rule. A disk fault makes every matching operation on a
path under ``prefix`` raise OSError(errno) (impl/storage/faults.py): ``write`` covers
pwrite, truncate and fallocate (ENOSPC: a full file system), ``fsync`` covers fsync,
fdatasync and a directory fsync. A clock fault names a server by its process id (the
nemesis knows its children's pids before it knows their UUIDs) and says how fast that
server's trio clock runs (`rate`, > 0) and by how many seconds, in all, it has jumped ahead
(`ahead`, >= 0; the clock never goes back, so a later entry with less is ignored).

Clock faults (FaultClock below). A server's timeouts are trio's (``trio.sleep``,
``move_on_after``, ``fail_after``, ``trio.current_time``): Raft's ticks and election
timeout, the masters' tablet-server liveness, RPC call deadlines, a follower master's
staleness bound, copy retries. So a clock fault is injected in one place, the clock
``trio.run`` is given (impl/servers/process.py), and reaches all of them at once, as a
machine's faulty monotonic clock would. (The copy source's idle-session expiry and a few
durations that are only reported read ``time.monotonic`` directly and are not faulted.)
Off unless the fault file is on: ``clock_for_this_process()`` is None and trio keeps its
own clock.

The faulted clock is piecewise linear in the real monotonic clock: between two changes of
the fault it reads ``anchor + rate * (real - anchor_real)``; at a change it re-anchors where
it stands, adding the new part of ``ahead`` (a jump). So it is continuous but for jumps,
and never goes back: a rate is positive and ``ahead`` only grows (an entry with less, or
none once the fault is healed, keeps what was jumped and runs at rate 1 again).

Sleeping: trio asks how long it may sleep until its next deadline; in real seconds that is
the faulted time left divided by the rate. A fault may change while trio sleeps, so the
sleep is capped at the fault file's poll interval: a clock made fast (or jumped) is seen
within that, and timers due by it fire then.
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
import trio

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
    clocks: tuple[tuple[int, ClockFault], ...] = ()  # (pid, fault)

    def clock(self, pid: int) -> ClockFault:
        return next((c for p, c in self.clocks if p == pid), NO_CLOCK_FAULT)

    def cut(self, a: str, b: str) -> bool:
        return (a, b) in self.cuts

    def disk_error(self, op: str, path: str) -> OSError | None:
        """The error an operation `op` on `path` must raise now, if any."""
        for fault in self.disk:
            if fault.op == op and path.startswith(fault.prefix):
                return OSError(fault.errno, f"{os.strerror(fault.errno)} (injected)", path)
        return None


@attrs.frozen
class ClockFault:
    """A server's clock runs `rate` times as fast as the real one and has jumped `ahead`
    seconds in all (FaultClock)."""

    rate: float = 1.0
    ahead: float = 0.0


NO_CLOCK_FAULT: Final = ClockFault()
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
    clocks: list[tuple[int, ClockFault]] = []
    for item in doc.get("clocks", []):
        if not isinstance(item, dict):
            raise ValueError(f"a clock fault is an object, not {item!r}")
        pid, rate, ahead = item.get("pid"), item.get("rate", 1.0), item.get("ahead", 0.0)
        if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
            raise ValueError(f"a clock fault's pid is a positive integer, not {pid!r}")
        if not isinstance(rate, (int, float)) or isinstance(rate, bool) or not rate > 0:
            raise ValueError(f"a clock fault's rate is a positive number, not {rate!r}")
        if not isinstance(ahead, (int, float)) or isinstance(ahead, bool) or not ahead >= 0:
            raise ValueError(f"a clock fault's ahead is a number >= 0, not {ahead!r}")
        clocks.append((pid, ClockFault(float(rate), float(ahead))))
    return Faults(frozenset(cuts), tuple(disk), tuple(clocks))


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


class FaultClock(trio.abc.Clock):
    """trio's clock for process `pid` (see the module docstring)."""

    def __init__(self, faults: FaultFile, pid: int, *,
                 real: Callable[[], float] = time.monotonic) -> None:
        self._faults = faults
        self._pid = pid
        self._real = real
        self._anchor_real = real()
        self._anchor = self._anchor_real
        self._rate = 1.0
        self._ahead = 0.0

    def start_clock(self) -> None:
        pass

    def current_time(self) -> float:
        real = self._real()
        now = self._anchor + self._rate * (real - self._anchor_real)
        fault = self._faults.current().clock(self._pid)
        ahead = max(self._ahead, fault.ahead)
        if fault.rate != self._rate or ahead != self._ahead:
            now += ahead - self._ahead
            self._anchor, self._anchor_real = now, real
            self._rate, self._ahead = fault.rate, ahead
        return now

    def deadline_to_sleep_time(self, deadline: float) -> float:
        left = (deadline - self.current_time()) / self._rate
        return max(0.0, min(left, POLL_SECONDS))


def clock_for_this_process() -> FaultClock | None:
    """The clock ``trio.run`` is to use in a server: a FaultClock when the fault file is on,
    None (trio's own) in production."""
    active = ACTIVE
    return None if active is None else FaultClock(active, os.getpid())


__all__ = ["ACTIVE", "ENV", "ERRNOS", "NO_CLOCK_FAULT", "NO_FAULTS", "ClockFault",
           "DiskFault", "FaultClock", "FaultFile", "Faults", "clock_for_this_process",
           "from_environment", "parse_faults"]
