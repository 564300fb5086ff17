"""One tablet replica in a tablet server: the trio shell around the Raft core.

Rules of this file
------------------
* The Raft core (impl/consensus/core.py) decides; this shell only does what a batch says,
  in the batch's order: for each step, make its change durable (cmeta atomic replace, or a
  WAL append + fsync) and only then write its trace event; then send the batch's messages;
  then apply its committed entries to the tablet store; then answer confirmed reads.
* One driver task owns the core. Everyone else (RPC handlers, the ticker) hands it inputs
  through ``_submit``; the driver takes the inputs queued so far, steps them all into the
  core, and runs the resulting batch. No input reaches the core between ``ready()`` and
  ``advance()``; inputs that arrive while a batch is being made durable are queued, so the
  next batch carries all of them: that is the group commit (N concurrent writes, one fsync).
* Two lanes into the driver: client proposals (``write``) and everything else (Raft
  messages, ticks, reads, config changes, the flush's compaction). Each round the driver
  steps the second lane and walks its batches first, then steps the proposals queued by
  then and walks theirs. The reason is the plan's order (impl/consensus/plan.py): a batch
  applies its committed entries after its own WAL append, so a follower's response that
  commits write N, stepped in one batch with write N+1's proposal, would answer write N
  only after N+1's fsync: under many clients every write waited for two leader fsyncs.
  Stepping the response first answers N at once, and N+1's append starts a few
  microseconds later. Inputs queued while the driver is busy are concurrent, so stepping
  one lane before the other is an order the network could have delivered them in; each
  batch is still walked in the plan's order (every durable step traced right after it).
* A write is acknowledged only once its entry is committed and applied here (on the
  leader). If leadership is lost first its outcome is unknown: the client gets
  OperationAborted and retries with the same (client_id, seq), which the store applies at
  most once.
* Reads are linearizable without a log write: ReadIndex (the core confirms leadership with a
  heartbeat round), then the read waits until the store has applied that index.

The trace state of a step (traces/README.md): the superblock is READY, the cmeta is the
core's (term, vote, committed config index), the WAL is LIVE with the core's last OpId,
and the blocks are PRESENT: this replica only exists once created READY (copy and deletion
come with the lifecycle).
"""

from __future__ import annotations

import collections
import functools
import logging
import random
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import msgspec
import trio

from revivify.contract.events import (
    CmetaState,
    DurableState,
    QuarantineState,
    SuperblockState,
    WalState,
)
from revivify.impl.consensus import core as raft
from revivify.impl.consensus.errors import ConfigChangeRefused as CoreConfigRefused
from revivify.impl.consensus.errors import NotLeader as CoreNotLeader
from revivify.impl.consensus.errors import TransferRefused
from revivify.impl.consensus.messages import Config, ConfigChange, Entry, Message, Peer
from revivify.impl.consensus.plan import plan, walk
from revivify.impl.observe.metrics import OFF, RaftMetrics
from revivify.impl.storage.metadata import MetadataStore
from revivify.impl.storage.values import ConsensusMeta, MemberType, RaftConfig, RaftPeer
from revivify.impl.storage.wal import Log, LogEntry
from revivify.impl.tablet.ops import WriteBatch, encode_write
from revivify.impl.tablet.store import ApplyResult, TabletStore
from revivify.impl.trace import TraceWriter

from . import api
from .api import Kind
from .durable import Durable, running
from .durable_step import durable_step
from .rolewatch import RoleWatch

logger = logging.getLogger(__name__)

T = TypeVar("T")
Blocking = Callable[..., Awaitable[Any]]  # run a blocking call (a worker thread, or inline)


# What a tablet's status page shows of its trace (impl/web): the newest events per tablet,
# kept in memory as the writer wrote them (references, formatted only when a page asks), for
# at most RECENT_TABLETS tablets (the least recently traced forgotten first).
RECENT_PER_TABLET = 20
RECENT_TABLETS = 4096
RecentEvent = tuple[int, str, Any]  # (lamport clock, event name, its args)


