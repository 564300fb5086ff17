"""Follower reads (KUDU-500; queries.py "Follower reads" argues the rule), both sides.

ListTables and GetTableLocations that name a ``freshness`` bound are answered by any
master: the ready leader from its snapshot, as always; a follower from the rows its
catalog replica has applied (never an entry it has not applied, so never a table the
leader has not committed), and only when ``Freshness`` shows that catalog no older than
the bound, else StaleCatalog (retryable, naming the staleness).

A follower learns its freshness by asking the leader for Master.ReadIndex (the leader's
Raft ReadIndex round, then its applied index: ``read_index``): an anchor (asked_at, index)
on the follower's own clock. It asks in the background every ``read_refresh_seconds``
while follower reads were served in the last ``read_refresh_idle`` seconds, and once more,
briefly (at most ``read_wait_seconds``), when a read finds its catalog too old; requests
for an anchor are single-flight. Nothing here is durable or traced: a read changes
nothing.
"""

from __future__ import annotations

import trio

from revivify.impl.rpc import RpcError, open_rpc_client
from revivify.impl.rpc.address import parse_address
from revivify.impl.tserver import api as ts_api
from revivify.impl.tserver.replica import Replica

from . import api
from .catalog import Catalog
from .embedded import EmbeddedServer, master_logger
from .errors import InvalidArgument
from .gate import ReadyGate
from .options import MasterOptions
from .queries import Freshness

logger = master_logger()


class FollowerReads:
    """The catalog a read is answered from, and a follower's anchors (module docstring)."""

    def __init__(self, embedded: EmbeddedServer, gate: ReadyGate,
                 options: MasterOptions) -> None:
        self._embedded = embedded
        self._gate = gate
        self._options = options
        # The anchors, when a follower read was last served, the request for an anchor in
        # flight (single-flight), and the catalog built from the applied rows, by the
        # (replica, applied index) it was built at.
        self.freshness = Freshness()
        self._follower_read_at: float | None = None
        self._anchoring: trio.Event | None = None
        self._applied_catalog: tuple[Replica, int, Catalog] | None = None

    async def view(self, freshness: float | None) -> tuple[Catalog, api.ServedBy]:
        """The catalog a read is answered from: the ready leader's snapshot, or, with a
        ``freshness`` bound, a follower's applied catalog known to be no older than the
        bound; else the typed refusal."""
        if freshness is not None and not (0 <= freshness < float("inf")):
            raise api.refusal(InvalidArgument(f"freshness {freshness}: a number of seconds "
                                              ">= 0"))
        replica = self._embedded.catalog_replica()
        if freshness is None or (replica is not None and replica.core.is_leader()):
            self._gate.require_ready()
            index = replica.store.applied_index if replica is not None else 0
            return self._gate.catalog, api.ServedBy(self._embedded.uuid, True, 0.0, index)
        if replica is None:
            raise api.ServiceUnavailable("this master holds no catalog yet")
        return await self._follower_view(replica, freshness)

    async def _follower_view(self, replica: Replica, freshness: float
                             ) -> tuple[Catalog, api.ServedBy]:
        self._follower_read_at = self._embedded.now()
        staleness = self._staleness(replica)
        if staleness is None or staleness > freshness:
            # Too old: ask the leader for a read index now, and wait a little for it to be
            # applied (a follower in touch with the leader answers; a cut-off one refuses).
            with trio.move_on_after(min(freshness, self._options.read_wait_seconds)):
                await self._anchor_once()
                while True:
                    staleness = self._staleness(replica)
                    if staleness is not None and staleness <= freshness:
                        break
                    await trio.sleep(self._options.tick_seconds)
            staleness = self._staleness(replica)
        applied = replica.store.applied_index
        if staleness is None or staleness > freshness:
            raise api.StaleCatalog(-1 if staleness is None else round(staleness * 1000),
                                   round(freshness * 1000), applied)
        # No await from the staleness check to here: the rows are those of ``applied``.
        return self._catalog_at(replica), api.ServedBy(self._embedded.uuid, False,
                                                       round(staleness, 3), applied)

    def _staleness(self, replica: Replica) -> float | None:
        return self.freshness.staleness(self._embedded.now(), replica.store.applied_index)

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
        replica = self._embedded.catalog_replica()
        if replica is None or replica.core.is_leader():
            return
        _, _, leader, address = self._embedded.role_of(replica)
        if leader is None or address is None:
            return  # no known leader: nothing to anchor on (the staleness grows)
        asked_at = self._embedded.now()  # before the request leaves (queries.py rule 2)
        host, port = parse_address(address)
        try:
            with trio.fail_after(self._options.call_timeout):
                async with open_rpc_client(host, port, leader, self._embedded.uuid,
                                           app_errors=api.APP_ERRORS,
                                           network=self._embedded.network) as client:
                    reply = await client.call(api.MASTER_READ_INDEX, api.Empty(),
                                              api.ReadIndexReply)
        except (RpcError, OSError, trio.TooSlowError) as exc:
            logger.debug("read index from %s: %s", leader, exc)
            return
        self.freshness.anchor(asked_at, reply.index, replica.store.applied_index)

    async def run(self) -> None:
        """Keep a follower's anchors fresh while follower reads are being asked for."""
        while True:
            await trio.sleep(self._options.read_refresh_seconds)
            served = self._follower_read_at
            if served is None or self._embedded.now() - served > self._options.read_refresh_idle:
                continue
            await self._anchor_once()

    async def read_index(self) -> api.ReadIndexReply:
        """The leader's side: the ready leader confirms its leadership (Raft ReadIndex: a
        heartbeat round a majority acknowledged) and answers its applied index, at least
        the read index."""
        term = self._gate.require_ready()
        replica = self._embedded.catalog_replica()
        assert replica is not None
        try:
            with trio.fail_after(self._options.call_timeout):
                await replica.read_barrier()
        except trio.TooSlowError:
            raise api.ServiceUnavailable("the read index was not confirmed in time") from None
        except ts_api.NotLeader:
            raise api.MasterNotLeader(None, None, term) from None
        # No await since read_barrier returned: this index is applied here, so committed.
        return api.ReadIndexReply(term, replica.store.applied_index)


__all__ = ["FollowerReads"]
