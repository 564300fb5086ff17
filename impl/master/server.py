"""The master process: the trio shell around the master core (catalog, plans, reports).

Theory of operation
-------------------
A master is a tablet server that hosts one tablet, the catalog (``sys-catalog``, api.py),
plus the master's RPC methods on the same RPC server (seed 004 "Current design"; DESIGN.md
"the catalog is a tablet hosted by the masters' tablet manager and replicated by the same
Raft and WAL"). It embeds impl/tserver/server.py's TabletServer unchanged: the directory
(its instance file gives the master its UUID), the tablet manager, the catalog's Raft
replica, its WAL, the Raft.Message transport and the trace (``server_format``,
``server_start``, the catalog tablet's Raft facts) all come from there.

Bootstrap (first start). The catalog tablet is created on every master with the same
config at index 0: every configured master as a VOTER, in address order. Its members' UUIDs
are learnt over RPC from their addresses (a call naming no UUID is refused with
WrongServerUuid, which names the server's; tests/integration/helpers.py discover_uuid does
the same), retried until every master answered. From then on the config is in the catalog's
cmeta: a restart finds the tablet on disk (STARTING, then RUNNING) and discovers nothing.
A master whose directory is wiped gets a new UUID and is not a member any more: remove
its old UUID and add it again (below, "Masters join and leave").

The leader-ready gate (seed 004; issue 18). A loop watches the catalog replica every tick:

    not leader                      ready = None; followers answer catalog requests with
                                    MasterNotLeader(hint), a leader not yet ready with
                                    ServiceUnavailable (retryable)
    leader, and it has committed an entry of its term (its no-op) and applied every entry
    of its log (no write of an earlier term still in flight)
                                    under the write lock: snapshot = Catalog.from_rows(the
                                    catalog tablet's rows); ready = term; the tablet-server
                                    map is told it leads (it asks every server for a full
                                    report: KUDU-1353/1374); a fresh CreationWatch

Every master keeps a TabletServerMap from the heartbeats every tablet server sends to every
master (KUDU-1358: a new leader already knows the live servers); only the ready leader
processes reports.

Running a plan (docs/architecture.md "The master core"). One catalog write is in flight at
a time: the write lock covers every catalog row, so it holds whatever ``plan.locks`` names
(a superset, never taken in a conflicting order); ``plan.reserve`` is held in
``reserved`` while the write is in flight so that a CreateTable of the same name planned
meanwhile is refused as NameReserved (retryable). Under the lock the plan is checked fresh
against the snapshot (else planned again), its write proposed to the local catalog replica
as ONE WriteBatch, and once the replica answers (committed and applied on this leader) the
snapshot advances by that batch's ops and ``plan.commit(snapshot)`` releases the reply and
the calls. Why the snapshot may be advanced by our ops alone: this master was the ready
leader when it planned and holds the write lock, so every entry between its last write and
this one is its own (or a no-op); an entry of another leader would be of a later term and
come after ours. A write that fails (lost leadership, timeout: KUDU-495) fails the operation
with CatalogWriteFailed, drops the plan, sends nothing, and marks the snapshot for a
rebuild (the write may still commit later under this or another leader): the gate then
rebuilds from the rows once the log is fully applied before anything is served again.

Calls to tablet servers are sent only after their plan committed (above), each by its own
task, retried with a backoff for at most ``call_retry_seconds``, and each attempt only while
this master is still the ready leader of the term that released it and its committed
snapshot still calls for it (calls.py "Every attempt re-checked": a CreateTablet retried
after the DeleteTablet DELETED of its table would recreate the deleted replica at term 0);
a DeleteTablet waits for a CreateTablet attempt to the same replica that is on the wire;
what is lost then (or with a dead master) is re-driven by reports and by the background
task. An answer that makes a call moot counts as done:
TabletAlreadyExists and TabletDeleted for CreateTablet (every create carries the releasing
term, ``master_term``: a tablet server refuses a master's create for a tablet it deleted
with mode DELETED), TabletNotFound for DeleteTablet, a refused CAS,
InvalidArgument, UnknownMethod (a tablet server older than Admin.AlterSchema).

Background (the ready leader, every ``background_seconds``): CreateTablet nudges to every
replica of every CREATING tablet (creation_nudges: from committed records alone, so a new
leader continues its predecessor's creations), and the replacement of tablets CREATING for
longer than ``creation_timeout`` under this leader (plan_replace_tablets: old REPLACED and
new CREATING in one write), then one round of the healing policy (replication.py ``decide``,
unless ``heal`` is off): its ONE write (moves recorded for tablets with a member on a server
silent longer than ``failed_after``, with a replica reported FAILED, or over-replicated;
finished or abandoned moves cleared) through run_plan, then its ChangeConfig calls, decided
again on the snapshot that holds that write and released through send_calls (so each is
traced as ``master_call`` after the write's ``catalog_commit``, for a tablet the committed
catalog holds, CAS = the recorded config index). A ChangeConfig sent is not sent again for
the same tablet, CAS and leader for ``change_backoff`` seconds (its effect comes back in a
report); NotLeader, TabletNotRunning and TabletNotFound make it moot (the policy decides
again from fresher records). Liveness for the policy (``server_view``): live = heard from
within ``failed_after``; dead = silent longer, or never heard from once this master has run
that long. A recorded MoveReplica wakes the background task at once.

Masters join and leave (seed 004 "Master Raft configuration changes"): Master.AddMaster
proposes ADD(NON_VOTER, promote) of a master started with ``--join`` (it never creates a
catalog; the leader's Raft sees the tablet missing there and copies it, then promotes the
new member once caught up), Master.RemoveMaster proposes REMOVE; both on the local catalog
replica with the CAS on its committed config index, one at a time (the Raft core refuses a
second change while one is pending); the leader itself is never removed. These are Raft
config changes of the catalog tablet, traced by its Raft events, not catalog writes.

AlterTable: the table row's one write (schema version + 1, ALTERING), then an AlterSchema
to each tablet's recorded leader (impl/tserver/schema.py records it durably); the reports
bring the versions back, and the write that records the last one makes the table RUNNING
(reports.py). A tablet that reports an old version gets the alter again.

Follower reads (KUDU-500; queries.py "Follower reads" argues the rule). ListTables and
GetTableLocations that name a ``freshness`` bound are answered by any master: the ready
leader from its snapshot, as always; a follower from the rows its catalog replica has
applied (never an entry it has not applied, so never a table the leader has not
committed), and only when ``Freshness`` shows that catalog no older than the bound, else
StaleCatalog (retryable, naming the staleness). A follower learns its freshness by asking
the leader for Master.ReadIndex (the leader's Raft ReadIndex round, then its applied
index): an anchor (asked_at, index) on the follower's own clock. It asks in the
background every ``read_refresh_seconds`` while follower reads were served in the last
``read_refresh_idle`` seconds, and once more, briefly (at most ``read_wait_seconds``), when
a read finds its catalog too old; requests for an anchor are single-flight. Nothing here
is durable or traced: a read changes nothing.

The master list (issue 19): every heartbeat answer and every Master.Status names the
catalog's committed config (member addresses and the config's index, messages.py "The
master list"), so tablet servers start heartbeating a master added later and stop calling a
removed one (impl/tserver/heartbeat.py), and clients ask the masters of the newest config
they were told (impl/client/master.py).

Known limits: the master also serves the tablet-server methods of its embedded server (the
catalog tablet itself refuses client and admin calls: ServerOptions.internal_tablets; Raft
and tablet copy still reach it).
"""

