"""run_copy end to end: a real CopySessionManager on one server layout, LocalCopyTarget on
another, on SimDisk and on a real temporary directory."""

from __future__ import annotations

import posixpath
import zlib
from pathlib import Path

import pytest
import trio
from copy_helpers import (
    REMOTE_CMETA,
    REMOTE_CONFIG,
    TABLET,
    WAL_OPTIONS,
    Layouts,
    LocalSource,
    RecordingTarget,
    SourceTablet,
    make_layouts,
    non_temp,
    open_destination,
    probe_snapshot,
    real_files,
    snapshot_bytes,
    source_tablet,
)

from revivify.impl.storage.disk import atomic_replace
from revivify.impl.storage.layout import ServerLayout
from revivify.impl.storage.metadata import MetadataStore
from revivify.impl.storage.values import ConsensusMeta, DataState, OpId, RaftConfig, Superblock
from revivify.impl.storage.wal import LogEntry, open_log
from revivify.impl.testing import SimDisk
from revivify.impl.tserver.copy import (
    CopyFailed,
    CopyPhase,
    CopyProgress,
    CopySessionInfo,
    CopySessionManager,
    DataChunk,
    FetchData,
    run_copy,
)
from revivify.impl.tserver.manager.core import CmetaMerged, CopyStepDone

DISKS = ["sim", "os"]
CHUNK = 700  # small chunks: every file takes several fetches


def manager(clock: list[float] | None = None) -> CopySessionManager:
    now = clock if clock is not None else [0.0]
    return CopySessionManager(lambda: now[0], 60.0, source_uuid="src")


def check_destination_files(layouts: Layouts, src: SourceTablet, info: CopySessionInfo,
                            expected: dict[tuple[str, str], bytes]) -> None:
    """The destination holds exactly the snapshot: identical WAL segments and blocks, the
    READY superblock listing the blocks, and no temp files."""
    disk, dst = layouts.disk, layouts.dst
    wal_dir = dst.wal_dir(TABLET)
    assert real_files(disk, wal_dir) == [f.name for f in info.wal_segments]
    for f in info.wal_segments:
        assert disk.read_file(posixpath.join(wal_dir, f.name)) == expected[("wal", f.name)]
    assert real_files(disk, dst.data_dir) == sorted(f.name for f in info.blocks)
    for f in info.blocks:
        assert disk.read_file(posixpath.join(dst.data_dir, f.name)) == expected[("block", f.name)]
    sb = MetadataStore(dst).load_superblock(TABLET)
    source_sb = src.metadata.load_superblock(TABLET)
    assert sb is not None and source_sb is not None
    assert sb.data_state is DataState.READY
    assert sb.live_blocks == tuple(f.name for f in info.blocks)
    assert sb.flushed_opid == source_sb.flushed_opid
    assert sb.client_results == source_sb.client_results
    assert sb.tombstone_last_opid is None and sb.quarantine_dir is None
    assert not sb.orphaned_blocks


def released(mgr: CopySessionManager, layouts: Layouts, src: SourceTablet) -> bool:
    """No session, no handle, and no anchor but those handed over by ended sessions."""
    return (not mgr.session_ids() and mgr.open_handles() == 0
            and layouts.tracking.open_count() == 0
            and len(src.log.anchors()) == mgr.handovers())


@pytest.mark.parametrize("disk_kind", DISKS)
def test_copy_between_layouts(disk_kind: str, tmp_path: Path) -> None:
    """The whole copy; the source keeps appending (and rolling over) during the session,
    and the destination ends with the snapshot: same files, READY, rows, last OpId."""
    layouts = make_layouts(disk_kind, tmp_path)
    mgr = manager()

    async def main() -> None:
        async with source_tablet(layouts) as src:
            state: dict[str, object] = {}

            async def before_fetch(request: FetchData, n: int) -> None:
                if n == 1:  # the session has begun: remember it, then move the source on
                    assert source.info is not None
                    state["expected"] = snapshot_bytes(src, source.info)
                    state["rows"] = src.rows()
                    await src.write(40)

            source = LocalSource(mgr, src, before_fetch=before_fetch)
            target = RecordingTarget(layouts.dst)
            result = await run_copy(source, target, chunk_size=CHUNK)
            info = source.info
            assert info is not None
            assert len(info.wal_segments) >= 3 and len(info.blocks) == 2
            assert src.log.last_opid is not None and info.last_opid is not None
            assert OpId(*info.last_opid) < src.log.last_opid  # the appends came later
            assert result.last_opid == OpId(*info.last_opid)
            assert source.ended == [info.session_id]
            assert released(mgr, layouts, src)
            check_destination_files(layouts, src, info, state["expected"])  # type: ignore[arg-type]
            assert target.steps == [
                "begin_copying", "merge_cmeta", f"wal_downloaded {result.last_opid}",
                "block_downloaded", "block_downloaded", "blocks_done", "mark_ready"]
            assert MetadataStore(layouts.dst).load_cmeta(TABLET) == ConsensusMeta(
                TABLET, REMOTE_CMETA.current_term, None, REMOTE_CONFIG)
            rows, last = await open_destination(layouts.dst)
            assert rows == state["rows"]
            assert last == result.last_opid

    trio.run(main)


