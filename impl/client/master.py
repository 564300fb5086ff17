"""Talking to the masters: find the leader among all of them at once, remember it, follow its
hints, bound every call, retry what is retryable.

Seed 004 "Clients behave much like tservers: they are configured a priori with the entire
master Raft configuration, must always communicate with the leader master, and will retry
their requests until the new leader master is found." A MasterClient does that:

Finding the leader. Without a remembered leader it asks ``Master.Status`` of every master AT
ONCE (one task each in a nursery, the UUID handshake included, each bounded by the call
timeout, ClientOptions.call_timeout), takes the first that says role LEADER in a term no
lower than any other answer seen so far, and cancels the rest: one stalled master, listed
first or not, costs nothing while a leader is up elsewhere. A follower's leader hint naming
an address not in the list is asked in the same round. The leader's address is remembered
for the life of the client (a TableClient keeps one MasterClient: table.py); a round with
no leader is a NoLeader failure, retried after a backoff.

Calling it. Each call is bounded by the call timeout, and retried, with the client's
backoff, until the deadline (ClientOptions.deadline) on:

    MasterNotLeader             the hint, if it names another master, is followed at once
                                (not twice in a row: two masters naming each other back
                                off); else the leader is looked for again
    ServiceUnavailable          a leader not ready yet (the leader-ready gate): again later,
                                at the same master
    CatalogWriteFailed          the one catalog write did not commit at that leader, but its
                                entry may still commit under the next one: a write's
                                outcome is unknown until a retry (same request id) answers
    Refused, retryable          NAME_RESERVED, NOT_ENOUGH_SERVERS: again later
    NoAnswer, a connection error, WrongServerUuid (the address's UUID updated first)
                                the leader is forgotten and looked for again

and gives up at once with Rejected(address, error) on a refusal that retrying cannot
change (NOT_FOUND, ALREADY_PRESENT, INVALID_ARGUMENT, ...). CreateTable, DeleteTable and
AlterTable carry a request id (the caller's: the CLI draws one per command), so a retry of
one that committed before its answer was lost answers OK with what it did
(impl/master/operations.py "Retries") instead of ALREADY_PRESENT, NOT_FOUND or "the column
exists". Giving up at the
deadline raises DeadlineExceeded, with outcome_unknown when an attempt of a call that
changes the catalog may have run (cut off after it was sent).

The master list (issue 19). ``masters`` is where to start: every Master.Status answer
names the catalog's committed config (its member addresses and index), and the client asks
the masters of the newest config it was told from then on (a master added later is asked,
a removed one no more; impl/tserver/master_api.py "The master list"). A leader hint naming an
address not in the list is added to it.

Follower reads (KUDU-500; impl/master/queries.py "Follower reads"). ``call_any`` sends a
read that names a freshness bound (ListTablesRequest / TableLocationsRequest with
``freshness``) to ANY master: the masters in the order given, starting with the one that
answered last, each bounded by the call timeout. A master whose catalog is too old
(StaleCatalog), that is not ready, not reachable or that refuses follower reads
(MasterNotLeader, from a master older than them) is passed over for the next; after a
round with no answer, a backoff, until the deadline. A non-retryable refusal (NOT_FOUND)
is Rejected at once. The answer says who served it and how stale it may be (``served_by``).

`master_call` is a one-shot MasterClient (the CLI's commands); `master_status` asks one
master, whatever its role (``revivify master status``, ``master list``), bounded by the
call timeout too, so a stalled master is a NoAnswer (ServerUnreachable) for the caller to
show, not a hang.
"""

from __future__ import annotations

import random
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import TypeVar

import attrs
import msgspec
import trio

from revivify.impl.master import api
from revivify.impl.rpc import ConnectFailed, ConnectionClosed, Network, RpcError, UnknownMethod
from revivify.impl.rpc.address import is_address

from .connections import ServerConnections, open_connections
from .discovery import discover_leader
from .errors import (
    ClientError,
    DeadlineExceeded,
    InvalidRequest,
    MastersUnreachable,
    NoAnswer,
    NoLeader,
    NoMasterAnswered,
    Rejected,
    ServerUnreachable,
    TabletUnknownToMasters,
    WrongServerKind,
    unreachable_reason,
)
from .leader_round import Answer, Unanswered, master_answer
from .options import ClientOptions, deadline_at, parse_address

T = TypeVar("T", bound=msgspec.Struct)

CLIENT_UUID = "revivify-client"

READ_ONLY = frozenset({api.MASTER_STATUS, api.MASTER_LIST_TSERVERS, api.MASTER_LIST_TABLES,
                       api.MASTER_TABLE_LOCATIONS})
"""Methods that change nothing: a call of one cut off in flight leaves no unknown outcome."""



