"""The write-ahead log: checksummed segments, group commit, preallocation, recovery, GC.

Seed 003 ("The write ahead log (WAL)") is the contract:

1. Reservation order is durable order. `Log.reserve()` is synchronous (so calls made in
   some order are reserved in that order) and appends the batch to one pending queue; a
   single appender task is the only consumer of the queue, so it writes batches to the file
   in reservation order.
2. With fsync on, an append is acknowledged (its `Reservation.wait()` returns) only after the
   bytes holding it, and every batch reserved before it, were written and synced.

Group commit: the appender takes *every* pending batch at once, writes them with one write
and one sync (fdatasync while the write ends inside the preallocated region, whose size is
already durable; fsync beyond it), then wakes every waiter (one event per group, shared by
its reservations). Throughput therefore scales with the number of concurrent writers at
nearly constant latency. The appender's blocking I/O
(each group's write + sync, segment switches) runs in one long-lived OS thread owned by the
log (`_AppenderThread`), so waiters keep queueing while the disk syncs: a job goes to it
through a queue and its outcome comes back by rescheduling the appender task with the trio
token. That costs one thread wake-up each way per group, less than a `trio.to_thread.run_sync`
per group (thread cache, capacity limiter, context copy), which matters for one writer,
whose rate is one group per sync. With fsync off (`LogOptions(fsync=False)`, a benchmark's
setting) a group's write only copies into the page cache, so it runs inline in trio.
Rarer I/O (preparing the next segment, GC, reads, close) still runs in trio worker threads,
so preparing a segment never delays a group commit.
With `LogOptions(use_threads=False)` every disk call runs inline (deterministic SimDisk tests).

Segment file `wals/<tablet-id>/wal-<sequence:09d>`, a sequence of codec frames::

    header   b"RVWH"  SegmentHeader(tablet_id, sequence)          durable before the name is
    batch    b"RVWB"  [(term, index, payload), ...]  one per reservation
    ...
    footer   b"RVWF"  SegmentFooter(entry_count, min_index, max_index, batches_crc)

A segment is *closed* when it ends with a valid footer (and nothing after it); only the last
segment may be unclosed. Rollover: once the active segment reaches `segment_size`, the next
one is prepared in the background (temp name `<name>.tmp.new`: create, preallocate, write the
header, fsync) while appends continue; then the appender closes the active segment (truncate
the unused preallocated space, write the footer, fsync) and only then renames the prepared
file into place and fsyncs the directory. Hence "only the last segment is unclosed" holds in
every crash state.

Entries are Raft entries: an entry with index i written after entries with index >= i
replaces them (a follower's log truncation), exactly as Kudu replays its log; an index may
never skip ahead (index <= previous + 1).

Recovery (`recover_log`, run by `open_log`) first verifies everything and only then changes
anything:
* in the last, unclosed segment, bytes after the last valid batch that are zeros
  (preallocated space) or a torn batch (truncated, bad checksum) with no valid frame after
  it are a torn tail: truncated and reported (`RecoveryReport.torn_tail`);
* anything else (a valid batch after a bad one, a bad or unclosed non-last segment, a
  missing sequence number, a header naming another tablet) raises WalCorrupt with path,
  offset and reason, and nothing is modified or deleted: the tablet stays offline.
The recovered last segment is then closed with a footer and a fresh segment is started.

GC: `Log.gc(up_to_index)` deletes closed segments, oldest first and only as a prefix, whose
entries all lie below min(up_to_index, every retention anchor, the last index): a tablet
copy session holds a `LogAnchor` so the segments it streams stay. The segment holding the
last entry is never deleted, so `last_opid` survives any crash.
"""

from __future__ import annotations

import functools
import itertools
import posixpath
import queue
import re
import threading
import time
import zlib
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import attrs
import msgspec
import outcome
import trio

from revivify.impl.observe.metrics import OFF, WalMetrics

from .codec import Frame, decode_frame, decode_payload, encode_frame, encode_value
from .disk import Disk, DiskFile, is_temp_name, makedirs_durably, temp_path_for
from .errors import (
    CorruptionKind,
    CorruptRecord,
    LogClosed,
    LogFailed,
    LogNotFound,
    StorageError,
    WalCorrupt,
)
from .values import OpId

HEADER_MAGIC = b"RVWH"
BATCH_MAGIC = b"RVWB"
FOOTER_MAGIC = b"RVWF"
FORMAT_VERSION = 1
SEGMENT_NAME = re.compile(r"^wal-(\d{9})$")

T = TypeVar("T")


def segment_name(sequence: int) -> str:
    return f"wal-{sequence:09d}"


@attrs.frozen
class LogEntry:
    """One Raft log entry."""

    term: int
    index: int
    payload: bytes

    @property
    def opid(self) -> OpId:
        return OpId(self.term, self.index)


