"""The source side of a tablet copy: sessions that pin a consistent snapshot of a replica.

Seed 001 ("Follower Tablet Copy") has the destination download the source's superblock,
consensus metadata, WAL segments and data blocks. The source's job is to hand out a set of
files that fit together, and to keep them readable until the destination has them, while
the replica keeps running (appending, flushing, compacting, collecting its WAL) or is even
deleted.

Snapshot order (`CopySessionManager.begin`), each step justified by the one before:

1. Anchor the WAL at index 0 (`Log.anchor`): from now on GC deletes no segment holding an
   entry. (A GC that chose its victims before the anchor may still unlink them: they lie
   below the flushed OpId that GC was given, so step 3 finds them gone as a *prefix* and
   skips them; a missing segment after a present one is refused.)
2. Read the superblock (it must be READY) and open every live block, keeping the file
   handles. If a block is gone (a compaction retired it after we read the superblock),
   close what we opened and read the superblock again (bounded attempts).
3. Snapshot the WAL *after* the superblock: list the segments, open each one, and fix the
   length served: a closed segment whole, the active one up to the end of its last complete
   batch (`scan_segment(...).data_end`; the preallocated zeros and any batch being written
   are left out). Since the superblock was read first and GC was stopped before it, the WAL
   snapshot holds every entry above the superblock's `flushed_opid` (checked: refused
   otherwise). The anchor then moves to the first retained index, which pins the same
   segments.
4. Read the consensus metadata *after* the WAL snapshot: the replica makes a term durable
   in its cmeta before it logs an entry of that term, so the cmeta's term is >= the last
   logged term (checked), as the destination's Raft requires.

No checksum pass: a session serves the files' own bytes, and each file carries the
checksums its writer computed (a block's frame, every WAL batch's frame), which the
destination verifies; each chunk carries the CRC-32 of the bytes read for it. So the first
chunk can go out as soon as the files are pinned.

The handover: a session that ends (the destination has every file) keeps its anchor for
``idle_timeout`` more seconds, moved up to the snapshot's last index. The new replica's log
ends there, and until it answers the leader's first AppendRequest the leader does not know
it needs the entries after it; a flush meanwhile (the replica's `retention_point` honours
every anchor of the log, for the Raft core's memory as for the WAL's segments) would
collect them, and the leader would have to copy the tablet again, for ever if writes never
stop while ``--log-retain-entries`` is 0 (a master joining a busy catalog did exactly that).

Consistency and lifetime invariants:

* Every byte a session serves comes from a handle opened during `begin` and never beyond
  the length fixed then: the source may append, roll over, collect, compact or delete the
  tablet (unlinking its files) and the session still serves exactly the snapshot (POSIX
  keeps an unlinked file's data while a handle is open; SimDisk does the same).
* A session owns exactly one LogAnchor and its file handles. `end`, idle expiry
  (`expire_idle`), `close_all` and a failed `begin` all release through one path
  (`CopySession.release`): the anchor is released and every handle closed, exactly once;
  nothing leaks whichever way a session ends. A session is released under its own lock, so
  a concurrent `fetch` either completes first or sees NoSuchSession, never a closed handle.
* Sessions are idempotent per (requester, tablet): a second `begin` returns the same session
  (and refreshes its idle timer) rather than pinning a second snapshot.

Threads: the session table and each session are lock-protected, so `fetch`, `keep_alive`,
`end` and `expire_idle` may run in worker threads. `begin` calls `Log.anchor` and
`Log.segments`, which are not thread-safe against the Log's own task: call it in the thread
that runs the Log (the trio thread), or while nothing else uses the Log. Its I/O is opening
files and reading the active WAL segment. Nothing here imports trio.
"""

from __future__ import annotations

import posixpath
import threading
import zlib
from collections.abc import Callable, Iterable
from typing import Protocol

import attrs

