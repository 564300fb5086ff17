"""CopySessionManager: snapshot pinning, WAL anchoring against GC, idempotent sessions, idle
expiry, release on every path, and the fetch contract."""

from __future__ import annotations

import zlib
from pathlib import Path

import attrs
import pytest
import trio
from copy_helpers import REMOTE_CMETA, TABLET, Layouts, SourceTablet, make_layouts, source_tablet

from revivify.impl.rpc.errors import AppError
from revivify.impl.storage.blocks import decode_block
from revivify.impl.storage.metadata import decode_cmeta, decode_superblock
from revivify.impl.storage.values import DataState, OpId, Superblock
from revivify.impl.tserver.copy import (
    COPY_ERRORS,
    MAX_CHUNK,
    BadFetch,
    CopySessionManager,
    CopySourceUnavailable,
    NoSuchSession,
)


def run_with_source(layouts: Layouts, body: object, **kwargs: int) -> None:
    async def main() -> None:
        async with source_tablet(layouts, **kwargs) as src:
            await body(src)  # type: ignore[operator]

    trio.run(main)


def fetch_all(mgr: CopySessionManager, session_id: str, kind: str, name: str) -> bytes:
    out = b""
    while True:
        chunk = mgr.fetch(session_id, kind, name, len(out), 500)
        assert zlib.crc32(chunk.data) == chunk.crc32
        if not chunk.data:
            assert len(out) == chunk.total_length
            return out
        out += chunk.data


def released(mgr: CopySessionManager, layouts: Layouts, src: SourceTablet) -> bool:
    """No session, no handle, and no anchor but those handed over by ended sessions."""
    return (not mgr.session_ids() and mgr.open_handles() == 0
            and layouts.tracking.open_count() == 0
            and len(src.log.anchors()) == mgr.handovers())


@pytest.fixture
def layouts(tmp_path: Path) -> Layouts:
    return make_layouts("sim", tmp_path)


def test_session_describes_a_consistent_snapshot(layouts: Layouts) -> None:
    async def body(src: SourceTablet) -> None:
        mgr = CopySessionManager(lambda: 0.0, 30.0, source_uuid="src")
        info = src.begin(mgr)
        sb = decode_superblock(info.superblock, path="sb")
        assert sb.data_state is DataState.READY and sb.flushed_opid is not None
        assert [b.name for b in info.blocks] == list(sb.live_blocks)
        assert decode_cmeta(info.cmeta, path="cm").current_term >= info.last_opid[0]  # type: ignore[index]
        assert info.last_opid == (src.log.last_opid.term, src.log.last_opid.index)  # type: ignore[union-attr]
        assert info.source_uuid == "src" and info.expires_in_seconds == 30.0
        names = [f.name for f in info.wal_segments]
        assert names == sorted(names) and len(names) >= 3
        # every file is served whole, with the announced size, and verifies by its own
        # checksums (a block's frame)
        for kind, files in (("wal", info.wal_segments), ("block", info.blocks)):
            for f in files:
                data = fetch_all(mgr, info.session_id, kind, f.name)
                assert len(data) == f.size
                if kind == "block":
                    assert decode_block(data, path=f.name, block_id=f.name) is not None
        # the active segment is served without its preallocated zeros, and appends made
        # after the snapshot are not served
        active = info.wal_segments[-1]
        on_disk = src.layout.disk.file_size(src.file_path("wal", active.name))
        assert active.size < on_disk
        before = fetch_all(mgr, info.session_id, "wal", active.name)
        await src.write(3)
        assert fetch_all(mgr, info.session_id, "wal", active.name) == before
        mgr.end(info.session_id)
        assert released(mgr, layouts, src)

    run_with_source(layouts, body)


def test_gc_keeps_anchored_segments_until_the_session_ends(layouts: Layouts) -> None:
    async def body(src: SourceTablet) -> None:
        mgr = CopySessionManager(lambda: 0.0, 30.0)
        info = src.begin(mgr)
        [anchor] = src.log.anchors()
        first = src.log.segments()[0]
        assert anchor.index == first.min_index  # the first retained index
        src.store.flush()
        await src.write(40)  # several rollovers
        flushed = src.store.flush()
        assert flushed is not None
        assert await src.log.gc(flushed.index) == []  # the anchor holds everything
        for f in info.wal_segments:
            assert src.layout.disk.exists(src.file_path("wal", f.name))
        mgr.end(info.session_id)
        assert info.last_opid is not None
        [handed] = src.log.anchors()  # the handover: at the snapshot's last index
        assert handed.index == info.last_opid[1] and mgr.handovers() == 1
        collected = await src.log.gc(flushed.index)
        gone = {p.rsplit("/", 1)[1] for p in collected}
        assert gone & {f.name for f in info.wal_segments}  # those below it may go now
        for f in info.wal_segments:
            if f.name not in gone:  # what is kept holds the snapshot's last entry or more
                assert any(s.max_index is not None and s.max_index >= handed.index
                           for s in src.log.segments() if s.path.endswith(f.name))
        assert released(mgr, layouts, src)

    run_with_source(layouts, body)


