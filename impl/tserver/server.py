"""The tablet server: one process hosting tablet replicas, served over RPC.

Theory of operation
-------------------
Start (``serve_tserver``):
1. Open the directory; on first start format it (instance file with a new UUID) and trace
   ``server_format``. The incarnation number is one more than the highest this UUID's trace
   files show, so every process incarnation has its own trace file.
2. Trace ``server_start``.
3. Startup: for every tablet with a superblock, open its data store, its cmeta and its WAL
   (recovery cuts a torn tail; a corrupt WAL or a missing block fails verification), and
   trace ``startup``: READY (the replica runs) or FAILED with the reason (the replica stays
   offline and is listed FAILED; the server serves its other tablets).
4. Serve RPC; tick every replica's core every ``tick`` seconds; flush memory stores that
   grew past the threshold.
Stop (SIGTERM, SIGINT, or the caller's cancel): stop serving, close every WAL (drains
pending appends), trace ``server_stop``. A kill -9 instead loses nothing acknowledged: an
acknowledged write was committed, so a majority fsync'd it.

Raft messages between servers are one-way ``Raft.Message`` calls, batched per destination
by one sender task per peer (``PeerSender``); a message that cannot be delivered is
dropped (Raft retries by itself: heartbeats, re-sent appends, new elections).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import posixpath
import re
import secrets
import time
import uuid as uuidlib
import zlib
from collections.abc import AsyncIterator
from typing import Any

import attrs
import trio

from revivify.impl.consensus import core as raft
from revivify.impl.consensus.messages import Config, Message
from revivify.impl.rpc import (
    CallContext,
    ConnectionClosed,
    FrameTooLarge,
    LamportHooks,
    RpcError,
    RpcServer,
    Service,
    open_rpc_client,
    serve_rpc,
)
from revivify.impl.rpc.transport import Network
from revivify.impl.storage.blocks import BlockManager
from revivify.impl.storage.disk import Disk, OsDisk
from revivify.impl.storage.errors import NotFormatted, StorageError
from revivify.impl.storage.layout import ServerLayout
from revivify.impl.storage.metadata import MetadataStore
from revivify.impl.storage.values import ConsensusMeta, DataState, Superblock
from revivify.impl.storage.wal import LogOptions, open_log, salvage_last_opid
from revivify.impl.tablet.errors import TabletError, WriteError
from revivify.impl.tablet.ops import WriteBatch, validate_write
from revivify.impl.tablet.store import TabletStore
from revivify.impl.trace import TraceWriter

from . import api
from .lifecycle import DiskView, Lifecycle
from .replica import (
    Replica,
    Tracer,
    config_from_storage,
    config_to_storage,
    entry_from_wal,
    fact_state,
    new_core,
)
from .stuck import watch_stop
from .tablet_copy import TabletCopies

logger = logging.getLogger(__name__)

SCAN_PAGE_BYTES = 4 << 20
_TABLET_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


@attrs.frozen
class ServerOptions:
    fs_root: str
    rpc_host: str = "127.0.0.1"
    rpc_port: int = 0
    trace_dir: str | None = None  # default: <fs_root>/traces
    tick_seconds: float = 0.05
    election_ticks: int = 10
    heartbeat_ticks: int = 2
    fsync: bool = True
    flush_threshold: int = 8 << 20
    seed: int | None = None
    # Blocking disk calls in worker threads (False: inline, for deterministic simulated
    # clusters on SimDisk under trio's MockClock).
    threads: bool = True
    fault_crash_after: str | None = None  # test-only: exit right after this traced step
    max_concurrent_copies: int = 4  # tablet copies running here at once (beyond: THROTTLED)
    copy_session_idle_seconds: float = 60.0  # a source session unused this long expires
    copy_request_seconds: float = 0.5  # how often a leader looks for peers needing a copy
    auto_copy: bool = True  # a leader asks peers that need a copy to copy from it
    log_retain_entries: int = 50_000  # entries kept behind the flushed index for lagging peers
    fault_corrupt_copy_chunks: int = 0  # test-only: corrupt the first N chunks served
    fault_slow_copy_ms: int = 0  # test-only: a copy source waits this long per chunk
    copy_chunk_bytes: int = 4 << 20  # FetchData chunk size


def next_incarnation(trace_dir: str, node: str) -> int:
    if not os.path.isdir(trace_dir):
        return 1
    best = 0
    pattern = re.compile(re.escape(node) + r"\.(\d+)\.jsonl(\.gz)?$")
    for name in os.listdir(trace_dir):
        m = pattern.match(name)
        if m:
            best = max(best, int(m.group(1)))
    return best + 1


# Entry data per RaftMessage call. A peer's queued messages for a tablet (several
# pipelined AppendRequests, each up to the core's max_append_bytes) are split into calls
# of at most this much, well under the RPC frame limit (16 MiB).
RAFT_CALL_BYTES: int = 4 << 20


def split_for_calls(messages: list[Message], limit: int) -> list[list[Message]]:
    """``messages`` in order, cut into runs of at most ``limit`` bytes of entry data
    (a run holds at least one message, however large)."""
    parts: list[list[Message]] = []
    size = 0
    for m in messages:
        n = sum(len(e.data) for e in getattr(m, "entries", ()))
        if parts and size + n <= limit:
            parts[-1].append(m)
            size += n
        else:
            parts.append([m])
            size = n
    return parts


class PeerSender:
    """Delivers Raft messages to one peer server, in order, batched, best effort."""

    def __init__(self, server: TabletServer, dest: str, address: str) -> None:
        self.server = server
        self.dest = dest
        self.address = address
        self.queue: list[tuple[str, Message]] = []
        self.wake = trio.Event()

    def push(self, tablet_id: str, messages: list[Message]) -> None:
        if len(self.queue) > 10_000:  # a dead peer: drop the oldest (Raft re-sends)
            del self.queue[:5_000]
        self.queue.extend((tablet_id, m) for m in messages)
        self.wake.set()

    async def run(self) -> None:
        host, port = split_address(self.address)
        backoff = 0.05
        while True:
            try:
                async with open_rpc_client(host, port, self.dest, self.server.uuid,
                                           lamport=self.server.lamport_hooks,
                                           app_errors=api.APP_ERRORS,
                                           network=self.server.network) as client:
                    backoff = 0.05
                    while True:
                        while not self.queue:
                            await self.wake.wait()
                            self.wake = trio.Event()
                        batch, self.queue = self.queue, []
                        grouped: dict[str, list[Message]] = {}
                        for tablet_id, m in batch:
                            grouped.setdefault(tablet_id, []).append(m)
                        for tablet_id, messages in grouped.items():
                            for part in split_for_calls(messages, RAFT_CALL_BYTES):
                                try:
                                    await client.call(api.RAFT_MESSAGE,
                                                      api.RaftMessages(tablet_id, part),
                                                      api.Ack)
                                except api.TabletNotFound:
                                    self.server.peer_missing(tablet_id, self.dest)
                                except api.TabletNotRunning:
                                    pass  # deleting, copying, failed: nothing to tell Raft
            except (RpcError, OSError) as exc:
                if isinstance(exc, FrameTooLarge):
                    # Not the network: a message this server built is over the frame
                    # limit. Raft re-sends, so say it loudly rather than loop in silence.
                    logger.error("to %s at %s: a Raft message is too large to send: %s",
                                 self.dest, self.address, exc)
                elif not isinstance(exc, ConnectionClosed):
                    logger.debug("to %s at %s: %s", self.dest, self.address, exc)
                self.queue.clear()  # stale by the time we reconnect
                await trio.sleep(backoff)
                backoff = min(backoff * 2, 1.0)


def _offline_info(tablet_id: str, state: str, reason: str, view: DiskView) -> api.ReplicaInfo:
    """A replica that does not run (a tombstone, a copy in progress), from its durable state
    (a voter's votes move its cmeta on)."""
    cm = view.cmeta
    return api.ReplicaInfo(
        tablet_id, state, reason, "", cm.current_term if cm else 0,
        cm.voted_for if cm else None, None, view.last_logged(), 0, 0,
        (cm.committed_config.opid_index or 0) if cm else 0,
        list(config_from_storage(cm.committed_config).peers) if cm else [], "NONE")


def split_address(address: str, *, allow_any_port: bool = False) -> tuple[str, int]:
    """HOST:PORT -> (host, port); ValueError naming the problem. Port 0 ("any free port")
    only where ``allow_any_port`` (a bind address, never a peer's address)."""
    host, sep, port = address.rpartition(":")
    low = 0 if allow_any_port else 1
    if not sep or not host or not port.isdigit() or not low <= int(port) < 65536:
        raise ValueError(f"bad address {address!r}: expected HOST:PORT")
    return host, int(port)


class TabletServer:
    """The process-wide state: identity, directory, replicas, peers, trace."""

    def __init__(self, options: ServerOptions, disk: Disk, network: Network | None) -> None:
        self.options = options
        self.disk = disk
        self.network = network
        self.layout = ServerLayout(options.fs_root, disk)
        self.metadata = MetadataStore(self.layout)
        self.blocks = BlockManager(self.layout)
        self.uuid = ""
        self.address = ""
        self.trace: Tracer | None = None
        self.replicas: dict[str, Replica] = {}
        self.failed: dict[str, str] = {}  # tablet id -> reason (offline replicas)
        self.failed_views: dict[str, DiskView] = {}  # their durable state (for deletion)
        self.hosts: dict[str, tuple[trio.CancelScope, trio.Event]] = {}
        self.lifecycle = Lifecycle(self, options.fault_crash_after)
        self.copies = TabletCopies(self, max_concurrent=options.max_concurrent_copies,
                                   session_idle=options.copy_session_idle_seconds,
                                   request_interval=options.copy_request_seconds,
                                   chunk_size=options.copy_chunk_bytes)
        self.peers: dict[str, PeerSender] = {}
        self._nursery: trio.Nursery | None = None
        self._create_lock = trio.Lock()
        self._creating: set[str] = set()
        self.lamport_hooks = LamportHooks(get=self._lamport_get, observe=self._lamport_observe)
        self.raft_options = raft.Options(election_ticks=options.election_ticks,
                                         heartbeat_ticks=options.heartbeat_ticks)
        self._rng_seed = options.seed if options.seed is not None else secrets.randbits(32)

    async def blocking(self, fn: Any, *args: Any) -> Any:
        """Run a blocking disk call: in a worker thread, or inline (``threads=False``)."""
        if self.options.threads:
            return await trio.to_thread.run_sync(fn, *args)
        result = fn(*args)
        await trio.lowlevel.checkpoint()
        return result

    def log_options(self) -> LogOptions:
        # Without fsync an append is a write() into the page cache: cheaper inline than the
        # two thread hand-offs of the appender thread.
        return LogOptions(fsync=self.options.fsync,
                          use_threads=self.options.threads and self.options.fsync)

    def _lamport_get(self) -> int:
        return self.trace.lamport if self.trace else 0

    def _lamport_observe(self, remote: int) -> None:
        if self.trace:
            self.trace.observe(remote)

    @property
    def tracer(self) -> Tracer:
        assert self.trace is not None
        return self.trace

    # ------------------------------------------------------------------ start / stop

    def open_directory(self) -> bool:
        """Open (or format) the directory; True if it was formatted now."""
        try:
            info = self.layout.open()
            formatted = False
        except NotFormatted:
            info = self.layout.format(uuidlib.uuid4().hex, time.time_ns())
            formatted = True
        self.layout.remove_stale_temps()
        self.uuid = info.server_uuid
        trace_dir = self.options.trace_dir or posixpath.join(self.options.fs_root, "traces")
        self.trace = Tracer(TraceWriter(trace_dir, self.uuid,
                                        next_incarnation(trace_dir, self.uuid)))
        if formatted:
            self.trace.event("server_format")
        self.trace.event("server_start")
        return formatted

    async def start_tablets(self) -> None:
        for tablet_id in self.layout.tablet_ids():
            await self._start_tablet(tablet_id)

    async def _start_tablet(self, tablet_id: str) -> None:
        """Seed 001 "Tablet startup" for a READY tablet (the lifecycle cases come later)."""
        sb = self.metadata.load_superblock(tablet_id)
        if sb is not None and sb.data_state is DataState.DELETED:
            await self.lifecycle.start_deleted(tablet_id, sb)
            return
        if sb is not None and sb.data_state is DataState.COPYING:
            await self.lifecycle.start_copying(tablet_id, sb)
            return
        if sb is None:
            return  # a superblock removed meanwhile (a full delete): nothing here
        cmeta = self.metadata.load_cmeta(tablet_id)
        if cmeta is None:
            self._startup_failed(tablet_id, None, "LIVE", "PRESENT",
                                 f"consensus metadata {self.layout.cmeta_path(tablet_id)} "
                                 "is missing")
            return
        try:
            store = await self.blocking(
                TabletStore.open, self.layout, self.metadata, self.blocks, tablet_id)
        except (TabletError, StorageError) as exc:
            self._startup_failed(tablet_id, cmeta, "LIVE", "DAMAGED", f"data blocks: {exc}")
            return
        assert self._nursery is not None
        await self._nursery.start(self._host, tablet_id, cmeta, store, "startup")

    async def start_copied(self, tablet_id: str, view: DiskView) -> None:
        """Copy step 6: start the replica a tablet copy has just made READY."""
        cmeta = self.metadata.load_cmeta(tablet_id)
        assert cmeta is not None, "a copy merges the cmeta before it marks the replica READY"
        try:
            store = await self.blocking(
                TabletStore.open, self.layout, self.metadata, self.blocks, tablet_id)
        except (TabletError, StorageError) as exc:
            self._startup_failed(tablet_id, cmeta, "LIVE", "DAMAGED", f"data blocks: {exc}")
            return
        assert self._nursery is not None
        await self._nursery.start(self._host, tablet_id, cmeta, store, "copy")

    def _startup_failed(self, tablet_id: str, cmeta: ConsensusMeta | None, wal: str,
                        blocks: str, reason: str) -> None:
        """Startup case FAILED: the replica stays offline, listed with its reason. The
        trace reports the WAL's last OpId as the segments that still verify record it."""
        last = salvage_last_opid(self.disk, self.layout.wal_dir(tablet_id)) \
            if self.disk.is_dir(self.layout.wal_dir(tablet_id)) else None
        wal_last = (last.term, last.index) if last else (0, 0)
        logger.error("tablet %s failed to start: %s", tablet_id, reason)
        _, quarantine = self.lifecycle.quarantine_view(tablet_id)
        view = DiskView("READY", cmeta=cmeta, wal=wal, wal_last=wal_last, blocks=blocks,
                        quarantine=quarantine)
        self.failed[tablet_id] = reason
        self.failed_views[tablet_id] = view
        self.tracer.event("startup", {"case": "FAILED", "reason": reason}, view.state(),
                          tablet=tablet_id)

    async def _host(self, tablet_id: str, cmeta: ConsensusMeta, store: Any,
                    how: str, *, task_status: trio.TaskStatus[None]) -> None:
        """The task that owns one replica: its WAL (open_log's tasks live here) and its
        driver. Started (``task_status``) once the replica runs or has failed to start;
        ``stop_replica`` cancels it (deletion step 1)."""
        scope, done = trio.CancelScope(), trio.Event()
        self.hosts[tablet_id] = (scope, done)
        try:
            with scope:
                await self._run_hosted(tablet_id, cmeta, store, how, task_status)
        except StorageError as exc:
            if how == "create":
                raise
            self._startup_failed(tablet_id, cmeta, "DAMAGED", "PRESENT", f"WAL: {exc}")
            task_status.started()
        finally:
            self.replicas.pop(tablet_id, None)
            self.hosts.pop(tablet_id, None)
            done.set()

    async def _run_hosted(self, tablet_id: str, cmeta: ConsensusMeta, store: Any,
                          how: str, task_status: trio.TaskStatus[None]) -> None:
        """``how``: "create" (CreateTablet), "startup", or "copy" (copy step 6)."""
        create = how == "create"
        async with open_log(self.disk, self.layout.wal_dir(tablet_id), tablet_id,
                            self.log_options(), create_if_missing=create) as log:
            if create:
                # CreateTablet: cmeta and WAL exist; the superblock is the commit point.
                await self.blocking(self.metadata.write_superblock,
                                    Superblock(tablet_id, DataState.READY))
                store = await self.blocking(
                    TabletStore.open, self.layout, self.metadata, self.blocks, tablet_id)
            base = store.flushed_opid
            base_term, base_index = (base.term, base.index) if base else (0, 0)
            entries = [entry_from_wal(e) for e in await log.read_entries(base_index + 1)]
            core = new_core(me=self.uuid, cmeta=cmeta, entries=entries,
                            base_term=base_term, base_index=base_index,
                            applied_index=store.applied_index,
                            seed=self._rng_seed ^ zlib.crc32(tablet_id.encode()),
                            options=self.raft_options)
            replica = self._make_replica(tablet_id, core, log, store)
            _, replica.quarantine = self.lifecycle.quarantine_view(tablet_id)
            st = core.status()
            state = fact_state(raft.Fact("", {}, st.term, st.voted_for,
                                         st.committed_config.opid_index, st.last_term,
                                         st.last_index), replica.quarantine)
            if create:
                self.tracer.event("create_tablet", {
                    "config_index": 0,
                    "voters": sorted(core.committed_config.voters())}, state, tablet=tablet_id)
            elif how == "copy":
                self.replicas[tablet_id] = replica
                self.tracer.event("copy_start_replica", {}, state, tablet=tablet_id)
                if self.lifecycle.fault_crash_after == "copy_start_replica":
                    os._exit(75)
            else:
                self.tracer.event("startup", {"case": "READY"}, state, tablet=tablet_id)
            self.replicas[tablet_id] = replica
            task_status.started()
            await replica.run()
            # run() returns only when the replica failed: keep it listed, stay idle
            # until it is deleted or the server stops.
            await trio.sleep_forever()

    async def stop_replica(self, tablet_id: str) -> tuple[int, int]:
        """Stop a running replica (its driver and WAL) and return the WAL's last durable
        OpId. Callers waiting on it get TabletNotRunning."""
        replica = self.replicas[tablet_id]
        scope, done = self.hosts[tablet_id]
        replica.fail("the replica is being deleted")
        scope.cancel()
        await done.wait()
        last = replica.log.last_opid
        return (last.term, last.index) if last else (0, 0)

    def _make_replica(self, tablet_id: str, core: raft.RaftCore, log: Any,
                      store: TabletStore) -> Replica:
        return Replica(tablet_id=tablet_id, me=self.uuid, core=core, log=log, store=store,
                       metadata=self.metadata, trace=self.tracer, blocking=self.blocking,
                       send=self.send,
                       address_of=functools.partial(self.address_of, tablet_id),
                       flush_threshold=self.options.flush_threshold,
                       retain_entries=self.options.log_retain_entries)

    def address_of(self, tablet_id: str, uuid: str) -> str | None:
        holder = self.replicas.get(tablet_id) or self.lifecycle.voters.get(tablet_id)
        if holder is None:
            return None
        peer = holder.core.active_config.peer(uuid)
        return peer.address if peer else None

    def peer_missing(self, tablet_id: str, peer: str) -> None:
        replica = self.replicas.get(tablet_id)
        if replica is not None and replica.state == "RUNNING":
            replica.peer_missing(peer)

    def start_background(self, fn: Any) -> None:
        assert self._nursery is not None
        self._nursery.start_soon(fn)

    # ------------------------------------------------------------------ Raft transport

    def send(self, dest: str, tablet_id: str, messages: list[Message]) -> None:
        # A reply may go to a server no longer in the config: any address we know will do.
        address = self.address_of(tablet_id, dest) or self._known_address(dest)
        if address is None:
            return
        sender = self.peers.get(dest)
        if sender is None or sender.address != address:
            sender = PeerSender(self, dest, address)
            self.peers[dest] = sender
            assert self._nursery is not None
            self._nursery.start_soon(sender.run)
        sender.push(tablet_id, messages)

    def _known_address(self, uuid: str) -> str | None:
        for r in self.replicas.values():
            p = r.core.active_config.peer(uuid)
            if p is not None:
                return p.address
        sender = self.peers.get(uuid)
        return sender.address if sender else None

    # ------------------------------------------------------------------ RPC handlers

    def _replica(self, tablet_id: str) -> Replica:
        replica = self.replicas.get(tablet_id)
        if replica is None:
            if tablet_id in self.failed:
                raise api.TabletNotRunning(tablet_id, "FAILED", self.failed[tablet_id])
            if tablet_id in self.lifecycle.tombstones:
                raise api.TabletNotRunning(tablet_id, "TOMBSTONED", "")
            if tablet_id in self.copies.jobs:
                raise api.TabletNotRunning(tablet_id, "COPYING", "")
            if tablet_id in self.lifecycle.in_progress:
                raise api.TabletNotRunning(tablet_id, "DELETING", "")
            raise api.TabletNotFound(tablet_id)
        return replica

    async def on_raft_message(self, req: api.RaftMessages, ctx: CallContext) -> api.Ack:
        for m in req.messages:
            if m.src != ctx.src_uuid:
                raise api.InvalidArgument(f"message from {m.src} sent by {ctx.src_uuid}")
        voter = self.lifecycle.voters.get(req.tablet_id)
        if voter is not None:
            voter.deliver(list(req.messages))
            return api.Ack()
        replica = self._replica(req.tablet_id)
        if replica.state == "RUNNING":
            replica.deliver(list(req.messages))
        return api.Ack()

    async def on_status(self, req: api.Empty, ctx: CallContext) -> api.ServerStatus:
        return api.ServerStatus(self.uuid, self.address, self._replica_infos())

    def _replica_infos(self) -> list[api.ReplicaInfo]:
        out = [r.info() for r in self.replicas.values()]
        for tablet_id, reason in self.failed.items():
            out.append(api.ReplicaInfo(tablet_id, "FAILED", reason, "", 0, None, None, (0, 0),
                                       0, 0, 0, [], "NONE"))
        for tablet_id, t in self.lifecycle.tombstones.items():
            out.append(_offline_info(tablet_id, "TOMBSTONED", "", t))
        listed = {r.tablet_id for r in out}
        for tablet_id in sorted(self.lifecycle.in_progress - listed - self._creating):
            view = self.lifecycle.in_flight.get(tablet_id) or DiskView("DOES_NOT_EXIST")
            job = self.copies.jobs.get(tablet_id)
            if job is None:
                out.append(_offline_info(tablet_id, "DELETING", "", view))
                continue
            progress = job.info()
            out.append(_offline_info(tablet_id, "COPYING", f"from {job.source_uuid}: "
                                     f"{progress.phase}, {progress.bytes_done} of "
                                     f"{progress.total_bytes} bytes", view))
        return sorted(out, key=lambda r: r.tablet_id)

    async def on_consensus_state(self, req: api.TabletRef, ctx: CallContext) -> api.ReplicaInfo:
        if req.tablet_id not in self.replicas:
            found = [r for r in self._replica_infos() if r.tablet_id == req.tablet_id]
            if found:
                return found[0]
        return self._replica(req.tablet_id).info()

    async def on_create_tablet(self, req: api.CreateTablet,
                               ctx: CallContext) -> api.TabletCreated:
        if not _TABLET_ID.match(req.tablet_id):
            raise api.InvalidArgument(f"bad tablet id {req.tablet_id!r}: 1-64 of [A-Za-z0-9_-]")
        uuids = [p.uuid for p in req.peers]
        if self.uuid not in uuids:
            raise api.InvalidArgument(f"the config {uuids} does not include this server "
                                      f"({self.uuid})")
        if len(set(uuids)) != len(uuids):
            raise api.InvalidArgument(f"duplicate peers in {uuids}")
        if not any(p.member_type == "VOTER" for p in req.peers):
            raise api.InvalidArgument("the config has no voter")
        for p in req.peers:
            try:
                split_address(p.address)
            except ValueError as exc:
                raise api.InvalidArgument(str(exc)) from None
        async with self._create_lock:  # only the check and the reservation: creations of
            # different tablets then make their files durable concurrently
            if req.tablet_id in self.replicas or req.tablet_id in self.failed or \
                    req.tablet_id in self.lifecycle.in_progress or \
                    self.metadata.load_superblock(req.tablet_id) is not None:
                raise api.TabletAlreadyExists(req.tablet_id)
            self.lifecycle.in_progress.add(req.tablet_id)
            self._creating.add(req.tablet_id)
        try:
            await self._create(req.tablet_id, Config(0, tuple(req.peers)))
        finally:
            self.lifecycle.in_progress.discard(req.tablet_id)
            self._creating.discard(req.tablet_id)
        return api.TabletCreated(req.tablet_id)

    async def _create(self, tablet_id: str, config: Config) -> None:
        """CreateTablet: cmeta, then the WAL directory, then the superblock (commit point)."""
        cmeta = ConsensusMeta(tablet_id, 0, None, config_to_storage(config))
        await self.blocking(self.metadata.write_cmeta, cmeta)
        assert self._nursery is not None
        await self._nursery.start(self._host, tablet_id, cmeta, None, "create")

    async def on_delete_tablet(self, req: api.DeleteTablet, ctx: CallContext) -> api.Ack:
        await self.lifecycle.delete(req.tablet_id, req.mode, req.cas_config_index)
        return api.Ack()

    async def on_step_down(self, req: api.StepDown, ctx: CallContext) -> api.Ack:
        await self._replica(req.tablet_id).step_down(req.new_leader)
        return api.Ack()

    async def on_change_config(self, req: api.ChangeConfig,
                               ctx: CallContext) -> api.ConfigChanged:
        change = req.change
        if change.kind == "ADD":
            try:
                split_address(change.peer.address)
            except ValueError as exc:
                raise api.InvalidArgument(str(exc)) from None
        index = await self._replica(req.tablet_id).change_config(change, req.cas_config_index)
        return api.ConfigChanged(index)

    async def on_write(self, req: api.Write, ctx: CallContext) -> api.Written:
        batch = WriteBatch(req.client_id, req.seq, list(req.ops))
        try:
            validate_write(batch)
        except WriteError as exc:
            raise api.InvalidArgument(str(exc)) from None
        return await self._replica(req.tablet_id).write(batch)

    async def on_read(self, req: api.Read, ctx: CallContext) -> api.ReadResult:
        replica = self._replica(req.tablet_id)
        await replica.read_barrier()
        value = replica.store.get(req.key)
        return api.ReadResult(value is not None, value or b"")

    async def on_scan(self, req: api.Scan, ctx: CallContext) -> api.ScanResult:
        if req.limit < 1 or req.limit > 100_000:
            raise api.InvalidArgument(f"scan limit {req.limit} not in 1..100000")
        replica = self._replica(req.tablet_id)
        await replica.read_barrier()
        rows = replica.store.scan(req.start, req.end, req.limit + 1)
        # A page also stops at SCAN_PAGE_BYTES (at least one row), far below the RPC frame
        # limit: the client continues after the last key returned.
        size, cut = 0, min(len(rows), req.limit)
        for n, (key, value) in enumerate(rows[:cut]):
            size += len(key) + len(value) + 16
            if size > SCAN_PAGE_BYTES and n > 0:
                cut = n
                break
        return api.ScanResult(rows[:cut], len(rows) > cut)

    def service(self) -> Service:
        s = Service("tserver")
        s.register(api.RAFT_MESSAGE, api.RaftMessages, api.Ack, self.on_raft_message)
        s.register(api.ADMIN_STATUS, api.Empty, api.ServerStatus, self.on_status)
        s.register(api.ADMIN_CREATE_TABLET, api.CreateTablet, api.TabletCreated,
                   self.on_create_tablet)
        s.register(api.ADMIN_CONSENSUS_STATE, api.TabletRef, api.ReplicaInfo,
                   self.on_consensus_state)
        s.register(api.ADMIN_STEP_DOWN, api.StepDown, api.Ack, self.on_step_down)
        s.register(api.ADMIN_DELETE_TABLET, api.DeleteTablet, api.Ack, self.on_delete_tablet)
        s.register(api.ADMIN_CHANGE_CONFIG, api.ChangeConfig, api.ConfigChanged,
                   self.on_change_config)
        s.register(api.DATA_WRITE, api.Write, api.Written, self.on_write)
        s.register(api.DATA_READ, api.Read, api.ReadResult, self.on_read)
        s.register(api.DATA_SCAN, api.Scan, api.ScanResult, self.on_scan)
        self.copies.register(s)
        return s

    # ------------------------------------------------------------------ background

    async def ticker(self) -> None:
        while True:
            await trio.sleep(self.options.tick_seconds)
            for voter in list(self.lifecycle.voters.values()):
                voter.tick()
            for replica in list(self.replicas.values()):
                if replica.state == "RUNNING":
                    replica.tick()
                    if replica.wants_flush():
                        assert self._nursery is not None
                        self._nursery.start_soon(replica.flush)


@contextlib.asynccontextmanager
async def open_tserver(options: ServerOptions, *, disk: Disk | None = None,
                       network: Network | None = None) -> AsyncIterator[TabletServer]:
    """Run a tablet server until the block exits (then stop it cleanly: server_stop)."""
    server = TabletServer(options, disk or OsDisk(), network)
    await server.blocking(server.open_directory)
    watch: trio.CancelScope | None = None
    try:
        async with trio.open_nursery() as nursery:
            server._nursery = nursery
            rpc: RpcServer = await nursery.start(functools.partial(
                serve_rpc, server.service(), server.uuid, options.rpc_host, options.rpc_port,
                lamport=server.lamport_hooks, network=network))
            server.address = f"{options.rpc_host}:{rpc.port}"
            await server.start_tablets()
            nursery.start_soon(server.ticker)
            nursery.start_soon(server.copies.maintain)
            try:
                yield server
            finally:
                nursery.cancel_scope.cancel()
                watch = watch_stop()  # logs what the stop waits for, if it is slow
        server.copies.sessions.close_all()
        server.tracer.event("server_stop")
    finally:
        if watch is not None:
            watch.cancel()
        if server.trace is not None:
            server.trace.writer.close()
        server.layout.release_lock()  # the directory is free the moment the server stops


__all__ = ["PeerSender", "ServerOptions", "TabletServer", "open_tserver", "split_address"]
