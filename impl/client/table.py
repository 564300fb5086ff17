"""TableClient: rows of a table, routed through the masters to the tablet holding each key.

    async with open_table_client(["m1:7001", "m2:7001", "m3:7001"], "t1") as table:
        await table.put(b"k", b"v")
        assert await table.get(b"k") == b"v"
        rows = await table.scan()          # every tablet, merged in key order

Theory of operation
-------------------
Partitioning (impl/master/catalog.py: ``hash_bucket``, the table record's
``partition_hash`` "blake2b-64"). A table of N tablets is hash-partitioned on the row key:
the key's bucket is ``int.from_bytes(blake2b(key, digest_size=8), "big") % N``, and the live
tablet whose record holds that bucket (``TabletRecord.partition``, reported as
``TabletLocationInfo.partition``) holds the key. The client calls the very function the
catalog names, so a client and a master can never disagree on a key's tablet (a second hash
function would need ``partition_hash`` in the locations reply first).

Locations. ``Master.GetTableLocations`` from the ready leader master (master.py's
MasterClient, one per TableClient, so the leader master is found once and remembered:
NOT_THE_LEADER hints followed, SERVICE_UNAVAILABLE retried, every call bounded by the call
timeout) gives each live
tablet's id, bucket and replicas (the leader first), asked ``running_only``: a tablet not
RUNNING in the catalog comes without replicas (impl/master/queries.py "Locations for
writers"). Such a tablet is CREATING, and the leader master may still REPLACE it after its
creation timeout, taking every row it acknowledged with it; so no row is ever sent to it.
The client holds to that even if a master lists replicas for a not-RUNNING tablet (one
older than ``running_only``): ``routes_from`` routes RUNNING tablets only. They are cached,
and fetched again:

    a bucket with no tablet in the cached locations (a replacement happened under us), or
        whose tablet is not RUNNING yet (TabletNotRunningError: a table just created)
    TabletNotFoundError from the tablet client (no server it asked hosts the tablet: the
        tablet was replaced or deleted, or its CreateTablet has not arrived yet)
    NoLeader / a deadline of the tablet client that found no leader among the servers

and the call is tried again, with the client's backoff, until ``ClientOptions.deadline``.
That deadline is one absolute time, taken when the operation starts (or given by the
caller) and handed to everything the operation does: each tablet-client attempt, each
location refresh through the masters, a scan's every tablet (options.py, "The deadline
guarantee"). A refresh that runs out of time raises DeadlineExceeded for the table
operation ("put on table t ... asking the masters for its locations"), not the masters'
own error: the caller learns which operation ran out and at which step.
A write that gives up says whether any of its attempts may have been applied
(outcome_unknown), whichever tablet-client attempt it was.
A NotLeader inside one tablet is not a reason to ask the masters: the tablet client follows
the hint and learns peers from the replicas' configs itself (tablet.py).

Exactly once. One TabletClient per tablet id, kept for the life of this client (a refresh
adds the new replicas' addresses to it instead of replacing it), all with this client's id:
each keeps its own (client_id, seq) numbering, and a tablet only ever sees the numbers of its
own TabletClient, so a write retried after a refresh re-sends the SAME pair (tablet.py's
exactly-once argument holds per tablet).

Scans visit every tablet (each a series of linearizable leader reads, tablet.py) and merge
the rows in key order; the tablets' key sets are disjoint, so the merge is a plain k-way
merge cut at ``limit``. Like a multi-page scan of one tablet, a scan of several tablets is
not one snapshot.
"""

from __future__ import annotations

import heapq
import random
import uuid as uuid_module
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from typing import TypeVar

import attrs
import trio

from revivify.impl.master import api
from revivify.impl.master.catalog import hash_bucket
from revivify.impl.rpc import Network
from revivify.impl.tserver.api import Written

