"""The destination side of a tablet copy: a verified, all-or-nothing download procedure.

Seed 001 ("Follower Tablet Copy"), destination steps, each durable before the next:

1. write the superblock COPYING (keeping a tombstone's last OpId, clearing its quarantine
   pointer)                                            `CopyTarget.begin_copying`
2. download the source's cmeta and merge it with the local one (merge.py)
                                                       `CopyTarget.merge_cmeta`
3. download the WAL segments                           `FileSink.commit` each, then
                                                       `CopyTarget.wal_downloaded`
4. download the data blocks (some, then all)           `CopyTarget.block_downloaded` each,
                                                       then `CopyTarget.blocks_done`
5. write the superblock READY listing the blocks       `CopyTarget.mark_ready`
6. start the replica                                   (the caller, after `run_copy`)

`run_copy(source, target, progress=...)` drives the steps over two seams: a `CopySource`
(begin / fetch / end of a source session, async so an RPC client plugs in; an in-process one
wraps a CopySessionManager in tests) and a `CopyTarget` (the durable local steps, synchronous;
`LocalCopyTarget` implements them with the storage primitives, and a caller wraps its
methods to write a trace event after each step).

Verification (nothing unverified is ever made visible under its real name):

* every chunk: its offset and the file's total length are the ones asked for and announced,
  its length is within bounds, and its CRC-32 matches its bytes (what travelled is what the
  source read). A bad chunk is refused and asked for again, at most `max_chunk_retries`
  times, then the copy fails;
* every file, before its rename, by the checksums of the server that *wrote* it (end to
  end, as Kudu relies on its CFile checksums): a block is one codec frame, whose header and
  CRC-32 are checked as its chunks arrive (`FrameVerifier`; a wrong header fails at the
  first chunk); a WAL segment decodes with `scan_segment` (header names this tablet and
  sequence, every frame verifies, every segment but the last is closed). A block's rows are
  decoded when the replica starts (its block id is checked then);
* the downloaded WAL's last OpId is the session's, and its term is at most the merged term;
  the block list is exactly the superblock's live blocks; names are validated before any
  path is built from them.

All or nothing: every file `run_copy` writes goes through a `FileSink` (temp file, fsync,
rename, fsync the directory), and `run_copy` remembers each sink. On any failure or
cancellation it discards every one of them (unlinking the temp or the renamed file, then
fsyncing the directory: durably), calls `target.abort(reason)` if step 1 was entered (the
caller tombstones the replica: COPYING must not stay; a failure before step 1, or a
CopyTargetError refusal from `begin_copying`, changed nothing and calls no abort), ends
the session (best effort) and raises (CopyFailed, or the cancellation itself). A block
that already existed with the identical contents (a retried copy after a crash) is reused
and never deleted. The merged cmeta is not undone: its term and vote only ever move
forward, which is what the merge is for. The session is ended *before* step 5 and nothing is
awaited after `mark_ready` returns, so nothing that can fail or be cancelled follows the
commit point.

Throughput: a producer task keeps `window` FetchData in flight, across file boundaries;
the copy's own task takes the answers in file order and verifies and writes each chunk in
a worker thread (zlib's CRC and the write release the GIL), so the network, the checksums
and the disk overlap, and the fetches of the next file go on while a finished one is
fsync'd and its durable step is traced. The durable steps stay in the seed's order; only
temp files are written ahead. At most `window` chunks are in memory.

Blocking I/O: target and sink calls run through `blocking` (e.g. the server's worker-thread
runner) when given, else inline. The cleanup after a failure runs inline (a cancelled task
cannot start a worker thread), so it always happens.
"""

from __future__ import annotations

import contextlib
import enum
import logging
import math
import posixpath
import time
import zlib
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar

import attrs
import trio

from revivify.impl.storage.blocks import block_verifier, decode_block
from revivify.impl.storage.codec import FrameVerifier
from revivify.impl.storage.disk import (
    Disk,
    DiskFile,
    is_temp_name,
    makedirs_durably,
    parent_of,
    temp_path_for,
)
from revivify.impl.storage.errors import StorageError
from revivify.impl.storage.layout import ServerLayout, validate_name
from revivify.impl.storage.metadata import MetadataStore, decode_cmeta, decode_superblock
from revivify.impl.storage.values import ConsensusMeta, DataState, OpId, Superblock
from revivify.impl.storage.wal import SEGMENT_NAME, scan_segment

from ..durable import opid_pair
from ..manager.core import (
    BlockDownloaded,
    BlocksDone,
    CmetaMerged,
    CopyBegun,
    CopyStepDone,
    MarkedReady,
    WalDownloaded,
)
from ..orphans import discard_uncommitted_create
from .api import MAX_CHUNK, CopySessionInfo, DataChunk, FetchData, FileInfo, FileKind
from .merge import merge_cmeta