TOMBSTONE = Superblock(TABLET, DataState.DELETED, tombstone_last_opid=OpId(2, 9),
                       quarantine_dir="/q/tablet-c.1", table_name="t")
OLD_CONFIG = RaftConfig(3, ())


@pytest.mark.parametrize(("local", "expected"), [
    (None, (4, None)),
    (ConsensusMeta(TABLET, 6, "x", OLD_CONFIG), (6, "x")),  # local term higher: kept, vote kept
    (ConsensusMeta(TABLET, 2, "x", OLD_CONFIG), (4, None)),  # remote higher: adopted, no vote
    (ConsensusMeta(TABLET, 4, "x", OLD_CONFIG), (4, "x")),  # equal: the local vote stays
    (ConsensusMeta(TABLET, 4, None, OLD_CONFIG), (4, None)),
], ids=["no-local", "local-higher", "remote-higher", "equal", "equal-no-vote"])
def test_copy_over_tombstone_merges_cmeta(
    local: ConsensusMeta | None, expected: tuple[int, str | None], tmp_path: Path
) -> None:
    layouts = make_layouts("sim", tmp_path)
    dst_meta = MetadataStore(layouts.dst)
    dst_meta.write_superblock(TOMBSTONE)
    if local is not None:
        dst_meta.write_cmeta(local)
    mgr = manager()

    async def main() -> None:
        async with source_tablet(layouts) as src:
            target = RecordingTarget(layouts.dst)
            result = await run_copy(LocalSource(mgr, src), target)
            at_merge = target.superblock_at_merge  # step 1 was durable before step 2
            assert at_merge is not None and at_merge.data_state is DataState.COPYING
            assert at_merge.tombstone_last_opid == OpId(2, 9)
            assert at_merge.quarantine_dir is None
            assert at_merge.table_name == "t"
            merged = dst_meta.load_cmeta(TABLET)
            assert merged == result.cmeta
            assert merged == ConsensusMeta(TABLET, expected[0], expected[1], REMOTE_CONFIG)
            final = dst_meta.load_superblock(TABLET)
            assert final is not None and final.data_state is DataState.READY
            assert final.tombstone_last_opid is None

    trio.run(main)


@pytest.mark.parametrize("disk_kind", DISKS)
def test_source_deleted_during_session(disk_kind: str, tmp_path: Path) -> None:
    """Every source file is unlinked after the session began: the held handles finish it."""
    layouts = make_layouts(disk_kind, tmp_path)
    mgr = manager()

    async def main() -> None:
        async with source_tablet(layouts) as src:
            state: dict[str, object] = {}

            async def before_fetch(request: FetchData, n: int) -> None:
                if n == 1:
                    assert source.info is not None
                    state["expected"] = snapshot_bytes(src, source.info)
                    state["rows"] = src.rows()
                    disk = src.layout.disk
                    for f in source.info.blocks:
                        disk.unlink(src.blocks.path(f.name))
                    wal_dir = src.layout.wal_dir(TABLET)
                    for name in disk.listdir(wal_dir):
                        disk.unlink(posixpath.join(wal_dir, name))
                    disk.unlink(src.layout.superblock_path(TABLET))
                    disk.unlink(src.layout.cmeta_path(TABLET))

            source = LocalSource(mgr, src, before_fetch=before_fetch)
            await run_copy(source, RecordingTarget(layouts.dst), chunk_size=CHUNK)
            assert source.info is not None
            assert not src.layout.disk.exists(src.blocks.path(source.info.blocks[0].name))
            check_destination_files(layouts, src_for_check(src), source.info,
                                    state["expected"])  # type: ignore[arg-type]
            assert released(mgr, layouts, src)
            rows, _ = await open_destination(layouts.dst)
            assert rows == state["rows"]

    def src_for_check(src: SourceTablet) -> SourceTablet:
        # the source superblock is gone: compare against what the destination was sent
        class _Meta:
            def load_superblock(self, tablet_id: str) -> Superblock | None:
                return MetadataStore(layouts.dst).load_superblock(tablet_id)
        src.metadata = _Meta()  # type: ignore[assignment]
        return src

    trio.run(main)