from __future__ import annotations

import contextlib
import logging
import random
import secrets
from collections.abc import AsyncIterator, Callable
from typing import Final, TypeVar

import attrs
import msgspec
import trio

from revivify.impl.consensus.messages import NON_VOTER, Config, ConfigChange, Peer
from revivify.impl.rpc import (
    AppError,
    CallContext,
    RpcError,
    Service,
    UnknownMethod,
    WrongServerUuid,
    open_rpc_client,
)
from revivify.impl.rpc.address import format_address, parse_address
from revivify.impl.rpc.backoff import Backoff
from revivify.impl.rpc.transport import Network
from revivify.impl.storage.disk import Disk
from revivify.impl.storage.values import ConsensusMeta
from revivify.impl.tserver import api as ts_api
from revivify.impl.tserver.manager.core import Kind
from revivify.impl.tserver.replica import Replica, config_to_storage
from revivify.impl.tserver.server import ServerOptions, TabletServer, open_tserver

from . import api
from .calls import ADMIN_ALTER_SCHEMA, TabletServerCall, still_called_for
from .catalog import Catalog, Column
from .errors import IllegalState, InvalidArgument, MasterError
from .messages import MASTER_HEARTBEAT, Heartbeat, HeartbeatResponse
from .operations import (
    AlterTable,
    Committed,
    CreateTable,
    CreationWatch,
    Plan,
    creation_nudges,
    plan_alter_table,
    plan_create_table,
    plan_delete_table,
    plan_replace_tablets,
)
from .placement import Candidate
from .queries import Freshness, list_tables, table_locations
from .replication import (
    Healing,
    ServerView,
    decide,
    failed_after_report,
    plan_add_replica,
    plan_move_replica,
    plan_remove_replica,
    server_view,
)
from .reports import process_report
from .tracing import call_fact, commit_fact, ready_fact
from .tserver_map import TabletServerMap

logger = logging.getLogger(__name__)

R = TypeVar("R")

CATALOG: Final = api.CATALOG_TABLET_ID
_CALL_RETRY: Final = Backoff(initial=0.1, max=2.0, multiplier=2.0, jitter=0)
_REPLAN_ATTEMPTS: Final = 8  # a plan that keeps finding its rows changed gives up

_RESPONSE_OF: Final[dict[str, type[msgspec.Struct]]] = {
    ts_api.ADMIN_CREATE_TABLET: ts_api.TabletCreated,
    ts_api.ADMIN_DELETE_TABLET: ts_api.Ack,
    ts_api.ADMIN_CHANGE_CONFIG: ts_api.ConfigChanged,
    ADMIN_ALTER_SCHEMA: ts_api.Ack,
}


@attrs.frozen
class MasterOptions:
    fs_root: str
    rpc_host: str = "127.0.0.1"
    rpc_port: int = 0
    masters: tuple[str, ...] = ()  # every master's HOST:PORT, this one included; () = alone
    trace_dir: str | None = None
    tick_seconds: float = 0.05
    election_ticks: int = 10
    heartbeat_ticks: int = 2
    fsync: bool = True
    seed: int | None = None
    dead_after: float = 3.0  # seconds without a heartbeat before a tablet server is dead
    background_seconds: float = 1.0
    creation_timeout: float = 60.0  # a tablet CREATING this long (under one leader) is replaced
    write_timeout: float = 10.0  # a catalog write not committed by then failed
    call_retry_seconds: float = 30.0
    call_timeout: float = 10.0
    # The healing policy (replication.py): a tablet server silent this long is failed and
    # its replicas are moved elsewhere (`master run --tserver-failed-after-ms`). A few
    # heartbeats' worth by default, for tests and demos; minutes in production.
    failed_after: float = 3.0
    heal: bool = True  # run the healing policy (moves, re-replication) in the background
    # A master that joins a running cluster (`master add`): it never creates the catalog,
    # the leader copies it here once this master is added to the catalog's config.
    join: bool = False
    # A ChangeConfig the policy sent is not sent again for the same tablet, config index and
    # leader for this long (its effect comes back in a report; the CAS fences the rest).
    change_backoff: float = 5.0
    threads: bool = True  # False: disk calls inline (the in-process clusters, MockClock)
    # Follower reads (module docstring): a follower asks the leader for a read index this
    # often while it served follower reads in the last ``read_refresh_idle`` seconds, and
    # a read that finds the catalog too old waits at most ``read_wait_seconds`` for one.
    read_refresh_seconds: float = 0.25
    read_refresh_idle: float = 60.0
    read_wait_seconds: float = 1.0
    # The catalog tablet's flush and WAL retention, as a tablet server's (ServerOptions):
    # small values let a test GC the catalog's WAL (a joining master then needs a copy of
    # the flushed catalog, not a replay of the log from its first entry).
    flush_threshold: int = 8 << 20
    log_retain_entries: int = 50_000


def normalize(address: str) -> str:
    host, port = parse_address(address)
    return format_address(host, port)