class Tracer:
    """The process's trace writer, as the server's parts use it. ``silence()`` is a simulated
    crash (impl/testing/cluster.py): a killed process writes nothing more."""

    def __init__(self, writer: TraceWriter) -> None:
        self.writer = writer
        self.silenced = False
        self.recent: dict[str, collections.deque[RecentEvent]] = {}

    def recent_events(self, tablet: str) -> list[RecentEvent]:
        """The tablet's newest traced events, newest first."""
        return list(reversed(self.recent.get(tablet, ())))

    @property
    def lamport(self) -> int:
        return self.writer.lamport

    def observe(self, remote: int) -> None:
        self.writer.observe(remote)

    def event(self, event: str, args: dict[str, Any] | msgspec.Struct | None = None,
              state: dict[str, Any] | DurableState | None = None,
              tablet: str | None = None) -> int:
        if self.silenced:
            return self.writer.lamport
        lamport = self.writer.event(event, args, state, tablet)
        if tablet is not None:
            recent = self.recent.pop(tablet, None)  # re-inserted: the dict's order is recency
            if recent is None:
                recent = collections.deque(maxlen=RECENT_PER_TABLET)
                if len(self.recent) >= RECENT_TABLETS:
                    del self.recent[next(iter(self.recent))]
            recent.append((lamport, event, args))
            self.recent[tablet] = recent
        return lamport

    def silence(self) -> None:
        self.silenced = True


# Raft messages waiting in one replica's inbox at most (beyond: dropped, Raft re-sends).
MAX_QUEUED_MESSAGES = 4096


def config_to_storage(config: Config) -> RaftConfig:
    return RaftConfig(config.opid_index, tuple(
        RaftPeer(p.uuid, p.address, MemberType(p.member_type), p.promote)
        for p in config.peers))


def config_from_storage(config: RaftConfig) -> Config:
    return Config(config.opid_index or 0, tuple(
        Peer(p.uuid, p.address, "VOTER" if p.member_type is MemberType.VOTER else "NON_VOTER",
             p.promote)
        for p in config.peers))


def fact_state(fact: raft.RaftFact,
               quarantine: tuple[bool, bool] | None = None) -> DurableState:
    """The contract's durable state record for a running READY replica after ``fact``
    (``quarantine``: a quarantine directory an interrupted deletion left, if any)."""
    return DurableState(
        superblock=SuperblockState("READY", (0, 0), False),
        cmeta=CmetaState(fact.term, fact.voted_for, fact.config_index),
        wal=WalState("LIVE", (fact.last_term, fact.last_index)), blocks="PRESENT",
        quarantine=None if quarantine is None else QuarantineState(*quarantine))


class _Waiter:
    """A one-shot result slot for a caller waiting on the driver."""

    def __init__(self) -> None:
        self.event = trio.Event()
        self.value: Any = None
        self.error: BaseException | None = None

    def set(self, value: Any) -> None:
        if not self.event.is_set():
            self.value = value
            self.event.set()

    def fail(self, error: BaseException) -> None:
        if not self.event.is_set():
            self.error = error
            self.event.set()

    async def wait(self) -> Any:
        await self.event.wait()
        if self.error is not None:
            raise self.error
        return self.value


