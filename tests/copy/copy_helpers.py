"""Shared helpers for the tablet copy tests: a source tablet with a live WAL and flushed
blocks, an in-process CopySource over a real CopySessionManager, a handle-counting disk.

Imported as a top-level module: pytest's default import mode puts tests/copy on sys.path.
"""

from __future__ import annotations

import posixpath
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

import attrs
import msgspec
import trio

from revivify.impl.storage.blocks import BlockManager
from revivify.impl.storage.disk import Disk, DiskFile, OsDisk, is_temp_name
from revivify.impl.storage.layout import ServerLayout
from revivify.impl.storage.metadata import MetadataStore
from revivify.impl.storage.values import (
    ConsensusMeta,
    DataState,
    OpId,
    RaftConfig,
    RaftPeer,
    Superblock,
)
from revivify.impl.storage.wal import Log, LogEntry, LogOptions, open_log
from revivify.impl.tablet.ops import WriteBatch, encode_write, put
from revivify.impl.tablet.store import TabletStore
from revivify.impl.testing import SimDisk
from revivify.impl.tserver.copy import (
    CopySessionInfo,
    CopySessionManager,
    DataChunk,
    FetchData,
    FileInfo,
    LocalCopyTarget,
)

T = TypeVar("T")

TABLET = "tablet-c"
TERM = 4
PEERS = (
    RaftPeer("src", "127.0.0.1:7001"),
    RaftPeer("peer-b", "127.0.0.1:7002"),
    RaftPeer("dst", "127.0.0.1:7003"),
)
REMOTE_CONFIG = RaftConfig(7, PEERS)
REMOTE_CMETA = ConsensusMeta(TABLET, TERM, "peer-b", REMOTE_CONFIG)
WAL_OPTIONS = LogOptions(segment_size=2048, use_threads=False)


def roundtrip(value: Any, kind: type[T]) -> T:
    """What an RPC does to a body: msgpack encode, then a strict typed decode."""
    return msgspec.msgpack.decode(msgspec.msgpack.encode(value), type=kind)


# --------------------------------------------------------------------------- disks


class TrackedFile:
    def __init__(self, inner: DiskFile, disk: TrackingDisk) -> None:
        self._inner = inner
        self._disk = disk
        self.closed = False

    @property
    def path(self) -> str:
        return self._inner.path

    def pwrite(self, offset: int, data: bytes) -> None:
        self._inner.pwrite(offset, data)

    def pread(self, offset: int, length: int) -> bytes:
        return self._inner.pread(offset, length)

    def size(self) -> int:
        return self._inner.size()

    def truncate(self, size: int) -> None:
        self._inner.truncate(size)

    def fallocate(self, offset: int, length: int) -> None:
        self._inner.fallocate(offset, length)

    def fsync(self) -> None:
        self._inner.fsync()

    def fdatasync(self) -> None:
        self._inner.fdatasync()

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self._inner.close()


class TrackingDisk:
    """A Disk proxy that remembers every handle it opened (to prove nothing leaks)."""

    def __init__(self, inner: Disk) -> None:
        self.inner = inner
        self.handles: list[TrackedFile] = []

    def open_count(self) -> int:
        return sum(1 for h in self.handles if not h.closed)

    def open(self, path: str, *, create: bool = False, exclusive: bool = False) -> TrackedFile:
        handle = TrackedFile(self.inner.open(path, create=create, exclusive=exclusive), self)
        self.handles.append(handle)
        return handle

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


@attrs.define
class Layouts:
    disk: Disk
    src: ServerLayout
    dst: ServerLayout
    tracking: TrackingDisk  # the source as the session manager sees it


def make_layouts(kind: str, tmp_path: Path) -> Layouts:
    if kind == "sim":
        disk: Disk = SimDisk()
        roots = ("/src", "/dst")
    else:
        disk = OsDisk()
        roots = (str(tmp_path / "src"), str(tmp_path / "dst"))
    src = ServerLayout(roots[0], disk)
    src.format("src", 1)
    dst = ServerLayout(roots[1], disk)
    dst.format("dst", 2)
    return Layouts(disk, src, dst, TrackingDisk(disk))


# --------------------------------------------------------------------------- the source


@attrs.define
class SourceTablet:
    layout: ServerLayout
    metadata: MetadataStore
    blocks: BlockManager
    log: Log
    store: TabletStore
    tracked_layout: ServerLayout
    tracked_blocks: BlockManager
    next_index: int = 1
    next_seq: int = 1

    async def write(self, count: int, *, size: int = 60) -> None:
        for _ in range(count):
            index, seq = self.next_index, self.next_seq
            key = f"key-{seq % 37:03d}".encode()
            batch = WriteBatch("client-1", seq, [put(key, f"v{seq}-".encode().ljust(size, b"x"))])
            payload = encode_write(batch)
            await self.log.append([LogEntry(TERM, index, b"W" + payload)])
            self.store.apply_payload(index, TERM, payload)
            self.next_index += 1
            self.next_seq += 1

    def rows(self) -> list[tuple[bytes, bytes]]:
        return self.store.scan()

    def begin(self, manager: CopySessionManager, requester: str = "dst") -> CopySessionInfo:
        return manager.begin(requester, TABLET, self.log, self.metadata, self.tracked_layout,
                             self.tracked_blocks)

    def file_path(self, kind: str, name: str) -> str:
        if kind == "wal":
            return posixpath.join(self.layout.wal_dir(TABLET), name)
        return self.blocks.path(name)


