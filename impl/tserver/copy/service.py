"""Tablet copy in the tablet server: StartTabletCopy, the copy jobs, the source's sessions,
and the leader that asks for copies on its own (seed 001, "Follower Tablet Copy").

Destination: StartTabletCopy(tablet, caller, caller_term, source, expected_state, last_opid)
-------------------------------------------------------------------------------------------
Refused with THROTTLED (not traced: as if never received) when ``max_concurrent_copies``
copies run already. Otherwise the checks run in this order, each a typed reason, and none
touches anything (traced ``stc_reject`` with the first failing check, or ``stc_accept``):

    ALREADY_IN_PROGRESS  a deletion or a copy of the tablet is in flight here
    ILLEGAL_STATE        the replica is not what the caller expects (DOES_NOT_EXIST, DELETED
                         = a tombstone, READY; a FAILED replica counts as READY)
    STALE_TERM           caller_term is below the replica's last *logged* term (a tombstone's
                         retained one, else its WAL's): such a caller cannot hold what this
                         replica logged. Kudu compares with the last logged term, not the
                         cmeta term; the seed's pseudo-code tombstones a running replica
                         before any term check, which would let a deposed leader destroy a
                         current replica. Every check here runs before anything is touched.
    OPID_MISMATCH        the caller named a last OpId and it is not this replica's

Accepted, a job runs in the background (the RPC answers at once):
1. a READY (or FAILED) replica is tombstoned first: the six deletion steps;
2. a tombstone stops voting while its superblock and cmeta change hands;
3. ``run_copy`` (copy/download.py) over an RPC session with the source: copy_begin,
   copy_merge_cmeta (the COPYING replica votes again from the merged cmeta and its
   tombstone's last OpId while it downloads), copy_download_wal, copy_download_block each,
   copy_blocks_done (the voter stops), copy_mark_ready (the commit point);
4. the replica starts: copy_start_replica.
Each step is durable (fsync'd; the COPYING superblock records steps 3-4, so that startup
knows what an interrupted copy left), then traced. A failure or a cancellation (``copy
cancel``, the server stopping) before the commit point traces ``copy_abort`` with the reason;
if copy_begin was traced the replica tombstones itself (deletion steps 2-6) keeping its
previous last OpId and cmeta, with every downloaded file removed; before it, the replica
stays what it was.

Source: Copy.BeginSession / FetchData / KeepAlive / EndSession serve a
``CopySessionManager`` (copy/source.py); idle sessions expire; a server stop releases all.

Leader: every ``request_interval`` seconds, each leader replica's peers that need a copy
(``PeerStatus.needs_copy``: answered TOMBSTONED, not hosting the tablet, or behind the
log's garbage collection) get a StartTabletCopy from this server as the source;
ALREADY_IN_PROGRESS and THROTTLED are not failures, only a reason to ask again later.
"""

from __future__ import annotations

import logging
import math
import time
from typing import Any, Protocol

import attrs
import trio

from revivify.impl.consensus.core import Role
from revivify.impl.observe.metrics import TServerMetrics
from revivify.impl.rpc import CallContext, LamportHooks, RpcError, open_rpc_client
from revivify.impl.rpc.address import parse_address
from revivify.impl.rpc.transport import Network
from revivify.impl.storage.blocks import BlockManager
from revivify.impl.storage.layout import ServerLayout
from revivify.impl.storage.metadata import MetadataStore
from revivify.impl.storage.values import DataState, OpId

from .. import api
from ..api import Kind
from ..durable import Sb
from ..manager.core import SUPERBLOCK_MARKS, CopyEnded, CopyStep, CopyStepDone, StartCopy
from ..manager.shell import TabletManager
from . import (
    COPY_BEGIN_SESSION,
    COPY_END_SESSION,
    COPY_ERRORS,
    COPY_FETCH_DATA,
    COPY_KEEP_ALIVE,
    BeginTabletCopySession,
    CopyProgress,
    CopySessionInfo,
    CopySessionManager,
    CopySourceUnavailable,
    DataChunk,
    EndTabletCopySession,
    FetchData,
    KeepAlive,
    LocalCopyTarget,
    run_copy,
)