from revivify.impl.storage.blocks import BlockManager
from revivify.impl.storage.disk import DiskFile
from revivify.impl.storage.errors import StorageError
from revivify.impl.storage.layout import ServerLayout
from revivify.impl.storage.metadata import MetadataStore, decode_cmeta, encode_superblock
from revivify.impl.storage.values import DataState, OpId, Superblock
from revivify.impl.storage.wal import SEGMENT_NAME, SegmentInfo, scan_segment

from .api import (
    MAX_CHUNK,
    BadFetch,
    CopySessionInfo,
    CopySourceUnavailable,
    DataChunk,
    FileInfo,
    NoSuchSession,
)


class Anchor(Protocol):
    """What a session needs of a LogAnchor (wal.py)."""

    def update(self, index: int) -> None: ...

    def release(self) -> None: ...


class SourceLog(Protocol):
    """What a session needs of a live Log (wal.py): its segments and a retention anchor."""

    def segments(self) -> list[SegmentInfo]: ...

    def anchor(self, index: int, owner: str) -> Anchor: ...


@attrs.define
class PinnedFile:
    """A file of the snapshot: an open handle, and the length served."""

    name: str
    handle: DiskFile
    size: int

    def info(self) -> FileInfo:
        return FileInfo(self.name, self.size)


class CopySession:
    """One pinned snapshot; released exactly once (anchor, then every handle)."""

    def __init__(
        self,
        session_id: str,
        requester: str,
        tablet_id: str,
        info: CopySessionInfo,
        anchor: Anchor,
        files: dict[tuple[str, str], PinnedFile],
        now: float,
    ) -> None:
        self.session_id = session_id
        self.requester = requester
        self.tablet_id = tablet_id
        self.info = info
        self.anchor = anchor
        self.files = files
        self.last_used = now
        self.started = now
        self.lock = threading.Lock()
        self.released = False
        self.bytes_served = 0  # chunk bytes read for the destination (re-reads count again)

    def read(self, kind: str, name: str, offset: int, max_length: int) -> DataChunk:
        with self.lock:
            if self.released:
                raise NoSuchSession(self.session_id)
            pinned = self.files.get((kind, name))
            if pinned is None:
                raise BadFetch(f"session {self.session_id} has no {kind} file {name!r}")
            if offset < 0 or offset > pinned.size:
                raise BadFetch(
                    f"offset {offset} outside {kind} file {name!r} of {pinned.size} bytes"
                )
            if max_length <= 0:
                raise BadFetch(f"max_length {max_length} is not positive")
            length = min(max_length, MAX_CHUNK, pinned.size - offset)
            data = pinned.handle.pread(offset, length) if length else b""
            if len(data) != length:
                raise CopySourceUnavailable(
                    self.tablet_id,
                    f"{kind} file {name!r} shrank below its snapshot size {pinned.size}",
                )
            self.bytes_served += length
            return DataChunk(data, offset, pinned.size, zlib.crc32(data))

    def release(self) -> None:
        with self.lock:
            if self.released:
                return
            self.released = True
            _release(self.anchor, self.files.values())

    def hand_over(self) -> Anchor | None:
        """Release the session but keep its anchor, moved up to the snapshot's last index
        (module docstring, "The handover"); None when the snapshot had no entry (nothing
        to keep) or the session was already released."""
        with self.lock:
            if self.released:
                return None
            self.released = True
            if self.info.last_opid is None:
                _release(self.anchor, self.files.values())
                return None
            self.anchor.update(self.info.last_opid[1])
            _release(None, self.files.values())
            return self.anchor


def _release(anchor: Anchor | None, files: Iterable[PinnedFile]) -> None:
    """Release the anchor and close every handle, even if some close fails."""
    errors: list[BaseException] = []
    if anchor is not None:
        try:
            anchor.release()
        except Exception as exc:
            errors.append(exc)
    for pinned in files:
        try:
            pinned.handle.close()
        except Exception as exc:
            errors.append(exc)
    if errors:
        raise errors[0]