@attrs.frozen
class SegmentHeader:
    tablet_id: str
    sequence: int


@attrs.frozen
class SegmentFooter:
    entry_count: int
    min_index: int | None
    max_index: int | None
    batches_crc: int


@attrs.frozen
class SegmentInfo:
    """What the log knows about one segment without re-reading it."""

    sequence: int
    path: str
    entry_count: int
    min_index: int | None
    max_index: int | None
    closed: bool


@attrs.frozen
class TornTail:
    """The unsynced end of the last segment that recovery cut off."""

    path: str
    offset: int  # where the valid data ends (the new file size)
    dropped_bytes: int
    reason: str


@attrs.frozen
class RecoveryReport:
    segments: tuple[SegmentInfo, ...]
    torn_tail: TornTail | None
    removed_temp_files: tuple[str, ...]
    last_opid: OpId | None
    created: bool  # the WAL directory was created empty


@attrs.frozen
class LogOptions:
    segment_size: int = 8 * 1024 * 1024  # roll over once the active segment reaches this
    preallocate: bool = True  # reserve segment_size bytes for each new segment
    # Preallocate by writing zeros (True) rather than fallocate (False). On ext4, fallocate
    # leaves *unwritten* extents: the first write into each block must convert it, which
    # makes fdatasync commit the journal like fsync. Zero-filled blocks are already
    # written, so fdatasync inside them only flushes data (what Kudu's design assumes).
    zero_fill: bool = True
    fsync: bool = True  # False: acknowledge after write(), no sync (bench comparison)
    # True: the appender's I/O runs in the log's own appender thread, other I/O in trio
    # worker threads. False: run every disk call inline (deterministic SimDisk tests).
    use_threads: bool = True


# --------------------------------------------------------------------------- scanning

_BatchWire = list[tuple[int, int, bytes]]


@attrs.frozen
class ScannedSegment:
    """A segment read and verified up to its first problem."""

    path: str
    header: SegmentHeader
    entries: tuple[LogEntry, ...]
    footer: SegmentFooter | None
    data_end: int  # offset just after the last valid batch
    file_size: int
    problem: CorruptRecord | None  # the first frame after data_end that did not verify
    tail_is_zeros: bool
    batches_crc: int  # crc32 over the bytes of every valid batch frame, in order

    def info(self, sequence: int) -> SegmentInfo:
        indexes = [e.index for e in self.entries]
        return SegmentInfo(
            sequence=sequence,
            path=self.path,
            entry_count=len(self.entries),
            min_index=min(indexes) if indexes else None,
            max_index=max(indexes) if indexes else None,
            closed=self.footer is not None,
        )


def _wal_error(exc: CorruptRecord) -> WalCorrupt:
    return WalCorrupt(exc.path, exc.offset, exc.reason, exc.kind)


def encode_batch(entries: Sequence[LogEntry]) -> bytes:
    wire = [(e.term, e.index, e.payload) for e in entries]
    return encode_frame(BATCH_MAGIC, FORMAT_VERSION, msgspec.msgpack.encode(wire))


def _decode_batch(frame: Frame, path: str) -> list[LogEntry]:
    wire = decode_payload(frame, _BatchWire, path=path)
    if not wire:
        raise CorruptRecord(path, frame.offset, "empty batch", CorruptionKind.INCONSISTENT)
    entries = [LogEntry(term, index, payload) for term, index, payload in wire]
    for previous, entry in itertools.pairwise(entries):
        if entry.index != previous.index + 1:
            raise CorruptRecord(
                path,
                frame.offset,
                f"batch indexes not consecutive ({previous.index} then {entry.index})",
                CorruptionKind.INCONSISTENT,
            )
    for entry in entries:
        if entry.index < 1 or entry.term < 0:
            raise CorruptRecord(
                path, frame.offset, f"invalid opid {entry.opid}", CorruptionKind.INCONSISTENT
            )
    return entries


