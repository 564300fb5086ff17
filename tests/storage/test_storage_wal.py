"""The WAL: group commit, segments, rollover, recovery (torn tail vs corruption), GC."""

from __future__ import annotations

import posixpath
import threading
from collections.abc import Awaitable, Callable

import pytest
import trio
from storage_helpers import ROOT, entries, formatted_disk

from revivify.impl.storage.disk import OsDisk, write_new_file
from revivify.impl.storage.errors import LogFailed, LogNotFound, WalCorrupt
from revivify.impl.storage.layout import ServerLayout
from revivify.impl.storage.values import OpId
from revivify.impl.storage.wal import (
    Log,
    LogEntry,
    LogOptions,
    _AppenderThread,
    encode_batch,
    open_log,
    read_log_entries,
    recover_log,
    salvage_last_opid,
    segment_name,
)
from revivify.impl.testing import SimDisk, SimulatedCrash

TABLET = "tablet-a"
WAL = f"{ROOT}/wals/{TABLET}"
INLINE = LogOptions(segment_size=4096, use_threads=False)


def run_log(
    disk: SimDisk | OsDisk,
    body: Callable[[Log], Awaitable[None]],
    options: LogOptions = INLINE,
    wal_dir: str = WAL,
) -> Log:
    holder: list[Log] = []

    async def main() -> None:
        async with open_log(disk, wal_dir, TABLET, options, create_if_missing=True) as log:
            holder.append(log)
            await body(log)

    trio.run(main)
    return holder[0]


async def append_sequentially(log: Log, first: int, count: int, per_batch: int = 1) -> None:
    for start in range(first, first + count, per_batch):
        await log.append(entries(start, min(per_batch, first + count - start)))


def segment_files(disk: SimDisk) -> list[str]:
    return [n for n in disk.listdir(WAL) if n.startswith("wal-")]


class TestAppendAndRead:
    def test_round_trip_and_last_opid(self) -> None:
        disk = formatted_disk()

        async def body(log: Log) -> None:
            assert log.last_opid is None
            assert await log.append(entries(1, 3)) == OpId(1, 3)
            await append_sequentially(log, 4, 7)
            assert log.last_opid == OpId(1, 10)
            assert [e.index for e in await log.read_entries(6)] == [6, 7, 8, 9, 10]

        log = run_log(disk, body)
        assert log.recovery.created
        crashed = disk.crash()
        assert read_log_entries(crashed, WAL, TABLET) == entries(1, 10)

    def test_reopen_continues_after_last_opid(self) -> None:
        disk = formatted_disk()
        run_log(disk, lambda log: append_sequentially(log, 1, 5))

        async def body(log: Log) -> None:
            assert log.last_opid == OpId(1, 5)
            await append_sequentially(log, 6, 5)

        second = disk.crash()  # durable state only, then one more incarnation
        run_log(second, body)
        assert [e.index for e in read_log_entries(second, WAL, TABLET)] == list(range(1, 11))

    def test_raft_overwrite_replaces_suffix(self) -> None:
        disk = formatted_disk()

        async def body(log: Log) -> None:
            await append_sequentially(log, 1, 10)
            await log.append([LogEntry(2, 6, b"six"), LogEntry(2, 7, b"seven")])
            assert log.last_opid == OpId(2, 7)
            got = await log.read_entries(1)
            assert [(e.term, e.index) for e in got][-3:] == [(1, 5), (2, 6), (2, 7)]
            assert len(got) == 7

        run_log(disk, body)
        reopened = recover_log(disk.crash(), WAL, TABLET)
        assert reopened.last_opid == OpId(2, 7)

    def test_reserve_refuses_gaps(self) -> None:
        async def body(log: Log) -> None:
            await log.append(entries(1, 2))
            with pytest.raises(ValueError, match="skips ahead"):
                log.reserve(entries(5, 1))
            with pytest.raises(ValueError):
                log.reserve([])

        run_log(formatted_disk(), body)

    def test_missing_wal_dir(self) -> None:
        with pytest.raises(LogNotFound):
            recover_log(formatted_disk(), WAL, TABLET)