@asynccontextmanager
async def source_tablet(
    layouts: Layouts, *, flushes: int = 2, per_flush: int = 25, tail: int = 8
) -> AsyncIterator[SourceTablet]:
    """A READY source replica: `flushes` flushed blocks, then `tail` unflushed entries, on a
    WAL of several small segments; the Log stays open for the block."""
    layout = layouts.src
    metadata = MetadataStore(layout)
    blocks = BlockManager(layout)
    metadata.write_cmeta(REMOTE_CMETA)
    async with open_log(layout.disk, layout.wal_dir(TABLET), TABLET, WAL_OPTIONS,
                        create_if_missing=True) as log:
        metadata.write_superblock(Superblock(TABLET, DataState.READY))
        store = TabletStore.open(layout, metadata, blocks, TABLET)
        tracked = ServerLayout(layout.root, layouts.tracking)  # type: ignore[arg-type]
        src = SourceTablet(layout, metadata, blocks, log, store, tracked, BlockManager(tracked))
        for _ in range(flushes):
            await src.write(per_flush)
            store.flush()
        await src.write(tail)
        yield src


FetchHook = Callable[[FetchData, int], Awaitable[None]]
Tamper = Callable[[FetchData, DataChunk], DataChunk]


class LocalSource:
    """A CopySource in-process: a real CopySessionManager, bodies round-tripped as on the
    wire; hooks to run code before a fetch and to tamper with chunks."""

    def __init__(self, manager: CopySessionManager, src: SourceTablet, requester: str = "dst",
                 *, before_fetch: FetchHook | None = None, tamper: Tamper | None = None) -> None:
        self.manager = manager
        self.src = src
        self.requester = requester
        self.before_fetch = before_fetch
        self.tamper = tamper
        self.fetches = 0
        self.ended: list[str] = []
        self.info: CopySessionInfo | None = None

    async def begin(self) -> CopySessionInfo:
        await trio.lowlevel.checkpoint()
        self.info = roundtrip(self.src.begin(self.manager, self.requester), CopySessionInfo)
        return self.info

    async def fetch(self, request: FetchData) -> DataChunk:
        await trio.lowlevel.checkpoint()
        request = roundtrip(request, FetchData)
        self.fetches += 1
        if self.before_fetch is not None:
            await self.before_fetch(request, self.fetches)
        chunk = self.manager.fetch(request.session_id, request.kind, request.name,
                                   request.offset, request.max_length)
        if self.tamper is not None:
            chunk = self.tamper(request, chunk)
        return roundtrip(chunk, DataChunk)

    async def end(self, session_id: str) -> None:
        await trio.lowlevel.checkpoint()
        self.manager.end(session_id)
        self.ended.append(session_id)


def snapshot_bytes(src: SourceTablet, info: CopySessionInfo) -> dict[tuple[str, str], bytes]:
    """The bytes the session promises, read from the source's files now."""
    out: dict[tuple[str, str], bytes] = {}
    files: list[tuple[str, FileInfo]] = [("wal", f) for f in info.wal_segments]
    files += [("block", f) for f in info.blocks]
    for kind, f in files:
        out[(kind, f.name)] = src.layout.disk.read_file(src.file_path(kind, f.name))[: f.size]
    return out


def probe_snapshot(src: SourceTablet, mgr: CopySessionManager
                   ) -> tuple[CopySessionInfo, dict[tuple[str, str], bytes]]:
    """What a session on ``src`` offers and its bytes, through a session opened and ended."""
    info = src.begin(mgr, "probe")
    expected = snapshot_bytes(src, info)
    mgr.end(info.session_id)
    return info, expected


# --------------------------------------------------------------------------- the destination


class RecordingTarget(LocalCopyTarget):
    """LocalCopyTarget that records each step (as a caller's trace wrapper would)."""

    def __init__(self, layout: ServerLayout) -> None:
        super().__init__(layout, MetadataStore(layout), TABLET, layout.disk)
        self.steps: list[str] = []
        self.superblock_at_merge: Superblock | None = None

    def begin_copying(self) -> None:
        super().begin_copying()
        self.steps.append("begin_copying")

    def merge_cmeta(self, remote: ConsensusMeta) -> ConsensusMeta:
        self.superblock_at_merge = self.metadata.load_superblock(TABLET)
        merged = super().merge_cmeta(remote)
        self.steps.append("merge_cmeta")
        return merged

    def wal_downloaded(self, last_opid: OpId | None) -> None:
        self.steps.append(f"wal_downloaded {last_opid}")

    def block_downloaded(self, block_id: str) -> None:
        self.steps.append("block_downloaded")

    def blocks_done(self) -> None:
        self.steps.append("blocks_done")

    def mark_ready(self, superblock: Superblock) -> Superblock:
        result = super().mark_ready(superblock)
        self.steps.append("mark_ready")
        return result

    def abort(self, reason: str) -> None:
        super().abort(reason)
        self.steps.append("abort")


def real_files(disk: Disk, directory: str) -> list[str]:
    if not disk.is_dir(directory):
        return []
    return disk.listdir(directory)


def non_temp(names: list[str]) -> list[str]:
    return [n for n in names if not is_temp_name(n)]


async def open_destination(layout: ServerLayout) -> tuple[list[tuple[bytes, bytes]], OpId | None]:
    """Start the copied replica's data as the server would: blocks, then the WAL replayed
    above the flushed OpId. Returns its rows and the recovered log's last OpId."""
    metadata = MetadataStore(layout)
    store = TabletStore.open(layout, metadata, BlockManager(layout), TABLET)
    async with open_log(layout.disk, layout.wal_dir(TABLET), TABLET, WAL_OPTIONS) as log:
        for entry in await log.read_entries(store.flushed_index + 1):
            store.apply_payload(entry.index, entry.term, entry.payload[1:])
        last = log.last_opid
    return store.scan(), last