logger = logging.getLogger(__name__)

T = TypeVar("T")
Blocking = Callable[..., Awaitable[Any]]  # run a blocking call (a worker thread, or inline)
# Called after each durable step with the step's record (the lifecycle core's input: the
# server traces it there, in its own thread); an exception from it fails the copy like any
# other.
OnStep = Callable[[CopyStepDone], Awaitable[None]]


async def _no_step(done: CopyStepDone) -> None:
    pass


# Runs one durable step and its on_step together (the server shields the pair from
# cancellation, so that a step made durable is always traced).
Durable = Callable[[Callable[[], Awaitable[Any]]], Awaitable[Any]]


async def _plain(step: Callable[[], Awaitable[Any]]) -> Any:
    return await step()


# --------------------------------------------------------------------------- seams


class CopySource(Protocol):
    """A session on the source server (an RPC client, or a CopySessionManager in-process).
    The source knows which tablet is copied and who asks."""

    async def begin(self) -> CopySessionInfo: ...

    async def fetch(self, request: FetchData) -> DataChunk: ...

    async def end(self, session_id: str) -> None: ...


class FileSink(Protocol):
    """A file being downloaded: written under a temp name, renamed into place by commit."""

    @property
    def path(self) -> str:
        """The final path."""
        ...

    def write(self, offset: int, data: bytes) -> None: ...

    def read_all(self) -> bytes:
        """Everything written so far, read back from the disk (for verification)."""
        ...

    def commit(self) -> None:
        """fsync, rename over the final path, fsync the directory: durable under its name."""
        ...

    def discard(self) -> None:
        """Remove the file (temp or committed) durably; idempotent."""
        ...


class CopyTarget(Protocol):
    """The destination's durable steps (seed numbering), and the hooks between them."""

    @property
    def tablet_id(self) -> str: ...

    def begin_copying(self) -> None:
        """Step 1: superblock COPYING (tombstone's last OpId kept, quarantine cleared)."""
        ...

    def local_cmeta(self) -> ConsensusMeta | None:
        """The local cmeta before the merge (None: there is none)."""
        ...

    def merge_cmeta(self, remote: ConsensusMeta) -> ConsensusMeta:
        """Step 2: merge `remote` into the local cmeta, durably; return the merged cmeta."""
        ...

    def create_wal_segment(self, name: str) -> FileSink: ...

    def wal_downloaded(self, last_opid: OpId | None) -> None:
        """Step 3 done: every segment is durable under its name."""
        ...

    def create_block(self, info: FileInfo) -> FileSink | None:
        """A sink for a block, or None when the identical block is already here."""
        ...

    def block_downloaded(self, block_id: str) -> None:
        """Step 4, one block durable (the blocks are PARTIAL)."""
        ...

    def blocks_done(self) -> None:
        """Step 4 done: every block is durable."""
        ...

    def mark_ready(self, superblock: Superblock) -> Superblock:
        """Step 5 (the commit point): write `superblock` (READY) durably."""
        ...

    def abort(self, reason: str) -> None:
        """The copy failed after `begin_copying` was entered; every downloaded file is
        already gone. The caller tombstones the replica (its superblock may be COPYING).
        Not called when the copy failed before step 1, or when `begin_copying` refused with
        CopyTargetError (which, by contract, changes nothing)."""
        ...


# --------------------------------------------------------------------------- values


class CopyPhase(enum.Enum):
    """Where a download is, as operators see it (``CopyProgress``, `revivify replica copy`'s
    progress, the copy service's session list): coarser than the durable steps
    (``manager.core.CopyStep``: every block is one step, here one phase), and with the two
    ends a step list has no name for, DONE and FAILED. Its lowercase values are part of the
    CLI's output."""

    BEGIN = "begin"
    CMETA = "cmeta"
    WAL = "wal"
    BLOCKS = "blocks"
    READY = "ready"
    DONE = "done"
    FAILED = "failed"


@attrs.frozen
class CopyProgress:
    """A snapshot of a copy's progress, reported after every step and every chunk."""

    tablet_id: str
    phase: CopyPhase
    bytes_done: int  # bytes of WAL segments and blocks downloaded (or reused)
    total_bytes: int  # 0 until the session began
    files_done: int
    files_total: int
    elapsed_seconds: float
    rate_bytes_per_second: float
    retries: int  # chunks refused and fetched again
    current_file: str | None = None
    error: str | None = None  # phase FAILED: why


@attrs.frozen
class CopyResult:
    """What a completed copy left on disk (the replica can now be started)."""

    superblock: Superblock
    cmeta: ConsensusMeta
    last_opid: OpId | None
    bytes_copied: int
    session_id: str
    source_uuid: str