class MasterServer:
    """One master process's state around its embedded tablet server (module docstring)."""

    def __init__(self, options: MasterOptions) -> None:
        self.options = options
        self.ts: TabletServer | None = None
        self.tservers: TabletServerMap | None = None
        self.catalog = Catalog()
        self.ready_term: int | None = None
        self._needs_rebuild = False
        self._write_lock = trio.Lock()
        self.reserved: set[str] = set()
        self._client_id = f"master-{secrets.token_hex(8)}"  # fresh per process: seqs from 0
        self._seq = 0
        self._inflight: set[tuple[str, str, str]] = set()
        # (dest, tablet id) -> CreateTablet attempts on the wire there, and the event set
        # when the last of them ends (a DeleteTablet to that replica waits for it).
        self._creates_on_wire: dict[tuple[str, str], tuple[int, trio.Event]] = {}
        self._watch = CreationWatch()
        self._nursery: trio.Nursery | None = None
        self._rng = random.Random(options.seed)
        self._bootstrapped = trio.Event()
        self._started_at: float | None = None
        self._wake = trio.Event()  # a recorded move: run a background round now
        # tablet id -> (CAS index, leader, when) of the last ChangeConfig the policy sent
        self._changes_sent: dict[str, tuple[int, str, float]] = {}
        # server uuid -> the tablets its reports (processed here) last said were FAILED
        self._failed: dict[str, frozenset[str]] = {}
        # Follower reads: the anchors, when one was last served, the request for an anchor
        # in flight (single-flight), and the catalog built from the applied rows, by the
        # (replica, applied index) it was built at.
        self.freshness = Freshness()
        self._follower_read_at: float | None = None
        self._anchoring: trio.Event | None = None
        self._applied_catalog: tuple[Replica, int, Catalog] | None = None

    # ------------------------------------------------------------------ identity

    @property
    def server(self) -> TabletServer:
        assert self.ts is not None
        return self.ts

    @property
    def uuid(self) -> str:
        return self.server.uuid

    @property
    def address(self) -> str:
        return self.server.address

    def master_addresses(self) -> tuple[str, ...]:
        configured = tuple(sorted({normalize(a) for a in self.options.masters}))
        return configured or (self.address,)

    def master_config(self) -> tuple[int, list[str]]:
        """(index, member addresses) of the catalog's committed Raft config as this master
        knows it, or (-1, []) without a catalog here (messages.py "The master list")."""
        if self.ts is None:
            return (-1, [])
        replica = self.ts.tablets.replica(CATALOG)
        if replica is None:
            return (-1, [])
        committed = replica.core.status().committed_config
        return (committed.opid_index, sorted(normalize(p.address) for p in committed.peers))

    def catalog_replica(self) -> Replica | None:
        if self.ts is None:
            return None
        return self.ts.tablets.running_replica(CATALOG)

    def now(self) -> float:
        return trio.current_time()

    def tmap(self) -> TabletServerMap:
        assert self.tservers is not None
        return self.tservers

    # ------------------------------------------------------------------ bootstrap

    async def discover_uuid(self, address: str) -> str:
        """The UUID of the server at ``address``, from its refusal of a call naming none."""
        host, port = parse_address(address)
        failures = 0
        while True:
            try:
                async with open_rpc_client(host, port, "", self.uuid,
                                           network=self.server.network) as client:
                    await client.call(api.MASTER_STATUS, api.Empty(), api.MasterStatus)
            except WrongServerUuid as exc:
                return exc.expected
            except (RpcError, OSError) as exc:
                logger.debug("master at %s: %s", address, exc)
            failures += 1
            await trio.sleep(_CALL_RETRY.delay(failures))

    async def ensure_catalog(self) -> None:
        """Create the catalog tablet here, once, with every master as a voter."""
        tablets = self.server.tablets
        if tablets.core.state(CATALOG).kind is not Kind.ABSENT:
            return
        addresses = self.master_addresses()
        if self.address not in addresses:
            raise ValueError(f"this master's address {self.address} is not in --masters "
                             f"{','.join(addresses)}")
        peers = []
        for address in addresses:
            uuid = self.uuid if address == self.address else await self.discover_uuid(address)
            peers.append(Peer(uuid, address))
        config = Config(0, tuple(peers))
        cmeta = ConsensusMeta(CATALOG, 0, None, config_to_storage(config))
        logger.info("creating the catalog tablet with voters %s", [p.uuid for p in peers])
        if tablets.core.state(CATALOG).kind is Kind.ABSENT:
            await tablets.create(CATALOG, cmeta, sorted(config.voters()))

    async def bootstrap(self) -> None:
        """Create the catalog if it is not here yet (it waits for the other masters); a
        joining master waits for the leader to copy it here instead."""
        if not self.options.join:
            await self.ensure_catalog()
        elif self.server.tablets.core.state(CATALOG).kind is Kind.ABSENT:
            logger.info("master %s joins: waiting for the catalog to be copied here",
                        self.uuid)
        self._bootstrapped.set()

    # ------------------------------------------------------------------ the gate

    def _leader_of(self, replica: Replica | None) -> tuple[str, int, str | None, str | None]:
        """(role, term, leader uuid, leader address) of the catalog replica."""
        if replica is None:
            return ("", 0, None, None)
        status = replica.core.status()
        leader = status.leader
        peer = status.active_config.peer(leader) if leader else None
        return (status.role.value, status.term, leader, peer.address if peer else None)

    async def gate(self) -> None:
        """The leader-ready gate, every tick (module docstring)."""
        while True:
            await trio.sleep(self.options.tick_seconds)
            replica = self.catalog_replica()
            if replica is None:
                continue
            status = replica.core.status()
            leading = replica.core.is_leader()
            if not leading:
                if self.ready_term is not None:
                    logger.info("master %s: no longer the ready leader (term %d)", self.uuid,
                                status.term)
                self.ready_term = None
                self.tmap().set_leadership(status.term, False)
                continue
            if self.ready_term == status.term and not self._needs_rebuild:
                continue
            if not (replica.core.committed_in_term()
                    and replica.store.applied_index >= status.last_index):
                continue
            async with self._write_lock:
                status = replica.core.status()
                if not (replica.core.is_leader() and replica.core.committed_in_term()
                        and replica.store.applied_index >= status.last_index):
                    continue
                self.catalog = Catalog.from_rows(replica.store.scan())
                self.ready_term = status.term
                self._needs_rebuild = False
                self.server.tracer.event("master_ready", ready_fact(
                    status.term, replica.store.applied_index, self.catalog))
                self._watch = CreationWatch()
                self.tmap().set_leadership(status.term, True)
                logger.info("master %s: ready leader in term %d (%d tables, %d tablets)",
                            self.uuid, status.term, len(self.catalog.tables),
                            len(self.catalog.tablets))

    def require_ready(self) -> int:
        """The term this master leads in, ready; else the typed refusal."""
        replica = self.catalog_replica()
        _, term, leader, address = self._leader_of(replica)
        if replica is None or not replica.core.is_leader():
            raise api.MasterNotLeader(leader, address, term)
        if self.ready_term != term or self._needs_rebuild:
            raise api.ServiceUnavailable(f"leader in term {term}, not ready yet")
        return term

    # ------------------------------------------------------------------ plans

    async def run_plan(self, make: Callable[[Catalog], Plan[R] | MasterError]
                       ) -> Committed[R] | MasterError:
        """Plan on the current snapshot and run the plan (module docstring)."""
        for _ in range(_REPLAN_ATTEMPTS):
            term = self.require_ready()
            planned = make(self.catalog)
            if isinstance(planned, MasterError):
                return planned
            plan = planned
            async with self._write_lock:
                if self.require_ready() != term or not plan.is_fresh(self.catalog):
                    continue  # someone's write changed a row it read: plan again
                if plan.write.is_empty():
                    done = plan.commit(self.catalog)
                else:
                    replica = self.catalog_replica()
                    assert replica is not None
                    batch = plan.write.to_batch(self._client_id, self._seq)
                    self._seq += 1
                    self.reserved |= plan.reserve
                    try:
                        with trio.fail_after(self.options.write_timeout):
                            written = await replica.write(batch)
                    except (AppError, trio.TooSlowError) as exc:
                        # KUDU-495: the operation fails, the master keeps running; the
                        # write may still commit, so the snapshot is rebuilt from the rows.
                        self._needs_rebuild = True
                        raise api.CatalogWriteFailed(f"{plan.op}: {exc}") from None
                    finally:
                        self.reserved -= plan.reserve
                    self.catalog = self.catalog.apply_ops(batch.ops)
                    self.server.tracer.event("catalog_commit", commit_fact(
                        term, written.index, plan.op, plan.write.records()))
                    done = plan.commit(self.catalog)
            self.send_calls(done.calls, term)
            return done
        raise api.ServiceUnavailable("the catalog kept changing under the request; retry")

    async def run_or_refuse(self, make: Callable[[Catalog], Plan[R] | MasterError]) -> R:
        result = await self.run_plan(make)
        if isinstance(result, MasterError):
            raise api.refusal(result)
        return result.reply

    # ------------------------------------------------------------------ calls

    def send_calls(self, calls: tuple[TabletServerCall, ...], term: int) -> None:
        """Release ``calls`` (decided by the ready leader of ``term``): each is traced
        (``master_call``) and then delivered by its own task."""
        for call in calls:
            key = (call.dest, call.method, call.tablet_id)
            if key in self._inflight:
                continue  # the same call is already being retried
            self._inflight.add(key)
            self.server.tracer.event("master_call", call_fact(term, call))
            assert self._nursery is not None
            self._nursery.start_soon(self._deliver, call, key, term)

    def _address_for(self, call: TabletServerCall) -> str | None:
        address = self.tmap().address(call.dest)
        if address is None and isinstance(call.body, ts_api.CreateTablet):
            peer = next((p for p in call.body.peers if p.uuid == call.dest), None)
            address = peer.address if peer else None
        return address

    def _still_wanted(self, call: TabletServerCall, term: int) -> bool | None:
        """May an attempt of ``call``, released in ``term``, leave now (calls.py "Every
        attempt re-checked")? True yes; False never again (moot); None not now (this
        leader's snapshot awaits a rebuild: it may not be the committed catalog)."""
        if self.ready_term != term:
            # Deposed (a master never leads the same term twice) or never ready again in
            # it: the new leader re-drives what its records call for (nudges, reports).
            return False
        if self._needs_rebuild:
            return None
        return still_called_for(self.catalog, call)

    async def _creates_ended(self, dest: str, tablet_id: str) -> None:
        """Wait until no CreateTablet attempt to (dest, tablet) is on the wire: a delete
        sent while one is might be overtaken by it (each attempt is bounded by
        ``call_timeout``, so this is too)."""
        while (on_wire := self._creates_on_wire.get((dest, tablet_id))) is not None:
            await on_wire[1].wait()

    async def _deliver(self, call: TabletServerCall, key: tuple[str, str, str],
                       term: int) -> None:
        try:
            deadline = self.now() + self.options.call_retry_seconds
            failures = 0
            while self.now() < deadline:
                wanted = self._still_wanted(call, term)
                if wanted is False:
                    logger.info("%s to %s for %s: moot (not called for by the catalog of "
                                "a ready leader of term %d any more)", call.method,
                                call.dest, call.tablet_id, term)
                    return
                if wanted is True and isinstance(call.body, ts_api.DeleteTablet):
                    await self._creates_ended(call.dest, call.tablet_id)
                    wanted = self._still_wanted(call, term)  # checked again after a wait
                address = self._address_for(call) if wanted else None
                if address is not None and await self._try_call(call, address, term):
                    return
                failures += 1
                await trio.sleep(_CALL_RETRY.delay(failures))
            logger.info("gave up on %s to %s for %s (reports re-drive it)", call.method,
                        call.dest, call.tablet_id)
        finally:
            self._inflight.discard(key)

    async def _try_call(self, call: TabletServerCall, address: str, term: int) -> bool:
        """One attempt; True when the call is done or moot."""
        host, port = parse_address(address)
        # A CreateTablet attempt counts as on the wire from here (the caller's check, no
        # checkpoint since) until it ends: a DeleteTablet released meanwhile waits for it.
        pair = (call.dest, call.tablet_id)
        creating = isinstance(call.body, ts_api.CreateTablet)
        if creating:
            count, ended = self._creates_on_wire.get(pair, (0, trio.Event()))
            self._creates_on_wire[pair] = (count + 1, ended)
        try:
            with trio.fail_after(self.options.call_timeout):
                async with open_rpc_client(host, port, call.dest, self.uuid,
                                           app_errors=ts_api.APP_ERRORS,
                                           network=self.server.network) as client:
                    # Checked again once connected: the catalog may have changed while
                    # the connection opened (the closest check to the send we have).
                    wanted = self._still_wanted(call, term)
                    if not wanted:
                        return wanted is False  # moot: done; not now: retry later
                    # A create carries the releasing term: the server refuses it for a
                    # tablet it deleted (TabletDeleted: a late copy, moot).
                    body = (msgspec.structs.replace(call.body, master_term=term)
                            if isinstance(call.body, ts_api.CreateTablet) else call.body)
                    await client.call(call.method, body, _RESPONSE_OF[call.method])
            logger.info("%s to %s for %s: done (%s)", call.method, call.dest,
                        call.tablet_id, call.why)
            return True
        except (ts_api.TabletAlreadyExists, ts_api.TabletDeleted, ts_api.ConfigChangeRefused,
                ts_api.InvalidArgument, UnknownMethod) as exc:
            logger.info("%s to %s for %s: moot: %s", call.method, call.dest, call.tablet_id,
                        exc)
            return True
        except (ts_api.NotLeader, ts_api.TabletNotRunning) as exc:
            if call.method == ts_api.ADMIN_CHANGE_CONFIG:
                # Decided on a leader the records no longer agree with: moot; the policy
                # decides again once a report names the tablet's new leader.
                logger.info("%s to %s for %s: moot: %s", call.method, call.dest,
                            call.tablet_id, exc)
                self._changes_sent.pop(call.tablet_id, None)
                return True
            return False
        except ts_api.TabletNotFound:
            if call.method == ts_api.ADMIN_CHANGE_CONFIG:
                self._changes_sent.pop(call.tablet_id, None)
                return True
            return call.method == ts_api.ADMIN_DELETE_TABLET
        except (RpcError, OSError, trio.TooSlowError) as exc:
            logger.debug("%s to %s for %s: %s", call.method, call.dest, call.tablet_id, exc)
            return False
        finally:
            if creating:
                count, ended = self._creates_on_wire[pair]
                if count == 1:
                    del self._creates_on_wire[pair]
                    ended.set()
                else:
                    self._creates_on_wire[pair] = (count - 1, ended)

    # ------------------------------------------------------------------ background

    async def background(self) -> None:
        while True:
            with trio.move_on_after(self.options.background_seconds):
                await self._wake.wait()
            self._wake = trio.Event()
            if self.ready_term is None:
                continue
            try:
                await self._background_round()
            except AppError as exc:  # lost leadership meanwhile: the next round
                logger.info("background round: %s", exc)

    async def _background_round(self) -> None:
        now = self.now()
        term = self.ready_term
        if term is None:
            return
        self.send_calls(creation_nudges(self.catalog), term)
        self._watch = self._watch.observe(self.catalog, now)
        timed_out = self._watch.timed_out(now, self.options.creation_timeout)
        if timed_out:
            servers = self.tmap().candidates(now)
            result = await self.run_plan(lambda c: plan_replace_tablets(
                c, timed_out, servers=servers, rng=self._rng))
            if isinstance(result, MasterError):
                logger.info("replacing timed-out tablets %s: %s", timed_out, result.message)
            else:
                logger.info("replaced timed-out tablets: %s", result.reply.replaced)
        if self.options.heal:
            await self._heal_round(term)

    # ------------------------------------------------------------------ healing

    def server_view(self, catalog: Catalog) -> ServerView:
        """Liveness for the policy (replication.py): live = heard from within
        ``failed_after``; dead = silent longer, or never heard from once this master has
        run that long (a restarted master does not take every server for dead); failed =
        the replicas live servers last reported FAILED to this master as the leader."""
        now = self.now()
        tmap = self.tmap()
        limit = self.options.failed_after
        started = self._started_at if self._started_at is not None else now
        warm = now - started > limit
        uuids = {i.uuid for i in tmap.describe(now)} | set(catalog.replica_counts())
        live: set[str] = set()
        dead: set[str] = set()
        for uuid in uuids:
            entry = tmap.entry(uuid)
            if entry is not None and now - entry.last_heartbeat <= limit:
                live.add(uuid)
            elif entry is not None or warm:
                dead.add(uuid)
        candidates = [c for c in tmap.candidates(now) if c.uuid in live]
        failed = [(tablet_id, uuid) for uuid, tablet_ids in self._failed.items()
                  if uuid in live for tablet_id in tablet_ids]
        return server_view(live, dead, candidates, failed)

    async def _heal_round(self, term: int) -> None:
        """One round of the healing policy: its one write (moves recorded or cleared),
        then its ChangeConfig calls, each decided on the committed catalog."""
        healing = decide(self.catalog, self.server_view(self.catalog), self._rng)
        if healing.write is not None:
            result = await self.run_plan(lambda c: _heal_write(
                decide(c, self.server_view(c), self._rng)))
            if isinstance(result, MasterError):
                logger.info("recording moves: %s", result.message)
            else:
                logger.info("moves recorded or finished: %s", result.reply)
            # The calls are decided again on the snapshot that holds the write.
            healing = decide(self.catalog, self.server_view(self.catalog), self._rng)
        if self.ready_term != term:
            return
        now = self.now()
        for plan in healing.changes:
            if plan.write.is_empty() and not plan.is_fresh(self.catalog):
                continue
            done = plan.commit(self.catalog)
            for call in done.calls:
                assert isinstance(call.body, ts_api.ChangeConfig)
                sent = self._changes_sent.get(call.tablet_id)
                mark = (call.body.cas_config_index, call.dest)
                if sent is not None and sent[:2] == mark \
                        and now - sent[2] < self.options.change_backoff:
                    continue  # sent already: its effect comes back in a report
                self._changes_sent[call.tablet_id] = (*mark, now)
                logger.info("healing %s: %s %s (%s)", call.tablet_id, call.body.change.kind,
                            call.body.change.peer.uuid, call.why)
                self.send_calls((call,), term)
        for tablet_id, why in sorted(healing.waiting.items()):
            logger.debug("healing %s waits: %s", tablet_id, why)

    # ------------------------------------------------------------------ RPC handlers

    def _require_started(self) -> None:
        if self.ts is None or self.tservers is None:
            raise api.ServiceUnavailable("the master is starting")

    async def on_heartbeat(self, hb: Heartbeat, ctx: CallContext) -> HeartbeatResponse:
        self._require_started()
        verdict = self.tmap().heartbeat(hb, self.now())
        report = verdict.report
        if report is not None:
            # Soft state for the healing policy (replication.py "A FAILED replica").
            self._failed[hb.server_uuid] = failed_after_report(
                self._failed.get(hb.server_uuid, frozenset()), report)
            try:
                result = await self.run_plan(lambda c: process_report(c, hb.server_uuid,
                                                                      report))
                if isinstance(result, MasterError):
                    logger.warning("report of %s refused: %s", hb.server_uuid, result.message)
            except AppError as exc:
                logger.info("report of %s not processed: %s", hb.server_uuid, exc)
                self.tmap().report_failed(hb.server_uuid)
        # Read after the report's write: a config change that committed meanwhile is told.
        index, masters = self.master_config()
        return msgspec.structs.replace(verdict.response, masters=masters,
                                       masters_index=index)

    async def on_status(self, req: api.Empty, ctx: CallContext) -> api.MasterStatus:
        self._require_started()
        replica = self.catalog_replica()
        role, term, leader, address = self._leader_of(replica)
        index, masters = self.master_config()
        if index < 0:  # no catalog here yet: the configured list, said with no index
            masters = list(self.master_addresses())
        ready = replica is not None and replica.core.is_leader() \
            and self.ready_term == term and not self._needs_rebuild
        return api.MasterStatus(self.uuid, self.address, role, term, leader, address, ready,
                                masters, index)

    async def on_list_tservers(self, req: api.Empty, ctx: CallContext
                               ) -> api.TabletServerList:
        self._require_started()
        return api.TabletServerList(self.uuid, [
            api.TabletServerEntry(i.uuid, i.address, i.live, round(i.seconds_since_heartbeat, 3),
                                  i.state.value)
            for i in self.tmap().describe(self.now())])

    async def on_create_table(self, req: api.CreateTableRequest, ctx: CallContext
                              ) -> api.TableCreatedReply:
        self._require_started()
        request = CreateTable(req.name, tuple(req.schema) or (Column("key", key=True),),
                              req.num_tablets, req.num_replicas, req.request_id)
        servers = self.tmap().candidates(self.now())
        reply = await self.run_or_refuse(lambda c: plan_create_table(
            c, request, servers=servers, reserved=frozenset(self.reserved), rng=self._rng))
        return api.TableCreatedReply(reply.table_id, list(reply.tablet_ids),
                                     reply.already_existed)

    async def on_delete_table(self, req: api.DeleteTableRequest, ctx: CallContext
                              ) -> api.TableDeletedReply:
        self._require_started()
        reply = await self.run_or_refuse(lambda c: plan_delete_table(c, req.name,
                                                                     req.request_id))
        return api.TableDeletedReply(reply.table_id)

    async def on_alter_table(self, req: api.AlterTableRequest, ctx: CallContext
                             ) -> api.TableAlteredReply:
        self._require_started()
        request = AlterTable(req.name, tuple(req.add_columns), tuple(req.drop_columns),
                             req.new_name, req.request_id)
        reply = await self.run_or_refuse(lambda c: plan_alter_table(
            c, request, reserved=frozenset(self.reserved)))
        return api.TableAlteredReply(reply.table_id, reply.schema_version)

    async def on_list_tables(self, req: api.ListTablesRequest, ctx: CallContext
                             ) -> api.TableList:
        self._require_started()
        catalog, served_by = await self._read_view(req.freshness)
        return api.TableList([
            api.TableInfo(t.name, t.table_id, t.state.value, t.schema_version, t.num_tablets)
            for t in list_tables(catalog)], served_by)

    async def on_table_locations(self, req: api.TableLocationsRequest, ctx: CallContext
                                 ) -> api.TableLocationsReply:
        self._require_started()
        catalog, served_by = await self._read_view(req.freshness)
        now = self.now()
        tmap = self.tmap()
        found = table_locations(catalog, req.name, address=tmap.address,
                                live=lambda uuid: tmap.is_live(uuid, now),
                                running_only=req.running_only)
        if isinstance(found, MasterError):
            raise api.refusal(found)
        return api.TableLocationsReply(found.table_id, found.name, found.schema_version,
                                       found.num_tablets, [
            api.TabletLocationInfo(t.tablet_id, t.partition, t.state.value, t.term, [
                api.ReplicaLocationInfo(r.uuid, r.address, r.member_type, r.leader, r.live)
                for r in t.replicas], t.config_index, t.moving_from)
            for t in found.tablets], found.num_replicas, served_by)

    # ------------------------------------------------------------------ follower reads

    async def _read_view(self, freshness: float | None) -> tuple[Catalog, api.ServedBy]:
        """The catalog a read is answered from (module docstring "Follower reads"): the
        ready leader's snapshot, or, with a ``freshness`` bound, a follower's applied
        catalog known to be no older than the bound; else the typed refusal."""
        if freshness is not None and not (0 <= freshness < float("inf")):
            raise api.refusal(InvalidArgument(f"freshness {freshness}: a number of seconds "
                                              ">= 0"))
        replica = self.catalog_replica()
        if freshness is None or (replica is not None and replica.core.is_leader()):
            self.require_ready()
            index = replica.store.applied_index if replica is not None else 0
            return self.catalog, api.ServedBy(self.uuid, True, 0.0, index)
        if replica is None:
            raise api.ServiceUnavailable("this master holds no catalog yet")
        self._follower_read_at = self.now()
        staleness = self.freshness.staleness(self.now(), replica.store.applied_index)
        if staleness is None or staleness > freshness:
            # Too old: ask the leader for a read index now, and wait a little for it to be
            # applied (a follower in touch with the leader answers; a cut-off one refuses).
            with trio.move_on_after(min(freshness, self.options.read_wait_seconds)):
                await self._anchor_once()
                while True:
                    staleness = self.freshness.staleness(self.now(),
                                                         replica.store.applied_index)
                    if staleness is not None and staleness <= freshness:
                        break
                    await trio.sleep(self.options.tick_seconds)
            staleness = self.freshness.staleness(self.now(), replica.store.applied_index)
        applied = replica.store.applied_index
        if staleness is None or staleness > freshness:
            raise api.StaleCatalog(-1 if staleness is None else round(staleness * 1000),
                                   round(freshness * 1000), applied)
        # No await from the staleness check to here: the rows are those of ``applied``.
        return self._catalog_at(replica), api.ServedBy(self.uuid, False,
                                                       round(staleness, 3), applied)

    def _catalog_at(self, replica: Replica) -> Catalog:
        """The catalog of the rows ``replica`` has applied (kept while the index holds)."""
        applied = replica.store.applied_index
        cached = self._applied_catalog
        # the replica itself, not its id(): a new replica (after a catalog copy) at a freed
        # one's address would otherwise match
        if cached is None or cached[0] is not replica or cached[1] != applied:
            cached = (replica, applied, Catalog.from_rows(replica.store.scan()))
            self._applied_catalog = cached
        return cached[2]

    async def _anchor_once(self) -> None:
        """Ask the leader master for a read index (single-flight: a request already in
        flight is waited for instead). Failures leave the anchors as they were."""
        if self._anchoring is not None:
            await self._anchoring.wait()
            return
        self._anchoring = done = trio.Event()
        try:
            await self._ask_read_index()
        finally:
            self._anchoring = None
            done.set()

    async def _ask_read_index(self) -> None:
        replica = self.catalog_replica()
        if replica is None or replica.core.is_leader():
            return
        _, _, leader, address = self._leader_of(replica)
        if leader is None or address is None:
            return  # no known leader: nothing to anchor on (the staleness grows)
        asked_at = self.now()  # before the request leaves (queries.py rule 2)
        host, port = parse_address(address)
        try:
            with trio.fail_after(self.options.call_timeout):
                async with open_rpc_client(host, port, leader, self.uuid,
                                           app_errors=api.APP_ERRORS,
                                           network=self.server.network) as client:
                    reply = await client.call(api.MASTER_READ_INDEX, api.Empty(),
                                              api.ReadIndexReply)
        except (RpcError, OSError, trio.TooSlowError) as exc:
            logger.debug("read index from %s: %s", leader, exc)
            return
        self.freshness.anchor(asked_at, reply.index, replica.store.applied_index)

    async def follower_reads(self) -> None:
        """Keep a follower's anchors fresh while follower reads are being asked for."""
        while True:
            await trio.sleep(self.options.read_refresh_seconds)
            served = self._follower_read_at
            if served is None or self.now() - served > self.options.read_refresh_idle:
                continue
            await self._anchor_once()

    async def on_read_index(self, req: api.Empty, ctx: CallContext) -> api.ReadIndexReply:
        """The ready leader confirms its leadership (Raft ReadIndex: a heartbeat round a
        majority acknowledged) and answers its applied index, at least the read index."""
        self._require_started()
        term = self.require_ready()
        replica = self.catalog_replica()
        assert replica is not None
        try:
            with trio.fail_after(self.options.call_timeout):
                await replica.read_barrier()
        except trio.TooSlowError:
            raise api.ServiceUnavailable("the read index was not confirmed in time") from None
        except ts_api.NotLeader:
            raise api.MasterNotLeader(None, None, term) from None
        # No await since read_barrier returned: this index is applied here, so committed.
        return api.ReadIndexReply(term, replica.store.applied_index)

    def _live_server(self, uuid: str) -> Candidate | MasterError:
        found = next((c for c in self.tmap().candidates(self.now()) if c.uuid == uuid), None)
        if found is None:
            return InvalidArgument(f"{uuid} is not a live tablet server")
        return found

    async def on_add_replica(self, req: api.ReplicaChangeRequest, ctx: CallContext
                             ) -> api.ReplicaChangeReply:
        self._require_started()
        if req.member_type not in ("VOTER", "NON_VOTER"):
            raise api.refusal(InvalidArgument(f"member type {req.member_type!r}: VOTER or "
                                              "NON_VOTER"))
        server = self._live_server(req.uuid)
        if isinstance(server, MasterError):
            raise api.refusal(server)
        reply = await self.run_or_refuse(lambda c: plan_add_replica(
            c, req.tablet_id, server, voter=req.member_type == "VOTER"))
        return api.ReplicaChangeReply(reply.tablet_id, reply.leader, reply.cas_config_index,
                                      reply.already_done)

    async def on_remove_replica(self, req: api.ReplicaChangeRequest, ctx: CallContext
                                ) -> api.ReplicaChangeReply:
        self._require_started()
        reply = await self.run_or_refuse(lambda c: plan_remove_replica(
            c, req.tablet_id, req.uuid))
        return api.ReplicaChangeReply(reply.tablet_id, reply.leader, reply.cas_config_index,
                                      reply.already_done)

    async def on_move_replica(self, req: api.MoveReplicaRequest, ctx: CallContext
                              ) -> api.MoveReplicaReply:
        self._require_started()
        to: Candidate | None = None
        if req.to_uuid:
            found = self._live_server(req.to_uuid)
            if isinstance(found, MasterError):
                raise api.refusal(found)
            to = found
        reply = await self.run_or_refuse(lambda c: plan_move_replica(
            c, req.tablet_id, req.from_uuid, to))
        self._wake.set()
        return api.MoveReplicaReply(reply.tablet_id, reply.from_uuid, reply.to_uuid,
                                    reply.already_recorded, reply.done)

    # ------------------------------------------------------------------ master config

    async def _change_masters(self, change: ConfigChange, cas: int | None
                              ) -> api.MasterChangeReply:
        """One change of the catalog tablet's Raft config, proposed by this ready leader
        with the CAS on the committed config's index (seed 004 "Master Raft configuration
        changes"): one at a time (the core refuses a second one while one is pending)."""
        self.require_ready()
        replica = self.catalog_replica()
        assert replica is not None
        committed = replica.core.status().committed_config
        cas_index = committed.opid_index if cas is None else cas
        try:
            with trio.fail_after(self.options.write_timeout):
                index = await replica.change_config(change, cas_index)
        except ts_api.ConfigChangeRefused as exc:
            retryable = exc.reason in ("CHANGE_PENDING", "LEADER_NOT_READY")
            raise api.Refused("ILLEGAL_STATE", exc.detail, int(retryable)) from None
        except trio.TooSlowError:
            raise api.CatalogWriteFailed("the master config change did not commit in "
                                         "time") from None
        peer = change.peer
        logger.info("master config: %s %s (%s) at index %d", change.kind, peer.uuid,
                    peer.address, index)
        return api.MasterChangeReply(peer.uuid, peer.address, index)

    async def on_add_master(self, req: api.MasterChangeRequest, ctx: CallContext
                            ) -> api.MasterChangeReply:
        self._require_started()
        self.require_ready()
        try:
            address = normalize(req.address)
        except ValueError as exc:
            raise api.refusal(InvalidArgument(f"address: {exc}")) from None
        with trio.move_on_after(self.options.call_timeout):
            uuid = await self.discover_uuid(address)
            replica = self.catalog_replica()
            assert replica is not None
            committed = replica.core.status().committed_config
            current = committed.peer(uuid)
            if current is not None:
                return api.MasterChangeReply(uuid, address, committed.opid_index,
                                             already_done=True)
            # A NON_VOTER with promote: the leader copies the catalog to it (it has none:
            # `master run --join`), streams its WAL, and makes it a VOTER once caught up.
            return await self._change_masters(
                ConfigChange("ADD", Peer(uuid, address, NON_VOTER, promote=True)),
                req.cas_config_index)
        raise api.refusal(InvalidArgument(f"no master answers at {address}"))

    async def on_remove_master(self, req: api.MasterChangeRequest, ctx: CallContext
                               ) -> api.MasterChangeReply:
        self._require_started()
        self.require_ready()
        if req.uuid == self.uuid:
            raise api.refusal(IllegalState(f"{self.uuid} is the leader master: it cannot "
                                           "be removed; make another master lead first"))
        replica = self.catalog_replica()
        assert replica is not None
        committed = replica.core.status().committed_config
        peer = committed.peer(req.uuid)
        if peer is None:
            return api.MasterChangeReply(req.uuid, "", committed.opid_index,
                                         already_done=True)
        return await self._change_masters(ConfigChange("REMOVE", peer), req.cas_config_index)

    def register(self, service: Service) -> None:
        """The master's methods, on the embedded tablet server's RPC service."""
        service.register(MASTER_HEARTBEAT, Heartbeat, HeartbeatResponse, self.on_heartbeat)
        service.register(api.MASTER_STATUS, api.Empty, api.MasterStatus, self.on_status)
        service.register(api.MASTER_LIST_TSERVERS, api.Empty, api.TabletServerList,
                         self.on_list_tservers)
        service.register(api.MASTER_CREATE_TABLE, api.CreateTableRequest,
                         api.TableCreatedReply, self.on_create_table)
        service.register(api.MASTER_DELETE_TABLE, api.DeleteTableRequest,
                         api.TableDeletedReply, self.on_delete_table)
        service.register(api.MASTER_ALTER_TABLE, api.AlterTableRequest,
                         api.TableAlteredReply, self.on_alter_table)
        service.register(api.MASTER_LIST_TABLES, api.ListTablesRequest, api.TableList,
                         self.on_list_tables)
        service.register(api.MASTER_TABLE_LOCATIONS, api.TableLocationsRequest,
                         api.TableLocationsReply, self.on_table_locations)
        service.register(api.MASTER_READ_INDEX, api.Empty, api.ReadIndexReply,
                         self.on_read_index)
        service.register(api.MASTER_ADD_REPLICA, api.ReplicaChangeRequest,
                         api.ReplicaChangeReply, self.on_add_replica)
        service.register(api.MASTER_REMOVE_REPLICA, api.ReplicaChangeRequest,
                         api.ReplicaChangeReply, self.on_remove_replica)
        service.register(api.MASTER_MOVE_REPLICA, api.MoveReplicaRequest,
                         api.MoveReplicaReply, self.on_move_replica)
        service.register(api.MASTER_ADD_MASTER, api.MasterChangeRequest,
                         api.MasterChangeReply, self.on_add_master)
        service.register(api.MASTER_REMOVE_MASTER, api.MasterChangeRequest,
                         api.MasterChangeReply, self.on_remove_master)


