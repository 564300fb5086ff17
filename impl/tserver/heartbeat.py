"""Heartbeats to every master (seed 004 "Heartbeat to all masters").

A tablet server started with ``--masters A,B,C`` runs one `Heartbeater` task per master
address; each is independent of the others (a dead or partitioned master delays nobody).
Every ``interval`` seconds it sends ``Master.Heartbeat``:

    Heartbeat(server_uuid, incarnation, registration?, report?, web_address)

* registration (this server's RPC address as advertised: ``--rpc-advertised-address``, else
  the bind address; never a wildcard, which the command line refuses) on the first
  heartbeat to a master, and again whenever that master answers ``needs_register`` (it
  does not know this server, or knows another incarnation of it);
* a FULL report (every tablet this server holds, tombstones included) with the
  registration, when the master asks (``needs_full_report``), and whenever the master is
  seen to become leader (``leader`` false -> true, or a new term while leader): KUDU-1374,
  the new leader decides again whatever its predecessor decided and never sent;
* ``web_address``: where this server's status pages are, on every heartbeat (the masters'
  pages link to them; "" without pages, or from a server older than the field, which the
  master decodes alike). The answer names the master's own pages (``master_web``, linked
  back from this server's pages), with the time of the answer (``answered_at``), and, from
  the ready leader, the table and partition of each reported tablet (``places``, kept in the
  host's ``tablet_places`` for its pages).
* otherwise an INCREMENTAL report: the tablets whose reported facts (state, term, leader,
  committed config index, schema version) differ from what this master last acknowledged,
  edge-triggered: a tablet acknowledged in report N is left out of N+1 unless it changed
  again.

``seq`` counts the reports sent to one master in this incarnation, from 0, and rises by
one per report sent, delivered or not: a lost report shows the master a gap, and it asks
for a full one (tserver_map.py). What a report acknowledged is only recorded once the master
answered, so a report lost in flight is sent again.

The report's per-tablet state is the tablet manager's slot state (impl/tserver/manager: one
state per tablet), with the replica's committed consensus state: from the running Raft core,
or from the durable cmeta of a tablet that does not run. A master's UUID is learnt from its
address (the RPC layer's WrongServerUuid names it) and learnt again when it changes (a
wiped master).

The master list is learnt from the masters (issue 19; master_api.py "The master
list"). ``--masters`` is only where to start: every heartbeat answer names the catalog's
committed config (its member addresses and index) as that master knows it. `MasterList`
keeps the list of the highest index told; when it changes, `HeartbeatPool` starts a
heartbeater for each master added and cancels the one of each master removed. A master's
heartbeater keeps its state (UUID, sequence, acknowledgements) while the master stays in
the list; one started again after a removal starts afresh (it registers, a full report).
Why the index and not a vote or a union: a removed master may never learn its removal
committed and keeps naming itself; its config is older than the one that removed it, so
any master that knows the newer config outranks it. Until some master answers, or when
every answer is from a master older than the list (index -1), the flag's list stands.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable, Mapping
from typing import Final, Protocol

import attrs
import trio

from revivify.impl.observe.metrics import OFF, ServerMetrics
from revivify.impl.rpc import ConnectionClosed, RpcError, WrongServerUuid, open_rpc_client
from revivify.impl.rpc.address import format_address, parse_address
from revivify.impl.rpc.backoff import Backoff

from . import api
from .manager.core import Absent, Failed, Running, Slot
from .manager.shell import TabletManager
from .master_api import (
    MASTER_HEARTBEAT,
    Heartbeat,
    HeartbeatResponse,
    Registration,
    ReplicaState,
    ReportedConsensus,
    ReportedReplica,
    TabletPlace,
    TabletReport,
)
from .replica import config_from_storage
from .schema import SchemaVersions

logger = logging.getLogger(__name__)

# Between failed attempts to reach one master: 0.1 s doubling to the interval's multiple.
_RECONNECT: Final = Backoff(initial=0.1, max=2.0, multiplier=2.0, jitter=0)

# A heartbeat unanswered this long drops its connection, and the next goes on a new one
# (issue 32): one long-lived connection whose packets were lost would otherwise wait for
# TCP's next retransmission after the network heals (the socket's TCP_USER_TIMEOUT, 10 s,
# being the slower backstop), and the master would count the server dead meanwhile. Six
# intervals, at least 3 s: a leader master answers a heartbeat after at most a catalog
# write (a Raft round and an fsync), well inside that even on a loaded machine.
HEARTBEAT_CALL_FLOOR: Final = 3.0


def heartbeat_call_timeout(interval: float) -> float:
    """Seconds one heartbeat may go unanswered: max(6 intervals, HEARTBEAT_CALL_FLOOR)."""
    return max(6 * interval, HEARTBEAT_CALL_FLOOR)

# What makes a tablet "changed" for an incremental report.
Signature = tuple[str, int, str | None, int, int | None]


class HeartbeatHost(Protocol):
    """What a heartbeater needs of its server (the TabletServer, seen through a Protocol so
    that this module never imports server.py: no cycle)."""

    uuid: str
    address: str
    tablets: TabletManager
    # and, optionally, ``schemas: SchemaVersions`` (schema.py): a host without it (a test's)
    # reports no schema versions; and ``network`` (the server's: an in-memory one in the
    # in-process clusters), else real TCP

    @property
    def incarnation(self) -> int: ...


def replica_report(tablet_id: str, slot: Slot, tablets: TabletManager,
                   schemas: SchemaVersions | None = None) -> ReportedReplica | None:
    """One tablet as the master sees it, or None for a slot that holds nothing (ABSENT).
    A running replica reports its schema version (schema.py; 0 if never altered here), so
    that a leader master re-sends an alter it decided and never delivered."""
    st = slot.state
    if isinstance(st, Absent):
        return None
    state: ReplicaState = st.kind.value  # type: ignore[assignment]  # the slot kinds but ABSENT
    if isinstance(st, Running):
        # The slot is the one answer to "does it run": a driver that failed is FAILED there.
        replica = tablets.replica(tablet_id)
        if replica is None:
            return None
        status = replica.core.status()
        consensus = ReportedConsensus(status.term, status.leader, status.committed_config)
        version = schemas.cached_version(tablet_id) if schemas is not None else None
        return ReportedReplica(tablet_id, state, consensus,
                               schema_version=None if schemas is None else version or 0)
    durable = tablets.durable_of(tablet_id)
    cmeta = durable.cmeta if durable is not None else None
    reported: ReportedConsensus | None = None
    if cmeta is not None:
        reported = ReportedConsensus(cmeta.current_term, None,
                                     config_from_storage(cmeta.committed_config))
    return ReportedReplica(tablet_id, state, reported,
                           error=st.reason if isinstance(st, Failed) else "")


def all_replicas(tablets: TabletManager, schemas: SchemaVersions | None = None
                 ) -> list[ReportedReplica]:
    out = []
    for tablet_id, slot in sorted(tablets.core.slots.items()):
        reported = replica_report(tablet_id, slot, tablets, schemas)
        if reported is not None:
            out.append(reported)
    return out


def signature(replica: ReportedReplica) -> Signature:
    c = replica.consensus
    if c is None:
        return (replica.state, -1, None, -1, replica.schema_version)
    return (replica.state, c.term, c.leader, c.config.opid_index, replica.schema_version)


@attrs.define
class Heartbeater:
    """One master, seen from one tablet server (module docstring)."""

    host: HeartbeatHost
    master_address: str
    interval: float
    master_uuid: str = ""
    registered: bool = False
    full_next: bool = True
    seq: int = 0
    leader: bool = False
    term: int = -1
    acked: dict[str, Signature] = attrs.field(factory=dict)
    responses: int = 0  # answered heartbeats (tests)
    answered_at: float | None = None  # trio time of the last answer (the status page)
    master_web: str = ""  # the master's status pages, as its last answer said
    # Told the master list each answer names (the pool's MasterList.learn), if any.
    on_masters: Callable[[int, list[str]], None] | None = None
    failures: int = 0  # attempts to reach the master that failed in a row

    def build(self) -> tuple[Heartbeat, Mapping[str, Signature]]:
        """The next heartbeat, and the signatures its report would acknowledge."""
        schemas: SchemaVersions | None = getattr(self.host, "schemas", None)
        replicas = all_replicas(self.host.tablets, schemas)
        full = self.full_next or not self.registered
        if not full:
            replicas = [r for r in replicas if self.acked.get(r.tablet_id) != signature(r)]
        sent = {r.tablet_id: signature(r) for r in replicas}
        report = TabletReport(full=full, seq=self.seq, replicas=replicas)
        self.seq += 1
        registration = None if self.registered else Registration(self.host.address)
        web: str = getattr(self.host, "web_address", "")
        return (Heartbeat(self.host.uuid, self.host.incarnation, registration, report,
                          web_address=web), sent)

    def absorb(self, hb: Heartbeat, sent: Mapping[str, Signature],
               response: HeartbeatResponse) -> None:
        """The master answered ``hb``: record what it acknowledged and what it asks for."""
        self.responses += 1
        self.master_web = response.web_address
        places: dict[str, TabletPlace] | None = getattr(self.host, "tablet_places", None)
        if places is not None:
            places.update(response.places)
        if hb.registration is not None:
            self.registered = True
        if hb.report is not None:
            if hb.report.full:
                self.acked = dict(sent)
                self.full_next = False
            else:
                self.acked.update(sent)
        newly_leader = response.leader and (not self.leader or response.term != self.term)
        self.leader, self.term = response.leader, response.term
        if response.needs_register:
            self.registered = False
            self.full_next = True
        # A leader newly seen gets everything again, unless what it just answered was
        # already a full report (it processed that one as this very leader).
        sent_full = hb.report is not None and hb.report.full
        if response.needs_full_report or (newly_leader and not sent_full):
            self.full_next = True
        if self.on_masters is not None and response.masters_index >= 0:
            self.on_masters(response.masters_index, response.masters)

    async def _beat(self, host: str, port: int, bound: float, dial: trio.CancelScope
                    ) -> None:
        """Heartbeat on one connection until it fails (raises); ``dial`` bounds the connect
        and is lifted once connected."""
        async with open_rpc_client(host, port, self.master_uuid, self.host.uuid,
                                   app_errors=api.APP_ERRORS,
                                   network=getattr(self.host, "network", None)) as client:
            dial.deadline = math.inf
            # The server's counters (a test's host may have none: then nothing is counted).
            metrics: ServerMetrics = getattr(self.host, "metrics", OFF)
            sent, answered = (metrics.tserver.heartbeats_sent,
                              metrics.tserver.heartbeats_answered)
            while True:
                hb, signatures = self.build()
                sent.inc()
                response: HeartbeatResponse | None = None
                with trio.move_on_after(bound):
                    response = await client.call(MASTER_HEARTBEAT, hb, HeartbeatResponse)
                if response is None:  # leaving the block drops the connection
                    raise ConnectionClosed(f"no answer to a heartbeat within {bound:g}s")
                answered.inc()
                self.absorb(hb, signatures, response)
                self.answered_at = trio.current_time()
                self.failures = 0
                await trio.sleep(self.interval)

    async def run(self) -> None:
        host, port = parse_address(self.master_address)
        bound = heartbeat_call_timeout(self.interval)
        while True:
            try:
                # The connect too is bounded: a SYN lost to a cut network is retried by
                # the kernel for two minutes, backing off to 64 s.
                with trio.move_on_after(bound) as dial:
                    await self._beat(host, port, bound, dial)
                if dial.cancelled_caught:
                    raise ConnectionClosed(f"not connected within {bound:g}s")
            except WrongServerUuid as exc:
                # The master's UUID is learnt from its refusal (the first call names none).
                if self.master_uuid and self.master_uuid != exc.expected:
                    logger.warning("master at %s is now %s (was %s)", self.master_address,
                                   exc.expected, self.master_uuid)
                    self.registered, self.full_next, self.acked = False, True, {}
                self.master_uuid = exc.expected
            except (RpcError, OSError) as exc:
                logger.debug("heartbeat to %s: %s", self.master_address, exc)
                self.failures += 1
                await trio.sleep(min(self.interval, _RECONNECT.delay(self.failures)))


def normalize_address(address: str) -> str:
    """HOST:PORT as the masters write it (so that a flag and a config name one master
    alike)."""
    host, port = parse_address(address)
    return format_address(host, port)


@attrs.define
class MasterList:
    """The masters to heartbeat: the ``--masters`` flag's (index -1) until a master names a
    committed catalog config; then the config of the highest index told (module
    docstring). A plain value holder: no I/O."""

    addresses: tuple[str, ...]
    index: int = -1

    @classmethod
    def from_flag(cls, masters: Iterable[str]) -> MasterList:
        return cls(tuple(dict.fromkeys(normalize_address(a) for a in masters)))

    def learn(self, index: int, addresses: Iterable[str]) -> bool:
        """A master told config ``index`` with ``addresses``: adopt it if it is newer than
        what is known. True when the list changed."""
        told = tuple(sorted({normalize_address(a) for a in addresses}))
        # An empty committed config does not exist (a Raft config always has a voter):
        # such an answer says nothing.
        if index <= self.index or not told:
            return False
        changed = set(told) != set(self.addresses)
        self.addresses, self.index = told, index
        assert self.addresses, "never left without a master to call"
        return changed


@attrs.define
class HeartbeatPool:
    """One heartbeater per master of the current MasterList, started and cancelled as the
    list changes (module docstring)."""

    host: HeartbeatHost
    interval: float
    masters: MasterList
    nursery: trio.Nursery
    beaters: dict[str, tuple[Heartbeater, trio.CancelScope]] = attrs.field(factory=dict)

    def learn(self, index: int, addresses: list[str]) -> None:
        if self.masters.learn(index, addresses):
            logger.info("masters are now %s (catalog config %d)",
                        ",".join(self.masters.addresses), index)
            self.reconcile()

    def reconcile(self) -> None:
        """Make the running heartbeaters those of the list: start the missing, cancel the
        removed (their tasks end at their next checkpoint)."""
        wanted = set(self.masters.addresses)
        for address in sorted(set(self.beaters) - wanted):
            _, scope = self.beaters.pop(address)
            scope.cancel()
            logger.info("stopped heartbeating %s (not a master any more)", address)
        for address in self.masters.addresses:
            if address not in self.beaters:
                beater = Heartbeater(self.host, address, self.interval, on_masters=self.learn)
                scope = trio.CancelScope()
                self.beaters[address] = (beater, scope)
                self.nursery.start_soon(_run_in, beater, scope)
        assert set(self.beaters) == wanted


async def _run_in(beater: Heartbeater, scope: trio.CancelScope) -> None:
    with scope:
        await beater.run()


async def run_heartbeaters(host: HeartbeatHost, masters: tuple[str, ...],
                           interval: float,
                           task_status: trio.TaskStatus[HeartbeatPool] = trio.TASK_STATUS_IGNORED
                           ) -> None:
    """One heartbeater per master, the list learnt from the masters, until cancelled.
    ``task_status`` gets the pool (tests look at it)."""
    async with trio.open_nursery() as nursery:
        pool = HeartbeatPool(host, interval, MasterList.from_flag(masters), nursery)
        pool.reconcile()
        task_status.started(pool)


__all__ = ["HeartbeatHost", "HeartbeatPool", "Heartbeater", "MasterList", "all_replicas",
           "normalize_address", "replica_report", "run_heartbeaters", "signature"]
