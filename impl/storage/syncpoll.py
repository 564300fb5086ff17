"""Keep a CPU awake while an fsync is in flight: short syncs on machines whose idle CPUs
hear of a finished disk flush late.

Why
---
A sync's latency is the disk's flush plus the time until the thread that waits for it runs
again. On a virtual machine whose idle vCPUs halt and are woken by the host only on their
next timer tick (the Firecracker guest this project is benchmarked on: haltpoll with
``guest_halt_poll_ns=0``, nested virtualization, HZ=250), the second part dominates: an
``fdatasync`` of one preallocated block took 3 to 4 ms there (whole ticks) when the process
was otherwise idle, and 0.2 to 0.5 ms while another thread of the process woke every
50 us. etcd, on the same machine, saw 0.3 to 1 ms per ``fdatasync`` (strace): Go's runtime
monitor thread (sysmon) wakes every 20 us while a goroutine is blocked in a system call,
which keeps a vCPU out of halt for exactly as long as the sync lasts. This module is that
monitor for our syncs, and nothing else.

How
---
``SyncPoller.sync(fn, fd)`` runs the blocking sync ``fn(fd)`` in the calling thread (the
WAL's appender thread, a worker thread) and, while any sync is in flight, a daemon thread
sleeps ``interval`` seconds at a time, for at most ``window`` seconds after the newest
sync started (a sync longer than that is a real disk's flush: waking more would only burn
CPU). Without syncs in flight the thread waits on a condition and costs nothing.

It changes no durability rule: the sync itself is the same call, in the same thread, with
the same result. Only the waiting around it is different.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

DEFAULT_INTERVAL = 50e-6  # what Go's sysmon starts at is 20 us; Python's loop costs more
DEFAULT_WINDOW = 0.002  # half a 250 Hz tick: beyond it, a sync is the disk's, not the CPU's


class SyncPoller:
    """One per process (shared by every file of an ``OsDisk``); thread-safe."""

    def __init__(self, interval: float = DEFAULT_INTERVAL,
                 window: float = DEFAULT_WINDOW) -> None:
        if interval <= 0 or window <= 0:
            raise ValueError("interval and window must be positive")
        self.interval = interval
        self.window = window
        self._lock = threading.Lock()
        self._busy = threading.Condition(self._lock)
        self._active = 0  # syncs in flight
        self._started_at = 0.0  # when the newest of them started (monotonic)
        self._thread: threading.Thread | None = None
        self.wakeups = 0  # how often the thread woke while polling (tests, diagnostics)

    def sync(self, fn: Callable[[int], None], fd: int) -> None:
        """Run ``fn(fd)`` (``os.fsync``, ``os.fdatasync``) with the poller awake."""
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._main, name="sync-poller",
                                                daemon=True)
                self._thread.start()
            self._active += 1
            self._started_at = time.monotonic()
            self._busy.notify()
        try:
            fn(fd)
        finally:
            with self._lock:
                self._active -= 1

    def _main(self) -> None:
        interval, window = self.interval, self.window
        lock = self._lock
        while True:
            with lock:
                while not self._active:
                    self._busy.wait()
                started = self._started_at
            # Poll until no sync is in flight or the newest one is older than the window;
            # then wait for the next sync to start (not merely for one to be in flight:
            # a long sync must not keep this thread polling).
            while True:
                time.sleep(interval)
                self.wakeups += 1
                with lock:
                    if not self._active:
                        break
                    if self._started_at != started:
                        started = self._started_at  # a newer sync: its own window
                    elif time.monotonic() - started > window:
                        while self._active and self._started_at == started:
                            self._busy.wait()
                        break


__all__ = ["DEFAULT_INTERVAL", "DEFAULT_WINDOW", "SyncPoller"]