from .connections import ServerConnections, open_connections
from .errors import (
    ClientError,
    DeadlineExceeded,
    InvalidRequest,
    MastersUnreachable,
    NoLeader,
    NoMasterAnswered,
    Rejected,
    TabletNotFoundError,
    TabletNotRunningError,
    Unavailable,
)
from .master import MasterClient, master_call, open_master_client
from .options import ClientOptions, deadline_at, parse_address
from .tablet import TabletClient

T = TypeVar("T")

RUNNING = "RUNNING"  # the catalog's TabletState a tablet must be in to take rows

class TableNotFoundError(ClientError):
    """The masters have no live table of that name (exit 2 in the CLI, like an unknown
    tablet)."""

    def __init__(self, name: str, last_error: BaseException | None = None) -> None:
        super().__init__(f"table {name!r} not found", last_error)
        self.name = name


@attrs.frozen
class TabletRoute:
    """One live tablet of the table as the masters last reported it."""

    tablet_id: str
    partition: int
    addresses: tuple[str, ...]  # its replicas' servers, the recorded leader first


@attrs.frozen
class Routes:
    """A table's cached locations: bucket -> tablet (RUNNING ones); ``not_running``: bucket
    -> (tablet id, catalog state) of the live tablets not RUNNING yet, for the error."""

    table_id: str
    num_tablets: int
    by_partition: dict[int, TabletRoute]
    not_running: dict[int, tuple[str, str]] = attrs.field(factory=dict)

    def route(self, key: bytes) -> TabletRoute | None:
        return self.by_partition.get(hash_bucket(key, self.num_tablets))


def routes_from(reply: api.TableLocationsReply) -> Routes:
    """The routing table of a GetTableLocations answer."""
    by_partition: dict[int, TabletRoute] = {}
    not_running: dict[int, tuple[str, str]] = {}
    for tablet in reply.tablets:
        assert 0 <= tablet.partition < reply.num_tablets, "a bucket within the table"
        if tablet.state != RUNNING or not tablet.replicas:
            # Not a place for a row (module docstring): the masters may still replace it.
            not_running[tablet.partition] = (tablet.tablet_id, tablet.state)
            continue
        replicas = sorted(tablet.replicas, key=lambda r: (not r.leader, not r.live))
        by_partition[tablet.partition] = TabletRoute(
            tablet.tablet_id, tablet.partition, tuple(r.address for r in replicas))
    return Routes(reply.table_id, reply.num_tablets, by_partition, not_running)