def scan_segment(
    data: bytes, path: str, *, tablet_id: str | None = None, sequence: int | None = None
) -> ScannedSegment:
    """Verify `data` (a whole segment file). Header, footer and checksum problems inside
    verified frames raise WalCorrupt; the first frame that fails to verify ends the scan and
    is returned as `problem` for the caller to judge (torn tail or corruption)."""
    try:
        head = decode_frame(data, 0, path=path, magics=frozenset({HEADER_MAGIC}))
        header = decode_payload(head, SegmentHeader, path=path)
    except CorruptRecord as exc:
        raise _wal_error(exc) from None
    if tablet_id is not None and header.tablet_id != tablet_id:
        raise WalCorrupt(path, 0, f"header names tablet {header.tablet_id!r}, not {tablet_id!r}")
    if sequence is not None and header.sequence != sequence:
        raise WalCorrupt(path, 0, f"header has sequence {header.sequence}, name says {sequence}")
    entries: list[LogEntry] = []
    crc = 0
    offset = head.end
    footer: SegmentFooter | None = None
    problem: CorruptRecord | None = None
    magics = frozenset({BATCH_MAGIC, FOOTER_MAGIC})
    while offset < len(data):
        try:
            frame = decode_frame(data, offset, path=path, magics=magics)
        except CorruptRecord as exc:
            problem = exc
            break
        if frame.magic == FOOTER_MAGIC:
            try:
                footer = decode_payload(frame, SegmentFooter, path=path)
            except CorruptRecord as exc:
                raise _wal_error(exc) from None
            _check_footer(path, frame, footer, entries, crc)
            if frame.end != len(data):
                raise WalCorrupt(
                    path,
                    frame.end,
                    f"{len(data) - frame.end} bytes after the footer",
                    CorruptionKind.TRAILING_DATA,
                )
            break
        try:
            batch = _decode_batch(frame, path)
        except CorruptRecord as exc:
            raise _wal_error(exc) from None
        entries.extend(batch)
        crc = zlib.crc32(data[frame.offset : frame.end], crc)
        offset = frame.end
    # (bytes.count runs in C; any() over a bytes slice walks it one Python int at a time)
    tail_is_zeros = problem is not None and data.count(0, offset) == len(data) - offset
    return ScannedSegment(
        path=path,
        header=header,
        entries=tuple(entries),
        footer=footer,
        data_end=offset,
        file_size=len(data),
        problem=problem,
        tail_is_zeros=tail_is_zeros,
        batches_crc=crc,
    )


def _check_footer(
    path: str, frame: Frame, footer: SegmentFooter, entries: list[LogEntry], crc: int
) -> None:
    indexes = [e.index for e in entries]
    expected = SegmentFooter(
        entry_count=len(entries),
        min_index=min(indexes) if indexes else None,
        max_index=max(indexes) if indexes else None,
        batches_crc=crc,
    )
    if footer != expected:
        raise WalCorrupt(
            path, frame.offset, f"footer {footer} does not match the segment's batches {expected}"
        )


def _valid_frame_after(data: bytes, start: int, path: str) -> int | None:
    """Offset of the first verifiable batch or footer frame at or after `start`, if any."""
    magics = frozenset({BATCH_MAGIC, FOOTER_MAGIC})
    candidates: list[int] = []
    for magic in magics:
        position = data.find(magic, start)
        while position != -1:
            candidates.append(position)
            position = data.find(magic, position + 1)
    for position in sorted(candidates):
        try:
            decode_frame(data, position, path=path, magics=magics)
        except CorruptRecord:
            continue
        return position
    return None


# --------------------------------------------------------------------------- recovery


@attrs.frozen
class _Verified:
    infos: list[SegmentInfo]
    last: ScannedSegment | None
    temps: list[str]
    last_opid: OpId | None


def _verify_log(disk: Disk, wal_dir: str, tablet_id: str) -> _Verified:
    """Read and verify every segment; raise WalCorrupt on anything a crash cannot cause."""
    sequences: list[int] = []
    temps: list[str] = []
    for name in disk.listdir(wal_dir):
        match = SEGMENT_NAME.match(name)
        if match:
            sequences.append(int(match.group(1)))
        elif is_temp_name(name):
            temps.append(posixpath.join(wal_dir, name))
        else:
            raise WalCorrupt(posixpath.join(wal_dir, name), 0, "unexpected file in WAL directory")
    sequences.sort()
    for previous, current in itertools.pairwise(sequences):
        if current != previous + 1:
            raise WalCorrupt(
                posixpath.join(wal_dir, segment_name(previous + 1)),
                0,
                f"segment missing between {previous} and {current}",
            )
    infos: list[SegmentInfo] = []
    last_scan: ScannedSegment | None = None
    last_entry: LogEntry | None = None
    for position, sequence in enumerate(sequences):
        path = posixpath.join(wal_dir, segment_name(sequence))
        data = disk.read_file(path)
        scan = scan_segment(data, path, tablet_id=tablet_id, sequence=sequence)
        is_last = position == len(sequences) - 1
        if scan.problem is not None:
            if not is_last:
                raise _wal_error(scan.problem)
            if not scan.tail_is_zeros:
                later = _valid_frame_after(data, scan.data_end + 1, path)
                if later is not None:
                    raise WalCorrupt(
                        path,
                        scan.problem.offset,
                        f"{scan.problem.reason}, yet a valid record follows at offset {later}",
                        scan.problem.kind,
                    )
        elif scan.footer is None and not is_last:
            raise WalCorrupt(path, scan.data_end, "segment is not closed but is not the last")
        for entry in scan.entries:
            if last_entry is not None and entry.index > last_entry.index + 1:
                raise WalCorrupt(path, 0, f"index gap: {entry.index} follows {last_entry.index}")
            last_entry = entry
        infos.append(scan.info(sequence))
        last_scan = scan if is_last else None
    return _Verified(
        infos=infos,
        last=last_scan,
        temps=temps,
        last_opid=last_entry.opid if last_entry is not None else None,
    )