class TestGroupCommit:
    @pytest.mark.parametrize("threads", [False, True])
    def test_concurrent_writers_share_syncs_in_reservation_order(self, threads: bool) -> None:
        disk = formatted_disk()
        order: list[int] = []
        next_index = [1]
        options = LogOptions(segment_size=1 << 20, use_threads=threads)

        async def writer(log: Log, rounds: int) -> None:
            for _ in range(rounds):
                index = next_index[0]
                next_index[0] += 1
                order.append(index)
                reservation = log.reserve(entries(index, 1))
                assert await reservation.wait() == OpId(1, index)
                assert log.last_opid is not None and log.last_opid.index >= index

        async def body(log: Log) -> None:
            before = disk.calls["fdatasync"] + disk.calls["fsync"]
            async with trio.open_nursery() as nursery:
                for _ in range(20):
                    nursery.start_soon(writer, log, 10)
            syncs = disk.calls["fdatasync"] + disk.calls["fsync"] - before
            assert syncs < 200 // 4, f"group commit should batch: {syncs} syncs for 200 appends"

        run_log(disk, body, options)
        recovered = read_log_entries(disk.crash(), WAL, TABLET)
        assert [e.index for e in recovered] == sorted(order) == list(range(1, 201))

    def test_fdatasync_inside_preallocated_region(self) -> None:
        disk = formatted_disk()

        async def body(log: Log) -> None:
            before = dict(disk.calls)
            await append_sequentially(log, 1, 5)
            assert disk.calls["fdatasync"] - before.get("fdatasync", 0) == 5
            assert disk.calls["fsync"] == before.get("fsync", 0)

        run_log(disk, body, LogOptions(segment_size=1 << 16, use_threads=False))

    def test_fsync_off_skips_syncs(self) -> None:
        disk = formatted_disk()

        async def body(log: Log) -> None:
            before = disk.calls["fdatasync"] + disk.calls["fsync"]
            await append_sequentially(log, 1, 5)
            assert disk.calls["fdatasync"] + disk.calls["fsync"] == before

        run_log(disk, body, LogOptions(fsync=False, use_threads=False))

    @pytest.mark.parametrize("fsync", [False, True])
    def test_only_a_sync_goes_to_the_appender_thread(self, fsync: bool,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
        """Without fsync a group's write is a copy into the page cache, done in trio: the
        appender thread (a hand-off each way) is for syncs."""
        disk = formatted_disk()
        handed: list[str] = []
        real_run = _AppenderThread.run

        async def counting_run(self: _AppenderThread, fn: Callable[..., object],
                               *args: object) -> object:
            handed.append(getattr(fn, "__name__", "?"))
            return await real_run(self, fn, *args)

        monkeypatch.setattr(_AppenderThread, "run", counting_run)

        async def body(log: Log) -> None:
            await append_sequentially(log, 1, 5)

        run_log(disk, body, LogOptions(segment_size=1 << 16, fsync=fsync))
        assert handed.count("_write_and_sync") == (5 if fsync else 0)
        assert [e.index for e in read_log_entries(disk, WAL, TABLET)] == [1, 2, 3, 4, 5]

    @pytest.mark.parametrize("threads", [False, True])
    def test_disk_failure_fails_waiters_and_later_appends(self, threads: bool) -> None:
        disk = formatted_disk()
        options = LogOptions(segment_size=1 << 16, use_threads=threads)

        async def body(log: Log) -> None:
            await log.append(entries(1, 1))
            disk.crash_after(0)
            reservations = [log.reserve(entries(index, 1)) for index in range(2, 6)]
            for reservation in reservations:  # every waiter of the failed group
                with pytest.raises(LogFailed) as failed:
                    await reservation.wait()
                assert isinstance(failed.value.cause, SimulatedCrash)
                assert TABLET in str(failed.value)
            with pytest.raises(LogFailed):
                log.reserve(entries(6, 1))
            assert log.last_opid == OpId(1, 1)

        run_log(disk, body, options)  # close() after a failure only releases handles
        assert not _appender_threads()


class TestAppendWritesItsOwnGroup:
    """Log.append writes its group itself when it is alone (no appender-task round trip);
    reservations made meanwhile still follow it, in order, through the appender task."""

    @pytest.mark.parametrize("threads", [False, True])
    def test_appends_and_reservations_interleaved_keep_order(self, threads: bool) -> None:
        disk = formatted_disk()
        options = LogOptions(segment_size=1 << 20, use_threads=threads)
        next_index = [1]

        async def appender(log: Log, rounds: int) -> None:
            for _ in range(rounds):
                index = next_index[0]
                next_index[0] += 1
                assert await log.append(entries(index, 1)) == OpId(1, index)

        async def reserver(log: Log, rounds: int) -> None:
            for _ in range(rounds):
                index = next_index[0]
                next_index[0] += 1
                assert await log.reserve(entries(index, 1)).wait() == OpId(1, index)

        async def body(log: Log) -> None:
            await appender(log, 5)  # alone: each append writes its own group
            async with trio.open_nursery() as nursery:
                for i in range(6):
                    nursery.start_soon(appender if i % 2 else reserver, log, 10)
            await appender(log, 5)
            assert log.last_opid == OpId(1, 70)

        run_log(disk, body, options)
        recovered = read_log_entries(disk.crash(), WAL, TABLET)
        assert [e.index for e in recovered] == list(range(1, 71))

    def test_failure_in_an_append_fails_it_and_the_log(self) -> None:
        disk = formatted_disk()

        async def body(log: Log) -> None:
            await log.append(entries(1, 1))
            disk.crash_after(0)
            with pytest.raises(LogFailed):
                await log.append(entries(2, 1))
            with pytest.raises(LogFailed):
                log.reserve(entries(3, 1))
            assert log.last_opid == OpId(1, 1)

        run_log(disk, body, LogOptions(segment_size=1 << 16, use_threads=False))


def _raise(exc: BaseException) -> None:
    raise exc


def _appender_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == f"wal-appender-{TABLET}"]