@attrs.frozen
class SourceSessionView:
    """One source session, copied out for the status pages (``describe``)."""

    session_id: str
    requester: str
    tablet_id: str
    bytes_served: int
    total_bytes: int
    files: int
    elapsed_seconds: float
    idle_seconds: float


class CopySessionManager:
    """The source's tablet copy sessions (see the module docstring for the invariants)."""

    def __init__(
        self,
        clock: Callable[[], float],
        idle_timeout: float,
        *,
        source_uuid: str = "",
        max_begin_attempts: int = 5,
    ) -> None:
        if idle_timeout <= 0:
            raise ValueError(f"idle_timeout must be positive, got {idle_timeout}")
        self._clock = clock
        self.idle_timeout = idle_timeout
        self.source_uuid = source_uuid
        self.max_begin_attempts = max_begin_attempts
        self._lock = threading.Lock()
        self._sessions: dict[str, CopySession] = {}
        self._by_peer: dict[tuple[str, str], str] = {}  # (requester, tablet) -> session id
        self._counter = 0
        self._handovers: list[tuple[float, Anchor]] = []  # (release at, anchor), by time

    # ------------------------------------------------------------------ sessions

    def begin(
        self,
        requester: str,
        tablet_id: str,
        log: SourceLog,
        metadata: MetadataStore,
        layout: ServerLayout,
        blocks_manager: BlockManager,
    ) -> CopySessionInfo:
        """Pin a snapshot of `tablet_id` for `requester`, or return (and refresh) the
        session it already has. CopySourceUnavailable if the replica is not READY or no
        consistent snapshot could be pinned; nothing stays pinned then."""
        with self._lock:
            existing = self._by_peer.get((requester, tablet_id))
            if existing is not None:
                session = self._sessions[existing]
                session.last_used = self._clock()
                return session.info
            self._counter += 1
            session_id = f"{tablet_id}:{requester}:{self._counter}"
        session = self._snapshot(session_id, requester, tablet_id, log, metadata, layout,
                                 blocks_manager)
        with self._lock:
            existing = self._by_peer.get((requester, tablet_id))
            if existing is None:
                self._sessions[session_id] = session
                self._by_peer[(requester, tablet_id)] = session_id
                return session.info
            winner = self._sessions[existing]  # a concurrent begin got there first
            winner.last_used = self._clock()
        session.release()
        return winner.info

    def fetch(
        self, session_id: str, kind: str, name: str, offset: int, max_length: int = MAX_CHUNK
    ) -> DataChunk:
        """Up to min(max_length, MAX_CHUNK) bytes of a pinned file from `offset` (an offset
        equal to the size gives an empty chunk); refreshes the session's idle timer."""
        if kind not in ("wal", "block"):
            raise BadFetch(f"unknown file kind {kind!r}")
        return self._touch(session_id).read(kind, name, offset, max_length)

    def keep_alive(self, session_id: str) -> None:
        self._touch(session_id)

    def end(self, session_id: str) -> None:
        """Release the session (NoSuchSession if it is unknown, e.g. already expired); its
        anchor stays at the snapshot's last index for idle_timeout more seconds (module
        docstring, "The handover")."""
        with self._lock:
            session = self._remove(session_id)
        if session is None:
            raise NoSuchSession(session_id)
        anchor = session.hand_over()
        if anchor is not None:
            with self._lock:
                self._handovers.append((self._clock() + self.idle_timeout, anchor))

    def handovers(self) -> int:
        """How many ended sessions still hold their anchor."""
        with self._lock:
            return len(self._handovers)

    def expire_idle(self) -> list[str]:
        """Release every session idle for longer than idle_timeout, and every handed-over
        anchor whose time is up; return the sessions' ids."""
        now = self._clock()
        with self._lock:
            idle = [s for s in self._sessions.values() if now - s.last_used > self.idle_timeout]
            for session in idle:
                self._remove(session.session_id)
            due = [anchor for at, anchor in self._handovers if at <= now]
            self._handovers = [(at, anchor) for at, anchor in self._handovers if at > now]
        for anchor in due:
            anchor.release()
        _release_all(idle)
        return [s.session_id for s in idle]

    def close_all(self) -> None:
        """Release every session and handed-over anchor (server stop)."""
        with self._lock:
            sessions = list(self._sessions.values())
            self._sessions.clear()
            self._by_peer.clear()
            handed = [anchor for _, anchor in self._handovers]
            self._handovers.clear()
        for anchor in handed:
            anchor.release()
        _release_all(sessions)

    def session_ids(self) -> list[str]:
        with self._lock:
            return sorted(self._sessions)

    def describe(self) -> list[SourceSessionView]:
        """A copy of every live session as the status pages show it, by session id."""
        now = self._clock()
        with self._lock:
            sessions = sorted(self._sessions.values(), key=lambda s: s.session_id)
            return [SourceSessionView(
                s.session_id, s.requester, s.tablet_id, s.bytes_served,
                sum(f.size for f in s.files.values()), len(s.files), now - s.started,
                now - s.last_used) for s in sessions if not s.released]

    def open_handles(self) -> int:
        """How many file handles the live sessions hold (0 once every session ended)."""
        with self._lock:
            return sum(len(s.files) for s in self._sessions.values() if not s.released)

    def _touch(self, session_id: str) -> CopySession:
        with self._lock:
            session = self._sessions.get(session_id)
            if session is None:
                raise NoSuchSession(session_id)
            session.last_used = self._clock()
            return session

    def _remove(self, session_id: str) -> CopySession | None:
        session = self._sessions.pop(session_id, None)
        if session is not None:
            self._by_peer.pop((session.requester, session.tablet_id), None)
        return session

    # ------------------------------------------------------------------ the snapshot

    def _snapshot(
        self,
        session_id: str,
        requester: str,
        tablet_id: str,
        log: SourceLog,
        metadata: MetadataStore,
        layout: ServerLayout,
        blocks_manager: BlockManager,
    ) -> CopySession:
        anchor = log.anchor(0, f"tablet-copy:{session_id}")  # step 1: GC collects nothing
        files: dict[tuple[str, str], PinnedFile] = {}
        try:
            superblock, blocks = self._pin_blocks(tablet_id, metadata, blocks_manager)
            files.update({("block", p.name): p for p in blocks})
            segments, last_opid, first_index = _pin_wal(tablet_id, log, layout)
            files.update({("wal", p.name): p for p in segments})
            flushed = superblock.flushed_opid.index if superblock.flushed_opid else 0
            if last_opid is not None and last_opid.index > flushed and (
                first_index is None or first_index > flushed + 1
            ):
                raise CopySourceUnavailable(
                    tablet_id,
                    f"the WAL snapshot starts at index {first_index}, but the superblock "
                    f"is flushed only up to {flushed}",
                )
            cmeta_path = layout.cmeta_path(tablet_id)  # step 4: after the WAL
            cmeta_bytes = layout.disk.read_file(cmeta_path)
            cmeta = decode_cmeta(cmeta_bytes, path=cmeta_path)
            if cmeta.tablet_id != tablet_id:
                raise CopySourceUnavailable(tablet_id, f"{cmeta_path} names {cmeta.tablet_id}")
            if last_opid is not None and cmeta.current_term < last_opid.term:
                raise CopySourceUnavailable(
                    tablet_id,
                    f"cmeta term {cmeta.current_term} is below the last logged term "
                    f"{last_opid.term}",
                )
            anchor.update(first_index or 0)
        except BaseException as exc:
            _release(anchor, files.values())
            if isinstance(exc, StorageError | OSError):
                raise CopySourceUnavailable(tablet_id, f"{type(exc).__name__}: {exc}") from exc
            raise
        info = CopySessionInfo(
            session_id=session_id,
            tablet_id=tablet_id,
            source_uuid=self.source_uuid,
            superblock=encode_superblock(superblock),
            cmeta=cmeta_bytes,
            wal_segments=[p.info() for p in segments],
            blocks=[p.info() for p in blocks],
            last_opid=None if last_opid is None else (last_opid.term, last_opid.index),
            expires_in_seconds=self.idle_timeout,
        )
        return CopySession(session_id, requester, tablet_id, info, anchor, files, self._clock())

    def _pin_blocks(
        self, tablet_id: str, metadata: MetadataStore, blocks_manager: BlockManager
    ) -> tuple[Superblock, list[PinnedFile]]:
        """Step 2: a READY superblock and an open handle on each of its live blocks."""
        disk = blocks_manager.disk
        for _ in range(self.max_begin_attempts):
            superblock = metadata.load_superblock(tablet_id)
            if superblock is None or superblock.data_state is not DataState.READY:
                state = "no superblock" if superblock is None else superblock.data_state.value
                raise CopySourceUnavailable(tablet_id, f"the replica is {state}, not READY")
            opened: list[PinnedFile] = []
            try:
                for block_id in superblock.live_blocks:
                    handle = disk.open(blocks_manager.path(block_id))
                    opened.append(PinnedFile(block_id, handle, handle.size()))
            except FileNotFoundError:
                _release(None, opened)  # retired by a compaction meanwhile: read it again
                continue
            except BaseException:
                _release(None, opened)
                raise
            return superblock, opened
        raise CopySourceUnavailable(
            tablet_id, f"the live blocks changed during {self.max_begin_attempts} attempts"
        )


