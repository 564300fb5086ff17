"""TabletClient: reads and writes of one tablet, routed to its leader, retried, exactly once.

    async with open_tablet_client(["ts-1:7050", "ts-2:7050"], tablet_id) as tablet:
        await tablet.put(b"k", b"v")
        assert await tablet.get(b"k") == b"v"

Theory of operation
-------------------
Routing. Every call goes to the tablet's leader. The client remembers the leader's address
(for as long as the client lives, so in-process workloads pay for discovery once per
leader change, not per call); without one it asks ``Admin.ConsensusState`` of every server
it knows AT ONCE (the addresses it was given and every peer address it learned from a
configuration or a hint: one task per server in a nursery, each bounded by the call
timeout), takes the first that says role LEADER, and cancels the rest. So one stalled
server, wherever it is listed, costs nothing when a leader is up elsewhere. A LEADER answer
in a term below one another server already reported is a deposed leader that has not
heard yet: it is skipped. A server named as leader or peer that was not asked yet is asked
too, in the same round. A server that does not host the tablet is skipped; if every server
that answered said so (and none stayed silent), the tablet does not exist
(TabletNotFoundError, not retried). A round that finds no leader (an election in progress,
servers down or silent) is a NoLeader failure, retried after a backoff.

Call timeout (options.py). Each call, the discovery questions and the call to the leader
alike, is bounded by ``ClientOptions.call_timeout``: a leader that does not answer in time
(NoAnswer) is forgotten and looked for again, like one whose connection broke.

Deadlines (options.py, "The deadline guarantee"). Every operation takes an optional
``deadline``, an absolute ``trio.current_time()`` (a table operation's, table.py); without
one it takes now + ``ClientOptions.deadline``. A scan keeps the one it started with for
every page, and a config change without an index for its leader-info read too.

Retries (policy and backoff: options.py). A failed call is retried when the error means "not
here, or not now": NotLeader (its hint, if new, is followed at once), TabletNotRunning,
TabletNotFound at the cached leader, OperationAborted, ServerShuttingDown, WrongServerUuid
(the address's UUID is updated first), ConnectionClosed / ConnectFailed (the next call
reconnects), NoAnswer (the call timeout), NoLeader. Everything else is final:
InvalidArgument, an internal error, a response that does not decode (Rejected). Giving
up raises RetriesExhausted or DeadlineExceeded naming the last error.

Exactly-once writes. A client has an id (uuid4 hex unless given) and numbers its writes
1, 2, 3, ...: each write carries (client_id, seq), and every retry of a write re-sends the
SAME pair. The tablet remembers, per client, the last seq it applied and that write's result,
so a retry of an applied write is not applied again: its remembered result comes back
(Written.duplicate). That is what makes retrying after an ambiguous failure safe: a
connection that closed with the write in flight, or OperationAborted (leadership lost
before the write committed: it may still commit under the next leader), or no answer within
the call timeout after the request was sent. Because the tablet
remembers only the LAST seq per client, a lower seq arriving after a higher one would be
refused as stale; so one client sends one write at a time (writes are serialized by a lock;
reads are not). A write that gives up (Unavailable with outcome_unknown) may or may not have
been applied (its message says so; errors.outcome_of says "unknown"); one that gives up
when no attempt can have been applied (every attempt refused, or never sent) has
outcome_unknown False ("failed"). The next write takes the next seq either way.

Reads. ``get`` and ``scan`` go to the leader, which confirms its leadership with a
ReadIndex round before answering: a read sees every write acknowledged before it began
(linearizable). A scan is a series of pages, each such a read (``more`` says another page
follows; the next starts just after the last key returned), so a scan over several pages is
not a single snapshot: a write between two pages is seen or not depending on its key.

Administration through the leader: the leader's own ConsensusState (``leader_info``), a
config change with a compare-and-set on the committed config's index (``change_config``)
and ``step_down``. A refused change raises ChangeRefused at once. A step-down is not
idempotent (repeating it would depose the next leader too), so it is retried only after
errors that mean the call did not run; cut off in flight, it raises OutcomeUnknown.
"""

