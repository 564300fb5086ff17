"""The master process: a tablet server hosting the catalog, and the rooms of the master
shell around the sans-I/O master core (catalog, plans, reports), composed here.

Theory of operation
-------------------
A master is a tablet server that hosts one tablet, the catalog (``sys-catalog``, api.py),
plus the master's RPC methods on the same RPC server (seed 004 "Current design",
docs/sources.md: the catalog is a tablet hosted by the masters' tablet manager and
replicated by the same Raft and WAL as any other tablet). It embeds impl/tserver/server.py's
TabletServer unchanged: the directory (its instance file gives the master its UUID), the
tablet manager, the catalog's Raft replica, its WAL, the Raft.Message transport and the
trace (``server_format``, ``server_start``, the catalog tablet's Raft facts) all come from
there.

The rooms, one concern each, every one built by ``MasterServer`` and handed only the rooms
it uses (constructor arguments; the calls' sink as runner.py's ``CallSender`` Protocol):

    embedded         the embedded tablet server and the tablet-server map, once it serves:
                     identity, clock, the catalog replica and its leader (the one logger)
    membership       bootstrap (the catalog created with every master as a voter), the
                     master list, Master.AddMaster / RemoveMaster as Raft config changes
    gate             the leader-ready gate; the snapshot, ready term and write lock it guards
    runner           a plan run as ONE replicated catalog write, retried when stale
    delivery         calls released after commit, each attempt re-checked
    background       creation nudges, timed-out creations replaced, a healing round
    healing          the healing policy's round: its one write, then its ChangeConfigs
    follower_reads   reads answered by followers under a freshness bound; Master.ReadIndex
    service          the thin RPC handlers (heartbeats, tables, reads, replicas, masters)

Every master keeps a TabletServerMap from the heartbeats every tablet server sends to every
master (KUDU-1358: a new leader already knows the live servers); only the ready leader
processes reports. Four tasks run in the master's nursery beside the delivery tasks:
membership's bootstrap, the gate, the background task and the follower-read refresher.

Known limits: the master also serves the tablet-server methods of its embedded server (the
catalog tablet itself refuses client and admin calls: ServerOptions.internal_tablets; Raft
and tablet copy still reach it).
"""

from __future__ import annotations

import contextlib
import random
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable

import trio

from revivify.impl.observe.metrics import ServerMetrics
from revivify.impl.rpc import Service
from revivify.impl.rpc.transport import Network
from revivify.impl.storage.disk import Disk
from revivify.impl.tserver.replica import Replica
from revivify.impl.tserver.server import ServerOptions, TabletServer, open_tserver

from .background import Background
from .counts import MasterMetrics
from .delivery import CallDelivery
from .embedded import CATALOG, EmbeddedServer
from .follower_reads import FollowerReads
from .gate import ReadyGate
from .healing import Healer, SentChanges
from .membership import Membership
from .monitor import Watch
from .options import MasterOptions, normalize
from .runner import PlanRunner
from .service import MasterService