def recover_log(
    disk: Disk, wal_dir: str, tablet_id: str, *, create_if_missing: bool = False
) -> RecoveryReport:
    """Verify the WAL, then truncate a torn tail, close the last segment, drop temp files.

    Raises WalCorrupt (and modifies nothing) when verification fails.
    """
    if not disk.is_dir(wal_dir):
        if not create_if_missing:
            raise LogNotFound(wal_dir)
        makedirs_durably(disk, wal_dir)
        return RecoveryReport((), None, (), None, created=True)
    verified = _verify_log(disk, wal_dir, tablet_id)
    torn: TornTail | None = None
    infos = list(verified.infos)
    last = verified.last
    if last is not None and last.footer is None:
        handle = disk.open(last.path)
        try:
            if last.file_size > last.data_end:
                if last.tail_is_zeros or last.problem is None:
                    reason = "preallocated zeros after the last batch"
                else:
                    assert last.problem is not None
                    reason = f"torn batch: {last.problem.reason}"
                torn = TornTail(last.path, last.data_end, last.file_size - last.data_end, reason)
                handle.truncate(last.data_end)
                handle.fsync()  # the cut is durable before a footer may follow it
            info = infos[-1]
            footer = SegmentFooter(
                info.entry_count, info.min_index, info.max_index, last.batches_crc
            )
            handle.pwrite(last.data_end, encode_value(FOOTER_MAGIC, FORMAT_VERSION, footer))
            handle.fsync()
        finally:
            handle.close()
        infos[-1] = attrs.evolve(infos[-1], closed=True)
    for temp in verified.temps:
        disk.unlink(temp)
    if verified.temps:
        disk.fsync_dir(wal_dir)
    return RecoveryReport(
        segments=tuple(infos),
        torn_tail=torn,
        removed_temp_files=tuple(verified.temps),
        last_opid=verified.last_opid,
        created=False,
    )


def salvage_last_opid(disk: Disk, wal_dir: str) -> OpId | None:
    """The last OpId a WAL that fails verification still records, read past the damage.

    For a tablet whose WAL is damaged (``recover_log`` raised WalCorrupt): the newest
    segment's last batch frame that still verifies (frames carry their own checksums, so a
    corrupt frame in the middle does not hide the ones after it). Never modifies anything.
    None if no batch anywhere verifies. Used to report a damaged replica's last OpId.
    """
    sequences = sorted(int(m.group(1)) for m in map(SEGMENT_NAME.match, disk.listdir(wal_dir))
                       if m)
    magics = frozenset({BATCH_MAGIC})
    for sequence in reversed(sequences):
        path = posixpath.join(wal_dir, segment_name(sequence))
        try:
            data = disk.read_file(path)
        except OSError:
            continue
        position = data.rfind(BATCH_MAGIC)
        while position != -1:
            try:
                batch = _decode_batch(decode_frame(data, position, path=path, magics=magics),
                                      path)
            except CorruptRecord:
                position = data.rfind(BATCH_MAGIC, 0, position)
                continue
            if batch:
                return batch[-1].opid
            position = data.rfind(BATCH_MAGIC, 0, position)
    return None


def read_log_entries(
    disk: Disk, wal_dir: str, tablet_id: str, from_index: int = 1
) -> list[LogEntry]:
    """The effective log from `from_index` (later entries replace earlier ones at >= index).

    Reads an offline WAL (e.g. a quarantined one); a live Log uses `Log.read_entries`.
    """
    verified = _verify_log(disk, wal_dir, tablet_id)
    return _effective_entries(disk, verified.infos, from_index, {})


def _effective_entries(
    disk: Disk, infos: Sequence[SegmentInfo], from_index: int, limits: dict[int, int]
) -> list[LogEntry]:
    start = 0
    for position, info in enumerate(infos):
        if info.max_index is not None and info.max_index >= from_index:
            start = position
            break
    else:
        return []
    log: list[LogEntry] = []
    for info in infos[start:]:
        data = disk.read_file(info.path)
        limit = limits.get(info.sequence)
        if limit is not None:
            data = data[:limit]
        scan = scan_segment(data, info.path)
        for entry in scan.entries:
            while log and log[-1].index >= entry.index:
                log.pop()
            if entry.index >= from_index:
                log.append(entry)
    return log


# --------------------------------------------------------------------------- the live log