def test_an_ended_session_hands_its_anchor_over_for_the_idle_timeout(
        layouts: Layouts) -> None:
    """The destination's log ends at the snapshot's last entry and continues from the
    leader's next AppendRequest: the entries after it stay (for the WAL and for the
    replica's `retention_point`) for idle_timeout seconds after the session ends, then
    the anchor goes; close_all releases it at once."""
    async def body(src: SourceTablet) -> None:
        clock = [0.0]
        mgr = CopySessionManager(lambda: clock[0], 10.0)
        info = src.begin(mgr)
        assert info.last_opid is not None
        clock[0] = 5.0
        mgr.end(info.session_id)
        assert [a.index for a in src.log.anchors()] == [info.last_opid[1]]
        assert layouts.tracking.open_count() == 0  # the files are closed at once
        clock[0] = 14.0
        assert mgr.expire_idle() == [] and mgr.handovers() == 1
        clock[0] = 15.5
        assert mgr.expire_idle() == []  # (no session expired: the anchor simply goes)
        assert src.log.anchors() == [] and mgr.handovers() == 0
        again = src.begin(mgr, "dst-2")
        mgr.end(again.session_id)
        assert len(src.log.anchors()) == 1
        mgr.close_all()
        assert src.log.anchors() == [] and mgr.handovers() == 0

    run_with_source(layouts, body)


def test_gc_during_session_does_not_disturb_fetches(layouts: Layouts) -> None:
    """Even segments that a GC deletes (empty ones, or a GC that chose before the anchor)
    stay readable through the session's handles."""
    async def body(src: SourceTablet) -> None:
        mgr = CopySessionManager(lambda: 0.0, 30.0)
        info = src.begin(mgr)
        expected = {f.name: src.layout.disk.read_file(src.file_path("wal", f.name))[: f.size]
                    for f in info.wal_segments}
        for f in info.wal_segments:  # as if collected: unlink every name
            src.layout.disk.unlink(src.file_path("wal", f.name))
        for f in info.wal_segments:
            assert fetch_all(mgr, info.session_id, "wal", f.name) == expected[f.name]
        mgr.end(info.session_id)
        assert released(mgr, layouts, src)

    run_with_source(layouts, body)


def test_sessions_are_idempotent_per_requester_and_tablet(layouts: Layouts) -> None:
    async def body(src: SourceTablet) -> None:
        clock = [0.0]
        mgr = CopySessionManager(lambda: clock[0], 10.0)
        first = src.begin(mgr, "dst-1")
        clock[0] = 8.0
        await src.write(5)
        again = src.begin(mgr, "dst-1")  # same session, same snapshot, timer refreshed
        assert again == first
        assert len(src.log.anchors()) == 1 and mgr.session_ids() == [first.session_id]
        clock[0] = 15.0
        assert mgr.expire_idle() == []  # refreshed at 8
        other = src.begin(mgr, "dst-2")
        assert other.session_id != first.session_id
        assert len(src.log.anchors()) == 2
        handles = layouts.tracking.open_count()
        pinned = sum(len(i.wal_segments) + len(i.blocks) for i in (first, other))
        assert handles == mgr.open_handles() == pinned
        mgr.end(first.session_id)
        mgr.end(other.session_id)
        assert released(mgr, layouts, src)
        third = src.begin(mgr, "dst-1")  # after the end: a fresh session and snapshot
        assert third.session_id != first.session_id
        mgr.close_all()
        assert released(mgr, layouts, src)

    run_with_source(layouts, body)


def test_idle_expiry_releases_everything(layouts: Layouts) -> None:
    async def body(src: SourceTablet) -> None:
        clock = [100.0]
        mgr = CopySessionManager(lambda: clock[0], 10.0)
        info = src.begin(mgr)
        clock[0] = 105.0
        mgr.keep_alive(info.session_id)
        clock[0] = 112.0
        mgr.fetch(info.session_id, "block", info.blocks[0].name, 0, 10)  # also refreshes
        clock[0] = 121.0
        assert mgr.expire_idle() == []
        assert layouts.tracking.open_count() > 0 and len(src.log.anchors()) == 1
        clock[0] = 122.5
        assert mgr.expire_idle() == [info.session_id]
        assert released(mgr, layouts, src)
        with pytest.raises(NoSuchSession):
            mgr.fetch(info.session_id, "block", info.blocks[0].name, 0, 10)
        with pytest.raises(NoSuchSession):
            mgr.keep_alive(info.session_id)
        with pytest.raises(NoSuchSession):
            mgr.end(info.session_id)

    run_with_source(layouts, body)