class MasterServer:
    """One master process: its rooms (module docstring), wired; open_master runs them."""

    def __init__(self, options: MasterOptions, metrics: ServerMetrics | None = None) -> None:
        self.options = options
        # The embedded tablet server's registry: the master's families are added to it.
        self.metrics = metrics if metrics is not None else ServerMetrics(
            enabled=options.metrics, per_tablet=options.metrics_per_tablet)
        counts = MasterMetrics(self.metrics)
        self.embedded = EmbeddedServer()
        # One Random for every placement (create, replace, heal): seeded, so a simulation
        # replays; the client id is fresh per process, so catalog write seqs start at 0.
        rng = random.Random(options.seed)
        client_id = f"master-{secrets.token_hex(8)}"
        changes = SentChanges(options.change_backoff)
        self.gate = ReadyGate(self.embedded, options.tick_seconds)
        self.delivery = CallDelivery(self.embedded, self.gate,
                                     call_retry_seconds=options.call_retry_seconds,
                                     call_timeout=options.call_timeout,
                                     forget_change=changes.forget, metrics=counts)
        self.runner = PlanRunner(self.embedded, self.gate, self.delivery,
                                 client_id=client_id, write_timeout=options.write_timeout,
                                 metrics=counts)
        self.healer = Healer(self.embedded, self.gate, self.runner, self.delivery, changes,
                             rng, failed_after=options.failed_after,
                             heal_changes=counts.heal_changes)
        self.watch = Watch(self.embedded, self.gate, self.healer, counts)
        self.metrics.families.collect_with(self.watch.collect)
        self.background = Background(self.embedded, self.gate, self.runner, self.delivery,
                                     self.healer if options.heal else None, rng,
                                     interval=options.background_seconds,
                                     creation_timeout=options.creation_timeout)
        self.reads = FollowerReads(self.embedded, self.gate, options)
        self.membership = Membership(self.embedded, self.gate, options)
        self.service = MasterService(self.embedded, self.gate, self.runner, self.reads,
                                     self.membership, self.healer, self.background, rng)

    @property
    def server(self) -> TabletServer:
        return self.embedded.server

    @property
    def uuid(self) -> str:
        return self.embedded.uuid

    @property
    def web_address(self) -> str:
        """HOST:PORT of this master's status pages ("" when they do not serve)."""
        return self.service.web_address

    @web_address.setter
    def web_address(self, value: str) -> None:
        self.service.web_address = value

    @property
    def address(self) -> str:
        return self.embedded.address

    def catalog_replica(self) -> Replica | None:
        return self.embedded.catalog_replica()

    def register(self, service: Service) -> None:
        """The master's methods, on the embedded tablet server's RPC service."""
        self.service.register(service)

    def start(self, ts: TabletServer, nursery: trio.Nursery) -> None:
        """The embedded server serves: start the rooms' tasks in ``nursery``."""
        self.embedded.start(ts, self.options.dead_after)
        self.delivery.nursery = nursery
        nursery.start_soon(self.membership.bootstrap)
        nursery.start_soon(self.gate.run)
        nursery.start_soon(self.background.run)
        nursery.start_soon(self.reads.run)
        nursery.start_soon(self.watch.run, self.options.background_seconds / 2)


@contextlib.asynccontextmanager
async def open_master(options: MasterOptions, *, disk: Disk | None = None,
                      network: Network | None = None,
                      on_bound: Callable[[MasterServer, TabletServer, trio.Nursery],
                                         Awaitable[None]] | None = None,
                      ) -> AsyncIterator[MasterServer]:
    """Run a master until the block exits. It serves RPC when this yields; it becomes ready
    (if elected) once the catalog tablet exists and the gate opened. ``disk`` and
    ``network``: as for a tablet server (impl/testing/cluster.py gives simulated ones).
    ``on_bound``: as open_tserver's, with the master and its embedded tablet server."""
    master = MasterServer(options)

    async def bound(ts: TabletServer, nursery: trio.Nursery) -> None:
        if on_bound is not None:
            await on_bound(master, ts, nursery)

    ts_options = ServerOptions(
        fs_root=options.fs_root, rpc_host=options.rpc_host, rpc_port=options.rpc_port,
        advertised_address=options.advertised_address, trace_dir=options.trace_dir,
        tick_seconds=options.tick_seconds,
        election_ticks=options.election_ticks, heartbeat_ticks=options.heartbeat_ticks,
        fsync=options.fsync, seed=options.seed, internal_tablets=(CATALOG,),
        threads=options.threads, flush_threshold=options.flush_threshold,
        log_retain_entries=options.log_retain_entries)
    async with open_tserver(ts_options, disk=disk, network=network,
                            extend_service=master.register, metrics=master.metrics,
                            on_bound=bound
                            ) as ts, trio.open_nursery() as nursery:
        master.start(ts, nursery)
        try:
            yield master
        finally:
            nursery.cancel_scope.cancel()


__all__ = ["CATALOG", "MasterOptions", "MasterServer", "normalize", "open_master"]