class MasterClient:
    """Calls answered by the leader master (module docstring)."""

    def __init__(self, connections: ServerConnections, masters: Sequence[str], *,
                 options: ClientOptions | None = None, rng: random.Random | None = None
                 ) -> None:
        if not masters:
            raise InvalidRequest("no master addresses given")
        for address in masters:
            parse_address(address)
        self.masters: list[str] = list(dict.fromkeys(masters))
        # The index of the catalog config ``masters`` was learnt from (-1: as given).
        self.masters_index = -1
        self.options = ClientOptions() if options is None else options
        self._rng = random.Random() if rng is None else rng
        self._connections = connections
        self._leader: str | None = None
        self._last_reader: str | None = None  # the master that answered the last call_any
        self.discoveries = 0  # rounds of leader discovery run (tests)

    @property
    def leader_address(self) -> str | None:
        """The remembered leader master (None until found, or after it failed)."""
        return self._leader

    async def call(self, method: str, body: msgspec.Struct, response: type[T], *,
                   deadline: float | None = None) -> T:
        """``method`` answered by the ready leader master (module docstring); by
        ``deadline`` (absolute trio time: an enclosing operation's, e.g. a table client's
        location refresh) if given, else by now + the options' deadline."""
        options = self.options
        attempts = 0
        last: BaseException | None = None
        maybe_ran = False
        followed_hint = False
        refused_by = "?"
        deadline = deadline_at(options, deadline)
        with trio.CancelScope(deadline=deadline):
            while True:
                attempts += 1
                address: str | None = None
                try:
                    address = self._leader
                    if address is None:
                        address = await self._find_leader()
                    return await self._connections.bounded_call(
                        options.call_timeout, address, method, body, response)
                except api.MasterNotLeader as exc:
                    last = exc
                    self._leader = None
                    hinted = exc.leader_address
                    if (not followed_hint and is_address(hinted) and hinted != address
                            and hinted is not None):
                        self._remember(hinted, exc.leader_uuid)
                        self._leader = hinted
                        followed_hint = True
                        continue
                except api.Refused as exc:
                    if not exc.retryable:
                        raise Rejected(address or "?", exc) from None
                    last = exc  # the leader answered: wait, then ask it again
                    refused_by = address or "?"
                except api.ServiceUnavailable as exc:
                    last = exc  # the leader answered: wait, then ask it again
                except api.CatalogWriteFailed as exc:
                    last = exc  # the leader answered: wait, then ask it again
                    maybe_ran = True  # its log entry may commit under the next leader
                except (NoAnswer, ConnectionClosed) as exc:
                    last = exc
                    self._leader = None
                    if method not in READ_ONLY and _maybe_sent(exc):
                        maybe_ran = True
                except NoLeader as exc:
                    last = exc
                except RpcError as exc:  # WrongServerUuid (UUID updated), a bad answer
                    last = exc
                    self._leader = None
                followed_hint = False
                delay = options.backoff.delay(attempts, self._rng)
                if trio.current_time() + delay >= deadline:
                    break
                await trio.sleep(delay)
        if isinstance(last, api.Refused) and not maybe_ran:
            # The leader answered to the end, refusing (NOT_ENOUGH_SERVERS, NAME_RESERVED):
            # a definite "no" for now, not an unreachable cluster.
            raise Rejected(refused_by, last)
        if isinstance(last, NoMasterAnswered):
            # Not one master answered in the last round: the operator's message names the
            # addresses and what happened at them, not the catalog tablet.
            raise MastersUnreachable(method, attempts, last, outcome_unknown=maybe_ran,
                                     say_operation=False)
        raise DeadlineExceeded(method, attempts, last, outcome_unknown=maybe_ran)

    async def call_any(self, method: str, body: msgspec.Struct, response: type[T], *,
                       deadline: float | None = None) -> T:
        """A read with a freshness bound, answered by any master (module docstring);
        ``deadline`` as for `call`."""
        assert method in READ_ONLY, f"{method} changes the catalog: call() the leader"
        options = self.options
        attempts = 0
        last: BaseException | None = None
        # Each master's latest silence (why it gave no answer), dropped once it answers:
        # if at the end every master is silent, the error says where and why, as a call
        # to the leader does (a deadline may cut the last round short).
        silent: dict[str, str] = {}
        deadline = deadline_at(options, deadline)
        with trio.CancelScope(deadline=deadline):
            while True:
                attempts += 1
                start = self.masters.index(self._last_reader) \
                    if self._last_reader in self.masters else 0
                for address in self.masters[start:] + self.masters[:start]:
                    try:
                        answer = await self._connections.bounded_call(
                            options.call_timeout, address, method, body, response)
                    except api.Refused as exc:
                        if not exc.retryable:
                            raise Rejected(address, exc) from None
                        last = exc
                        silent.pop(address, None)
                    except (ServerUnreachable, ConnectFailed, ConnectionClosed,
                            OSError) as exc:
                        # NoAnswer, a connection error: this master cannot answer now
                        last = exc
                        silent[address] = unreachable_reason(exc)
                    except RpcError as exc:
                        # StaleCatalog, MasterNotLeader, ServiceUnavailable: it answered,
                        # not with the catalog
                        last = exc
                        silent.pop(address, None)
                    else:
                        self._last_reader = address
                        return answer
                delay = options.backoff.delay(attempts, self._rng)
                if trio.current_time() + delay >= deadline:
                    break
                await trio.sleep(delay)
        if self.masters and all(address in silent for address in self.masters):
            reasons = NoMasterAnswered([(address, silent[address]) for address in self.masters])
            raise MastersUnreachable(method, attempts, reasons, say_operation=False)
        raise DeadlineExceeded(method, attempts, last, outcome_unknown=False)

    async def _find_leader(self) -> str:
        """One round of Master.Status to every master at once (module docstring; the
        round is discovery.py's)."""
        self.discoveries += 1
        not_masters: list[WrongServerKind] = []
        silent: dict[str, str] = {}  # address -> why it gave no answer at all
        answered = 0

        async def question(address: str) -> Answer | Unanswered:
            nonlocal answered
            try:
                status = await self._status(address)
            except WrongServerKind as exc:
                not_masters.append(exc)
                return Unanswered(exc.message)
            except (ClientError, RpcError) as exc:
                silent[address] = unreachable_reason(exc)
                return Unanswered(exc.message if isinstance(exc, ClientError) else str(exc))
            answered += 1
            self._learn_masters(status)
            answer = master_answer(status)
            for hinted in answer.also_ask:
                self._remember(hinted, status.leader)
            return answer

        found = await discover_leader(self.masters, question)
        if found.leader is None and len(not_masters) == len(self.masters):
            raise not_masters[0]  # pointed at tablet servers only: no retry can help
        if found.leader is None and answered == 0 and not not_masters:
            raise NoMasterAnswered([(a, silent.get(a, "no answer")) for a in found.asked])
        if found.leader is None:
            raise NoLeader("", list(found.errors), subject="among the masters")
        self._leader = found.leader
        return found.leader

    async def _status(self, address: str) -> api.MasterStatus:
        """Master.Status of one master, the handshake included, within the call timeout."""
        timeout = self.options.call_timeout
        with trio.move_on_after(timeout):
            await self._connections.uuid_of(address)
            try:
                return await self._connections.call(address, api.MASTER_STATUS, api.Empty(),
                                                    api.MasterStatus)
            except UnknownMethod:
                # Every master answers Master.Status; a tablet server knows no Master.*
                raise WrongServerKind(address, "tablet server", "master") from None
        raise NoAnswer(address, timeout, maybe_sent=False)

    def _learn_masters(self, status: api.MasterStatus) -> None:
        """Adopt the master list a master names, if its config is newer than the one the
        list came from (impl/tserver/master_api.py "The master list": configs are ordered by
        their index; a removed master's older config never outranks it)."""
        told = [a for a in dict.fromkeys(status.masters) if is_address(a)]
        if status.masters_index <= self.masters_index or not told:
            return
        self.masters, self.masters_index = told, status.masters_index

    def _remember(self, address: str, uuid: str | None) -> None:
        if address not in self.masters:
            self.masters.append(address)
        if uuid:
            self._connections.learn(address, uuid)