class CopyHost(Protocol):
    """What the copy service needs of its server (impl/tserver/server.py): typed here so
    that the service does not import the server that owns it (no import cycle)."""

    uuid: str
    address: str
    options: Any  # ServerOptions: max copies, chunk faults, threads, auto copy
    tablets: TabletManager
    layout: ServerLayout
    metadata: MetadataStore
    blocks: BlockManager
    lamport_hooks: LamportHooks
    network: Network | None

    async def blocking(self, fn: Any, *args: Any) -> Any: ...

    def start_background(self, fn: Any) -> None: ...

    def address_of(self, tablet_id: str, uuid: str) -> str | None: ...

logger = logging.getLogger(__name__)

EXPECTED_STATES = ("DOES_NOT_EXIST", "DELETED", "READY")


class TracedCopyTarget(LocalCopyTarget):
    """The destination's durable steps; the COPYING superblock records steps 3 and 4."""

    def _record(self, **changes: Any) -> None:
        sb = self.metadata.load_superblock(self.tablet_id)
        assert sb is not None and sb.data_state is DataState.COPYING
        self.metadata.write_superblock(attrs.evolve(sb, **changes))

    def wal_downloaded(self, last_opid: OpId | None) -> None:
        self._record(copy_step=SUPERBLOCK_MARKS[CopyStep.DOWNLOAD_WAL],
                     copy_wal_last=last_opid)

    def block_downloaded(self, block_id: str) -> None:
        sb = self.metadata.load_superblock(self.tablet_id)
        assert sb is not None
        self._record(copy_step=SUPERBLOCK_MARKS[CopyStep.DOWNLOAD_BLOCK],
                     live_blocks=(*sb.live_blocks, block_id))

    def blocks_done(self) -> None:
        self._record(copy_step=SUPERBLOCK_MARKS[CopyStep.BLOCKS_DONE])


class RpcCopySource:
    """``CopySource`` over RPC: a session with the source server's copy service."""

    def __init__(self, client: Any, tablet_id: str, requester: str) -> None:
        self.client = client
        self.tablet_id = tablet_id
        self.requester = requester

    async def begin(self) -> CopySessionInfo:
        info: CopySessionInfo = await self.client.call(
            COPY_BEGIN_SESSION, BeginTabletCopySession(self.tablet_id, self.requester),
            CopySessionInfo)
        return info

    async def fetch(self, request: FetchData) -> DataChunk:
        chunk: DataChunk = await self.client.call(COPY_FETCH_DATA, request, DataChunk)
        return chunk

    async def end(self, session_id: str) -> None:
        await self.client.call(COPY_END_SESSION, EndTabletCopySession(session_id), api.Ack)


@attrs.define
class CopyJob:
    """One copy running here (the destination)."""

    tablet_id: str
    source_uuid: str
    source_address: str
    scope: trio.CancelScope = attrs.field(factory=trio.CancelScope)
    progress: CopyProgress | None = None
    started: float = attrs.field(factory=time.monotonic)

    def info(self) -> api.CopyInfo:
        p = self.progress
        if p is None:
            return api.CopyInfo(self.tablet_id, self.source_uuid, self.source_address,
                                "deleting", 0, 0, 0, 0, time.monotonic() - self.started, 0.0, 0)
        return api.CopyInfo(self.tablet_id, self.source_uuid, self.source_address,
                            p.phase.value, p.bytes_done, p.total_bytes, p.files_done,
                            p.files_total, p.elapsed_seconds, p.rate_bytes_per_second,
                            p.retries, p.current_file, p.error)