def _pin_wal(
    tablet_id: str, log: SourceLog, layout: ServerLayout
) -> tuple[list[PinnedFile], OpId | None, int | None]:
    """Step 3: open every segment and fix its served length; return them, the snapshot's
    last OpId and its first retained index."""
    disk = layout.disk
    pinned: list[PinnedFile] = []
    first_index: int | None = None
    last_opid: OpId | None = None
    scanned: dict[str, OpId] = {}  # the active segment's last OpId, from its one scan
    try:
        for info in log.segments():
            name = posixpath.basename(info.path)
            match = SEGMENT_NAME.match(name)
            if match is None:
                raise CopySourceUnavailable(tablet_id, f"unexpected WAL segment {info.path}")
            try:
                handle = disk.open(info.path)
            except FileNotFoundError:
                if pinned:
                    raise CopySourceUnavailable(
                        tablet_id, f"WAL segment {info.path} vanished after a later one"
                    ) from None
                continue  # collected by a GC that chose it before the anchor: a prefix
            pinned.append(PinnedFile(name, handle, handle.size()))
            if info.closed:
                if first_index is None and info.min_index is not None:
                    first_index = info.min_index
                continue
            # The active segment: serve it only up to its last complete batch.
            data = handle.pread(0, handle.size())
            scan = scan_segment(data, info.path, tablet_id=tablet_id,
                                sequence=int(match.group(1)))
            pinned[-1].size = len(data) if scan.footer is not None else scan.data_end
            if first_index is None and scan.entries:
                first_index = min(e.index for e in scan.entries)
            if scan.entries:
                scanned[name] = scan.entries[-1].opid
        # The snapshot's last OpId: the last entry of the last segment holding any.
        for segment in reversed(pinned):
            if segment.name in scanned:
                last_opid = scanned[segment.name]
                break
            data = segment.handle.pread(0, segment.size)
            scan = scan_segment(data, segment.handle.path, tablet_id=tablet_id)
            if scan.entries:
                last_opid = scan.entries[-1].opid
                break
    except BaseException:
        _release(None, pinned)
        raise
    return pinned, last_opid, first_index


def _release_all(sessions: Iterable[CopySession]) -> None:
    errors: list[BaseException] = []
    for session in sessions:
        try:
            session.release()
        except Exception as exc:
            errors.append(exc)
    if errors:
        raise errors[0]


__all__ = ["Anchor", "CopySession", "CopySessionManager", "PinnedFile", "SourceLog"]
