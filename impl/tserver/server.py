"""The tablet server: one process hosting tablet replicas, served over RPC.

Theory of operation
-------------------
Start (``serve_tserver``):
1. Open the directory; on first start format it (instance file with a new UUID) and trace
   ``server_format``. The incarnation number is one more than the highest this UUID's trace
   files show, so every process incarnation has its own trace file.
2. Trace ``server_start``.
3. Register every tablet with a superblock in the tablet manager (state STARTING), BEFORE
   serving: a tablet call for one of them gets the retryable TabletNotRunning(STARTING),
   never "not hosted" (which would make a leader ask for a copy of a tablet that is only
   starting: the startup race this order closes).
4. Serve RPC; then startup proper (impl/tserver/manager): open each tablet's data store,
   cmeta and WAL (recovery cuts a torn tail; a corrupt WAL or a missing block fails
   verification) and trace ``startup``: READY (the replica runs), FAILED with the reason
   (offline, listed FAILED; the server serves its other tablets), or a deleted or
   half-copied tablet's case. Tick every replica's core every ``tick`` seconds; flush
   memory stores that grew past the threshold.
Stop (SIGTERM, SIGINT, or the caller's cancel): stop serving, close every WAL (drains
pending appends), trace ``server_stop``. A kill -9 instead loses nothing acknowledged: an
acknowledged write was committed, so a majority fsync'd it.

Raft messages between servers are one-way ``Raft.Message`` calls, batched per destination
by one sender task per peer (``PeerSender``); a message that cannot be delivered is
dropped (Raft retries by itself: heartbeats, re-sent appends, new elections).

Link liveness (issue 32)
------------------------
A peer link is one long-lived TCP connection that carries casts one way: nothing on it is
ever answered when all goes well (the peer's replies are casts of their own, on the peer's
link to us). So a link whose packets are lost (a cut network) looks exactly like a healthy
one from the sender's side, and after the cut heals it stays silent until the kernel's next
retransmission, which backs off up to 120 s: a partition of 60 s kept a master from its
peers for 45 s more. Nor can the replies coming back be the proof: they travel on the
peer's link, which may be fine while ours is stuck, and a follower's link to its leader
carries only replies, which nobody answers.

So the link is probed: while it carries traffic, every ``liveness / 3`` seconds the sender
makes one real call on it, ``Raft.Ping`` (answered Ack at once, in the peer's RPC loop,
never behind a disk), unless the peer answered our requests meanwhile: a Raft response
from it (AppendResponse, VoteResponse) means requests we sent reached it, which is what a
ping would show (so a leader's links to followers that keep up need no pings; a
follower's link, which carries only responses nobody answers, is pinged). An answer of
any kind to a ping (an error too: an older server without the method) proves both
directions of THIS connection work right now, and that every cast queued before the ping
was delivered (one TCP stream is in order). A ping unanswered for ``liveness`` seconds
drops the link, and the sender redials (backoff 50 ms doubling up to
``liveness``, cut short the moment the peer is heard from: a Raft message from it proves
the path is back); a connect that has not completed within ``liveness`` is abandoned and
tried again at once (its SYN was lost: waiting more would only wait for the kernel's
retransmission, 1 s, then 3 s, ...). An idle link (nothing cast since the last probe) is
not probed.

    liveness = max(3 * heartbeat interval, LIVENESS_FLOOR = 0.5 s)

Three heartbeats: a healthy peer answers a ping in well under one (it is an RPC-loop
round trip), so three missed heartbeats' worth is a dead link, not a slow one; the floor
keeps a loaded 2-core machine's scheduling hiccups and a short tick from dropping healthy
links (a false drop costs a reconnect and the casts queued on it, which Raft re-sends).
With the defaults (tick 50 ms, heartbeat 2 ticks, election 10 ticks: timeout 0.5 to 1 s)
liveness is 0.5 s: a dead link is noticed within 0.67 s, and once the network heals a
link is up again within 0.5 s (the dial under way when it healed), so a tablet with a
reachable majority elects within about two election timeouts
(tests/availability/test_partition_heal.py measures it with a kernel partition). The
socket options of impl/rpc/transport.py (TCP_USER_TIMEOUT, keepalive) are the slower
backstop for every other connection.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
import os
import posixpath
import re
import secrets
import time
import uuid as uuidlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any, Final

import attrs
import msgspec
import trio
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from revivify.impl.consensus import core as raft
from revivify.impl.consensus.messages import AppendResponse, Config, Message, VoteResponse
from revivify.impl.observe.metrics import ServerMetrics, gauge
from revivify.impl.rpc import (
    CallContext,
    ConnectionClosed,
    FrameTooLarge,
    LamportHooks,
    RpcClient,
    RpcError,
    RpcServer,
    Service,
    open_rpc_client,
    serve_rpc,
)
from revivify.impl.rpc.address import format_address, parse_address
from revivify.impl.rpc.backoff import Backoff
from revivify.impl.rpc.transport import Network
from revivify.impl.storage.blocks import BlockManager
from revivify.impl.storage.disk import Disk
from revivify.impl.storage.errors import NotFormatted
from revivify.impl.storage.faults import os_disk
from revivify.impl.storage.layout import ServerLayout
from revivify.impl.storage.metadata import MetadataStore
from revivify.impl.storage.syncpoll import SyncPoller
from revivify.impl.storage.values import ConsensusMeta
from revivify.impl.storage.wal import LogOptions
from revivify.impl.tablet.errors import WriteError
from revivify.impl.tablet.ops import WriteBatch, validate_write
from revivify.impl.tablet.store import TabletStore
from revivify.impl.trace import TraceWriter

from . import api
from .api import Kind
from .copy.service import TabletCopies
from .heartbeat import HeartbeatPool, run_heartbeaters
from .manager.shell import TabletManager
from .master_api import TabletPlace
from .replica import Replica, Tracer, config_to_storage
from .schema import SchemaVersions, register_alter_schema
from .stuck import watch_stop

logger = logging.getLogger(__name__)

SCAN_PAGE_BYTES = 4 << 20
_TABLET_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


@attrs.frozen
class ServerOptions:
    fs_root: str
    rpc_host: str = "127.0.0.1"
    rpc_port: int = 0
    # The HOST:PORT others reach this server at (``--rpc-advertised-address``): what it
    # registers with the masters, puts in Raft configs and copy requests, and prints on its
    # "listening" line. "": the bind host and the port bound (a wildcard bind host is then
    # refused by the command line: impl/servers/process.py).
    advertised_address: str = ""
    trace_dir: str | None = None  # default: <fs_root>/traces
    tick_seconds: float = 0.05
    election_ticks: int = 10
    heartbeat_ticks: int = 2
    fsync: bool = True
    # While a sync is in flight, a thread wakes every this many microseconds (for at most
    # 2 ms of it) so that the CPU does not halt and hear of the disk's answer a timer tick
    # late (impl/storage/syncpoll.py); 0: plain blocking syncs.
    fsync_poll_us: int = 50
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
    # The masters to heartbeat (HOST:PORT each; heartbeat.py), every ``heartbeat_seconds``.
    # Empty: the server runs alone, without masters.
    masters: tuple[str, ...] = ()
    heartbeat_seconds: float = 0.5
    # Tablets this process hosts for itself (a master's catalog): Raft and the copy service
    # reach them, the client and admin calls do not (they go through the master).
    internal_tablets: tuple[str, ...] = ()
    # Prometheus metrics (impl/observe): False replaces every family with a no-op (to
    # measure their cost); per-tablet term and role series only when asked (1,000 tablets
    # would otherwise mean thousands of series per server).
    metrics: bool = True
    metrics_per_tablet: bool = False


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


# How many Raft senders' addresses a server keeps (``TabletServer._heard_from``).
MAX_HEARD_AT: Final = 4096
# A peer link's liveness bound is never below this (module docstring, "Link liveness").
LIVENESS_FLOOR: Final = 0.5


def link_liveness(heartbeat_seconds: float) -> float:
    """Seconds a peer link may go unanswered (a probe) or unconnected (a dial) before it
    is dropped and redialled: max(3 heartbeat intervals, LIVENESS_FLOOR)."""
    return max(3 * heartbeat_seconds, LIVENESS_FLOOR)


def peer_reconnect(liveness: float) -> Backoff:
    """Between reconnections to a peer: 50 ms doubling up to the liveness bound (no
    jitter: one sender per peer, and Raft's own timers already differ per server)."""
    return Backoff(initial=min(0.05, liveness), max=liveness, multiplier=2.0, jitter=0)


class PeerSender:
    """Delivers Raft messages to one peer server, in order, batched, best effort.

    Each batch is a cast (a one-way ``Raft.Message`` call, impl/rpc/client.py): the peer
    answers only a refusal, so a message costs one frame, not a frame and an empty Ack
    back (which, per write at 1 client, were 4 of the 10 frames between the 3 servers:
    each frame is a send and a wake-up on this 2-core machine). A refusal comes back
    through ``_refused``: TabletNotFound marks the peer for a tablet copy.

    The fast path: while connected, with nothing queued and no batch being drained,
    ``push`` casts at once, from the replica driver's own step, so a message leaves
    without waiting for this sender's task to be scheduled (the driver calls push only
    once the steps the message depends on are durable and traced: plan.py). Otherwise
    the messages join the queue and the task sends them in order. Order per destination
    (plan rule 4) holds because push never overtakes the queue or a batch in progress.

    Liveness (module docstring, "Link liveness"): a probe task pings the link while it
    carries traffic and drops it when a ping goes unanswered for ``liveness`` seconds; a
    dial is given up after ``liveness`` too.
    """

    def __init__(self, server: TabletServer, dest: str, address: str) -> None:
        self.server = server
        self.dest = dest
        self.address = address
        self.queue: list[tuple[str, Message]] = []
        self.wake = trio.Event()
        self.client: RpcClient | None = None  # while connected
        self.draining = False  # the task is sending a batch taken from the queue
        self.scope = trio.CancelScope()  # cancelled when another sender replaces this one
        self.liveness = link_liveness(server.options.tick_seconds
                                      * server.options.heartbeat_ticks)
        self.reconnect = peer_reconnect(self.liveness)
        self.sent = False  # something was cast since the last probe
        self.answered = False  # a response to our requests came back since the last probe
        self.heard_again = trio.Event()  # set by ``heard``: the peer reached us
        self.drops = 0  # links dropped for want of an answer (tests, logs)
        self.drops_in_a_row = 0  # since the last answered ping

    def heard(self, messages: list[Message]) -> None:
        """Raft messages from this peer arrived (on its link to us): the path works, so a
        reconnection waiting out its backoff goes now. A response among them (to an
        AppendRequest or a vote request) proves that our requests reach the peer, so the
        next probe is not needed ("Link liveness")."""
        self.heard_again.set()
        if any(isinstance(m, AppendResponse | VoteResponse) for m in messages):
            self.answered = True

    def push(self, tablet_id: str, messages: list[Message]) -> None:
        client = self.client
        if client is not None and not client.closed and not self.queue and not self.draining:
            parts = split_for_calls(messages, RAFT_CALL_BYTES)
            while parts:
                try:
                    client.cast_nowait(api.RAFT_MESSAGE, api.RaftMessages(
                        tablet_id, parts[0], self.server.address))
                except trio.WouldBlock:
                    break  # the connection's queue is full: the task waits for room
                except FrameTooLarge as exc:
                    self._too_large(exc)
                except ConnectionClosed:
                    break  # the task finds the connection gone and reconnects
                parts.pop(0)
                self.sent = True
            if not parts:
                return
            messages = [m for part in parts for m in part]
        if len(self.queue) > 10_000:  # a dead peer: drop the oldest (Raft re-sends)
            del self.queue[:5_000]
        self.queue.extend((tablet_id, m) for m in messages)
        self.wake.set()

    def _refused(self, error: BaseException) -> None:
        """A cast the peer refused (called by the connection's reader)."""
        if isinstance(error, api.TabletNotFound):
            self.server.peer_missing(error.tablet_id, self.dest)
        elif not isinstance(error, api.TabletNotRunning):  # deleting, copying, failed
            logger.debug("to %s at %s: a Raft message was refused: %r", self.dest,
                         self.address, error)

    def _too_large(self, exc: FrameTooLarge) -> None:
        # Not the network: a message this server built is over the frame limit. Raft
        # re-sends, so say it loudly rather than loop in silence.
        logger.error("to %s at %s: a Raft message is too large to send: %s",
                     self.dest, self.address, exc)

    async def run(self) -> None:
        with self.scope:
            await self._run()

    async def _run(self) -> None:
        host, port = parse_address(self.address)
        failures = 0  # reconnection attempts that failed in a row
        while True:
            # The dial is bounded by the liveness bound: a SYN lost to a cut network is
            # otherwise retried by the kernel for two minutes, backing off to 64 s.
            connected = False
            try:
                with trio.move_on_after(self.liveness) as dial:
                    async with open_rpc_client(host, port, self.dest, self.server.uuid,
                                               lamport=self.server.lamport_hooks,
                                               app_errors=api.APP_ERRORS,
                                               network=self.server.network,
                                               on_cast_error=self._refused) as client:
                        dial.deadline = math.inf
                        connected = True
                        failures = 0
                        # what the last connection carried vouches for nothing on this one
                        self.sent = self.answered = False
                        self.client = client
                        try:
                            async with trio.open_nursery() as nursery:
                                nursery.start_soon(self._probe, client)
                                await self._drain(client)  # returns once the link is gone
                                nursery.cancel_scope.cancel()
                        finally:
                            self.client = None
                            self.draining = False
                if dial.cancelled_caught and not connected:
                    # The SYN (or its answer) was lost: the dial already waited the whole
                    # bound, so dial again at once (the backoff is for refusals, which
                    # come back at once); a healed path then connects within the bound.
                    logger.debug("to %s at %s: not connected within %gs", self.dest,
                                 self.address, self.liveness)
                    self.queue.clear()
                    continue
            except (RpcError, OSError) as exc:
                if not isinstance(exc, ConnectionClosed):
                    logger.debug("to %s at %s: %s", self.dest, self.address, exc)
            self.queue.clear()  # stale by the time we reconnect
            failures += 1
            self.heard_again = trio.Event()
            with trio.move_on_after(self.reconnect.delay(failures)):
                await self.heard_again.wait()

    async def _probe(self, client: RpcClient) -> None:
        """Ping the link while it carries traffic; abort it when a ping is not answered
        within ``liveness`` (module docstring, "Link liveness")."""
        while True:
            await trio.sleep(self.liveness / 3)
            if not self.sent:
                continue  # idle: nothing to vouch for
            self.sent = False
            if self.answered:  # the peer answered our requests meanwhile: proof enough
                self.answered = False
                self.drops_in_a_row = 0
                continue
            with trio.move_on_after(self.liveness):
                try:
                    await client.call(api.RAFT_PING, api.Empty(), api.Ack)
                except ConnectionClosed:
                    self.wake.set()  # the drain notices the closed link
                    return
                except RpcError:
                    pass  # refused (a server without Raft.Ping): an answer all the same
                self.drops_in_a_row = 0
                continue
            self.drops += 1
            # Said once per outage (a cut network drops the link every cycle until it heals).
            logger.log(logging.INFO if self.drops_in_a_row == 0 else logging.DEBUG,
                       "to %s at %s: no answer within %gs; reconnecting", self.dest,
                       self.address, self.liveness)
            self.drops_in_a_row += 1
            client.abort(f"no answer to a ping within {self.liveness:g}s")
            self.wake.set()
            return

    async def _drain(self, client: RpcClient) -> None:
        """Send what push queued, in order, until the connection fails."""
        while True:
            while not self.queue:
                if client.closed:  # push found it gone, the probe dropped it, or it broke
                    return
                await self.wake.wait()
                self.wake = trio.Event()
            batch, self.queue = self.queue, []
            self.draining = True
            self.sent = True
            grouped: dict[str, list[Message]] = {}
            for tablet_id, m in batch:
                grouped.setdefault(tablet_id, []).append(m)
            for tablet_id, messages in grouped.items():
                for part in split_for_calls(messages, RAFT_CALL_BYTES):
                    try:
                        await client.cast(api.RAFT_MESSAGE, api.RaftMessages(
                            tablet_id, part, self.server.address))
                    except FrameTooLarge as exc:
                        self._too_large(exc)
                    except ConnectionClosed:
                        return
            self.draining = False


class TabletServer:
    """The process-wide state: identity, directory, replicas, peers, trace."""

    def __init__(self, options: ServerOptions, disk: Disk, network: Network | None,
                 metrics: ServerMetrics | None = None) -> None:
        self.options = options
        self.disk = disk
        self.network = network
        self.layout = ServerLayout(options.fs_root, disk)
        self.metadata = MetadataStore(self.layout)
        self.blocks = BlockManager(self.layout)
        self.uuid = ""
        self.address = ""  # as advertised to others (open_tserver sets it once bound)
        self.bound_address = ""  # the socket's own HOST:PORT (a wildcard host, maybe)
        self.trace: Tracer | None = None
        # What /metrics shows (impl/observe): this server's own registry; a master adds its
        # families to its embedded server's.
        self.metrics = metrics if metrics is not None else ServerMetrics(
            enabled=options.metrics, per_tablet=options.metrics_per_tablet)
        self.metrics.families.collect_with(self._collect_state)
        # Every tablet of this server, each in exactly one lifecycle state.
        self.tablets = TabletManager(self, max_concurrent_copies=options.max_concurrent_copies,
                                     fault_crash_after=options.fault_crash_after,
                                     metrics=self.metrics)
        self.copies = TabletCopies(self, max_concurrent=options.max_concurrent_copies,
                                   session_idle=options.copy_session_idle_seconds,
                                   request_interval=options.copy_request_seconds,
                                   chunk_size=options.copy_chunk_bytes)
        self.tablets.run_copy = self.copies.run_copy
        # Schema versions recorded by Admin.AlterSchema (schema.py: a file per tablet).
        self.schemas = SchemaVersions(self.layout, disk)
        self.peers: dict[str, PeerSender] = {}
        # Where Raft senders said they listen, by UUID (``_heard_from``), oldest first.
        self._heard_at: dict[str, str] = {}
        self.heartbeats: HeartbeatPool | None = None  # the heartbeaters, if --masters
        self.web_address = ""  # HOST:PORT of the status pages, once they serve (heartbeats)
        # Each tablet's table and partition as the leader master's answers name them (soft
        # state for the status pages: tablet servers record no table of their own).
        self.tablet_places: dict[str, TabletPlace] = {}
        self._nursery: trio.Nursery | None = None
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

    @property
    def incarnation(self) -> int:
        """This process's incarnation (its trace file's number): heartbeats carry it."""
        return self.tracer.writer.incarnation

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

    def replica_seed(self, tablet_id: str) -> int:
        return self._rng_seed

    def make_replica(self, tablet_id: str, core: raft.RaftCore, log: Any,
                     store: TabletStore) -> Replica:
        return Replica(tablet_id=tablet_id, me=self.uuid, core=core, log=log, store=store,
                       metadata=self.metadata, trace=self.tracer, blocking=self.blocking,
                       send=self.send,
                       address_of=functools.partial(self.address_of, tablet_id),
                       runs=functools.partial(self.tablets.runs, tablet_id),
                       flush_threshold=self.options.flush_threshold,
                       retain_entries=self.options.log_retain_entries,
                       metrics=self.metrics.raft)

    def address_of(self, tablet_id: str, uuid: str) -> str | None:
        holder: Any = self.tablets.replica(tablet_id) or self.tablets.voter(tablet_id)
        if holder is None:
            return None
        peer = holder.core.active_config.peer(uuid)
        return peer.address if peer else None

    def peer_missing(self, tablet_id: str, peer: str) -> None:
        replica = self.tablets.running_replica(tablet_id)
        if replica is not None:
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
            if sender is not None:
                # the peer moved (or is named another way): the old sender stops; what it
                # still held is dropped (Raft re-sends)
                sender.scope.cancel()
            sender = PeerSender(self, dest, address)
            self.peers[dest] = sender
            assert self._nursery is not None
            self._nursery.start_soon(sender.run)
        sender.push(tablet_id, messages)

    def _known_address(self, uuid: str) -> str | None:
        for _, r in self.tablets.running():
            p = r.core.active_config.peer(uuid)
            if p is not None:
                return p.address
        learned = self._heard_at.get(uuid)
        if learned is not None:
            return learned
        sender = self.peers.get(uuid)
        return sender.address if sender else None

    def _heard_from(self, uuid: str, address: str) -> None:
        """A Raft message's sender said where it listens (``RaftMessages.src_address``):
        kept so that an answer can reach a sender no config here names (a tombstone's
        config predates a leader that joined since: without it the tombstone's answers
        were dropped, the leader never learnt the replica needs a copy, and a NON_VOTER
        added there waited forever). Bounded: the oldest goes first."""
        if self._heard_at.get(uuid) == address:
            return
        self._heard_at.pop(uuid, None)
        self._heard_at[uuid] = address
        while len(self._heard_at) > MAX_HEARD_AT:
            del self._heard_at[next(iter(self._heard_at))]

    # ------------------------------------------------------------------ RPC handlers

    def _replica(self, tablet_id: str) -> Replica:
        return self.tablets.require_running(tablet_id)

    def _refuse_internal(self, tablet_id: str) -> None:
        """A client or admin call for a tablet this process keeps for itself."""
        if tablet_id in self.options.internal_tablets:
            raise api.InvalidArgument(f"tablet {tablet_id} is internal to this server (a "
                                      "master's catalog): use the master's commands")

    async def on_raft_message(self, req: api.RaftMessages, ctx: CallContext) -> api.Ack:
        for m in req.messages:
            if m.src != ctx.src_uuid:
                raise api.InvalidArgument(f"message from {m.src} sent by {ctx.src_uuid}")
        if req.src_address and self._heard_at.get(ctx.src_uuid) != req.src_address:
            try:  # (an address already heard from this sender was checked then)
                parse_address(req.src_address)
            except ValueError as exc:
                raise api.InvalidArgument(f"bad src_address {req.src_address!r}: "
                                          f"{exc}") from None
            self._heard_from(ctx.src_uuid, req.src_address)
        sender = self.peers.get(ctx.src_uuid)
        if sender is not None:
            sender.heard(req.messages)  # the path from it works (and maybe ours to it)
        voter = self.tablets.voter(req.tablet_id)
        if voter is not None:
            voter.deliver(list(req.messages))
            return api.Ack()
        self._replica(req.tablet_id).deliver(list(req.messages))
        return api.Ack()

    async def on_raft_ping(self, req: api.Empty, ctx: CallContext) -> api.Ack:
        """A peer's link liveness probe ("Link liveness"): answered at once."""
        return api.Ack()

    async def on_status(self, req: api.Empty, ctx: CallContext) -> api.ServerStatus:
        return api.ServerStatus(self.uuid, self.address, self._replica_infos())

    def _replica_infos(self) -> list[api.ReplicaInfo]:
        out = [r.info() for _, r in self.tablets.running()]
        for info in self.tablets.offline_infos():
            job = self.copies.jobs.get(info.tablet_id)
            if info.state == Kind.COPYING.value and job is not None:
                progress = job.info()
                info = msgspec.structs.replace(
                    info, reason=f"from {job.source_uuid}: {progress.phase}, "
                    f"{progress.bytes_done} of {progress.total_bytes} bytes")
            out.append(info)
        return sorted(out, key=lambda r: r.tablet_id)

    async def on_consensus_state(self, req: api.TabletRef, ctx: CallContext) -> api.ReplicaInfo:
        if self.tablets.replica(req.tablet_id) is None:
            found = [r for r in self._replica_infos() if r.tablet_id == req.tablet_id]
            if found:
                return found[0]
        return self._replica(req.tablet_id).info()

    async def on_create_tablet(self, req: api.CreateTablet,
                               ctx: CallContext) -> api.TabletCreated:
        self._refuse_internal(req.tablet_id)
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
                parse_address(p.address)
            except ValueError as exc:
                raise api.InvalidArgument(str(exc)) from None
        config = Config(0, tuple(req.peers))
        cmeta = ConsensusMeta(req.tablet_id, 0, None, config_to_storage(config))
        await self.tablets.create(req.tablet_id, cmeta, sorted(config.voters()),
                                  from_master=req.master_term is not None)
        return api.TabletCreated(req.tablet_id)

    async def on_delete_tablet(self, req: api.DeleteTablet, ctx: CallContext) -> api.Ack:
        self._refuse_internal(req.tablet_id)
        await self.tablets.delete(req.tablet_id, req.mode, req.cas_config_index)
        return api.Ack()

    async def on_step_down(self, req: api.StepDown, ctx: CallContext) -> api.Ack:
        self._refuse_internal(req.tablet_id)
        await self._replica(req.tablet_id).step_down(req.new_leader)
        return api.Ack()

    async def on_change_config(self, req: api.ChangeConfig,
                               ctx: CallContext) -> api.ConfigChanged:
        self._refuse_internal(req.tablet_id)
        change = req.change
        if change.kind == "ADD":
            try:
                parse_address(change.peer.address)
            except ValueError as exc:
                raise api.InvalidArgument(str(exc)) from None
        index = await self._replica(req.tablet_id).change_config(change, req.cas_config_index)
        return api.ConfigChanged(index)

    async def on_write(self, req: api.Write, ctx: CallContext) -> api.Written:
        self._refuse_internal(req.tablet_id)
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
        s.register(api.RAFT_PING, api.Empty, api.Ack, self.on_raft_ping)
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
        register_alter_schema(s, self)
        return s

    # ------------------------------------------------------------------ metrics

    def _collect_state(self) -> Iterator[Metric]:
        """Scrape time (impl/observe): replicas by lifecycle state and running replicas by
        Raft role, read from the lifecycle core and the cores now; with per-tablet metrics,
        each running replica's term and role too."""
        states = dict.fromkeys((k.value for k in Kind if k is not Kind.ABSENT), 0.0)
        for slot in list(self.tablets.core.slots.values()):
            states[slot.state.kind.value] = states.get(slot.state.kind.value, 0.0) + 1
        yield gauge("revivify_replicas", "Replicas on this server by lifecycle state",
                    "state", states)
        roles = dict.fromkeys((r.value for r in raft.Role if r is not raft.Role.TOMBSTONE),
                              0.0)
        running = list(self.tablets.running())
        for _, replica in running:
            roles[replica.core.role.value] = roles.get(replica.core.role.value, 0.0) + 1
        yield gauge("revivify_raft_replicas", "Running replicas on this server by Raft role",
                    "role", roles)
        if self.metrics.per_tablet:
            terms = GaugeMetricFamily("revivify_tablet_raft_term",
                                      "Raft term of each running replica", labels=["tablet"])
            role = GaugeMetricFamily("revivify_tablet_raft_role",
                                     "Raft role of each running replica (1 for its role)",
                                     labels=["tablet", "role"])
            for tablet_id, replica in running:
                terms.add_metric([tablet_id], replica.core.term)
                role.add_metric([tablet_id, replica.core.role.value], 1)
            yield terms
            yield role

    def startup_summary(self, seconds: float) -> str:
        """The start-up line: tablets found per state, and the time they took to open."""
        states: dict[str, int] = {}
        for slot in self.tablets.core.slots.values():
            states[slot.state.kind.value] = states.get(slot.state.kind.value, 0) + 1
        found = ", ".join(f"{n} {state}" for state, n in sorted(states.items())) or "none"
        return (f"tablet server {self.uuid} serving on {self.address}: tablets {found}; "
                f"opened in {seconds:.2f} s")

    # ------------------------------------------------------------------ background

    async def ticker(self) -> None:
        while True:
            await trio.sleep(self.options.tick_seconds)
            for voter in self.tablets.voting():
                voter.tick()
            for _, replica in self.tablets.running():
                replica.tick()
                if replica.wants_flush():
                    assert self._nursery is not None
                    self._nursery.start_soon(replica.flush)


@contextlib.asynccontextmanager
async def open_tserver(options: ServerOptions, *, disk: Disk | None = None,
                       network: Network | None = None,
                       startup_gate: Callable[[str], Awaitable[None]] | None = None,
                       extend_service: Callable[[Service], None] | None = None,
                       metrics: ServerMetrics | None = None,
                       on_bound: Callable[[TabletServer, trio.Nursery], Awaitable[None]]
                       | None = None,
                       ) -> AsyncIterator[TabletServer]:
    """Run a tablet server until the block exits (then stop it cleanly: server_stop).
    ``startup_gate`` (tests): awaited before each tablet's startup. ``extend_service``:
    registers more methods on the same RPC service (a master's, impl/master/server.py).
    ``metrics``: the registry to count in (a master's, shared with its own families); by
    default one of the server's own, as ``options`` say. ``on_bound``: awaited once RPC
    serves and before the tablets on disk are opened, with the server's nursery (the status
    pages start there, impl/servers: so they answer while the WALs replay, and ``/healthz``
    can say how many tablets are left)."""
    opening = time.monotonic()  # the start-up summary's "opened in": directory to READY
    poller = SyncPoller(options.fsync_poll_us / 1e6) \
        if options.fsync and options.fsync_poll_us > 0 else None
    server = TabletServer(options, disk or os_disk(poller), network, metrics)  # faults: test-only
    server.tablets.startup_gate = startup_gate
    await server.blocking(server.open_directory)
    # Every tablet on disk is registered (STARTING) before the first call is served.
    await server.blocking(server.tablets.register_all)
    await server.blocking(server.schemas.warm, server.layout.tablet_ids())
    watch: trio.CancelScope | None = None
    try:
        async with trio.open_nursery() as nursery:
            server._nursery = nursery
            server.tablets.attach(nursery)
            service = server.service()
            if extend_service is not None:
                extend_service(service)
            rpc: RpcServer = await nursery.start(functools.partial(
                serve_rpc, service, server.uuid, options.rpc_host, options.rpc_port,
                lamport=server.lamport_hooks, network=network, metrics=server.metrics.rpc))
            # The one place a server's own address is decided: everything that names this
            # server to others (registration, Raft configs, copy sources, NotLeader hints,
            # status) reads server.address, never the bind host.
            server.bound_address = format_address(options.rpc_host, rpc.port)
            server.address = options.advertised_address or server.bound_address
            if on_bound is not None:
                await on_bound(server, nursery)
            await server.tablets.start_all()
            logger.info("%s", server.startup_summary(time.monotonic() - opening))
            nursery.start_soon(server.ticker)
            nursery.start_soon(server.copies.maintain)
            if options.masters:
                server.heartbeats = await nursery.start(run_heartbeaters, server,
                                                        options.masters,
                                                        options.heartbeat_seconds)
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


__all__ = ["PeerSender", "ServerOptions", "TabletServer", "open_tserver"]