class Replica:
    """A running tablet replica (identity: one per tablet per server process)."""

    def __init__(self, *, tablet_id: str, me: str, core: raft.RaftCore, log: Log,
                 store: TabletStore, metadata: MetadataStore, trace: Tracer,
                 blocking: Blocking,
                 send: Callable[[str, str, list[Message]], None],
                 address_of: Callable[[str], str | None],
                 runs: Callable[[], bool],
                 flush_threshold: int = 8 << 20, retain_entries: int = 50_000,
                 metrics: RaftMetrics | None = None) -> None:
        self.tablet_id = tablet_id
        self.me = me
        self.core = core
        self.log = log
        self.store = store
        self.metadata = metadata
        self.trace = trace
        self._blocking = blocking
        self._send = send
        self._address_of = address_of
        self.flush_threshold = flush_threshold
        self.retain_entries = retain_entries
        self.quarantine: tuple[bool, bool] | None = None  # reported in every trace state
        # Whether this replica runs is the lifecycle core's answer (its slot is RUNNING:
        # ``TabletManager.runs``), never a flag of its own. The driver's failure only
        # reaches the core (``fail``, then the manager's ReplicaFailed) in the same step,
        # with no checkpoint between, so no caller sees the two disagree.
        self._runs = runs
        self.reason = ""  # why the driver stopped (``fail``): the ReplicaFailed reason
        self._inbox: list[Callable[[], None]] = []
        self._proposals: list[Callable[[], None]] = []  # writes: stepped after the inbox
        self._waiting: set[_Waiter] = set()  # every caller waiting, queued or stepped
        self._stopped: api.TabletNotRunning | None = None  # set by fail(): no more answers
        self._wake = trio.Event()
        self._writes: dict[int, tuple[int, _Waiter]] = {}  # index -> (term, waiter)
        self._changes: dict[int, tuple[int, _Waiter]] = {}
        self._reads: dict[int, _Waiter] = {}  # request id -> waiter (answers an index)
        self._read_ids = 0
        self._index_waiters: list[tuple[int, _Waiter]] = []
        self._flushing = False
        self._queued_messages = 0  # Raft messages in the inbox (bounded)
        self._ticks_pending = 0
        self.dropped_messages = 0
        # The durable state as of the last *traced* step: what ``durable()`` reports. The
        # core's status runs ahead of it (an entry appended in memory, an fsync under way,
        # a persisted step whose event is the next effect), and a lifecycle fact traced
        # from the core's status (stc_reject, stc_accept) would then report a WAL position
        # that no event has reached yet, ahead of the log_append that comes after it in
        # the trace (seen by the checker in a 10-minute nemesis run under load). At
        # construction the core holds exactly what the disk holds.
        st = core.status()
        self._traced_cmeta = ConsensusMeta(tablet_id, st.term, st.voted_for,
                                           config_to_storage(st.committed_config))
        self._traced_last: tuple[int, int] = (st.last_term, st.last_index)
        self._persisted_cmeta: ConsensusMeta | None = None  # written, its event not yet
        # Elections, leaders and configs, seen after each batch (rolewatch.py).
        self._watch = RoleWatch(tablet_id, core, metrics if metrics is not None
                                else OFF.raft)

    # ------------------------------------------------------------------ inputs

    def _submit(self, fn: Callable[[], None]) -> None:
        self._inbox.append(fn)
        self._wake.set()

    def _submit_proposal(self, fn: Callable[[], None]) -> None:
        """A client write's proposal: stepped once the inbox's batches are walked (the
        module's rules: a commit it carries is applied before the next WAL append)."""
        self._proposals.append(fn)
        self._wake.set()

    def deliver(self, messages: list[Message]) -> None:
        """Raft messages from peers. Bounded: while the driver is busy (an fsync), at most
        MAX_QUEUED_MESSAGES wait; beyond that they are dropped, as a lossy network would
        (Raft re-sends: heartbeats, appends, elections), so a flood costs no memory."""
        if self._queued_messages + len(messages) > MAX_QUEUED_MESSAGES:
            self.dropped_messages += len(messages)
            return
        self._queued_messages += len(messages)
        for m in messages:
            self._submit(lambda m=m: self._step(m))  # type: ignore[misc]

    def _step(self, m: Message) -> None:
        self._queued_messages -= 1
        assert self._queued_messages >= 0
        self.core.step(m)

    def tick(self) -> None:
        """A tick. Ticks that arrive while the driver is busy are counted, not queued one
        by one (time still passes for the core: they are all stepped in at once)."""
        self._ticks_pending += 1
        if self._ticks_pending == 1:
            self._submit(self._tick)

    def _tick(self) -> None:
        n, self._ticks_pending = self._ticks_pending, 0
        assert n >= 1
        for _ in range(n):
            self.core.tick()

    def _check_running(self) -> None:
        if not self._runs():
            raise api.TabletNotRunning(self.tablet_id, Kind.FAILED.value, self.reason)

    def _not_leader(self, exc: CoreNotLeader) -> api.NotLeader:
        hint = exc.leader_hint
        return api.NotLeader(hint, self._address_of(hint) if hint else None, exc.term,
                             str(exc))

    async def write(self, batch: WriteBatch) -> api.Written:
        self._check_running()
        known = self.store.lookup_result(batch.client_id, batch.seq)
        if known is not None and self.core.is_leader():
            return _written(_check_fresh(known, batch))
        payload = encode_write(batch)
        waiter = _Waiter()

        def go() -> None:
            try:
                entry = self.core.propose(payload)
            except CoreNotLeader as exc:
                waiter.fail(self._not_leader(exc))
                return
            self._writes[entry.index] = (entry.term, waiter)

        self._submit_proposal(go)
        result: ApplyResult = await self._wait(waiter)
        if result.rejected:
            raise api.InvalidArgument(result.error or "write rejected")
        return _written(_check_fresh(result, batch))

    async def change_config(self, change: ConfigChange, cas_index: int) -> int:
        self._check_running()
        waiter = _Waiter()

        def go() -> None:
            try:
                entry = self.core.propose_config_change(change, cas_index)
            except CoreNotLeader as exc:
                waiter.fail(self._not_leader(exc))
                return
            except CoreConfigRefused as exc:
                waiter.fail(api.ConfigChangeRefused(exc.reason, exc.detail, exc.committed_index))
                return
            self._changes[entry.index] = (entry.term, waiter)

        self._submit(go)
        index: int = await self._wait(waiter)
        return index

    async def read_barrier(self) -> None:
        """Return once a linearizable read may be served from the local store."""
        self._check_running()
        waiter = _Waiter()
        self._read_ids += 1
        request_id = self._read_ids

        def go() -> None:
            try:
                self.core.read_index(request_id)
            except CoreNotLeader as exc:
                waiter.fail(self._not_leader(exc))
                return
            self._reads[request_id] = waiter

        self._submit(go)
        index: int = await self._wait(waiter)
        if self.store.applied_index < index:
            applied = _Waiter()
            self._index_waiters.append((index, applied))
            await applied.wait()

    async def step_down(self, new_leader: str | None) -> None:
        self._check_running()
        waiter = _Waiter()

        def go() -> None:
            try:
                if new_leader:
                    self.core.transfer_leadership(new_leader)
                else:
                    self.core.step_down()
                waiter.set(None)
            except CoreNotLeader as exc:
                waiter.fail(self._not_leader(exc))
            except TransferRefused as exc:
                waiter.fail(api.InvalidArgument(str(exc)))

        self._submit(go)
        await self._wait(waiter)

    def peer_missing(self, uuid: str) -> None:
        """The peer's server does not host this tablet (a leader marks it for a copy)."""
        self._submit(lambda: self.core.peer_missing(uuid))

    # ------------------------------------------------------------------ views

    def durable(self) -> Durable:
        """The replica's durable state as the lifecycle core sees it (READY, its WAL LIVE,
        its blocks PRESENT), as of the last traced step: the cmeta and WAL position every
        event so far has reported, never a step whose event is still to come."""
        return running(self._traced_cmeta, self._traced_last, self.quarantine)

    def info(self) -> api.ReplicaInfo:
        st = self.core.status()
        me = st.active_config.peer(self.me)
        runs = self._runs()
        state = Kind.RUNNING if runs else Kind.FAILED
        return api.ReplicaInfo(
            tablet_id=self.tablet_id, state=state.value, reason=self.reason,
            role=st.role.value if runs else "", term=st.term,
            voted_for=st.voted_for, leader=st.leader, last_opid=(st.last_term, st.last_index),
            commit_index=st.commit_index, applied_index=self.store.applied_index,
            config_index=st.committed_config.opid_index, peers=list(st.active_config.peers),
            member_type=me.member_type if me else "NONE")

    # ------------------------------------------------------------------ the driver

    async def run(self) -> None:
        """The driver task: runs until cancelled (the server stops the replica)."""
        core = self.core
        try:
            while True:
                if not self._inbox and not self._proposals and not core.has_ready():
                    await self._wake.wait()
                self._wake = trio.Event()
                inbox, self._inbox = self._inbox, []
                for fn in inbox:
                    fn()
                await self._walk_ready()
                if self._proposals:  # (those queued while the inbox's batches ran, too)
                    proposals, self._proposals = self._proposals, []
                    for fn in proposals:
                        fn()
                    await self._walk_ready()
                self._after_batch()
                self._watch.see(core)
        except Exception as exc:  # a storage failure: the replica goes offline, loudly
            logger.exception("tablet %s failed", self.tablet_id)
            self.fail(f"{type(exc).__name__}: {exc}")

    async def _walk_ready(self) -> None:
        """Execute the core's batches until it has none ready (inputs stay queued)."""
        core = self.core
        while core.has_ready():
            rd = core.ready()
            await self._execute(rd)
            core.advance(rd)

    async def _wait(self, waiter: _Waiter) -> Any:
        """A caller's wait for the driver, from its submission on: a driver that stops
        fails it even while its input is still queued (not yet stepped into the core)."""
        if self._stopped is not None:
            waiter.fail(self._stopped)
        self._waiting.add(waiter)
        try:
            return await waiter.wait()
        finally:
            self._waiting.discard(waiter)

    def fail(self, reason: str) -> None:
        """The driver stopped (a storage failure, or a deletion or copy stopping it): every
        waiter fails. The caller tells the lifecycle core next (ReplicaFailed, or the slot
        already left RUNNING), which is what makes the replica refuse new calls."""
        self.reason = reason
        error = api.TabletNotRunning(self.tablet_id, Kind.FAILED.value, reason)
        self._stopped = error
        for w in list(self._waiting):  # inputs still queued: never stepped now
            w.fail(error)
        for _, w in [*self._writes.values(), *self._changes.values()]:
            w.fail(error)
        for w in self._reads.values():
            w.fail(error)
        # Reads whose ReadIndex was confirmed wait for the store to apply it: a failed
        # replica never will, so they fail too (they used to hang).
        for _, w in self._index_waiters:
            w.fail(error)
        self._writes.clear()
        self._changes.clear()
        self._reads.clear()
        self._index_waiters.clear()

    def _send_all(self, messages: tuple[Message, ...]) -> None:
        by_dest: dict[str, list[Message]] = {}
        for m in messages:
            by_dest.setdefault(m.dest, []).append(m)
        for dest, batch in by_dest.items():
            self._send(dest, self.tablet_id, batch)

    async def _execute(self, rd: raft.Ready) -> None:
        """Walk the batch's plan in order (impl/consensus/plan.py decides the order and
        says why: persist then trace each step; a message leaves once the steps it depends
        on are durable and traced, a leader's appends overtaking only its own WAL append
        of their entries; then apply, then answer reads)."""
        await walk(plan(rd), self)

    # ------------------------------------------------------------------ the plan's effects
    # (consensus/plan.py PlanShell: ``walk`` calls these in the plan's order)

    async def persist_step(self, step: raft.Step) -> None:
        # A step made durable is traced, even when the replica is being stopped: a clean
        # stop (server_stop) promises the trace lost nothing. The shield covers the write;
        # its TraceStep is the next effect and runs with no checkpoint in between, so a
        # cancellation cannot separate them either. No step lock: the driver is the
        # tablet's only durable writer while it runs (durable_step.py).
        async with durable_step(None):
            if step.cmeta is not None:
                cmeta = ConsensusMeta(self.tablet_id, step.cmeta.term, step.cmeta.voted_for,
                                      config_to_storage(step.cmeta.committed_config))
                await self._blocking(self.metadata.write_cmeta, cmeta)
                self._persisted_cmeta = cmeta
            if step.entries:
                await self.log.append([LogEntry(e.term, e.index, _entry_payload(e))
                                       for e in step.entries])

    async def trace_step(self, step: raft.Step) -> None:
        fact = step.fact
        self.trace.event(fact.event, fact.args, fact_state(fact, self.quarantine),
                         tablet=self.tablet_id)
        if self._persisted_cmeta is not None:
            self._traced_cmeta, self._persisted_cmeta = self._persisted_cmeta, None
        self._traced_last = (fact.last_term, fact.last_index)

    async def send_messages(self, messages: tuple[Message, ...]) -> None:
        # Handed to the per-peer senders, which stamp each call with the Lamport clock when
        # it leaves: every fact this message depends on is traced by now.
        self._send_all(messages)

    async def apply_entries(self, entries: tuple[Entry, ...]) -> None:
        for e in entries:
            self._apply(e)

    async def release_reads(self, read_states: tuple[raft.ReadState, ...],
                            read_failures: tuple[int, ...]) -> None:
        for rs in read_states:
            w = self._reads.pop(rs.request_id, None)
            if w is not None:
                w.set(rs.index)
        for rid in read_failures:
            w = self._reads.pop(rid, None)
            if w is not None:
                w.fail(api.NotLeader(None, None, self.core.term, "leadership lost"))

    def _apply(self, e: Entry) -> None:
        result = self.store.apply_entry(e.index, e.term, e.kind, e.data)
        pending = self._writes.pop(e.index, None)
        if pending is not None:
            term, w = pending
            if term == e.term and result is not None:
                w.set(result)
            else:
                w.fail(api.OperationAborted(
                    f"the write proposed at ({term},{e.index}) was replaced by a new leader; "
                    "retry (it is applied at most once)"))
        change = self._changes.pop(e.index, None)
        if change is not None:
            term, w = change
            if term == e.term:
                w.set(e.index)
            else:
                w.fail(api.OperationAborted(f"config change at ({term},{e.index}) was lost"))

    def _after_batch(self) -> None:
        applied = self.store.applied_index
        if self._index_waiters:
            ready = [w for i, w in self._index_waiters if i <= applied]
            self._index_waiters = [(i, w) for i, w in self._index_waiters if i > applied]
            for w in ready:
                w.set(None)
        if not self.core.is_leader() and (self._writes or self._changes):
            error = api.OperationAborted("leadership lost before the write committed; "
                                         "retry (it is applied at most once)")
            for _, w in [*self._writes.values(), *self._changes.values()]:
                w.fail(error)
            self._writes.clear()
            self._changes.clear()

    def wants_flush(self) -> bool:
        return (not self._flushing and self._runs()
                and self.store.should_flush(self.flush_threshold))

    async def flush(self) -> None:
        """Flush the memory store to a block, then let the WAL and the core's memory go."""
        if self._flushing:
            return
        self._flushing = True
        try:
            flushed = await self._blocking(self.store.flush)
            if self.store.needs_compaction():
                await self._blocking(self.store.compact)
            if flushed is not None:
                point = self.retention_point(flushed.index)
                self._submit(lambda: self.core.compact(point))
                await self.log.gc(point)
        except Exception as exc:
            # A data block, superblock or WAL segment that cannot be written (EIO, a full
            # disk): this replica goes FAILED, through its driver (the one place a replica
            # fails: run() catches it, the tablet manager lists it FAILED), and nothing is
            # retried. Not raised: the flush runs in the server's nursery, so raising
            # would stop the whole server and its other tablets (Kudu fails the replica).
            logger.error("tablet %s: flush failed: %r", self.tablet_id, exc)
            self._submit(functools.partial(_raise, exc))
        finally:
            self._flushing = False

    def retention_point(self, flushed_index: int) -> int:
        """How far the log may be forgotten after a flush: up to the flushed index, but a
        leader keeps what its slowest peer still needs (so a follower that was down a while
        catches up from the log) unless that is more than ``retain_entries`` behind; a
        follower keeps ``retain_entries`` too, in case it leads next. Beyond that a lagging
        replica needs a tablet copy. Never past a retention anchor of the log (a tablet
        copy's snapshot, and its handover: impl/tserver/copy/source.py): what a copy gave
        a peer ends there, and the peer continues from the entries after it."""
        floor = max(0, flushed_index - self.retain_entries)
        st = self.core.status()
        point = floor
        if st.peers:
            slowest = min(p.match for p in st.peers)
            point = min(flushed_index, max(slowest, floor))
        for anchor in self.log.anchors():
            point = min(point, anchor.index)
        return point