class TestAppenderThread:
    """With use_threads, group writes run in the log's own OS thread, stopped by close()."""

    def test_one_thread_serves_every_group_and_stops_on_close(self, tmp_path: object) -> None:
        disk = OsDisk()
        wal = f"{tmp_path}/wals/{TABLET}"
        seen: list[int] = []
        original = Log._write_and_sync

        def spy(log: Log, *args: object) -> None:
            seen.append(threading.get_ident())
            original(log, *args)  # type: ignore[arg-type]

        async def body(log: Log) -> None:
            assert [t.is_alive() for t in _appender_threads()] == [True]
            await append_sequentially(log, 1, 20)

        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(Log, "_write_and_sync", spy)
            run_log(disk, body, LogOptions(segment_size=1 << 16), wal_dir=wal)
        assert len(seen) == 20 and len(set(seen)) == 1
        assert seen[0] != threading.get_ident()
        assert not _appender_threads()
        assert [e.index for e in read_log_entries(disk, wal, TABLET)] == list(range(1, 21))

    def test_thread_runs_jobs_in_order_and_reraises_their_errors(self) -> None:
        async def main() -> None:
            thread = _AppenderThread("wal-appender-unit")
            done: list[int] = []
            async with trio.open_nursery() as nursery:
                for n in range(5):
                    nursery.start_soon(thread.run, done.append, n)
                    await trio.lowlevel.checkpoint()
            assert done == [0, 1, 2, 3, 4]
            assert await thread.run(threading.get_ident) != threading.get_ident()
            with pytest.raises(OSError, match="disk on fire"):
                await thread.run(_raise, OSError(5, "disk on fire"))
            assert await thread.run(len, b"abc") == 3  # still serving after an error
            with trio.CancelScope() as scope:
                scope.cancel()
                assert await thread.run(len, b"ab") == 2  # a queued job is not abandoned
            await thread.stop()
            await thread.stop()
            assert not [t for t in threading.enumerate() if t.name == "wal-appender-unit"]
            with pytest.raises(RuntimeError, match="not running"):
                await thread.run(len, b"")

        trio.run(main)

    def test_inline_mode_starts_no_thread(self) -> None:
        async def body(log: Log) -> None:
            await append_sequentially(log, 1, 3)
            assert not _appender_threads()

        run_log(formatted_disk(), body)

    def test_cancelled_nursery_stops_thread_and_keeps_acknowledged_appends(
        self, tmp_path: object
    ) -> None:
        disk = OsDisk()
        wal = f"{tmp_path}/wals/{TABLET}"
        acknowledged: list[int] = []
        counter = [1]

        async def writer(log: Log) -> None:
            while True:
                index = counter[0]
                counter[0] += 1
                await log.append(entries(index, 1))
                acknowledged.append(index)

        async def main() -> None:
            options = LogOptions(segment_size=1 << 16)
            with trio.move_on_after(0.2):
                async with (
                    open_log(disk, wal, TABLET, options, create_if_missing=True) as log,
                    trio.open_nursery() as nursery,
                ):
                    for _ in range(8):
                        nursery.start_soon(writer, log)

        trio.run(main)
        assert acknowledged
        assert not _appender_threads()
        recovered = [e.index for e in read_log_entries(disk, wal, TABLET)]
        assert recovered == list(range(1, len(recovered) + 1))
        assert set(acknowledged) <= set(recovered)
        assert recover_log(disk, wal, TABLET).torn_tail is None  # close() wrote the footer

    def test_close_is_idempotent_with_thread(self, tmp_path: object) -> None:
        async def body(log: Log) -> None:
            await log.append(entries(1, 1))
            await log.close()
            assert not _appender_threads()
            await log.close()

        run_log(OsDisk(), body, LogOptions(segment_size=1 << 16), f"{tmp_path}/w")