class CopyFailed(Exception):
    """The copy failed in `phase`; everything it downloaded was removed, abort was called."""

    def __init__(self, tablet_id: str, phase: CopyPhase, reason: str) -> None:
        super().__init__(f"tablet copy of {tablet_id} failed in phase {phase.value}: {reason}")
        self.tablet_id = tablet_id
        self.phase = phase
        self.reason = reason


class CopyTargetError(Exception):
    """The local side refuses the copy (e.g. the tablet is READY here, or files are in the
    way)."""


# --------------------------------------------------------------------------- the procedure


async def _inline(fn: Callable[..., T], *args: Any) -> T:
    return fn(*args)


async def run_copy(
    source: CopySource,
    target: CopyTarget,
    *,
    progress: Callable[[CopyProgress], None] = lambda _: None,
    blocking: Blocking | None = None,
    chunk_size: int = MAX_CHUNK,
    max_chunk_retries: int = 3,
    clock: Callable[[], float] = time.monotonic,
    on_step: OnStep = _no_step,
    window: int = 8,
    durable: Durable = _plain,
) -> CopyResult:
    """Copy the source's tablet onto `target` (module docstring: steps 1-5, verification,
    all-or-nothing). Returns once the READY superblock is durable; raises CopyFailed (or
    the cancellation) after cleaning up. ``on_step(record)`` follows every durable step
    with its record (manager/core.py ``CopyStepDone``): CopyBegun, CmetaMerged (local,
    remote, result), WalDownloaded (the WAL's last OpId), BlockDownloaded for each block,
    BlocksDone, MarkedReady."""
    run = _Copy(source, target, progress, blocking or _inline, chunk_size, max_chunk_retries,
                clock)
    run.on_step = on_step
    run.window = max(1, window)
    run.durable = durable
    return await run.run()