from __future__ import annotations

import itertools
import random
import uuid as uuid_module
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from typing import TypeVar

import msgspec
import trio

from revivify.impl.consensus.messages import ConfigChange, Peer
from revivify.impl.rpc import (
    ConnectFailed,
    ConnectionClosed,
    Network,
    RpcError,
    ServerShuttingDown,
    WrongServerUuid,
)
from revivify.impl.rpc.address import is_address
from revivify.impl.tablet.errors import InvalidWrite
from revivify.impl.tablet.ops import RowOp, validate_identity, validate_ops
from revivify.impl.tserver.api import (
    ADMIN_CHANGE_CONFIG,
    ADMIN_CONSENSUS_STATE,
    ADMIN_STEP_DOWN,
    DATA_READ,
    DATA_SCAN,
    DATA_WRITE,
    Ack,
    ChangeConfig,
    ConfigChanged,
    ConfigChangeRefused,
    NotLeader,
    OperationAborted,
    Read,
    ReadResult,
    ReplicaInfo,
    Scan,
    ScanResult,
    StepDown,
    TabletNotFound,
    TabletNotRunning,
    TabletRef,
    Write,
    Written,
)

from .connections import ServerConnections, open_connections
from .discovery import discover_leader
from .errors import (
    ChangeRefused,
    ClientError,
    DeadlineExceeded,
    InvalidRequest,
    NoAnswer,
    NoLeader,
    OutcomeUnknown,
    Rejected,
    RetriesExhausted,
    TabletNotFoundError,
)
from .leader_round import LEADER, Answer, Unanswered
from .options import ClientOptions, deadline_at, parse_address

T = TypeVar("T")
ResponseT = TypeVar("ResponseT")

RETRYABLE: tuple[type[BaseException], ...] = (
    NotLeader, TabletNotRunning, TabletNotFound, OperationAborted, ServerShuttingDown,
    WrongServerUuid, ConnectionClosed, NoAnswer, NoLeader,
)
"""Errors after which the same request may go again (to the leader, found afresh)."""


def _ran_maybe(error: BaseException) -> bool:
    """Whether a call that failed with `error` may have taken effect."""
    if isinstance(error, ConnectFailed):
        return False
    if isinstance(error, NoAnswer):
        return error.maybe_sent
    return isinstance(error, (ConnectionClosed, OperationAborted))