def test_corrupt_chunks_are_refused_and_retried(tmp_path: Path) -> None:
    layouts = make_layouts("sim", tmp_path)
    mgr = manager()
    flipped: list[tuple[str, int]] = []

    def tamper(request: FetchData, chunk: DataChunk) -> DataChunk:
        key = (request.name, request.offset)
        # the first two answers for offset CHUNK of every file are bad (bit flip, or a lie
        # about the offset), the third is good
        if request.offset == CHUNK and flipped.count(key) < 2:
            flipped.append(key)
            if flipped.count(key) == 1:
                data = bytes([chunk.data[0] ^ 0xFF]) + chunk.data[1:]
                return DataChunk(data, chunk.offset, chunk.total_length, chunk.crc32)
            return DataChunk(chunk.data, chunk.offset + 1, chunk.total_length, chunk.crc32)
        return chunk

    progress: list[CopyProgress] = []

    async def main() -> None:
        async with source_tablet(layouts) as src:
            source = LocalSource(mgr, src, tamper=tamper)
            await run_copy(source, RecordingTarget(layouts.dst), chunk_size=CHUNK,
                           progress=progress.append)
            assert source.info is not None
            expected = snapshot_bytes(src, source.info)
            check_destination_files(layouts, src, source.info, expected)
            files_with_second_chunk = {k[0] for k in flipped}
            assert len(files_with_second_chunk) >= 3
            assert progress[-1].retries == len(flipped) == 2 * len(files_with_second_chunk)

    trio.run(main)


def test_persistently_corrupt_chunk_fails_cleanly(tmp_path: Path) -> None:
    layouts = make_layouts("sim", tmp_path)
    mgr = manager()

    def tamper(request: FetchData, chunk: DataChunk) -> DataChunk:
        if request.kind == "block" and request.offset == 0:
            return DataChunk(b"\0" + chunk.data[1:], chunk.offset, chunk.total_length,
                             chunk.crc32)
        return chunk

    async def main() -> None:
        async with source_tablet(layouts) as src:
            target = RecordingTarget(layouts.dst)
            with pytest.raises(CopyFailed) as failure:
                await run_copy(LocalSource(mgr, src, tamper=tamper), target, chunk_size=CHUNK,
                               max_chunk_retries=2)
            assert failure.value.phase is CopyPhase.BLOCKS
            assert "checksum" in failure.value.reason and "3 attempts" in failure.value.reason
            assert_nothing_left(layouts, target)
            assert released(mgr, layouts, src)

    trio.run(main)


@pytest.mark.parametrize(("position", "refusal"), [
    (0, "bad magic"),  # the frame's header: refused at the first chunk
    (100, "checksum mismatch"),  # the payload: refused when the block is complete
])
def test_lying_source_caught_by_the_blocks_own_checksum(tmp_path: Path, position: int,
                                                        refusal: str) -> None:
    """A chunk that matches its own checksum but not the file: the block's frame (the
    checksum its writer computed) refuses the file before it gets its name."""
    layouts = make_layouts("sim", tmp_path)
    mgr = manager()

    def tamper(request: FetchData, chunk: DataChunk) -> DataChunk:
        if request.kind == "block" and request.offset == 0:
            data = bytearray(chunk.data)
            data[position] ^= 0xFF
            return DataChunk(bytes(data), chunk.offset, chunk.total_length,
                             zlib.crc32(data))
        return chunk

    async def main() -> None:
        async with source_tablet(layouts) as src:
            target = RecordingTarget(layouts.dst)
            with pytest.raises(CopyFailed, match=refusal) as failure:
                await run_copy(LocalSource(mgr, src, tamper=tamper), target, chunk_size=CHUNK)
            assert failure.value.phase is CopyPhase.BLOCKS
            assert_nothing_left(layouts, target)

    trio.run(main)