class _Copy:
    def __init__(
        self,
        source: CopySource,
        target: CopyTarget,
        progress: Callable[[CopyProgress], None],
        blocking: Blocking,
        chunk_size: int,
        max_chunk_retries: int,
        clock: Callable[[], float],
    ) -> None:
        if not 0 < chunk_size <= MAX_CHUNK:
            raise ValueError(f"chunk_size must be in 1..{MAX_CHUNK}, got {chunk_size}")
        self.source = source
        self.target = target
        self.tablet_id = target.tablet_id
        self._progress = progress
        self._blocking = blocking
        self.chunk_size = chunk_size
        self.max_chunk_retries = max_chunk_retries
        self._clock = clock
        self._start = clock()
        self.phase = CopyPhase.BEGIN
        self.bytes_done = 0
        self.total_bytes = 0
        self.files_done = 0
        self.files_total = 0
        self.retries = 0
        self.current: str | None = None
        self.session: CopySessionInfo | None = None
        self.sinks: list[FileSink] = []
        self.started = False  # begin_copying was entered: abort() is owed on failure
        self.on_step: OnStep = _no_step
        self.window = 1  # FetchData in flight at once
        self.durable: Durable = _plain

    def report(self, error: str | None = None) -> None:
        elapsed = max(self._clock() - self._start, 0.0)
        rate = self.bytes_done / elapsed if elapsed > 0 else 0.0
        try:
            self._progress(CopyProgress(
                self.tablet_id, self.phase, self.bytes_done, self.total_bytes,
                self.files_done, self.files_total, elapsed, rate, self.retries,
                self.current, error))
        except Exception:  # a broken progress callback must not break the copy
            logger.exception("tablet copy progress callback failed")

    def fail(self, reason: str) -> CopyFailed:
        return CopyFailed(self.tablet_id, self.phase, reason)

    async def run(self) -> CopyResult:
        try:
            return await self._steps()
        except BaseException as exc:
            reason = exc.reason if isinstance(exc, CopyFailed) else (
                f"{type(exc).__name__}: {exc}" if isinstance(exc, Exception) else
                f"cancelled ({type(exc).__name__})")
            failed_phase = self.phase
            self._cleanup(reason)
            await self._end_session(cancelling=not isinstance(exc, Exception))
            if isinstance(exc, CopyFailed) or not isinstance(exc, Exception):
                raise
            raise CopyFailed(self.tablet_id, failed_phase, reason) from exc

    def _cleanup(self, reason: str) -> None:
        """Inline, never awaiting: remove every downloaded file durably, then abort."""
        for sink in reversed(self.sinks):
            try:
                sink.discard()
            except Exception:
                logger.exception("tablet copy of %s: could not remove %s", self.tablet_id,
                                 sink.path)
        self.sinks.clear()
        try:
            if self.started:
                self.target.abort(reason)
        finally:
            self.phase = CopyPhase.FAILED
            self.report(error=reason)

    async def _end_session(self, *, cancelling: bool) -> None:
        if self.session is None:
            return
        session_id, self.session = self.session.session_id, None
        try:
            await self.source.end(session_id)
        except Exception as exc:  # best effort: the source expires idle sessions anyway
            logger.info("tablet copy of %s: ending session %s: %s", self.tablet_id, session_id,
                        exc)
        except BaseException:
            if not cancelling:
                raise  # a cancellation arriving now wins; the cleanup is already done

    async def _steps(self) -> CopyResult:
        """The seed's destination steps 1-5 in order, each durable (and reported through
        ``on_step``) before the next begins."""
        self.report()
        session = await self.source.begin()
        self.session = session
        remote_sb, remote_cmeta = self._check_session(session)
        self.total_bytes = sum(f.size for f in [*session.wal_segments, *session.blocks])
        self.files_total = len(session.wal_segments) + len(session.blocks)
        await self._begin_copying()
        merged = await self._merge_cmeta(remote_cmeta)
        last_opid = await self._download_wal(session, merged)
        await self._download_blocks(session)
        final = await self._mark_ready(remote_sb)
        return CopyResult(final, merged, last_opid, self.bytes_done, session.session_id,
                          session.source_uuid)

    async def _begin_copying(self) -> None:
        """Step 1: the superblock COPYING. From here a failure owes ``abort``, unless the
        target refused (CopyTargetError: by contract nothing was changed)."""
        self.started = True

        async def begin() -> None:
            try:
                await self._blocking(self.target.begin_copying)
            except CopyTargetError:
                self.started = False  # a refusal: by contract nothing was changed
                raise
            await self.on_step(CopyBegun())
        await self.durable(begin)
        self.report()

    async def _merge_cmeta(self, remote_cmeta: ConsensusMeta) -> ConsensusMeta:
        """Step 2: the source's cmeta merged into the local one, durably."""
        self.phase = CopyPhase.CMETA
        target = self.target

        async def merge() -> ConsensusMeta:
            local: ConsensusMeta | None = await self._blocking(target.local_cmeta)
            result: ConsensusMeta = await self._blocking(target.merge_cmeta, remote_cmeta)
            await self.on_step(CmetaMerged(local, remote_cmeta, result))
            return result
        merged: ConsensusMeta = await self.durable(merge)
        self.report()
        return merged

    async def _download_wal(self, session: CopySessionInfo,
                            merged: ConsensusMeta) -> OpId | None:
        """Step 3: every WAL segment downloaded, scanned and durable under its name; the
        WAL must end at the session's last OpId, in a term the merged cmeta has reached.
        Returns that last OpId."""
        self.phase = CopyPhase.WAL
        target = self.target
        segments = session.wal_segments
        wal_last: list[OpId | None] = [None]

        async def segment_done(position: int, info: FileInfo, sink: FileSink | None,
                               data: bytes) -> None:
            assert sink is not None  # a WAL segment is never reused
            sequence = int(SEGMENT_NAME.match(info.name).group(1))  # type: ignore[union-attr]
            try:
                scan = scan_segment(data, sink.path, tablet_id=self.tablet_id,
                                    sequence=sequence)
            except StorageError as exc:
                raise self.fail(f"downloaded WAL segment {info.name}: {exc}") from exc
            if scan.problem is not None:
                raise self.fail(f"downloaded WAL segment {info.name}: {scan.problem}")
            if scan.footer is None and position != len(segments) - 1:
                raise self.fail(f"downloaded WAL segment {info.name} is not closed")
            if scan.entries:
                wal_last[0] = scan.entries[-1].opid
            await self._blocking(sink.commit)

        async def new_segment(info: FileInfo) -> FileSink | None:
            sink: FileSink = await self._blocking(target.create_wal_segment, info.name)
            return sink
        await self._transfer("wal", segments, new_segment, segment_done)
        last_opid = wal_last[0]
        expected = None if session.last_opid is None else OpId(*session.last_opid)
        if last_opid != expected:
            raise self.fail(f"the downloaded WAL ends at {last_opid}, the source said {expected}")
        if last_opid is not None and last_opid.term > merged.current_term:
            raise self.fail(f"the WAL's last term {last_opid.term} is above the merged cmeta "
                            f"term {merged.current_term}")

        async def wal_done() -> None:
            await self._blocking(target.wal_downloaded, last_opid)
            await self.on_step(WalDownloaded(opid_pair(last_opid)))
        await self.durable(wal_done)
        self.current = None
        self.report()
        return last_opid

    async def _download_blocks(self, session: CopySessionInfo) -> None:
        """Step 4: every data block durable (one step each: PARTIAL), then all of them (a
        block already here with the identical contents is reused)."""
        self.phase = CopyPhase.BLOCKS
        target = self.target

        async def new_block(info: FileInfo) -> FileSink | None:
            sink: FileSink | None = await self._blocking(target.create_block, info)
            return sink  # None: the identical block is already here

        async def block_done(position: int, info: FileInfo, sink: FileSink | None,
                             data: bytes) -> None:
            if sink is not None:
                await self._blocking(sink.commit)

            async def step() -> None:
                await self._blocking(target.block_downloaded, info.name)
                await self.on_step(BlockDownloaded(info.name))
            await self.durable(step)
        await self._transfer("block", session.blocks, new_block, block_done)

        async def all_blocks() -> None:
            await self._blocking(target.blocks_done)
            await self.on_step(BlocksDone())
        await self.durable(all_blocks)
        self.current = None

    async def _mark_ready(self, remote_sb: Superblock) -> Superblock:
        """Step 5, the commit point: the superblock READY with the source's live blocks.
        Everything is local and durable: the session ends before it, so nothing that can
        fail or be cancelled follows it."""
        self.phase = CopyPhase.READY
        await self._end_session(cancelling=False)
        ready = attrs.evolve(remote_sb, data_state=DataState.READY, tombstone_last_opid=None,
                             quarantine_dir=None, orphaned_blocks=())

        async def commit() -> Superblock:
            done: Superblock = await self._blocking(self.target.mark_ready, ready)
            self.sinks.clear()  # committed: nothing to undo any more
            await self.on_step(MarkedReady())
            return done
        final: Superblock = await self.durable(commit)
        self.phase = CopyPhase.DONE
        self.report()
        return final

    def _check_session(self, session: CopySessionInfo) -> tuple[Superblock, ConsensusMeta]:
        """Decode and sanity-check what the source announced, before anything is written."""
        if session.tablet_id != self.tablet_id:
            raise self.fail(f"the source sent a session for tablet {session.tablet_id}")
        try:
            superblock = decode_superblock(session.superblock, path="<source superblock>")
            cmeta = decode_cmeta(session.cmeta, path="<source cmeta>")
        except StorageError as exc:
            raise self.fail(str(exc)) from exc
        if superblock.tablet_id != self.tablet_id or cmeta.tablet_id != self.tablet_id:
            raise self.fail("the source's superblock or cmeta names another tablet")
        if superblock.data_state is not DataState.READY:
            raise self.fail(f"the source's superblock is {superblock.data_state.value}")
        names = [b.name for b in session.blocks]
        if tuple(names) != superblock.live_blocks:
            raise self.fail(f"the session's blocks {names} are not the superblock's live "
                            f"blocks {list(superblock.live_blocks)}")
        sequences: list[int] = []
        for info in [*session.wal_segments, *session.blocks]:
            if info.size < 0:
                raise self.fail(f"file {info.name!r} has a negative size")
        for info in session.wal_segments:
            match = SEGMENT_NAME.match(info.name)
            if match is None:
                raise self.fail(f"bad WAL segment name {info.name!r}")
            sequences.append(int(match.group(1)))
        if sequences and sequences != list(range(sequences[0], sequences[0] + len(sequences))):
            raise self.fail(f"the WAL segments {sequences} are not consecutive")
        for name in names:
            try:
                validate_name(name)
            except StorageError as exc:
                raise self.fail(str(exc)) from exc
        if len(set(names)) != len(names):
            raise self.fail("the session lists a block twice")
        return superblock, cmeta

    async def _transfer(
        self,
        kind: FileKind,
        files: list[FileInfo],
        open_sink: Callable[[FileInfo], Awaitable[FileSink | None]],
        file_done: Callable[[int, FileInfo, FileSink | None, bytes], Awaitable[None]],
    ) -> None:
        """Download `files` in order: a producer opens each file's sink (`open_sink`; None:
        the file is already here) and keeps up to `window` FetchData in flight, across file
        boundaries; this task takes the answers in file order, verifies and writes each
        chunk (in a worker thread, so the next chunks arrive meanwhile), and calls
        `file_done(position, info, sink, data)` once a file is complete (`data`: the file's
        bytes for the WAL, which is scanned; b"" for a block, whose frame was verified as
        it arrived). Memory: at most `window` chunks are held at once."""
        assert self.session is not None
        send, receive = trio.open_memory_channel[_Item](math.inf)
        slots = trio.Semaphore(self.window)
        try:
            await self._consume(kind, files, open_sink, file_done, send, receive, slots)
        except BaseExceptionGroup as group:
            # Only this task raises (the producer and the fetches hand their errors over
            # in file order): give its exception back as itself, not wrapped by trio.
            if len(group.exceptions) == 1:
                raise group.exceptions[0] from None
            raise

    async def _consume(
        self,
        kind: FileKind,
        files: list[FileInfo],
        open_sink: Callable[[FileInfo], Awaitable[FileSink | None]],
        file_done: Callable[[int, FileInfo, FileSink | None, bytes], Awaitable[None]],
        send: trio.MemorySendChannel[_Item],
        receive: trio.MemoryReceiveChannel[_Item],
        slots: trio.Semaphore,
    ) -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._produce, kind, files, open_sink, send, slots, nursery)
            file: _FileDownload | None = None
            async with receive:
                async for item in receive:
                    if isinstance(item, Exception):
                        raise item
                    if isinstance(item, _FileDownload):
                        file = item
                        self.current = file.info.name
                        if file.sink is None:
                            self.bytes_done += file.info.size
                    elif isinstance(item, _Fetch):
                        assert file is not None and file.sink is not None
                        await self._take(kind, file, item)
                        slots.release()
                        self.report()
                    else:
                        assert file is not None and file.info is item.info
                        if file.verifier is not None:
                            try:
                                file.verifier.finish()
                            except StorageError as exc:
                                raise self.fail(f"downloaded {kind} file {file.info.name}: "
                                                f"{exc}") from exc
                        await file_done(item.position, file.info, file.sink,
                                        b"".join(file.kept))
                        self.files_done += 1
                        self.report()
                        file = None

    async def _produce(self, kind: FileKind, files: list[FileInfo],
                       open_sink: Callable[[FileInfo], Awaitable[FileSink | None]],
                       send: trio.MemorySendChannel[_Item], slots: trio.Semaphore,
                       nursery: trio.Nursery) -> None:
        # BrokenResourceError: the consumer stopped (it failed, or was cancelled): its
        # error is the news.
        with contextlib.suppress(trio.BrokenResourceError):
            await self._produce_files(kind, files, open_sink, send, slots, nursery)

    async def _produce_files(self, kind: FileKind, files: list[FileInfo],
                             open_sink: Callable[[FileInfo], Awaitable[FileSink | None]],
                             send: trio.MemorySendChannel[_Item], slots: trio.Semaphore,
                             nursery: trio.Nursery) -> None:
        async with send:
            for position, info in enumerate(files):
                try:
                    sink = await open_sink(info)
                except Exception as exc:  # raised by the consumer, in file order
                    await send.send(exc)
                    return
                if sink is not None:
                    self.sinks.append(sink)  # discarded on failure from now on
                verifier = block_verifier(sink.path) if sink is not None and \
                    kind == "block" else None
                await send.send(_FileDownload(info, position, sink, verifier))
                if sink is not None:
                    for offset in range(0, info.size, self.chunk_size):
                        await slots.acquire()
                        fetch = _Fetch(self._request(kind, info, offset))
                        nursery.start_soon(self._fetch_into, fetch)
                        await send.send(fetch)
                await send.send(_FileEnd(info, position))

    async def _fetch_into(self, fetch: _Fetch) -> None:
        try:
            fetch.chunk = await self.source.fetch(fetch.request)
        except Exception as exc:  # raised in file order by the consumer (_take)
            fetch.error = exc
        finally:
            fetch.done.set()

    async def _take(self, kind: FileKind, file: _FileDownload, fetch: _Fetch) -> None:
        """Verify and write one answer (asking again while it is refused)."""
        await fetch.done.wait()
        if fetch.error is not None:
            raise fetch.error
        assert fetch.chunk is not None and file.sink is not None
        request, chunk = fetch.request, fetch.chunk
        try:
            problem: str = await self._blocking(_verify_and_write, file, chunk, request)
            if problem:
                chunk = await self._fetch_chunk(kind, file.info, request.offset,
                                                first_try=chunk, problem=problem)
                await self._blocking(_verify_and_write, file, chunk, request)
        except StorageError as exc:  # the frame's header is wrong: the file is bad
            raise self.fail(f"downloaded {kind} file {file.info.name}: {exc}") from exc
        if kind == "wal":
            file.kept.append(chunk.data)
        self.bytes_done += len(chunk.data)

    def _request(self, kind: FileKind, info: FileInfo, offset: int) -> FetchData:
        assert self.session is not None
        return FetchData(self.session.session_id, kind, info.name, offset,
                         min(self.chunk_size, info.size - offset))

    async def _fetch_chunk(self, kind: FileKind, info: FileInfo, offset: int, *,
                           first_try: DataChunk, problem: str) -> DataChunk:
        """Ask again (at most max_chunk_retries times) for a chunk whose answer `first_try`
        was refused for `problem`; the verified answer."""
        request = self._request(kind, info, offset)
        for _ in range(self.max_chunk_retries):
            self.retries += 1
            logger.warning("tablet copy of %s: refused chunk of %s at %d (%s); retrying",
                           self.tablet_id, info.name, offset, problem)
            chunk = await self.source.fetch(request)
            problem = _chunk_problem(chunk, info, offset, request.max_length)
            if not problem:
                return chunk
        raise self.fail(f"{kind} file {info.name} at offset {offset}: {problem} "
                        f"({self.max_chunk_retries + 1} attempts)")