class TabletCopies:
    """The server's tablet copies: destination jobs, source sessions, leader requests."""

    def __init__(self, server: CopyHost, *, max_concurrent: int, session_idle: float,
                 request_interval: float, chunk_size: int) -> None:
        self.server = server
        self.max_concurrent = max_concurrent
        self.request_interval = request_interval
        self.chunk_size = chunk_size
        self.jobs: dict[str, CopyJob] = {}
        self.sessions = CopySessionManager(time.monotonic, session_idle)
        self._requests: dict[tuple[str, str], float] = {}  # (tablet, peer) -> next attempt
        self._corrupt_left = server.options.fault_corrupt_copy_chunks

    # ------------------------------------------------------------------ destination

    async def on_start_tablet_copy(self, req: api.StartTabletCopy,
                                   ctx: CallContext) -> api.Ack:
        """StartTabletCopy: the arguments are checked here; the lifecycle core runs the
        seed's checks (traced) and, accepted, the steps (the tombstoning of a READY
        replica, the download, the start)."""
        server = self.server
        if req.expected_state not in EXPECTED_STATES:
            raise api.InvalidArgument(f"expected_state {req.expected_state!r} is not one of "
                                      f"{', '.join(EXPECTED_STATES)}")
        if req.caller_term < 0:
            raise api.InvalidArgument(f"caller_term {req.caller_term} is negative")
        if req.source_uuid == server.uuid:
            raise api.InvalidArgument("the copy source is this server itself")
        try:
            parse_address(req.source_address)
        except ValueError as exc:
            raise api.InvalidArgument(str(exc)) from None
        tablet_id = req.tablet_id
        manager = server.tablets
        at_rest = await server.blocking(manager.at_rest, tablet_id)
        event = StartCopy(req.caller_uuid, req.caller_term, req.source_uuid,
                          Sb(req.expected_state),
                          tuple(req.last_opid) if req.last_opid is not None else None,  # type: ignore[arg-type]
                          at_rest)
        batch = manager.core.handle(tablet_id, event)
        if batch.refusal is not None:
            await manager.execute(tablet_id, batch)  # stc_reject, if the spec knows it
            raise batch.refusal
        job = CopyJob(tablet_id, req.source_uuid, req.source_address)
        self.jobs[tablet_id] = job

        async def accepted() -> None:
            # The RPC answers at once; the accepted batch (stc_accept, then the
            # tombstoning of a READY replica, then the download) runs here.
            try:
                with trio.CancelScope(shield=True):
                    await manager.execute(tablet_id, batch)
            except BaseException:
                self.jobs.pop(tablet_id, None)
                raise

        server.start_background(accepted)
        return api.Ack()

    def run_copy(self, tablet_id: str) -> None:
        """RUN_COPY: the download runs in the background; its steps and its end go back
        into the lifecycle core."""
        job = self.jobs[tablet_id]
        self.server.start_background(lambda: self._run_job(job))

    async def _run_job(self, job: CopyJob) -> None:
        manager = self.server.tablets
        tablet_id = job.tablet_id
        reason: str | None = "cancelled by an operator"
        result = "cancelled"
        counts = manager.metrics.tserver
        counts.copies_started.inc()
        logger.info("tablet copy of %s from %s at %s started", tablet_id, job.source_uuid,
                    job.source_address)
        try:
            with job.scope:
                await self._copy(job)
                reason, result = None, "ok"
        except Exception as exc:
            reason, result = str(exc) or type(exc).__name__, "failed"
            logger.warning("tablet copy of %s from %s failed: %s", tablet_id, job.source_uuid,
                           reason)
        except BaseException:
            reason = "the server is stopping"
            raise
        finally:
            self.jobs.pop(tablet_id, None)
            _count_copy_end(job, result, counts)
            # copy_abort and the tombstone (before the commit point), or the replica starts
            # (after it): finishes even when the server is stopping.
            with trio.CancelScope(shield=True):
                await manager.apply(tablet_id, CopyEnded(reason))

    async def _copy(self, job: CopyJob) -> None:
        server = self.server
        manager = server.tablets
        tablet_id = job.tablet_id
        target = TracedCopyTarget(server.layout, server.metadata, tablet_id)

        async def on_step(done: CopyStepDone) -> None:
            await manager.apply(tablet_id, done)

        async def one_step(step: Any) -> Any:
            """A durable copy step and its trace event (TabletManager.durable_step)."""
            async with manager.durable_step(tablet_id):
                return await step()

        host, port = parse_address(job.source_address)
        async with open_rpc_client(host, port, job.source_uuid, server.uuid,
                                   lamport=server.lamport_hooks,
                                   app_errors=(*api.APP_ERRORS, *COPY_ERRORS),
                                   network=server.network) as client:
            source = RpcCopySource(client, tablet_id, server.uuid)
            await run_copy(source, target, progress=lambda p: setattr(job, "progress", p),
                           blocking=server.blocking, chunk_size=self.chunk_size,
                           on_step=on_step, durable=one_step)

    async def on_list_copies(self, req: api.Empty, ctx: CallContext) -> api.CopyList:
        return api.CopyList([j.info() for j in sorted(self.jobs.values(),
                                                      key=lambda j: j.tablet_id)],
                            self.max_concurrent)

    async def on_cancel_copy(self, req: api.TabletRef, ctx: CallContext) -> api.Ack:
        job = self.jobs.get(req.tablet_id)
        if job is None:
            raise api.InvalidArgument(f"no copy of tablet {req.tablet_id} is running here")
        job.scope.cancel()
        return api.Ack()

    # ------------------------------------------------------------------ source

    async def on_begin_session(self, req: BeginTabletCopySession,
                               ctx: CallContext) -> CopySessionInfo:
        server = self.server
        replica = server.tablets.running_replica(req.tablet_id)
        if replica is None:
            # A replica still hosted whose slot left RUNNING had its driver stopped (it
            # failed, or a deletion or a copy stopped it): to a copy client it is FAILED.
            hosted = server.tablets.replica(req.tablet_id) is not None
            state = Kind.FAILED.value if hosted else "not hosted here"
            raise CopySourceUnavailable(req.tablet_id, f"the replica is {state}")
        if req.requester_uuid != ctx.src_uuid:
            raise api.InvalidArgument(f"requester {req.requester_uuid} is not the caller "
                                      f"{ctx.src_uuid}")
        self.sessions.source_uuid = server.uuid
        server.tablets.metrics.tserver.source_sessions.inc()
        log: Any = replica.log
        if server.options.threads:
            # The snapshot reads and checksums every pinned file: a worker thread does it,
            # and calls back into this (the Log's) thread for the Log's own bookkeeping.
            log = _TrioThreadLog(replica.log)
        info: CopySessionInfo = await server.blocking(
            self.sessions.begin, req.requester_uuid, req.tablet_id, log, server.metadata,
            server.layout, server.blocks)
        return info

    async def on_fetch(self, req: FetchData, ctx: CallContext) -> DataChunk:
        if self.server.options.fault_slow_copy_ms:  # test-only
            await trio.sleep(self.server.options.fault_slow_copy_ms / 1000)
        chunk: DataChunk = await self.server.blocking(
            self.sessions.fetch, req.session_id, req.kind, req.name, req.offset, req.max_length)
        if self._corrupt_left > 0 and chunk.data:  # test-only fault: a bit flipped in flight
            self._corrupt_left -= 1
            logger.error("fault injection: corrupting the chunk of %s at %d", req.name,
                         req.offset)
            flipped = bytes([chunk.data[0] ^ 0xFF]) + chunk.data[1:]
            return DataChunk(flipped, chunk.offset, chunk.total_length, chunk.crc32)
        return chunk

    async def on_keep_alive(self, req: KeepAlive, ctx: CallContext) -> api.Ack:
        self.sessions.keep_alive(req.session_id)
        return api.Ack()

    async def on_end_session(self, req: EndTabletCopySession, ctx: CallContext) -> api.Ack:
        self.sessions.end(req.session_id)
        return api.Ack()

    def register(self, service: Any) -> None:
        service.register(api.ADMIN_START_TABLET_COPY, api.StartTabletCopy, api.Ack,
                         self.on_start_tablet_copy)
        service.register(api.ADMIN_LIST_COPIES, api.Empty, api.CopyList, self.on_list_copies)
        service.register(api.ADMIN_CANCEL_COPY, api.TabletRef, api.Ack, self.on_cancel_copy)
        service.register(COPY_BEGIN_SESSION, BeginTabletCopySession, CopySessionInfo,
                         self.on_begin_session)
        service.register(COPY_FETCH_DATA, FetchData, DataChunk, self.on_fetch)
        service.register(COPY_KEEP_ALIVE, KeepAlive, api.Ack, self.on_keep_alive)
        service.register(COPY_END_SESSION, EndTabletCopySession, api.Ack, self.on_end_session)

    # ------------------------------------------------------------------ background

    async def maintain(self) -> None:
        """Expire idle source sessions; as a leader, ask for the copies peers need."""
        while True:
            await trio.sleep(self.request_interval)
            expired = self.sessions.expire_idle()
            if expired:
                logger.info("tablet copy sessions expired: %s", expired)
            if self.server.options.auto_copy:
                self._request_copies()

    def _request_copies(self) -> None:
        server = self.server
        now = trio.current_time()  # (virtual time under a MockClock)
        for tablet_id, replica in list(server.tablets.running()):
            st = replica.core.status()
            if st.role is not Role.LEADER:
                continue
            for peer in st.peers:
                key = (tablet_id, peer.uuid)
                if not peer.needs_copy or peer.uuid == server.uuid:
                    continue
                if self._requests.get(key, 0.0) > now:
                    continue
                address = server.address_of(tablet_id, peer.uuid)
                if address is None:
                    continue
                self._requests[key] = math.inf  # one request in flight per (tablet, peer)
                req = api.StartTabletCopy(tablet_id, server.uuid, st.term, server.uuid,
                                          server.address, peer.copy_expected or "DELETED")
                server.start_background(lambda p=peer.uuid, a=address, r=req, k=key:
                                        self._ask(p, a, r, k))

    async def _ask(self, dest: str, address: str, req: api.StartTabletCopy,
                   key: tuple[str, str]) -> None:
        server = self.server
        retry = self.request_interval
        try:
            host, port = parse_address(address)
            with trio.fail_after(10):
                async with open_rpc_client(host, port, dest, server.uuid,
                                           lamport=server.lamport_hooks,
                                           app_errors=api.APP_ERRORS,
                                           network=server.network) as client:
                    await client.call(api.ADMIN_START_TABLET_COPY, req, api.Ack)
            logger.info("tablet copy of %s to %s started", req.tablet_id, dest)
            retry = 5.0  # give the copy time to finish before asking again
        except api.CopyRefused as exc:
            # ALREADY_IN_PROGRESS / THROTTLED: not failures, ask again later.
            retry = 1.0 if exc.reason in ("ALREADY_IN_PROGRESS", "THROTTLED") else 2.0
            logger.debug("tablet copy of %s to %s: %s", req.tablet_id, dest, exc)
        except (RpcError, OSError, trio.TooSlowError) as exc:
            retry = 1.0
            logger.debug("tablet copy request of %s to %s: %s", req.tablet_id, dest, exc)
        finally:
            self._requests[key] = trio.current_time() + retry