class TestSegments:
    def test_rollover_preallocates_and_truncates_on_close(self) -> None:
        disk = formatted_disk()
        options = LogOptions(segment_size=2048, use_threads=False)

        async def body(log: Log) -> None:
            await append_sequentially(log, 1, 120)
            active = log.segments()[-1]
            assert not active.closed
            assert disk.file_size(active.path) == 2048  # preallocated
            assert all(s.closed for s in log.segments()[:-1])

        log = run_log(disk, body, options)
        names = segment_files(disk)
        assert len(names) >= 4
        assert all(disk.file_size(posixpath.join(WAL, n)) < 2048 + 200 for n in names)
        assert all(s.closed for s in log.segments())
        assert read_log_entries(disk.crash(), WAL, TABLET) == entries(1, 120)
        report = recover_log(disk.crash(), WAL, TABLET)
        assert report.torn_tail is None and report.last_opid == OpId(1, 120)

    def test_rollover_with_threads_on_real_disk(self, tmp_path: object) -> None:
        root = str(tmp_path)
        disk = OsDisk()
        ServerLayout(root, disk).format("server-1", 1)
        wal = f"{root}/wals/{TABLET}"
        options = LogOptions(segment_size=4096)

        async def body(log: Log) -> None:
            async with trio.open_nursery() as nursery:
                for w in range(8):
                    nursery.start_soon(append_sequentially_shared, log, w)

        counter = [1]

        async def append_sequentially_shared(log: Log, _: int) -> None:
            for _ in range(25):
                index = counter[0]
                counter[0] += 1
                await log.append(entries(index, 1, size=100))

        run_log(disk, body, options, wal_dir=wal)
        assert [e.index for e in read_log_entries(disk, wal, TABLET)] == list(range(1, 201))
        assert len([n for n in disk.listdir(wal) if n.startswith("wal-")]) > 3
        assert not [n for n in disk.listdir(wal) if ".tmp." in n]