def assert_nothing_left(layouts: Layouts, target: RecordingTarget) -> None:
    """After a failed copy: no WAL segment, no block, no temp file; abort was called; the
    superblock is still COPYING (the caller tombstones) and the merged cmeta stays."""
    disk, dst = layouts.disk, layouts.dst
    assert real_files(disk, dst.wal_dir(TABLET)) == []
    assert real_files(disk, dst.data_dir) == []
    assert non_temp(real_files(disk, dst.tablet_meta_dir)) == real_files(disk, dst.tablet_meta_dir)
    assert target.abort_reason and target.steps[-1] == "abort"
    sb = MetadataStore(dst).load_superblock(TABLET)
    assert sb is not None and sb.data_state is DataState.COPYING
    assert MetadataStore(dst).load_cmeta(TABLET) is not None
    if isinstance(disk, SimDisk):
        survivor = disk.crash()  # and the removal is durable: a crash brings nothing back
        assert real_files(survivor, dst.wal_dir(TABLET)) == []
        assert non_temp(real_files(survivor, dst.data_dir)) == []


@pytest.mark.parametrize("disk_kind", DISKS)
@pytest.mark.parametrize("failing_kind", ["wal", "block"])
def test_failure_mid_copy_leaves_no_partial_files(
    disk_kind: str, failing_kind: str, tmp_path: Path
) -> None:
    layouts = make_layouts(disk_kind, tmp_path)
    mgr = manager()
    seen: list[str] = []

    async def before_fetch(request: FetchData, n: int) -> None:
        if request.kind == failing_kind:
            seen.append(request.name)
            if len(set(seen)) == 2 and request.offset > 0:  # part way into the second file
                raise ConnectionError("network down")

    async def main() -> None:
        async with source_tablet(layouts) as src:
            target = RecordingTarget(layouts.dst)
            source = LocalSource(mgr, src, before_fetch=before_fetch)
            with pytest.raises(CopyFailed) as failure:
                await run_copy(source, target, chunk_size=CHUNK)
            assert isinstance(failure.value.__cause__, ConnectionError)
            assert failure.value.phase is (CopyPhase.WAL if failing_kind == "wal"
                                           else CopyPhase.BLOCKS)
            assert "network down" in (target.abort_reason or "")
            assert_nothing_left(layouts, target)
            assert source.ended  # the session was ended
            assert released(mgr, layouts, src)

    trio.run(main)


def test_cancellation_mid_copy_leaves_no_partial_files(tmp_path: Path) -> None:
    layouts = make_layouts("sim", tmp_path)
    mgr = manager()

    async def main() -> None:
        async with source_tablet(layouts) as src:
            target = RecordingTarget(layouts.dst)
            with trio.CancelScope() as scope:

                async def before_fetch(request: FetchData, n: int) -> None:
                    if request.kind == "block" and request.offset > 0:
                        scope.cancel()
                        await trio.sleep_forever()

                await run_copy(LocalSource(mgr, src, before_fetch=before_fetch), target,
                               chunk_size=CHUNK)
            assert scope.cancelled_caught
            assert "cancelled" in (target.abort_reason or "")
            assert_nothing_left(layouts, target)
            # the cancelled copy could not end its session: idle expiry (or close_all) does
            assert len(mgr.session_ids()) == 1
            mgr.close_all()
            assert released(mgr, layouts, src)

    trio.run(main)


def test_refusal_before_step_one_changes_nothing(tmp_path: Path) -> None:
    """A READY replica here: begin_copying refuses, abort is not called, nothing changes."""
    layouts = make_layouts("sim", tmp_path)
    dst_meta = MetadataStore(layouts.dst)
    ready = Superblock(TABLET, DataState.READY)
    dst_meta.write_superblock(ready)
    mgr = manager()

    async def main() -> None:
        async with source_tablet(layouts) as src:
            target = RecordingTarget(layouts.dst)
            with pytest.raises(CopyFailed, match="READY here"):
                await run_copy(LocalSource(mgr, src), target)
            assert target.steps == [] and target.abort_reason is None
            assert dst_meta.load_superblock(TABLET) == ready
            assert released(mgr, layouts, src)

    trio.run(main)


# What a CreateTablet cut before its superblock leaves (issue 32): its cmeta (term 0, no
# vote, its config) and its WAL directory with the first, empty segment.
CREATE_CMETA = ConsensusMeta(TABLET, 0, None, OLD_CONFIG)


async def leave_an_uncommitted_create(layout: ServerLayout, *, wal: bool = True,
                                      entries: int = 0) -> None:
    """The cmeta, then (``wal``) the WAL directory with ``entries`` in its log."""
    MetadataStore(layout).write_cmeta(CREATE_CMETA)
    if not wal:
        return
    async with open_log(layout.disk, layout.wal_dir(TABLET), TABLET, WAL_OPTIONS,
                        create_if_missing=True) as log:
        for index in range(1, entries + 1):
            await log.append([LogEntry(1, index, b"N")])