def test_close_all_releases_every_session(layouts: Layouts) -> None:
    async def body(src: SourceTablet) -> None:
        mgr = CopySessionManager(lambda: 0.0, 10.0)
        for requester in ("a", "b", "c"):
            src.begin(mgr, requester)
        assert len(mgr.session_ids()) == 3 and len(src.log.anchors()) == 3
        mgr.close_all()
        assert released(mgr, layouts, src)

    run_with_source(layouts, body)


def test_fetch_contract(layouts: Layouts) -> None:
    async def body(src: SourceTablet) -> None:
        mgr = CopySessionManager(lambda: 0.0, 10.0)
        info = src.begin(mgr)
        block = info.blocks[0]
        sid = info.session_id
        whole = mgr.fetch(sid, "block", block.name, 0, 10 * MAX_CHUNK)
        assert len(whole.data) == block.size == whole.total_length  # capped, not padded
        tail = mgr.fetch(sid, "block", block.name, block.size, 100)
        assert tail.data == b"" and tail.total_length == block.size
        for kind, name, offset, length in [
            ("block", "no-such-block", 0, 10),
            ("block", block.name, block.size + 1, 10),
            ("block", block.name, -1, 10),
            ("block", block.name, 0, 0),
            ("wal", block.name, 0, 10),  # a block name is not a WAL segment
            ("superblock", block.name, 0, 10),
        ]:
            with pytest.raises(BadFetch):
                mgr.fetch(sid, kind, name, offset, length)
        with pytest.raises(NoSuchSession):
            mgr.fetch("nope", "block", block.name, 0, 10)
        mgr.end(sid)
        assert released(mgr, layouts, src)

    run_with_source(layouts, body)


def test_begin_refuses_a_replica_that_is_not_ready(layouts: Layouts) -> None:
    async def body(src: SourceTablet) -> None:
        mgr = CopySessionManager(lambda: 0.0, 10.0)
        src.metadata.write_superblock(Superblock(TABLET, DataState.DELETED,
                                                 tombstone_last_opid=OpId(4, 9)))
        with pytest.raises(CopySourceUnavailable, match="DELETED"):
            src.begin(mgr)
        assert released(mgr, layouts, src)  # no anchor, no handle left behind

    run_with_source(layouts, body)


def test_begin_refuses_a_cmeta_older_than_the_wal(layouts: Layouts) -> None:
    async def body(src: SourceTablet) -> None:
        mgr = CopySessionManager(lambda: 0.0, 10.0)
        src.metadata.write_cmeta(attrs.evolve(REMOTE_CMETA, current_term=1))
        with pytest.raises(CopySourceUnavailable, match="below the last logged term"):
            src.begin(mgr)
        src.layout.disk.unlink(src.layout.cmeta_path(TABLET))
        with pytest.raises(CopySourceUnavailable, match="FileNotFoundError"):
            src.begin(mgr)
        assert released(mgr, layouts, src)

    run_with_source(layouts, body)


def test_begin_retries_when_a_compaction_retires_blocks(layouts: Layouts) -> None:
    """A live block vanishes between reading the superblock and opening it: begin reads the
    superblock again and pins the new block set."""
    async def body(src: SourceTablet) -> None:
        mgr = CopySessionManager(lambda: 0.0, 10.0)
        metadata = src.metadata
        real_load = metadata.load_superblock
        calls = [0]

        def racing_load(tablet_id: str) -> Superblock | None:
            sb = real_load(tablet_id)
            calls[0] += 1
            if calls[0] == 1:
                src.store.compact()  # retires the blocks this superblock lists
            return sb

        metadata.load_superblock = racing_load  # type: ignore[method-assign]
        info = src.begin(mgr)
        metadata.load_superblock = real_load  # type: ignore[method-assign]
        assert len(info.blocks) == 1  # the second read of the superblock was pinned
        assert decode_superblock(info.superblock, path="sb").live_blocks == (info.blocks[0].name,)
        mgr.end(info.session_id)
        assert released(mgr, layouts, src)

    run_with_source(layouts, body, flushes=3)


def test_errors_travel() -> None:
    for error in (NoSuchSession("s-1"), CopySourceUnavailable("t", "why"), BadFetch("off")):
        assert isinstance(error, AppError) and type(error) in COPY_ERRORS
        rebuilt = type(error).from_data(error.message, error.to_data())
        assert rebuilt.message == error.message and rebuilt.to_data() == error.to_data()