@attrs.define
class _FileDownload:
    """A file the consumer is writing: its sink (None: reused), the streaming check of a
    block's frame, and the bytes kept of a WAL segment."""

    info: FileInfo
    position: int
    sink: FileSink | None
    verifier: FrameVerifier | None
    kept: list[bytes] = attrs.Factory(list)


@attrs.define(eq=False)
class _Fetch:
    """One FetchData in flight; `done` is set once `chunk` or `error` is there."""

    request: FetchData
    chunk: DataChunk | None = None
    error: Exception | None = None
    done: trio.Event = attrs.Factory(trio.Event)


@attrs.frozen
class _FileEnd:
    info: FileInfo
    position: int


_Item = _FileDownload | _Fetch | _FileEnd | Exception  # Exception: the producer failed


def _verify_and_write(file: _FileDownload, chunk: DataChunk, request: FetchData) -> str:
    """(A worker thread.) Check the chunk; if it is good write it and feed the block's
    frame check. Returns the problem ("" when written). zlib's CRC releases the GIL."""
    problem = _chunk_problem(chunk, file.info, request.offset, request.max_length)
    if problem:
        return problem
    assert file.sink is not None
    file.sink.write(chunk.offset, chunk.data)
    if file.verifier is not None:
        file.verifier.feed(chunk.data)
    return ""