class _Group:
    """The completion shared by every reservation taken into one group commit."""

    __slots__ = ("done", "error")

    def __init__(self) -> None:
        self.done = trio.Event()
        self.error: StorageError | None = None

    def fail(self, error: StorageError) -> None:
        self.error = error
        self.done.set()


class Reservation:
    """A batch's place in the durable order; `await wait()` returns once it is durable."""

    __slots__ = ("_group", "frame", "last_opid", "max_index", "min_index")

    def __init__(self, frame: bytes, entries: Sequence[LogEntry], group: _Group) -> None:
        # `entries` holds consecutive indexes (checked by Log.reserve)
        self.frame = frame
        self.min_index = entries[0].index
        self.max_index = entries[-1].index
        self.last_opid = entries[-1].opid
        self._group = group

    async def wait(self) -> OpId:
        group = self._group
        await group.done.wait()
        if group.error is not None:
            raise group.error
        return self.last_opid


class LogAnchor:
    """Pins every segment holding entries with index >= `index` against GC until released."""

    def __init__(self, log: Log, index: int, owner: str) -> None:
        self._log = log
        self.index = index
        self.owner = owner

    def update(self, index: int) -> None:
        self.index = index

    def release(self) -> None:
        self._log._anchors.discard(self)

    def __enter__(self) -> LogAnchor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


_Job = tuple[Callable[[], Any], trio.lowlevel.Task]


def _wait_for_job(_: Any) -> trio.lowlevel.Abort:
    return trio.lowlevel.Abort.FAILED  # a started job runs to completion; wait for it