def _closed_wal(count: int = 80, segment_size: int = 1024) -> SimDisk:
    disk = formatted_disk()
    run_log(
        disk,
        lambda log: append_sequentially(log, 1, count),
        LogOptions(segment_size=segment_size, use_threads=False),
    )
    return disk.crash()


def _unclosed_wal() -> tuple[SimDisk, str, int]:
    """A WAL whose last segment is unclosed (crash before close), preallocated with zeros."""
    disk = formatted_disk()

    async def body(log: Log) -> None:
        await append_sequentially(log, 1, 6)
        disk.crash_after(0)

    with pytest.raises(BaseException):  # noqa: B017 - the crash stops close()
        run_log(disk, body, LogOptions(segment_size=4096, use_threads=False))
    crashed = disk.crash()
    last = posixpath.join(WAL, segment_files(crashed)[-1])
    data = crashed.read_file(last)
    end = len(data.rstrip(b"\0"))
    return crashed, last, end


class TestRecovery:
    def test_preallocated_zeros_truncated_and_reported(self) -> None:
        disk, last, end = _unclosed_wal()
        report = recover_log(disk, WAL, TABLET)
        assert report.torn_tail is not None
        assert report.torn_tail.path == last and report.torn_tail.offset == end
        assert "zeros" in report.torn_tail.reason
        assert report.last_opid == OpId(1, 6)
        assert recover_log(disk.crash(), WAL, TABLET).torn_tail is None  # now closed

    def test_torn_batch_truncated_and_reported(self) -> None:
        disk, last, end = _unclosed_wal()
        handle = disk.open(last)
        handle.pwrite(end, encode_batch(entries(7, 3))[:-5])
        handle.fsync()
        report = recover_log(disk, WAL, TABLET)
        assert report.torn_tail is not None and "torn batch" in report.torn_tail.reason
        assert report.last_opid == OpId(1, 6)
        assert read_log_entries(disk, WAL, TABLET) == entries(1, 6)

    def test_bad_batch_followed_by_valid_one_is_corruption(self) -> None:
        disk, last, _end = _unclosed_wal()
        data = bytearray(disk.read_file(last))
        first_batch = data.find(b"RVWB")
        data[first_batch + 20] ^= 0xFF
        write_new_file(disk, last, bytes(data))
        before = disk.tree()
        with pytest.raises(WalCorrupt) as exc:
            recover_log(disk, WAL, TABLET)
        assert exc.value.path == last and exc.value.offset == first_batch
        assert "valid record follows" in exc.value.reason
        assert disk.tree() == before  # nothing truncated or deleted

    def test_corrupt_closed_segment_is_an_error(self) -> None:
        disk = _closed_wal()
        first = posixpath.join(WAL, segment_name(1))
        data = bytearray(disk.read_file(first))
        data[-30] ^= 0x01  # in the last batch or footer
        write_new_file(disk, first, bytes(data))
        before = disk.tree()
        with pytest.raises(WalCorrupt) as exc:
            recover_log(disk, WAL, TABLET)
        assert exc.value.path == first
        assert disk.tree() == before

    def test_truncated_closed_segment_is_an_error(self) -> None:
        disk = _closed_wal()
        first = posixpath.join(WAL, segment_name(1))
        write_new_file(disk, first, disk.read_file(first)[:-10])
        with pytest.raises(WalCorrupt):
            recover_log(disk, WAL, TABLET)

    def test_missing_middle_segment_is_an_error(self) -> None:
        disk = _closed_wal()
        assert len(segment_files(disk)) >= 3
        disk.unlink(posixpath.join(WAL, segment_name(2)))
        with pytest.raises(WalCorrupt, match="segment missing"):
            recover_log(disk, WAL, TABLET)

    def test_header_of_another_tablet_is_an_error(self) -> None:
        disk = _closed_wal()
        with pytest.raises(WalCorrupt, match="names tablet"):
            recover_log(disk, WAL, "tablet-b")

    def test_stale_prepared_segment_removed(self) -> None:
        disk = _closed_wal()
        temp = posixpath.join(WAL, segment_name(99) + ".tmp.new")
        write_new_file(disk, temp, b"junk")
        report = recover_log(disk, WAL, TABLET)
        assert report.removed_temp_files == (temp,)
        assert not disk.exists(temp)