def _chunk_problem(chunk: DataChunk, info: FileInfo, offset: int, asked: int) -> str:
    if chunk.offset != offset:
        return f"chunk is at offset {chunk.offset}"
    if chunk.total_length != info.size:
        return f"total length {chunk.total_length}, the session said {info.size}"
    if not 0 < len(chunk.data) <= asked:
        return f"chunk of {len(chunk.data)} bytes (asked for {asked})"
    if zlib.crc32(chunk.data) != chunk.crc32:
        return "chunk checksum mismatch"
    return ""


# --------------------------------------------------------------------------- the local target


class LocalFileSink:
    """`FileSink` on a Disk: `<path>.tmp.new`, then fsync + rename + fsync of the directory.

    Leftover temp names (a crash) are removed by recovery (WAL) and `remove_stale_temps`
    (data/); they are never read as real files.
    """

    def __init__(self, disk: Disk, path: str) -> None:
        self._disk = disk
        self._path = path
        self._temp = temp_path_for(path)
        self._handle: DiskFile | None = disk.open(self._temp, create=True)
        self._handle.truncate(0)
        self._committed = False
        self._discarded = False

    @property
    def path(self) -> str:
        return self._path

    def _open(self) -> DiskFile:
        if self._handle is None:
            raise ValueError(f"{self._path}: sink is closed")
        return self._handle

    def write(self, offset: int, data: bytes) -> None:
        self._open().pwrite(offset, data)

    def read_all(self) -> bytes:
        handle = self._open()
        return handle.pread(0, handle.size())

    def commit(self) -> None:
        handle = self._open()
        handle.fsync()
        handle.close()
        self._handle = None
        self._disk.rename(self._temp, self._path)
        self._disk.fsync_dir(parent_of(self._path))
        self._committed = True

    def discard(self) -> None:
        if self._discarded:
            return
        if self._handle is not None:
            self._handle.close()
            self._handle = None
        victim = self._path if self._committed else self._temp
        if self._disk.exists(victim):
            self._disk.unlink(victim)
        self._disk.fsync_dir(parent_of(victim))
        self._discarded = True