class TabletClient:
    """Reads, writes and leader-routed administration of one tablet (module docstring)."""

    def __init__(self, connections: ServerConnections, addresses: Sequence[str],
                 tablet_id: str, *, client_id: str | None = None,
                 options: ClientOptions | None = None, rng: random.Random | None = None
                 ) -> None:
        if not addresses:
            raise InvalidRequest("no server addresses given")
        for address in addresses:
            parse_address(address)
        self.tablet_id = tablet_id
        self.client_id = uuid_module.uuid4().hex if client_id is None else client_id
        try:
            validate_identity(self.client_id, 1)
        except InvalidWrite as exc:
            raise InvalidRequest(f"client id {self.client_id!r}: {exc}") from None
        self.options = ClientOptions() if options is None else options
        self._rng = random.Random() if rng is None else rng
        self._connections = connections
        self._addresses: list[str] = list(dict.fromkeys(addresses))
        self._leader: str | None = None
        self._seqs = itertools.count(1)
        self._write_lock = trio.Lock()
        self.discoveries = 0  # rounds of leader discovery run (tests)

    # ------------------------------------------------------------------ what it knows

    @property
    def addresses(self) -> list[str]:
        """Every server address known: the ones given, then those learned from configs."""
        return list(self._addresses)

    def learn_addresses(self, addresses: Sequence[str]) -> None:
        """Add servers to ask (a table client's refreshed locations: table.py); the ones
        already known keep their place, so the cached leader and the order stay."""
        for address in addresses:
            if is_address(address) and address not in self._addresses:
                self._addresses.append(address)

    @property
    def leader_address(self) -> str | None:
        """The cached leader (None until one is found, or after it failed)."""
        return self._leader

    # ------------------------------------------------------------------ data

    async def put(self, key: bytes, value: bytes, *, deadline: float | None = None
                  ) -> Written:
        return await self.write([RowOp("put", key, value)], deadline=deadline)

    async def delete(self, key: bytes, *, deadline: float | None = None) -> Written:
        return await self.write([RowOp("delete", key)], deadline=deadline)

    async def write(self, ops: Sequence[RowOp], *, deadline: float | None = None) -> Written:
        """Apply `ops` in order, atomically, exactly once (module docstring). `deadline`:
        an absolute trio time to end by (module docstring, "Deadlines")."""
        deadline = deadline_at(self.options, deadline)
        ops = list(ops)
        try:
            validate_ops(ops)
        except InvalidWrite as exc:
            raise InvalidRequest(str(exc)) from None
        with trio.CancelScope(deadline=deadline) as waiting:  # for an earlier write
            await self._write_lock.acquire()
        if waiting.cancelled_caught:
            raise DeadlineExceeded("write (waiting for this client's earlier write)", 0, None)
        try:
            request = Write(self.tablet_id, self.client_id, next(self._seqs), ops)

            async def attempt(address: str) -> Written:
                return await self._call(address, DATA_WRITE, request, Written)

            return await self._retry(f"write seq {request.seq}", attempt, mutating=True,
                                     deadline=deadline)
        finally:
            self._write_lock.release()

    async def get(self, key: bytes, *, deadline: float | None = None) -> bytes | None:
        """The value at `key`, or None (a linearizable read at the leader)."""
        request = Read(self.tablet_id, key)

        async def attempt(address: str) -> ReadResult:
            return await self._call(address, DATA_READ, request, ReadResult)

        result = await self._retry("read", attempt, deadline=deadline)
        return result.value if result.found else None

    async def scan(self, start: bytes | None = None, end: bytes | None = None,
                   limit: int | None = None, *, deadline: float | None = None
                   ) -> list[tuple[bytes, bytes]]:
        """Rows with start <= key < end (None: unbounded), in key order, at most `limit`;
        every page within the one deadline."""
        if limit is not None and limit < 0:
            raise InvalidRequest(f"scan limit {limit} is negative")
        rows: list[tuple[bytes, bytes]] = []
        async for page in self.scan_pages(start, end, limit, deadline=deadline):
            rows.extend(page)
        return rows

    async def scan_pages(self, start: bytes | None = None, end: bytes | None = None,
                         limit: int | None = None, *, deadline: float | None = None
                         ) -> AsyncIterator[list[tuple[bytes, bytes]]]:
        """The scan, a page at a time (each page one leader read; module docstring), every
        page within the deadline taken when the first is asked for."""
        deadline = deadline_at(self.options, deadline)
        remaining = limit
        cursor = start
        while remaining is None or remaining > 0:
            size = self.options.scan_page_size
            if remaining is not None:
                size = min(size, remaining)
            request = Scan(self.tablet_id, cursor, end, size)

            async def attempt(address: str, request: Scan = request) -> ScanResult:
                return await self._call(address, DATA_SCAN, request, ScanResult)

            page = await self._retry("scan", attempt, deadline=deadline)
            rows = [(bytes(k), bytes(v)) for k, v in page.rows]
            if remaining is not None:
                rows = rows[:remaining]
                remaining -= len(rows)
            if rows:
                yield rows
            if not page.more or not page.rows:
                return
            cursor = bytes(page.rows[-1][0]) + b"\0"

    # ------------------------------------------------------------------ administration

    async def leader_info(self, *, deadline: float | None = None) -> ReplicaInfo:
        """The leader's ConsensusState (its term, config and config_index)."""
        request = TabletRef(self.tablet_id)

        async def attempt(address: str) -> ReplicaInfo:
            info = await self._call(address, ADMIN_CONSENSUS_STATE, request, ReplicaInfo)
            if info.role != LEADER:
                raise NotLeader(info.leader, self._address_of(info.leader, info.peers),
                                info.term)
            return info

        return await self._retry("consensus state", attempt, deadline=deadline)

    async def change_config(self, change: ConfigChange,
                            cas_config_index: int | None = None, *,
                            deadline: float | None = None) -> ConfigChanged:
        """Apply `change` if the committed config is still at `cas_config_index`.

        None: read the leader's committed config index first (the compare-and-set still
        protects against a change that lands between that read and this write).
        Raises ChangeRefused when the leader says no.
        """
        deadline = deadline_at(self.options, deadline)  # the read below included
        if cas_config_index is None:
            cas_config_index = (await self.leader_info(deadline=deadline)).config_index
        request = ChangeConfig(self.tablet_id, change, cas_config_index)
        maybe_ran = False

        async def attempt(address: str) -> ConfigChanged:
            nonlocal maybe_ran
            try:
                return await self._call(address, ADMIN_CHANGE_CONFIG, request,
                                        ConfigChanged)
            except ConfigChangeRefused as refusal:
                raise ChangeRefused(refusal.reason, refusal.detail, refusal.committed_index,
                                    outcome_unknown=maybe_ran, last_error=refusal) from None
            except RETRYABLE as exc:
                maybe_ran = maybe_ran or _ran_maybe(exc)
                raise

        return await self._retry(f"config change {change.kind} {change.peer.uuid}", attempt,
                                 mutating=True, deadline=deadline)

    async def step_down(self, new_leader: str | None = None, *,
                        deadline: float | None = None) -> str:
        """Ask the leader to step down (to `new_leader` if given); the UUID of that leader."""
        request = StepDown(self.tablet_id, new_leader)

        async def attempt(address: str) -> str:
            await self._call(address, ADMIN_STEP_DOWN, request, Ack)
            return self._connections.known_uuid(address) or address

        return await self._retry("step down", attempt, mutating=True, repeatable=False,
                                 deadline=deadline)

    # ------------------------------------------------------------------ the retry loop

    async def _call(self, address: str, method: str, request: msgspec.Struct,
                    response_type: type[ResponseT]) -> ResponseT:
        """One call, bounded by the call timeout (NoAnswer when it runs out)."""
        return await self._connections.bounded_call(self.options.call_timeout, address,
                                                    method, request, response_type)

    async def _retry(self, operation: str, attempt: Callable[[str], Awaitable[T]], *,
                     mutating: bool = False, repeatable: bool = True,
                     deadline: float | None = None) -> T:
        """Run `attempt(leader address)` until it succeeds or the policy gives up.

        `mutating`: the call changes state, so a failure in flight leaves its outcome
        unknown (reported in the error); `repeatable`: it may be sent again after that;
        `deadline`: the operation's (absolute; module docstring, "Deadlines").
        """
        options = self.options
        attempts = 0
        last: BaseException | None = None
        maybe_ran = False
        in_flight = False
        tried: str | None = None
        deadline = deadline_at(options, deadline)
        with trio.CancelScope(deadline=deadline) as scope:
            while True:
                attempts += 1
                in_flight = False
                tried = None
                try:
                    tried = self._leader
                    if tried is None:
                        tried = await self._find_leader()
                    in_flight = True  # from here on, a cancellation may cut it off in flight
                    return await attempt(tried)
                except NotLeader as exc:
                    last = exc
                    if self._follow_hint(exc, tried) and attempts < options.max_attempts:
                        continue
                except RETRYABLE as exc:
                    last = exc
                    self._leader = None
                    if mutating and _ran_maybe(exc):
                        maybe_ran = True
                        if not repeatable:
                            raise OutcomeUnknown(operation, attempts, exc,
                                                 outcome_unknown=True) from None
                except ClientError:  # (NoLeader, a retryable one, was caught above)
                    raise
                except RpcError as exc:  # the server refused for good: retrying cannot help
                    raise Rejected(tried or "?", exc) from None
                if attempts >= options.max_attempts:
                    raise RetriesExhausted(operation, attempts, last,
                                           outcome_unknown=maybe_ran) from None
                delay = options.backoff.delay(attempts, self._rng)
                if trio.current_time() + delay >= deadline:
                    break
                in_flight = False
                await trio.sleep(delay)
        # The deadline cut an attempt off: in flight if its connection was open (the
        # request is sent only on an open connection, after the handshake).
        if (scope.cancelled_caught and in_flight and mutating and tried is not None
                and self._connections.connected(tried)):
            maybe_ran = True
        raise DeadlineExceeded(operation, attempts, last, outcome_unknown=maybe_ran)

    def _follow_hint(self, refusal: NotLeader, tried: str | None) -> bool:
        """Cache the leader a NotLeader names; whether it is worth trying at once."""
        self._leader = None
        address = refusal.leader_address
        if not refusal.leader_uuid or not address or not is_address(address):
            return False
        self._remember(address, refusal.leader_uuid)
        if address == tried:  # a server naming itself while refusing: find the leader anew
            return False
        self._leader = address
        return True

    async def _find_leader(self) -> str:
        """One round of questions to every server at once (module docstring; the round
        is discovery.py's).

        The first LEADER answer not older than a term already seen wins and cancels the
        other questions; NoLeader if none does, TabletNotFoundError if every server
        answered that it does not host the tablet.
        """
        self.discoveries += 1
        request = TabletRef(self.tablet_id)

        async def question(address: str) -> Answer | Unanswered:
            try:
                info = await self._call(address, ADMIN_CONSENSUS_STATE, request, ReplicaInfo)
            except TabletNotFound:
                return Unanswered("tablet not hosted", absent=True)
            except RpcError as exc:
                return Unanswered(str(exc))
            except NoAnswer as exc:
                return Unanswered(exc.reason)
            # Peers are learnt from every answer, a late one included.
            for peer in info.peers:
                if is_address(peer.address):
                    self._remember(peer.address, peer.uuid)
            # A leader or a peer nobody asked yet: asked in this round too.
            hinted = self._address_of(info.leader, info.peers)
            others = tuple(p.address for p in info.peers if is_address(p.address))
            return Answer(info.role, info.term, info.role or info.state,
                          (hinted, *others) if hinted is not None else others)

        found = await discover_leader(self._addresses, question)
        if found.leader is not None:
            self._leader = found.leader
            return found.leader
        if found.all_absent:
            raise TabletNotFoundError(self.tablet_id, list(found.asked))
        raise NoLeader(self.tablet_id, list(found.errors))

    def _remember(self, address: str, uuid: str) -> None:
        if address not in self._addresses:
            self._addresses.append(address)
        self._connections.learn(address, uuid)

    @staticmethod
    def _address_of(uuid: str | None, peers: Sequence[Peer]) -> str | None:
        if uuid is None:
            return None
        for peer in peers:
            if peer.uuid == uuid and is_address(peer.address):
                return peer.address
        return None



@asynccontextmanager
async def open_tablet_client(
    addresses: Sequence[str],
    tablet_id: str,
    *,
    client_id: str | None = None,
    network: Network | None = None,
    options: ClientOptions | None = None,
    rng: random.Random | None = None,
) -> AsyncIterator[TabletClient]:
    """A TabletClient for `tablet_id` on the servers at `addresses` ("HOST:PORT" each).

    `client_id`: the exactly-once identity (uuid4 hex when None); `network`: where
    connections come from (TCP when None; a MemoryNetwork host in tests); `options`: the
    retry policy; `rng`: the backoff jitter's source. Connections close when the block ends.
    """
    for address in addresses:
        parse_address(address)
    ident = uuid_module.uuid4().hex if client_id is None else client_id
    async with open_connections(f"client-{ident}", network=network) as connections:
        yield TabletClient(connections, addresses, tablet_id, client_id=ident,
                           options=options, rng=rng)


__all__ = ["LEADER", "RETRYABLE", "TabletClient", "open_tablet_client"]