def _maybe_sent(error: BaseException) -> bool:
    if isinstance(error, ConnectFailed):
        return False
    if isinstance(error, NoAnswer):
        return error.maybe_sent
    return isinstance(error, ConnectionClosed)


@asynccontextmanager
async def open_master_client(masters: Sequence[str], *, network: Network | None = None,
                             options: ClientOptions | None = None,
                             rng: random.Random | None = None
                             ) -> AsyncIterator[MasterClient]:
    """A MasterClient for the masters at ``masters`` (HOST:PORT each); its connections
    close when the block ends. ``network``: TCP when None (a MemoryNetwork host in tests)."""
    for address in masters:
        parse_address(address)
    async with open_connections(CLIENT_UUID, network=network,
                                app_errors=api.APP_ERRORS) as connections:
        yield MasterClient(connections, masters, options=options, rng=rng)


async def master_call(masters: Sequence[str], method: str, body: msgspec.Struct,
                      response: type[T], options: ClientOptions | None = None, *,
                      network: Network | None = None, any_master: bool = False,
                      deadline: float | None = None) -> T:
    """``method`` answered by the ready leader master (a one-shot MasterClient); with
    ``any_master``, a read whose body names a freshness bound, by any master (call_any);
    ``deadline`` as for MasterClient.call."""
    async with open_master_client(masters, network=network, options=options) as client:
        if any_master:
            return await client.call_any(method, body, response, deadline=deadline)
        return await client.call(method, body, response, deadline=deadline)


