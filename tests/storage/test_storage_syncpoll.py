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


class TestSyncPoller:
    def test_polls_only_while_a_sync_is_in_flight(self) -> None:
        """It wakes during a sync (up to its window) and not at all between syncs."""
        poller = SyncPoller(interval=200e-6, window=10.0)
        release, calls = threading.Event(), list[int]()
        worker = threading.Thread(target=poller.sync,
                                  args=(_blocking_sync(release, calls), 7))
        worker.start()
        time.sleep(0.05)
        during = poller.wakeups
        release.set()
        worker.join(5)
        assert calls == [7]
        assert during >= 5, "no polling while the sync was in flight"
        time.sleep(0.01)  # the poller notices the sync ended
        after = poller.wakeups
        time.sleep(0.05)
        assert poller.wakeups == after, "it kept waking with no sync in flight"

    def test_stops_after_its_window(self) -> None:
        """A sync longer than the window is left to block: the poller goes quiet."""
        poller = SyncPoller(interval=200e-6, window=0.005)
        release, calls = threading.Event(), list[int]()
        worker = threading.Thread(target=poller.sync,
                                  args=(_blocking_sync(release, calls), 3))
        worker.start()
        time.sleep(0.03)
        settled = poller.wakeups
        time.sleep(0.05)
        assert poller.wakeups == settled, "it polled past its window"
        release.set()
        worker.join(5)
        # A new sync gets a window of its own.
        release2, calls2 = threading.Event(), list[int]()
        worker = threading.Thread(target=poller.sync,
                                  args=(_blocking_sync(release2, calls2), 4))
        worker.start()
        time.sleep(0.004)
        release2.set()
        worker.join(5)
        assert poller.wakeups > settled

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