@pytest.mark.parametrize("wal", [False, True], ids=["cmeta", "cmeta-and-wal"])
@pytest.mark.parametrize("disk_kind", DISKS)
def test_copy_into_no_replica_starts_from_no_cmeta(disk_kind: str, wal: bool,
                                                   tmp_path: Path) -> None:
    """No superblock here, but a create's leftovers: the copy removes them before its
    COPYING superblock and merges from no cmeta (it used to merge the orphan as the local
    cmeta); the leftover WAL directory no longer refuses the copy (it used to: "not
    empty")."""
    layouts = make_layouts(disk_kind, tmp_path)
    dst_meta = MetadataStore(layouts.dst)
    mgr = manager()
    merges: list[CmetaMerged] = []

    async def on_step(done: CopyStepDone) -> None:
        if isinstance(done, CmetaMerged):
            merges.append(done)

    async def main() -> None:
        await leave_an_uncommitted_create(layouts.dst, wal=wal)
        async with source_tablet(layouts) as src:
            target = RecordingTarget(layouts.dst)
            result = await run_copy(LocalSource(mgr, src), target, on_step=on_step)
            assert [m.local for m in merges] == [None]
            assert dst_meta.load_cmeta(TABLET) == result.cmeta == ConsensusMeta(
                TABLET, REMOTE_CMETA.current_term, None, REMOTE_CONFIG)
            rows, last = await open_destination(layouts.dst)
            assert rows == src.rows() and last == result.last_opid

    trio.run(main)


def test_a_wal_with_entries_and_no_superblock_is_kept_and_refuses_the_copy(
        tmp_path: Path) -> None:
    """A WAL directory holding entries is no create's leftover: nothing is removed (the
    cmeta stays too, for an operator) and the copy refuses before its first step."""
    layouts = make_layouts("sim", tmp_path)
    dst_meta = MetadataStore(layouts.dst)
    mgr = manager()

    async def main() -> None:
        await leave_an_uncommitted_create(layouts.dst, entries=2)
        async with source_tablet(layouts) as src:
            target = RecordingTarget(layouts.dst)
            with pytest.raises(CopyFailed, match="is not empty"):
                await run_copy(LocalSource(mgr, src), target)
            assert target.steps == [] and target.abort_reason is None
            assert dst_meta.load_cmeta(TABLET) == CREATE_CMETA
            assert dst_meta.load_superblock(TABLET) is None

    trio.run(main)


def test_progress_reports_bytes_and_totals(tmp_path: Path) -> None:
    layouts = make_layouts("sim", tmp_path)
    mgr = manager()
    progress: list[CopyProgress] = []
    ticks = iter(range(10_000))

    async def main() -> None:
        async with source_tablet(layouts) as src:
            source = LocalSource(mgr, src)
            result = await run_copy(source, RecordingTarget(layouts.dst), chunk_size=CHUNK,
                                    progress=progress.append, clock=lambda: float(next(ticks)))
            assert source.info is not None
            files = [*source.info.wal_segments, *source.info.blocks]
            total = sum(f.size for f in files)
            last = progress[-1]
            assert last.phase is CopyPhase.DONE
            assert last.bytes_done == last.total_bytes == total == result.bytes_copied
            assert last.files_done == last.files_total == len(files)
            assert last.rate_bytes_per_second > 0 and last.elapsed_seconds > 0
            order = [CopyPhase.BEGIN, CopyPhase.CMETA, CopyPhase.WAL, CopyPhase.BLOCKS,
                     CopyPhase.READY, CopyPhase.DONE]
            positions = [order.index(p.phase) for p in progress]
            assert positions == sorted(positions)
            assert {p.phase for p in progress} >= {CopyPhase.BEGIN, CopyPhase.WAL,
                                                   CopyPhase.BLOCKS, CopyPhase.DONE}
            done = [p.bytes_done for p in progress]
            assert done == sorted(done)
            assert len(progress) > len(files)  # per chunk, not only per file
            assert any(p.current_file is not None for p in progress)

    trio.run(main)