async def master_call_at(address: str, method: str, body: msgspec.Struct,
                         response: type[T], options: ClientOptions | None = None, *,
                         network: Network | None = None) -> T:
    """``method`` of the one master at ``address``, whatever its role (an operator's call
    that every master must answer for itself: ``tserver unregister``), within the call
    timeout; ServerUnreachable or NoAnswer if it cannot be reached."""
    parse_address(address)
    async with open_master_client([address], network=network, options=options) as client:
        timeout = client.options.call_timeout
        with trio.move_on_after(timeout):
            try:
                await client._connections.uuid_of(address)
                return await client._connections.call(address, method, body, response)
            except ConnectionClosed as exc:
                raise ServerUnreachable(address, exc.reason, exc) from None
        raise NoAnswer(address, timeout, maybe_sent=True)


async def master_status(address: str, options: ClientOptions | None = None, *,
                        network: Network | None = None) -> api.MasterStatus:
    """One master's view of itself (any role), within the call timeout (NoAnswer, a
    ServerUnreachable, if it stays silent; ServerUnreachable if it cannot be reached)."""
    parse_address(address)
    async with open_master_client([address], network=network, options=options) as client:
        try:
            return await client._status(address)
        except ConnectionClosed as exc:
            raise ServerUnreachable(address, exc.reason, exc) from None


@attrs.frozen
class MasterConfigView:
    """What ``master list`` shows (issue 31): ``config``, the Master.Status answer naming
    the newest committed catalog config among those that answered (None: none answered
    with one), and ``answers``, every master asked, named or a member of that config,
    with its own status or why it gave none."""

    config: api.MasterStatus | None
    answers: dict[str, api.MasterStatus | str]


async def master_config(masters: Sequence[str], options: ClientOptions | None = None, *,
                        network: Network | None = None) -> MasterConfigView:
    """Every member of the catalog's Raft config, whichever of its masters were named.

    The masters named are asked at once (Master.Status, each within the call timeout);
    the answer with the highest config index names the config (its members' UUIDs,
    addresses and member types); the members not named are then asked too, so each row
    has its own role and term, and a member that does not answer is shown as not live
    rather than left out. A NON_VOTER is therefore listed as one even when only voters
    were named."""
    answers: dict[str, api.MasterStatus | str] = {}

    async def ask(address: str) -> None:
        try:
            answers[address] = await master_status(address, options, network=network)
        except ClientError as exc:
            answers[address] = unreachable_reason(exc)

    async def ask_all(addresses: Sequence[str]) -> None:
        async with trio.open_nursery() as nursery:
            for address in addresses:
                if address not in answers:
                    nursery.start_soon(ask, address)

    for address in masters:
        parse_address(address)
    asked = list(dict.fromkeys(masters))
    await ask_all(asked)
    statuses = [a for a in answers.values() if isinstance(a, api.MasterStatus) and a.members]
    config = max(statuses, key=lambda st: st.masters_index, default=None)
    if config is not None:
        asked += [m.address for m in config.members if m.address not in answers]
        await ask_all(asked)
    # In the order asked, not the order answered: the rows a master list shows of masters
    # outside the config come in that order, the same from one run to the next.
    return MasterConfigView(config, {address: answers[address] for address in asked})


async def locate_tablet(masters: Sequence[str], tablet_id: str,
                        options: ClientOptions | None = None) -> list[str]:
    """The addresses of `tablet_id`'s replicas as the leader master's catalog records them
    (the tablet commands' ``--masters``/``--root``): the catalog is asked for its tables,
    then each table's locations, until the tablet is found; a table deleted between the two
    is skipped (as ksck does). TabletUnknownToMasters when no table of the catalog holds
    the tablet. The tablet's servers, not the catalog, are the authority on its config:
    the caller asks them and follows the peers they report, so a catalog a little behind a
    move is still enough to find the tablet."""
    async with open_master_client(masters, options=options) as client:
        listed = await client.call(api.MASTER_LIST_TABLES, api.Empty(), api.TableList)
        for table in listed.tables:
            try:
                where = await client.call(api.MASTER_TABLE_LOCATIONS, api.TableName(table.name),
                                          api.TableLocationsReply)
            except Rejected as exc:
                if isinstance(exc.error, api.Refused) and exc.error.reason == "NOT_FOUND":
                    continue  # deleted since the list
                raise
            for tablet in where.tablets:
                if tablet.tablet_id == tablet_id:
                    return [r.address for r in tablet.replicas]
    raise TabletUnknownToMasters(tablet_id, len(listed.tables))


__all__ = ["CLIENT_UUID", "READ_ONLY", "MasterClient", "MasterConfigView", "locate_tablet",
           "master_call", "master_call_at", "master_config", "master_status",
           "open_master_client"]