def _count_copy_end(job: CopyJob, result: str, counts: TServerMetrics) -> None:
    """A destination copy ended: its result, bytes and time counted; a finished one
    logged with its size, rate and source (a failed one was logged by the caller)."""
    seconds = time.monotonic() - job.started
    done = job.progress.bytes_done if job.progress is not None else 0
    counts.copies_finished[result].inc()
    counts.copy_bytes.inc(done)
    counts.copy_seconds.observe(seconds)
    if result == "ok":
        rate = done / seconds / (1 << 20) if seconds > 0 else 0.0
        logger.info("tablet copy of %s from %s finished: %d bytes in %.2f s (%.1f MiB/s)",
                    job.tablet_id, job.source_uuid, done, seconds, rate)
    elif result == "cancelled":
        logger.info("tablet copy of %s from %s cancelled after %.2f s", job.tablet_id,
                    job.source_uuid, seconds)


class _TrioThreadLog:
    """A Log seen from a worker thread: its methods run in the trio thread (where the Log
    lives and is not thread-safe)."""

    def __init__(self, log: Any) -> None:
        self._log = log

    def segments(self) -> Any:
        return trio.from_thread.run_sync(self._log.segments)

    def anchor(self, index: int, owner: str) -> Any:
        return _TrioThreadAnchor(trio.from_thread.run_sync(self._log.anchor, index, owner))


class _TrioThreadAnchor:
    def __init__(self, anchor: Any) -> None:
        self._anchor = anchor

    def update(self, index: int) -> None:
        trio.from_thread.run_sync(self._anchor.update, index)

    def release(self) -> None:
        try:
            trio.from_thread.run_sync(self._anchor.release)
        except RuntimeError:  # called from the trio thread itself (end, expiry, close)
            self._anchor.release()


__all__ = ["CopyJob", "RpcCopySource", "TabletCopies", "TracedCopyTarget"]