def test_progress_reports_failure(tmp_path: Path) -> None:
    layouts = make_layouts("sim", tmp_path)
    progress: list[CopyProgress] = []

    async def before_fetch(request: FetchData, n: int) -> None:
        raise OSError("disk on fire")

    async def main() -> None:
        async with source_tablet(layouts) as src:
            with pytest.raises(CopyFailed):
                await run_copy(LocalSource(manager(), src, before_fetch=before_fetch),
                               RecordingTarget(layouts.dst), progress=progress.append)
            assert progress[-1].phase is CopyPhase.FAILED
            assert "disk on fire" in (progress[-1].error or "")

    trio.run(main)


def test_identical_block_already_present_is_reused(tmp_path: Path) -> None:
    """A retried copy after a crash finds its earlier, identical block files: reused (and
    not deleted if this attempt fails)."""
    layouts = make_layouts("sim", tmp_path)
    mgr = manager()

    async def main() -> None:
        async with source_tablet(layouts) as src:
            info, expected = probe_snapshot(src, mgr)
            first = info.blocks[0].name
            atomic_replace(layouts.disk, posixpath.join(layouts.dst.data_dir, first),
                           expected[("block", first)])

            async def before_fetch(request: FetchData, n: int) -> None:
                if request.kind == "block":
                    assert request.name != first  # never downloaded again
                    raise ConnectionError("boom")

            target = RecordingTarget(layouts.dst)
            with pytest.raises(CopyFailed):
                await run_copy(LocalSource(mgr, src, before_fetch=before_fetch), target)
            assert real_files(layouts.disk, layouts.dst.data_dir) == [first]
            result = await run_copy(LocalSource(mgr, src), RecordingTarget(layouts.dst))
            assert result.superblock.live_blocks == tuple(b.name for b in info.blocks)

    trio.run(main)


@pytest.mark.parametrize(("contents", "refusal"), [
    (b"not a block", "exists with other contents"),
    (b"x", "is not block .*bad magic"),  # damaged: as many x as block 2 has bytes
    (None, "is not block .*holds block"),  # another block's (valid) bytes under this name
])
def test_a_block_file_in_the_way_fails_the_copy_cleanly(tmp_path: Path, contents: bytes | None,
                                                        refusal: str) -> None:
    """A file under a block's name that is not that block (damaged, or of another size) is
    never reused nor overwritten: the copy fails in BLOCKS naming it, and leaves it alone.
    (The refusal comes from the task that opens files ahead of the downloads.)"""
    layouts = make_layouts("sim", tmp_path)
    mgr = manager()

    async def main() -> None:
        async with source_tablet(layouts) as src:
            info, expected = probe_snapshot(src, mgr)
            second = info.blocks[1].name
            other = expected[("block", info.blocks[0].name)] if contents is None \
                else b"x" * info.blocks[1].size if contents == b"x" else contents
            if contents != b"not a block":
                assert len(other) == info.blocks[1].size  # so only the contents differ
            path = posixpath.join(layouts.dst.data_dir, second)
            atomic_replace(layouts.disk, path, other)
            target = RecordingTarget(layouts.dst)
            with pytest.raises(CopyFailed, match=refusal) as failure:
                await run_copy(LocalSource(mgr, src), target, chunk_size=CHUNK)
            assert failure.value.phase is CopyPhase.BLOCKS
            assert real_files(layouts.disk, layouts.dst.data_dir) == [second]
            assert layouts.disk.read_file(path) == other
            assert released(mgr, layouts, src)

    trio.run(main)


@pytest.mark.parametrize("window", [1, 3])
def test_fetches_are_pipelined_within_the_window(tmp_path: Path, window: int) -> None:
    """Up to `window` FetchData are in flight at once (more than one when the window
    allows: the next chunks travel while one is written), never more (the memory bound),
    across file boundaries; the durable steps still come in the seed's order."""
    layouts = make_layouts("sim", tmp_path)
    mgr = manager()
    in_flight = [0, 0]  # now, most

    class Slow(LocalSource):
        async def fetch(self, request: FetchData) -> DataChunk:
            in_flight[0] += 1
            in_flight[1] = max(in_flight)
            try:
                await trio.sleep(0.002)
                return await super().fetch(request)
            finally:
                in_flight[0] -= 1

    async def main() -> None:
        async with source_tablet(layouts) as src:
            target = RecordingTarget(layouts.dst)
            result = await run_copy(Slow(mgr, src), target, chunk_size=CHUNK, window=window)
            assert in_flight[1] == window
            assert target.steps == [
                "begin_copying", "merge_cmeta", f"wal_downloaded {result.last_opid}",
                "block_downloaded", "block_downloaded", "blocks_done", "mark_ready"]
            assert released(mgr, layouts, src)

    trio.run(main)