class _AppenderThread:
    """The log's long-lived OS thread for the appender task's blocking I/O.

    `run(fn, *args)` queues the call and parks the calling task; the thread runs jobs one at
    a time in queue order and hands each outcome back by rescheduling the parked task through
    the trio token. Like `trio.to_thread.run_sync`, a started job is not abandoned on
    cancellation: the task waits for it (the bytes may already be on disk). Errors raised by
    the job are re-raised in the task (the appender turns them into LogFailed). `stop()` ends
    the thread once the jobs queued before it are done.
    """

    def __init__(self, name: str) -> None:
        self._token = trio.lowlevel.current_trio_token()
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)
        self._stopped = False
        self._thread.start()

    @property
    def name(self) -> str:
        return self._thread.name

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        if self._stopped or not self._thread.is_alive():
            raise RuntimeError(f"{self.name} is not running")
        self._jobs.put((functools.partial(fn, *args), trio.lowlevel.current_task()))
        result: T = await trio.lowlevel.wait_task_rescheduled(_wait_for_job)  # unwraps it
        return result

    async def stop(self) -> None:
        if not self._stopped:
            self._stopped = True
            self._jobs.put(None)
        if self._thread.is_alive():
            await trio.to_thread.run_sync(self._thread.join)

    def _main(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            fn, task = job
            result = outcome.capture(fn)
            try:
                self._token.run_sync_soon(trio.lowlevel.reschedule, task, result)
            except trio.RunFinishedError:
                return  # the trio run is gone; nobody is left to wake


@attrs.define
class _ActiveSegment:
    sequence: int
    path: str
    file: DiskFile
    end: int  # bytes written (all durable once the group that wrote them completes)
    allocated: int  # preallocated size made durable by the segment's creating fsync
    entry_count: int = 0
    min_index: int | None = None
    max_index: int | None = None
    batches_crc: int = 0

    def info(self, closed: bool) -> SegmentInfo:
        return SegmentInfo(
            self.sequence, self.path, self.entry_count, self.min_index, self.max_index, closed
        )


class Log:
    """A tablet's live WAL. Create with `open_log` (an async context manager)."""

    def __init__(
        self, disk: Disk, wal_dir: str, tablet_id: str, options: LogOptions, report: RecoveryReport,
        metrics: WalMetrics | None = None,
    ) -> None:
        self.disk = disk
        # Counted once per group (never per entry): the server's families, shared by its
        # tablets' logs (bound when the server starts, so a group costs no label lookup).
        self.metrics = metrics if metrics is not None else OFF.wal
        self.wal_dir = wal_dir
        self.tablet_id = tablet_id
        self.options = options
        self.recovery = report
        self._closed_segments: list[SegmentInfo] = list(report.segments)
        self._active: _ActiveSegment | None = None
        self._pending: list[Reservation] = []
        self._pending_group = _Group()  # completes every reservation in _pending at once
        self._work = trio.Event()
        self._last_opid = report.last_opid
        self._last_reserved_index = report.last_opid.index if report.last_opid else None
        self._anchors: set[LogAnchor] = set()
        self._closing = False
        self._failure: LogFailed | None = None
        self._next: _ActiveSegment | None = None
        self._preparing = False
        self._prepared = trio.Event()
        self._appender_done = trio.Event()
        self._thread: _AppenderThread | None = None
        self._writing = False  # a group is being written (by the appender or an append())

    # ------------------------------------------------------------------ public API

    @property
    def last_opid(self) -> OpId | None:
        """The last durable OpId (None for an empty log)."""
        return self._last_opid

    def reserve(self, entries: Sequence[LogEntry]) -> Reservation:
        """Take the next place in the durable order (synchronous; serializes the batch)."""
        reservation = self._reserve(entries)
        self._work.set()
        return reservation

    def _reserve(self, entries: Sequence[LogEntry]) -> Reservation:
        if self._failure is not None:
            raise self._failure
        if self._closing:
            raise LogClosed(self.tablet_id)
        if not entries:
            raise ValueError("empty batch")
        first = entries[0].index
        if first < 1:
            raise ValueError(f"index {first} < 1")
        if self._last_reserved_index is not None and first > self._last_reserved_index + 1:
            raise ValueError(f"index {first} skips ahead of {self._last_reserved_index}")
        for previous, entry in itertools.pairwise(entries):
            if entry.index != previous.index + 1:
                raise ValueError("batch indexes must be consecutive")
        reservation = Reservation(encode_batch(entries), entries, self._pending_group)
        self._last_reserved_index = entries[-1].index
        self._pending.append(reservation)
        return reservation

    async def append(self, entries: Sequence[LogEntry]) -> OpId:
        """Reserve and wait until durable; returns the batch's last OpId.

        The caller writes its group itself when it is the only reservation pending and no
        group is being written: the same write through the same appender thread, in the
        same order, minus two scheduling rounds (waking the appender task, then being
        woken by it), which a replica driver, one append at a time, paid on every step."""
        reservation = self._reserve(entries)
        active = self._active
        if (self._writing or len(self._pending) != 1 or self._closing or active is None
                or active.end >= self.options.segment_size):  # (a roll-over: the task's job)
            self._work.set()
            return await reservation.wait()
        group, completion = self._take_pending()
        self._writing = True
        try:
            # As in the appender task: a group once started is finished, so its waiters
            # (here, this caller) are always answered, even when the caller is cancelled.
            with trio.CancelScope(shield=True):
                await self._write_group(group, completion)
        except BaseException as exc:
            self._fail(exc, completion)
            if not isinstance(exc, Exception):
                raise
        finally:
            self._writing = False
            if self._pending or self._closing:
                self._work.set()  # the appender task takes what was reserved meanwhile
        return await reservation.wait()

    def anchor(self, index: int, owner: str) -> LogAnchor:
        """Register a retention anchor (e.g. a tablet copy session) at `index`."""
        anchor = LogAnchor(self, index, owner)
        self._anchors.add(anchor)
        return anchor

    def anchors(self) -> list[LogAnchor]:
        return sorted(self._anchors, key=lambda a: (a.index, a.owner))

    def segments(self) -> list[SegmentInfo]:
        """Every segment, oldest first; the last one is the active (unclosed) segment."""
        out = list(self._closed_segments)
        if self._active is not None:
            out.append(self._active.info(closed=False))
        return out

    async def read_entries(self, from_index: int = 1) -> list[LogEntry]:
        """The durable effective log from `from_index` (for bootstrap and tablet copy)."""
        infos = self.segments()
        limits = {self._active.sequence: self._active.end} if self._active else {}
        return await self._run(_effective_entries, self.disk, infos, from_index, limits)

    async def gc(self, up_to_index: int) -> list[str]:
        """Delete closed segments whose entries all lie below min(up_to_index, anchors,
        last index); oldest first, as a prefix. Returns the deleted paths."""
        bound = up_to_index
        for anchor in self._anchors:
            bound = min(bound, anchor.index)
        if self._last_opid is not None:
            bound = min(bound, self._last_opid.index)
        victims: list[SegmentInfo] = []
        for info in self._closed_segments:
            if info.max_index is None or info.max_index < bound:
                victims.append(info)
            else:
                break
        if not victims:
            return []
        paths = [v.path for v in victims]
        await self._run(self._unlink_segments, paths)
        gone = {v.sequence for v in victims}
        self._closed_segments = [s for s in self._closed_segments if s.sequence not in gone]
        return paths

    async def close(self) -> None:
        """Drain pending appends, close the active segment (footer, truncate), stop tasks."""
        if self._closing:
            await self._appender_done.wait()
            return
        self._closing = True
        self._work.set()
        await self._appender_done.wait()
        if self._thread is not None:
            await self._thread.stop()  # idle: the appender, its only user, has returned
        if self._preparing:
            await self._prepared.wait()
        if self._failure is not None:
            self._close_handles()
            return
        if self._next is not None:
            prepared = self._next
            self._next = None
            await self._run(self._discard_prepared, prepared)
        if self._active is not None:
            active = self._active
            await self._run(self._finish_segment, active)
            self._closed_segments.append(active.info(closed=True))
            self._active = None

    # ------------------------------------------------------------------ tasks

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        """Blocking I/O off the appender's path: a trio worker thread (or inline)."""
        if self.options.use_threads:
            return await trio.to_thread.run_sync(fn, *args)
        result = fn(*args)
        await trio.lowlevel.checkpoint()
        return result

    async def _run_appender(self, fn: Callable[..., T], *args: Any) -> T:
        """Blocking I/O of the appender task: the log's appender thread (or inline)."""
        if self._thread is not None:
            return await self._thread.run(fn, *args)
        return await self._run(fn, *args)

    async def _appender(self) -> None:
        # Shielded: the appender outlives the cancellation of a stop, and only close()
        # (which open_log runs, shielded, before its nursery exits) ends it. A batch reserved
        # just before the stop (a replica's durable step, itself shielded so that what is
        # made durable is traced) must still be written: cancelled here, its waiter would
        # wait forever and the server would never finish stopping.
        with trio.CancelScope(shield=True):
            await self._append_until_closed()

    async def _append_until_closed(self) -> None:
        try:
            while True:
                await self._work.wait()
                self._work = trio.Event()
                if self._writing:
                    continue  # an append() writes its group; it sets _work when done
                if not self._pending:
                    if self._closing:
                        return
                    continue
                group, completion = self._take_pending()
                self._writing = True
                try:
                    await self._write_group(group, completion)
                except BaseException as exc:
                    self._fail(exc, completion)
                    if isinstance(exc, Exception):
                        return
                    raise
                finally:
                    self._writing = False
                if self._closing and not self._pending:
                    return
        finally:
            self._appender_done.set()

    def _take_pending(self) -> tuple[list[Reservation], _Group]:
        """Every pending reservation, as one group, and the completion they share."""
        group, completion = self._pending, self._pending_group
        self._pending = []
        self._pending_group = _Group()
        return group, completion

    def _fail(self, exc: BaseException, completion: _Group) -> None:
        self._failure = LogFailed(self.tablet_id, exc)
        if not completion.done.is_set():  # (it is when the failure came after the wake-up)
            completion.fail(self._failure)
        self._pending_group.fail(self._failure)
        self._pending = []

    async def _write_group(self, group: list[Reservation], completion: _Group) -> None:
        active = self._active
        assert active is not None
        data = b"".join([r.frame for r in group]) if len(group) > 1 else group[0].frame
        started = time.perf_counter()
        if self.options.fsync or self._thread is None:
            synced = await self._run_appender(self._write_and_sync, active, active.end, data)
        else:
            # Without fsync the write only copies into the page cache (microseconds): a
            # hand-off to the appender thread and back would cost more than the write.
            synced = self._write_and_sync(active, active.end, data)
        metrics = self.metrics  # observed here, in the trio thread (impl/observe/families.py)
        metrics.append_seconds.observe(time.perf_counter() - started)
        if synced is not None:
            metrics.fsync_seconds.observe(synced)
        metrics.group_batches.observe(len(group))
        metrics.group_bytes.observe(len(data))
        metrics.appended_bytes.inc(len(data))
        active.end += len(data)
        active.batches_crc = zlib.crc32(data, active.batches_crc)
        low = min([r.min_index for r in group])
        active.entry_count += sum([r.max_index - r.min_index + 1 for r in group])
        active.min_index = low if active.min_index is None else min(active.min_index, low)
        high = max([r.max_index for r in group])
        active.max_index = high if active.max_index is None else max(active.max_index, high)
        self._last_opid = group[-1].last_opid
        completion.done.set()  # wakes every waiter of the group
        if active.end >= self.options.segment_size:
            await self._maybe_roll_over()

    def _write_and_sync(self, active: _ActiveSegment, offset: int, data: bytes
                        ) -> float | None:
        """Write, then sync: how long the sync took (None without fsync)."""
        active.file.pwrite(offset, data)
        if not self.options.fsync:
            return None
        started = time.perf_counter()
        if offset + len(data) <= active.allocated:
            active.file.fdatasync()  # size and extents already durable: data only
        else:
            active.file.fsync()
        return time.perf_counter() - started

    async def _maybe_roll_over(self) -> None:
        if self._next is None:
            if not self._preparing:
                self._preparing = True
                self._prepared = trio.Event()
                self._nursery.start_soon(self._prepare_next, self._next_sequence())
            return
        prepared = self._next
        self._next = None
        old = self._active
        assert old is not None
        await self._run_appender(self._switch_segments, old, prepared)
        self._closed_segments.append(old.info(closed=True))
        self._active = attrs.evolve(
            prepared, path=posixpath.join(self.wal_dir, segment_name(prepared.sequence))
        )

    def _next_sequence(self) -> int:
        assert self._active is not None
        return self._active.sequence + 1

    async def _prepare_next(self, sequence: int) -> None:
        try:
            prepared = await self._run(self._create_segment_file, sequence)
        except Exception as exc:
            self._failure = self._failure or LogFailed(self.tablet_id, exc)
        else:
            if self._closing:
                self._next = prepared  # close() discards it
            else:
                self._next = prepared
        finally:
            self._preparing = False
            self._prepared.set()

    # ------------------------------------------------------------------ blocking I/O

    def _create_segment_file(self, sequence: int) -> _ActiveSegment:
        """Temp file with header and preallocation, synced; not yet visible by name."""
        final = posixpath.join(self.wal_dir, segment_name(sequence))
        temp = temp_path_for(final)
        handle = self.disk.open(temp, create=True)
        handle.truncate(0)
        header = encode_value(HEADER_MAGIC, FORMAT_VERSION, SegmentHeader(self.tablet_id, sequence))
        allocated = 0
        size = self.options.segment_size
        if self.options.preallocate and size > len(header):
            if self.options.zero_fill:
                chunk = bytes(min(size, 1 << 20))
                for offset in range(0, size, len(chunk)):
                    handle.pwrite(offset, chunk[: size - offset])
            else:
                handle.fallocate(0, size)
            allocated = size
        handle.pwrite(0, header)
        handle.fsync()
        return _ActiveSegment(sequence, temp, handle, len(header), allocated)

    def _publish(self, prepared: _ActiveSegment) -> None:
        final = posixpath.join(self.wal_dir, segment_name(prepared.sequence))
        self.disk.rename(prepared.path, final)
        self.disk.fsync_dir(self.wal_dir)

    def _finish_segment(self, active: _ActiveSegment) -> None:
        """Close a segment: drop unused preallocated space, append the footer, fsync."""
        footer = SegmentFooter(
            active.entry_count, active.min_index, active.max_index, active.batches_crc
        )
        active.file.truncate(active.end)
        active.file.pwrite(active.end, encode_value(FOOTER_MAGIC, FORMAT_VERSION, footer))
        active.file.fsync()
        active.file.close()

    def _switch_segments(self, old: _ActiveSegment, prepared: _ActiveSegment) -> None:
        # Order matters: the old segment is closed durably before the new name appears, so
        # only the last segment is ever unclosed.
        self._finish_segment(old)
        self._publish(prepared)

    def _discard_prepared(self, prepared: _ActiveSegment) -> None:
        prepared.file.close()
        self.disk.unlink(prepared.path)
        self.disk.fsync_dir(self.wal_dir)

    def _unlink_segments(self, paths: list[str]) -> None:
        for path in paths:  # oldest first: a crash leaves a suffix, never a gap
            self.disk.unlink(path)
        self.disk.fsync_dir(self.wal_dir)

    def _close_handles(self) -> None:
        for segment in (self._active, self._next):
            if segment is not None:
                segment.file.close()
        self._active = None
        self._next = None

    async def _start(self, nursery: trio.Nursery) -> None:
        self._nursery = nursery
        sequence = self._closed_segments[-1].sequence + 1 if self._closed_segments else 1
        prepared = await self._run(self._create_segment_file, sequence)
        await self._run(self._publish, prepared)
        self._active = attrs.evolve(
            prepared, path=posixpath.join(self.wal_dir, segment_name(sequence))
        )
        if self.options.use_threads:
            self._thread = _AppenderThread(f"wal-appender-{self.tablet_id}")
        nursery.start_soon(self._appender)


@asynccontextmanager
async def open_log(
    disk: Disk,
    wal_dir: str,
    tablet_id: str,
    options: LogOptions | None = None,
    *,
    create_if_missing: bool = False,
    metrics: WalMetrics | None = None,
) -> AsyncIterator[Log]:
    """Recover the WAL in `wal_dir` (see recover_log) and run it until the block exits.

    Raises WalCorrupt before yielding when the WAL fails verification (nothing modified).
    The recovery report is `log.recovery`.
    """
    options = options or LogOptions()
    if options.use_threads:
        report = await trio.to_thread.run_sync(
            lambda: recover_log(disk, wal_dir, tablet_id, create_if_missing=create_if_missing)
        )
    else:
        report = recover_log(disk, wal_dir, tablet_id, create_if_missing=create_if_missing)
    log = Log(disk, wal_dir, tablet_id, options, report, metrics)
    async with trio.open_nursery() as nursery:
        await log._start(nursery)
        try:
            yield log
        finally:
            with trio.CancelScope(shield=True):
                await log.close()