class TableClient:
    """Reads and writes of one table's rows through its tablets (module docstring)."""

    def __init__(self, connections: ServerConnections, masters: Sequence[str], name: str, *,
                 client_id: str, options: ClientOptions | None = None,
                 rng: random.Random | None = None, master: MasterClient | None = None
                 ) -> None:
        if not masters:
            raise InvalidRequest("no master addresses given")
        for address in masters:
            parse_address(address)
        self.masters = list(masters)
        self.name = name
        self.client_id = client_id
        self.options = ClientOptions() if options is None else options
        self._rng = random.Random() if rng is None else rng
        self._connections = connections
        self._master = master  # None: a one-shot master_call per refresh
        self._routes: Routes | None = None
        self._tablets: dict[str, TabletClient] = {}
        self.refreshes = 0  # GetTableLocations calls made (tests)
        # A writer's view: locations of RUNNING tablets only (module docstring).
        self._locations_request = api.TableLocationsRequest(name, running_only=True)

    # ------------------------------------------------------------------ locations

    async def refresh(self, *, deadline: float | None = None) -> Routes:
        """Fetch the table's locations from the leader master and cache them (by
        ``deadline``, absolute, if given: an operation's; else within the options')."""
        try:
            if self._master is not None:
                reply = await self._master.call(api.MASTER_TABLE_LOCATIONS,
                                                self._locations_request,
                                                api.TableLocationsReply, deadline=deadline)
            else:
                reply = await master_call(self.masters, api.MASTER_TABLE_LOCATIONS,
                                          self._locations_request, api.TableLocationsReply,
                                          self.options, deadline=deadline)
        except Rejected as exc:
            error = exc.error
            if isinstance(error, api.Refused) and error.reason == "NOT_FOUND":
                raise TableNotFoundError(self.name, error) from None
            raise
        self.refreshes += 1
        routes = routes_from(reply)
        self._routes = routes
        for route in routes.by_partition.values():
            client = self._tablets.get(route.tablet_id)
            if client is not None:
                client.learn_addresses(route.addresses)
        return routes

    async def routes(self, *, deadline: float | None = None) -> Routes:
        return (self._routes if self._routes is not None
                else await self.refresh(deadline=deadline))

    def _client(self, route: TabletRoute) -> TabletClient:
        client = self._tablets.get(route.tablet_id)
        if client is None:
            assert route.addresses, "a live tablet has replicas"
            client = TabletClient(self._connections, route.addresses, route.tablet_id,
                                  client_id=self.client_id, options=self.options,
                                  rng=self._rng)
            self._tablets[route.tablet_id] = client
        return client

    async def _locate(self, what: str, attempts: int, last: BaseException | None,
                      maybe_ran: bool, deadline: float, *, fresh: bool) -> Routes:
        """The cached routes (``fresh``: refreshed) within ``deadline``; a refresh that runs
        out of time is the table operation's DeadlineExceeded (module docstring)."""
        try:
            if fresh:
                return await self.refresh(deadline=deadline)
            return await self.routes(deadline=deadline)
        except MastersUnreachable as exc:
            # No master answered at all: the operator's words, the operation named first.
            assert isinstance(exc.last_error, NoMasterAnswered)
            raise MastersUnreachable(f"{what} on table {self.name}", attempts,
                                     exc.last_error,
                                     outcome_unknown=maybe_ran or exc.outcome_unknown
                                     ) from None
        except DeadlineExceeded as exc:
            raise DeadlineExceeded(
                f"{what} on table {self.name} (asking the masters for its locations)",
                attempts, exc.last_error or last,
                outcome_unknown=maybe_ran or exc.outcome_unknown) from None

    async def _on_tablet(self, key: bytes | None, partition: int | None, what: str,
                         op: Callable[[TabletClient, float], Awaitable[T]],
                         deadline: float | None = None) -> T:
        """Run ``op(tablet client, deadline)`` on the tablet of ``key`` (or of bucket
        ``partition``), refreshing the locations and trying again on the errors the module
        docstring lists, all by the one ``deadline`` (absolute; now + the options' if
        None)."""
        deadline = deadline_at(self.options, deadline)
        attempts = 0
        last: BaseException | None = None
        maybe_ran = False  # an earlier attempt may have been applied (a write)
        fresh = False
        while True:
            attempts += 1
            routes = await self._locate(what, attempts, last, maybe_ran, deadline,
                                        fresh=fresh)
            bucket = (hash_bucket(key, routes.num_tablets) if key is not None
                      else partition if partition is not None else -1)
            route = routes.by_partition.get(bucket)
            if route is None and bucket in routes.not_running:
                tablet_id, state = routes.not_running[bucket]
                last = TabletNotRunningError(tablet_id, bucket, state)  # retried: below
            if route is not None:
                try:
                    return await op(self._client(route), deadline)
                except (TabletNotFoundError, NoLeader) as exc:
                    last = exc
                except Unavailable as exc:
                    maybe_ran = maybe_ran or exc.outcome_unknown
                    found_nothing = isinstance(exc.last_error, NoLeader | TabletNotFoundError)
                    if not (isinstance(exc, DeadlineExceeded) and found_nothing):
                        if maybe_ran and not exc.outcome_unknown:  # an earlier attempt's
                            raise type(exc)(exc.operation, exc.attempts, exc.last_error,
                                            outcome_unknown=True) from None
                        raise
                    last = exc
            delay = self.options.backoff.delay(attempts, self._rng)
            if trio.current_time() + delay >= deadline:
                raise DeadlineExceeded(f"{what} on table {self.name}", attempts, last,
                                       outcome_unknown=maybe_ran)
            await trio.sleep(delay)
            fresh = True  # the next attempt asks the masters again

    # ------------------------------------------------------------------ data

    async def put(self, key: bytes, value: bytes, *, deadline: float | None = None
                  ) -> Written:
        return await self._on_tablet(key, None, "put",
                                     lambda t, at: t.put(key, value, deadline=at), deadline)

    async def delete(self, key: bytes, *, deadline: float | None = None) -> Written:
        return await self._on_tablet(key, None, "delete",
                                     lambda t, at: t.delete(key, deadline=at), deadline)

    async def get(self, key: bytes, *, deadline: float | None = None) -> bytes | None:
        return await self._on_tablet(key, None, "get",
                                     lambda t, at: t.get(key, deadline=at), deadline)

    async def tablet_of(self, key: bytes, *, deadline: float | None = None) -> str:
        """The id of the tablet that holds ``key`` (as the cached locations say)."""
        deadline = deadline_at(self.options, deadline)
        routes = await self._locate("tablet of a key", 1, None, False, deadline, fresh=False)
        route = routes.route(key)
        if route is None:
            routes = await self._locate("tablet of a key", 1, None, False, deadline,
                                        fresh=True)
            route = routes.route(key)
        if route is None:
            bucket = hash_bucket(key, routes.num_tablets)
            if bucket in routes.not_running:
                raise TabletNotRunningError(routes.not_running[bucket][0], bucket,
                                            routes.not_running[bucket][1])
            raise ClientError(f"table {self.name}: no live tablet for the key's bucket")
        return route.tablet_id

    async def scan(self, start: bytes | None = None, end: bytes | None = None,
                   limit: int | None = None, *, deadline: float | None = None
                   ) -> list[tuple[bytes, bytes]]:
        """Rows with start <= key < end from every tablet, in key order, at most ``limit``
        (module docstring); every tablet within the one deadline."""
        if limit is not None and limit < 0:
            raise InvalidRequest(f"scan limit {limit} is negative")
        deadline = deadline_at(self.options, deadline)
        routes = await self._locate("scan", 1, None, False, deadline, fresh=False)
        per_tablet: list[list[tuple[bytes, bytes]]] = []
        for partition in range(routes.num_tablets):
            # Each tablet's first `limit` rows suffice: the merged first `limit` rows are
            # among them. Tablets one after another: a CLI's scan, not a parallel reader.
            per_tablet.append(await self._on_tablet(
                None, partition, "scan",
                lambda t, at: t.scan(start, end, limit, deadline=at), deadline))
        merged = list(heapq.merge(*per_tablet, key=lambda row: row[0]))
        return merged if limit is None else merged[:limit]


@asynccontextmanager
async def open_table_client(
    masters: Sequence[str],
    name: str,
    *,
    client_id: str | None = None,
    network: Network | None = None,
    options: ClientOptions | None = None,
    rng: random.Random | None = None,
    master_network: Network | None = None,
) -> AsyncIterator[TableClient]:
    """A TableClient for table ``name`` through the masters at ``masters`` (HOST:PORT each).
    The arguments are open_tablet_client's (tablet.py); ``network`` serves the tablet
    servers' connections, ``master_network`` the masters' (both TCP when None)."""
    for address in masters:
        parse_address(address)
    ident = uuid_module.uuid4().hex if client_id is None else client_id
    async with open_connections(f"client-{ident}", network=network) as connections, \
            open_master_client(masters, network=master_network, options=options,
                               rng=rng) as master:
        yield TableClient(connections, masters, name, client_id=ident, options=options,
                          rng=rng, master=master)


__all__ = ["Routes", "TableClient", "TableNotFoundError", "TabletRoute",
           "open_table_client", "routes_from"]
