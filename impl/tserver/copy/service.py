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

import functools
import logging
import math
import time
from typing import TYPE_CHECKING, Any

import attrs
import trio

from revivify.impl.rpc import CallContext, RpcError, open_rpc_client
from revivify.impl.storage.values import ConsensusMeta, DataState, OpId

from . import api
from .copy import (
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
from .lifecycle import DiskView, cmeta_view, opid_pair

if TYPE_CHECKING:
    from .server import TabletServer

logger = logging.getLogger(__name__)

EXPECTED_STATES = ("DOES_NOT_EXIST", "DELETED", "READY")


class TracedCopyTarget(LocalCopyTarget):
    """The destination's durable steps; the COPYING superblock records steps 3 and 4."""

    def _record(self, **changes: Any) -> None:
        sb = self.metadata.load_superblock(self.tablet_id)
        assert sb is not None and sb.data_state is DataState.COPYING
        self.metadata.write_superblock(attrs.evolve(sb, **changes))

    def wal_downloaded(self, last_opid: OpId | None) -> None:
        self._record(copy_step="WAL", copy_wal_last=last_opid)

    def block_downloaded(self, block_id: str) -> None:
        sb = self.metadata.load_superblock(self.tablet_id)
        assert sb is not None
        self._record(copy_step="BLOCKS_PARTIAL", live_blocks=(*sb.live_blocks, block_id))

    def blocks_done(self) -> None:
        self._record(copy_step="BLOCKS_DONE")


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

    def __init__(self, server: TabletServer, *, max_concurrent: int, session_idle: float,
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

    def current_state(self, tablet_id: str) -> tuple[str, DiskView | None]:
        """(data state for StartTabletCopy's checks, the durable view if not running)."""
        server = self.server
        if tablet_id in server.replicas:
            return "READY", None
        view = server.lifecycle.view_of(tablet_id)
        if view is not None:
            return view.data_state, view
        return "DOES_NOT_EXIST", None

    def state_now(self, tablet_id: str, view: DiskView | None) -> dict[str, Any]:
        """The durable state to report with an stc event."""
        server = self.server
        replica = server.replicas.get(tablet_id)
        if replica is not None:
            return replica.trace_state()
        if view is not None:
            return view.state()
        _, quarantine = server.lifecycle.quarantine_view(tablet_id)
        return DiskView("DOES_NOT_EXIST", wal=server.lifecycle.wal_at_rest(tablet_id),
                        wal_last=(0, 0), blocks="ABSENT", quarantine=quarantine).state()

    def last_logged(self, tablet_id: str, view: DiskView | None) -> tuple[int, int]:
        replica = self.server.replicas.get(tablet_id)
        if replica is not None:
            st = replica.core.status()
            return (st.last_term, st.last_index)
        return view.last_logged() if view is not None else (0, 0)

    async def on_start_tablet_copy(self, req: api.StartTabletCopy,
                                   ctx: CallContext) -> api.Ack:
        server = self.server
        if req.expected_state not in EXPECTED_STATES:
            raise api.InvalidArgument(f"expected_state {req.expected_state!r} is not one of "
                                      f"{', '.join(EXPECTED_STATES)}")
        if req.caller_term < 0:
            raise api.InvalidArgument(f"caller_term {req.caller_term} is negative")
        if req.source_uuid == server.uuid:
            raise api.InvalidArgument("the copy source is this server itself")
        from .server import split_address  # (server imports this module)

        try:
            split_address(req.source_address)
        except ValueError as exc:
            raise api.InvalidArgument(str(exc)) from None
        if len(self.jobs) >= self.max_concurrent and req.tablet_id not in self.jobs:
            raise api.CopyRefused("THROTTLED", f"{len(self.jobs)} copies are running here "
                                  f"(at most {self.max_concurrent}); ask again later")
        tablet_id = req.tablet_id
        state, view = self.current_state(tablet_id)
        last = self.last_logged(tablet_id, view)
        checks = [
            ("ALREADY_IN_PROGRESS", tablet_id in server.lifecycle.in_progress,
             "a deletion or a copy of this tablet is in flight"),
            ("ILLEGAL_STATE", state != req.expected_state,
             f"the replica is {state}, the caller expected {req.expected_state}"),
            ("STALE_TERM", req.caller_term < last[0],
             f"the caller's term {req.caller_term} is below this replica's last logged "
             f"term {last[0]}"),
            ("OPID_MISMATCH", req.last_opid is not None and tuple(req.last_opid) != last,
             f"the caller expects last OpId {req.last_opid}, this replica's is {last}"),
        ]
        failed = next(((reason, detail) for reason, bad, detail in checks if bad), None)
        args = {"caller": req.caller_uuid, "caller_term": req.caller_term,
                "expected_state": req.expected_state, "has_opid": req.last_opid is not None,
                "opid_term": req.last_opid[0] if req.last_opid else 0,
                "opid_index": req.last_opid[1] if req.last_opid else 0}
        if failed is not None:
            server.tracer.event("stc_reject", {**args, "answer": failed[0], "reason": failed[0]},
                                self.state_now(tablet_id, view), tablet=tablet_id)
            raise api.CopyRefused(*failed)
        server.tracer.event("stc_accept", {**args, "answer": "OK"},
                            self.state_now(tablet_id, view), tablet=tablet_id)
        job = CopyJob(tablet_id, req.source_uuid, req.source_address)
        self.jobs[tablet_id] = job
        server.lifecycle.in_progress.add(tablet_id)
        server.start_background(lambda: self._run_job(job, state))
        return api.Ack()

    async def _run_job(self, job: CopyJob, state: str) -> None:
        lifecycle = self.server.lifecycle
        tablet_id = job.tablet_id
        box: list[DiskView] = []  # the tablet's durable view, once the job has one
        reason = "cancelled by an operator"
        try:
            with job.scope:
                await self._steps(job, state, box)
                return
        except Exception as exc:
            reason = str(exc) or type(exc).__name__
            logger.warning("tablet copy of %s from %s failed: %s", tablet_id, job.source_uuid,
                           reason)
        except BaseException:
            reason = "the server is stopping"
            raise
        finally:
            self.jobs.pop(tablet_id, None)
            try:
                if box and box[0].data_state != "READY":  # before the commit point
                    with trio.CancelScope(shield=True):
                        await self._abort(tablet_id, box[0], reason)
            finally:
                lifecycle.in_progress.discard(tablet_id)
                lifecycle.in_flight.pop(tablet_id, None)

    async def _steps(self, job: CopyJob, state: str, box: list[DiskView]) -> None:
        lifecycle = self.server.lifecycle
        tablet_id = job.tablet_id
        if state == "READY":  # tombstone it first (its checks all passed)
            view = await lifecycle.shutdown(tablet_id)
            view = await lifecycle.tombstone_steps(tablet_id, view, start_voter=False)
        elif state == "DELETED":
            await lifecycle.stop_voter(tablet_id)
            view = lifecycle.tombstones[tablet_id]
        else:
            _, quarantine = lifecycle.quarantine_view(tablet_id)
            view = DiskView("DOES_NOT_EXIST", wal=lifecycle.wal_at_rest(tablet_id),
                            wal_last=(0, 0), blocks="ABSENT", quarantine=quarantine)
        box.append(view)
        lifecycle.in_flight[tablet_id] = view
        await self._copy(job, view)

    async def _abort(self, tablet_id: str, view: DiskView, reason: str) -> None:
        """copy_abort; a COPYING replica then tombstones itself (deletion steps 2-6)."""
        server = self.server
        lifecycle = server.lifecycle
        if view.data_state == "READY":
            return  # past the commit point: the replica is READY (startup will run it)
        await lifecycle.stop_voter(tablet_id)
        server.tracer.event("copy_abort", {"reason": reason}, view.state(), tablet=tablet_id)
        if view.data_state == "COPYING":
            await lifecycle.tombstone_steps(tablet_id, view)
        elif view.data_state == "DELETED":
            lifecycle.tombstones[tablet_id] = view
            lifecycle.start_voter(tablet_id, view)

    async def _copy(self, job: CopyJob, view: DiskView) -> None:
        server = self.server
        lifecycle = server.lifecycle
        tablet_id = job.tablet_id
        lifecycle.tombstones.pop(tablet_id, None)
        target = TracedCopyTarget(server.layout, server.metadata, tablet_id)

        async def on_step(event: str, facts: dict[str, Any]) -> None:
            args: dict[str, Any] = {}
            if event == "copy_begin":
                view.data_state, view.sb_qdir = "COPYING", False
                args = {"source": facts["source"]}
            elif event == "copy_merge_cmeta":
                remote: ConsensusMeta = facts["remote"]
                result: ConsensusMeta = facts["result"]
                args = {"remote_term": remote.current_term,
                        "remote_config_index": remote.committed_config.opid_index or 0,
                        "local": cmeta_view(facts["local"]), "remote": cmeta_view(remote),
                        "result": cmeta_view(result)}
                view.cmeta = result
            elif event == "copy_download_wal":
                view.wal, view.wal_last = "LIVE", opid_pair(facts["last_opid"])
                args = {"remote_last_term": view.wal_last[0],
                        "remote_last_index": view.wal_last[1]}
            elif event == "copy_download_block":
                view.blocks = "PARTIAL"
            elif event == "copy_blocks_done":
                view.blocks = "PRESENT"
            elif event == "copy_mark_ready":
                view.data_state, view.tombstone_last = "READY", (0, 0)
            lifecycle.trace(tablet_id, event, view, args)
            if event == "copy_merge_cmeta":  # vote again, from the merged cmeta
                lifecycle.start_voter(tablet_id, view)
            elif event == "copy_blocks_done":  # the commit point follows: stop voting
                await lifecycle.stop_voter(tablet_id)

        host, port = _split(job.source_address)
        async with open_rpc_client(host, port, job.source_uuid, server.uuid,
                                   lamport=server.lamport_hooks,
                                   app_errors=(*api.APP_ERRORS, *COPY_ERRORS),
                                   network=server.network) as client:
            source = RpcCopySource(client, tablet_id, server.uuid)
            await run_copy(source, target, progress=lambda p: setattr(job, "progress", p),
                           blocking=server.blocking, chunk_size=self.chunk_size,
                           on_step=on_step, durable=functools.partial(_one_step, view))
        # 6. Start the replica from what was downloaded.
        with trio.CancelScope(shield=True):
            await lifecycle.stop_voter(tablet_id)
            await server.start_copied(tablet_id, view)

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
        replica = server.replicas.get(req.tablet_id)
        if replica is None or replica.state != "RUNNING":
            state = "not hosted here" if replica is None else replica.state
            raise CopySourceUnavailable(req.tablet_id, f"the replica is {state}")
        if req.requester_uuid != ctx.src_uuid:
            raise api.InvalidArgument(f"requester {req.requester_uuid} is not the caller "
                                      f"{ctx.src_uuid}")
        self.sessions.source_uuid = server.uuid
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
        for tablet_id, replica in list(server.replicas.items()):
            if replica.state != "RUNNING":
                continue
            st = replica.core.status()
            if st.role.value != "LEADER":
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
            host, port = _split(address)
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


async def _one_step(view: DiskView, step: Any) -> Any:
    """A durable copy step and its trace event, never separated by a cancellation, and
    the tablet's only durable step in flight (``DiskView.step_lock``)."""
    async with view.step_lock:
        with trio.CancelScope(shield=True):
            return await step()


def _split(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host, int(port)


__all__ = ["CopyJob", "RpcCopySource", "TabletCopies", "TracedCopyTarget"]