class TestGarbageCollection:
    def test_gc_respects_anchors_and_keeps_last_entry(self) -> None:
        disk = formatted_disk()
        options = LogOptions(segment_size=1024, use_threads=False)

        async def body(log: Log) -> None:
            await append_sequentially(log, 1, 100)
            segments = log.segments()
            assert len(segments) >= 5
            anchor = log.anchor(segments[2].min_index or 0, owner="tablet-copy-1")
            deleted = await log.gc(up_to_index=1000)
            assert deleted == [s.path for s in segments[:2]]
            assert await log.read_entries(anchor.index) == entries(anchor.index, 101 - anchor.index)
            anchor.release()
            deleted = await log.gc(up_to_index=1000)
            assert deleted  # more went, but never the segment holding the last entry
            remaining = log.segments()
            assert any(s.max_index == 100 for s in remaining)
            assert (await log.read_entries(100))[-1].index == 100

        run_log(disk, body, options)
        report = recover_log(disk.crash(), WAL, TABLET)
        assert report.last_opid == OpId(1, 100)

    def test_gc_up_to_index_bound(self) -> None:
        disk = formatted_disk()
        options = LogOptions(segment_size=1024, use_threads=False)

        async def body(log: Log) -> None:
            await append_sequentially(log, 1, 60)
            deleted = await log.gc(up_to_index=1)
            assert deleted == []
            deleted = await log.gc(up_to_index=30)
            assert deleted
            first = log.segments()[0]
            assert first.min_index is not None and first.min_index <= 30

        run_log(disk, body, options)
        assert read_log_entries(disk.crash(), WAL, TABLET)[-1].index == 60


class TestSalvageLastOpid:
    """salvage_last_opid reads a damaged WAL's last OpId past the damage (for the trace of
    a FAILED startup), and changes nothing."""

    def test_reads_past_a_corrupt_segment_in_the_middle(self) -> None:
        disk = formatted_disk()
        run_log(disk, lambda log: append_sequentially(log, 1, 300, per_batch=3))
        names = sorted(segment_files(disk))
        assert len(names) >= 3
        middle = posixpath.join(WAL, names[1])
        data = bytearray(disk.read_file(middle))
        data[len(data) // 2] ^= 0xFF
        disk.unlink(middle)
        write_new_file(disk, middle, bytes(data))
        with pytest.raises(WalCorrupt):
            recover_log(disk, WAL, TABLET)
        before = {n: disk.read_file(posixpath.join(WAL, n)) for n in segment_files(disk)}
        assert salvage_last_opid(disk, WAL) == OpId(1, 300)
        assert {n: disk.read_file(posixpath.join(WAL, n)) for n in segment_files(disk)} == before

    def test_corrupt_last_batch_gives_the_one_before(self) -> None:
        disk = formatted_disk()
        run_log(disk, lambda log: append_sequentially(log, 1, 6, per_batch=2))
        last = posixpath.join(WAL, sorted(segment_files(disk))[-1])
        data = bytearray(disk.read_file(last))
        position = bytes(data).rfind(b"RVWB")
        data[position + 12] ^= 0xFF
        disk.unlink(last)
        write_new_file(disk, last, bytes(data))
        assert salvage_last_opid(disk, WAL) == OpId(1, 4)

    def test_nothing_readable(self) -> None:
        disk = formatted_disk()
        ServerLayout(ROOT, disk)  # no WAL written at all
        disk.mkdir(WAL)
        assert salvage_last_opid(disk, WAL) is None