def _heal_write(healing: Healing) -> Plan[tuple[str, ...]] | MasterError:
    """The round's one write, planned again on the current snapshot (run_plan re-plans a
    plan whose rows changed; nothing to write any more is a refusal, logged)."""
    if healing.write is None:
        return InvalidArgument("no move to record or clear any more")
    return healing.write


@contextlib.asynccontextmanager
async def open_master(options: MasterOptions, *, disk: Disk | None = None,
                      network: Network | None = None) -> AsyncIterator[MasterServer]:
    """Run a master until the block exits. It serves RPC when this yields; it becomes ready
    (if elected) once the catalog tablet exists and the gate opened. ``disk`` and
    ``network``: as for a tablet server (impl/testing/cluster.py gives simulated ones)."""
    master = MasterServer(options)
    ts_options = ServerOptions(
        fs_root=options.fs_root, rpc_host=options.rpc_host, rpc_port=options.rpc_port,
        trace_dir=options.trace_dir, tick_seconds=options.tick_seconds,
        election_ticks=options.election_ticks, heartbeat_ticks=options.heartbeat_ticks,
        fsync=options.fsync, seed=options.seed, internal_tablets=(CATALOG,),
        threads=options.threads, flush_threshold=options.flush_threshold,
        log_retain_entries=options.log_retain_entries)
    async with open_tserver(ts_options, disk=disk, network=network,
                            extend_service=master.register) as ts:
        master.ts = ts
        master.tservers = TabletServerMap(ts.uuid, options.dead_after)
        master._started_at = trio.current_time()
        async with trio.open_nursery() as nursery:
            master._nursery = nursery
            nursery.start_soon(master.bootstrap)
            nursery.start_soon(master.gate)
            nursery.start_soon(master.background)
            nursery.start_soon(master.follower_reads)
            try:
                yield master
            finally:
                nursery.cancel_scope.cancel()


__all__ = ["CATALOG", "MasterOptions", "MasterServer", "normalize", "open_master"]
