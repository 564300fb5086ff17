"""The sync poller (impl/storage/syncpoll.py): awake while a sync runs, asleep otherwise, and
never in the way of the sync's own result."""

from __future__ import annotations

import os
import threading
import time

import pytest

from revivify.impl.storage.disk import OsDisk
from revivify.impl.storage.syncpoll import SyncPoller


def _blocking_sync(release: threading.Event, calls: list[int]):  # type: ignore[no-untyped-def]
    def sync(fd: int) -> None:
        calls.append(fd)
        assert release.wait(5)

    return sync


def _until(predicate, seconds: float = 10.0) -> bool:  # type: ignore[no-untyped-def]
    """Whether ``predicate()`` held within ``seconds`` (polled; no fixed sleep decides)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.002)
    return False


def _settles(poller: SyncPoller, quiet: float = 0.05, seconds: float = 10.0) -> bool:
    """Whether the poller stops waking (no wakeup for ``quiet`` seconds) within ``seconds``:
    a loaded machine only delays that, it cannot fake it."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        before = poller.wakeups
        time.sleep(quiet)
        if poller.wakeups == before:
            return True
    return False


class _InFlight:
    """One sync on its own thread, held in flight until ``end()``."""

    def __init__(self, poller: SyncPoller, fd: int) -> None:
        self.release, self.calls = threading.Event(), list[int]()
        self.worker = threading.Thread(target=poller.sync,
                                       args=(_blocking_sync(self.release, self.calls), fd))
        self.worker.start()

    def end(self) -> list[int]:
        self.release.set()
        self.worker.join(5)
        return self.calls


class TestSyncPoller:
    def test_polls_only_while_a_sync_is_in_flight(self) -> None:
        """It wakes during a sync (up to its window) and not at all between syncs."""
        poller = SyncPoller(interval=200e-6, window=10.0)
        sync = _InFlight(poller, 7)
        assert _until(lambda: poller.wakeups >= 5), "no polling while the sync was in flight"
        assert sync.end() == [7]
        assert _settles(poller), "it kept waking with no sync in flight"

    def test_stops_after_its_window(self) -> None:
        """A sync longer than the window is left to block: the poller goes quiet; a new sync
        gets a window of its own."""
        poller = SyncPoller(interval=200e-6, window=0.005)
        sync = _InFlight(poller, 3)
        assert _until(lambda: poller.wakeups >= 1)
        assert _settles(poller), "it polled past its window"
        assert sync.end() == [3]
        settled = poller.wakeups
        sync = _InFlight(poller, 4)
        assert _until(lambda: poller.wakeups > settled), "a new sync was not polled"
        assert sync.end() == [4]

    def test_the_sync_error_reaches_the_caller(self) -> None:
        poller = SyncPoller()

        def failing(fd: int) -> None:
            raise OSError(5, "EIO")

        with pytest.raises(OSError, match="EIO"):
            poller.sync(failing, 1)
        poller.sync(lambda fd: None, 1)  # and the next sync still runs

    def test_refuses_nonsense(self) -> None:
        with pytest.raises(ValueError):
            SyncPoller(interval=0)
        with pytest.raises(ValueError):
            SyncPoller(window=-1)

    def test_os_disk_syncs_through_it(self, tmp_path: os.PathLike[str]) -> None:
        """Every sync of an OsDisk given a poller (file and directory) goes through it."""
        seen: list[int] = []

        class Counting(SyncPoller):
            def sync(self, fn, fd):  # type: ignore[no-untyped-def]
                seen.append(fd)
                super().sync(fn, fd)

        disk = OsDisk(Counting())
        path = os.path.join(tmp_path, "f")
        f = disk.open(path, create=True)
        f.pwrite(0, b"x")
        f.fdatasync()
        f.fsync()
        f.close()
        disk.fsync_dir(os.fspath(tmp_path))
        assert len(seen) == 3
        with open(path, "rb") as g:
            assert g.read() == b"x"