class LocalCopyTarget:
    """`CopyTarget` on a server layout: the durable steps with the storage primitives.

    * begin_copying: refuses a READY replica (delete it first) and a WAL directory holding
      segments (a tombstone's WAL was moved into its quarantine directory); with no
      superblock (the tablet does not exist here), first removes what a CreateTablet cut
      before its superblock left (orphans.py: the copy starts from no cmeta); otherwise writes
      the superblock COPYING, keeping the tombstone's last OpId (and table name and schema)
      and clearing the quarantine pointer and any block lists (a stale replica's leftover
      block files become unreferenced: the sweeper's business), then creates the WAL
      directory durably (removing leftover temp files in it).
    * merge_cmeta: `merge.merge_cmeta` with the local cmeta, atomically replaced.
    * files: `LocalFileSink` in the tablet's WAL directory and in data/; a block file that
      exists already is reused if it is identical (size and CRC-32), else refused.
    * mark_ready: the READY superblock, atomically replaced (the commit point).
    * the hooks (wal_downloaded, block_downloaded, blocks_done, abort) change nothing on
      disk; `abort` records its reason. Subclass or wrap them to trace each step.
    """

    def __init__(
        self,
        layout: ServerLayout,
        metadata: MetadataStore,
        tablet_id: str,
        disk: Disk | None = None,
    ) -> None:
        self.layout = layout
        self.metadata = metadata
        self._tablet_id = validate_name(tablet_id)
        self.disk = disk if disk is not None else layout.disk
        self.wal_dir = layout.wal_dir(tablet_id)
        self.abort_reason: str | None = None

    @property
    def tablet_id(self) -> str:
        return self._tablet_id

    def begin_copying(self) -> None:
        local = self.metadata.load_superblock(self._tablet_id)
        if local is not None and local.data_state is DataState.READY:
            raise CopyTargetError(f"tablet {self._tablet_id} is READY here: delete it first")
        if local is None:
            # No replica here: the copy starts from no cmeta (and no WAL). A cmeta or a WAL
            # directory without a superblock is a CreateTablet's that never committed:
            # never merged (orphans.py says why), removed before the COPYING superblock.
            removed = discard_uncommitted_create(self.layout, self.metadata, self._tablet_id)
            if removed:
                logger.warning("tablet %s: a copy into no replica removed what a CreateTablet "
                               "cut before its superblock left: %s", self._tablet_id,
                               ", ".join(removed))
        if self.disk.is_dir(self.wal_dir):
            names = self.disk.listdir(self.wal_dir)
            real = [n for n in names if not is_temp_name(n)]
            if real:
                raise CopyTargetError(f"WAL directory {self.wal_dir} is not empty: {real}")
        copying = Superblock(
            self._tablet_id,
            DataState.COPYING,
            tombstone_last_opid=None if local is None else local.tombstone_last_opid,
            table_name="" if local is None else local.table_name,
            schema=() if local is None else local.schema,
        )
        self.metadata.write_superblock(copying)
        if self.disk.is_dir(self.wal_dir):
            temps = [n for n in self.disk.listdir(self.wal_dir) if is_temp_name(n)]
            for name in temps:
                self.disk.unlink(posixpath.join(self.wal_dir, name))
            if temps:
                self.disk.fsync_dir(self.wal_dir)
        else:
            makedirs_durably(self.disk, self.wal_dir)

    def local_cmeta(self) -> ConsensusMeta | None:
        return self.metadata.load_cmeta(self._tablet_id)

    def merge_cmeta(self, remote: ConsensusMeta) -> ConsensusMeta:
        merged = merge_cmeta(self.metadata.load_cmeta(self._tablet_id), remote)
        self.metadata.write_cmeta(merged)
        return merged

    def create_wal_segment(self, name: str) -> FileSink:
        if SEGMENT_NAME.match(name) is None:
            raise CopyTargetError(f"bad WAL segment name {name!r}")
        path = posixpath.join(self.wal_dir, name)
        if self.disk.exists(path):
            raise CopyTargetError(f"{path} exists already")
        return LocalFileSink(self.disk, path)

    def wal_downloaded(self, last_opid: OpId | None) -> None:
        pass

    def create_block(self, info: FileInfo) -> FileSink | None:
        path = posixpath.join(self.layout.data_dir, validate_name(info.name))
        if self.disk.exists(path):
            # A block id names one immutable block (128 random bits, never reused): a file
            # under it of the same size that verifies and holds that id is that block (a
            # copy retried after a crash), kept rather than fetched again. Anything else is
            # refused, never overwritten.
            data = self.disk.read_file(path)
            if len(data) != info.size:
                raise CopyTargetError(f"block file {path} exists with other contents "
                                      f"({len(data)} bytes, the source's has {info.size})")
            try:
                decode_block(data, path=path, block_id=info.name)
            except StorageError as exc:
                raise CopyTargetError(f"block file {path} exists and is not block "
                                      f"{info.name}: {exc}") from None
            return None
        return LocalFileSink(self.disk, path)

    def block_downloaded(self, block_id: str) -> None:
        pass

    def blocks_done(self) -> None:
        pass

    def mark_ready(self, superblock: Superblock) -> Superblock:
        if superblock.tablet_id != self._tablet_id or superblock.data_state is not \
                DataState.READY:
            raise CopyTargetError(f"mark_ready needs a READY superblock of {self._tablet_id}")
        self.metadata.write_superblock(superblock)
        return superblock

    def abort(self, reason: str) -> None:
        self.abort_reason = reason


__all__ = [
    "Blocking", "CopyFailed", "CopyPhase", "CopyProgress", "CopyResult", "CopySource",
    "CopyTarget", "CopyTargetError", "FileSink", "LocalCopyTarget", "LocalFileSink",
    "run_copy",
]