def _raise(error: BaseException) -> None:
    """An input that fails the replica's driver with `error` (see Replica.flush)."""
    raise error


def _check_fresh(result: ApplyResult, batch: WriteBatch) -> ApplyResult:
    """A write whose seq is below its client's last applied one was not applied: say so.
    (One client id issues its writes one at a time, in seq order.)"""
    if result.stale:
        raise api.InvalidArgument(
            f"stale write: client {batch.client_id} seq {batch.seq} is below its last "
            "applied seq; a client id must issue writes in order, one at a time")
    return result


def _written(result: ApplyResult) -> api.Written:
    return api.Written(index=result.index, ops_applied=result.ops_applied,
                       duplicate=result.duplicate)


_KIND_CODE = {"noop": b"N", "write": b"W", "config": b"C"}
_CODE_KIND = {v: k for k, v in _KIND_CODE.items()}


def _entry_payload(e: Entry) -> bytes:
    """WAL payload of a Raft entry: one kind byte, then the entry's data."""
    return _KIND_CODE[e.kind] + e.data


def entry_from_wal(e: LogEntry) -> Entry:
    kind = _CODE_KIND.get(e.payload[:1])
    if kind is None:
        raise ValueError(f"WAL entry ({e.term},{e.index}) has an unknown kind byte "
                         f"{e.payload[:1]!r}")
    return Entry(e.term, e.index, kind, e.payload[1:])  # type: ignore[arg-type]


def new_core(*, me: str, cmeta: ConsensusMeta, entries: list[Entry], base_term: int,
             base_index: int, applied_index: int, seed: int,
             options: raft.Options) -> raft.RaftCore:
    from revivify.impl.consensus.log import RaftLog

    return raft.RaftCore(
        me=me, term=cmeta.current_term, voted_for=cmeta.voted_for,
        committed_config=config_from_storage(cmeta.committed_config),
        log=RaftLog(entries, base_term=base_term, base_index=base_index),
        applied_index=applied_index, rng=random.Random(seed), options=options)


__all__ = ["Blocking", "Replica", "Tracer", "config_from_storage",
           "config_to_storage", "entry_from_wal", "fact_state", "new_core"]
