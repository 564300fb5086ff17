"""Administration of tablet servers and tablets: what the ``revivify`` CLI calls.

Each function opens the connections it needs and closes them before it returns; the
addresses are "HOST:PORT" strings (options.parse_address) and every UUID comes from the
handshake (connections.py). Calls that address one particular server (`server_status`,
`create_tablet`, `tablet_status`) are made once: a server that cannot be reached is
ServerUnreachable (or, for `tablet_status`, a row saying so), a refusal is Rejected.
`tablet_status` asks every server at once, each bounded by the call timeout
(options.py), so one stalled server is a row saying "no answer", not a status that never
comes.
Calls that go to a tablet's leader (`change_config`, `step_down`, `leader_info`) go through
a TabletClient and its retries (tablet.py).

Creating a tablet: the first `replicas` servers are asked for their UUIDs, then each gets
``Admin.CreateTablet`` with the same peer list, every peer a VOTER at the address it was
reached at, and the same tablet id (uuid4 hex unless given). Those replicas then elect a
leader among themselves. A failure part way leaves the replicas already created in place
(the error names the server that failed); creating again under the same id is refused by
those servers with TabletAlreadyExists.
"""

from __future__ import annotations

import random
import uuid as uuid_module
from collections.abc import Sequence

import attrs
import msgspec
import trio

from revivify.impl.consensus.messages import VOTER, ConfigChange, Peer
from revivify.impl.rpc import ConnectionClosed, Network, RpcError
from revivify.impl.tserver.api import (
    ADMIN_CANCEL_COPY,
    ADMIN_CONSENSUS_STATE,
    ADMIN_CREATE_TABLET,
    ADMIN_DELETE_TABLET,
    ADMIN_LIST_COPIES,
    ADMIN_START_TABLET_COPY,
    ADMIN_STATUS,
    Ack,
    ConfigChanged,
    CopyList,
    CreateTablet,
    DeleteTablet,
    Empty,
    ReplicaInfo,
    ServerStatus,
    StartTabletCopy,
    TabletCreated,
    TabletNotFound,
    TabletRef,
)

from .connections import ServerConnections, open_connections
from .errors import InvalidRequest, NoAnswer, Rejected, ServerUnreachable
from .options import ClientOptions, parse_address
from .tablet import LEADER, open_tablet_client

ADMIN_SRC_UUID = "revivify-admin"
"""The src_uuid the admin helpers name themselves with."""


def _checked(addresses: Sequence[str]) -> list[str]:
    if not addresses:
        raise InvalidRequest("no server addresses given")
    for address in addresses:
        parse_address(address)
    return list(addresses)


async def _uuid(connections: ServerConnections, address: str) -> str:
    try:
        return await connections.uuid_of(address)
    except ConnectionClosed as exc:
        raise ServerUnreachable(address, exc.reason, exc) from None
    except RpcError as exc:
        raise Rejected(address, exc) from None


async def server_status(address: str, *, network: Network | None = None) -> ServerStatus:
    """The server's UUID, address and replicas (handshake, then Admin.Status)."""
    _checked([address])
    async with open_connections(ADMIN_SRC_UUID, network=network) as connections:
        await _uuid(connections, address)
        try:
            return await connections.call(address, ADMIN_STATUS, Empty(), ServerStatus)
        except ConnectionClosed as exc:
            raise ServerUnreachable(address, exc.reason, exc) from None
        except RpcError as exc:
            raise Rejected(address, exc) from None


async def delete_replica(address: str, tablet_id: str, mode: str = "TOMBSTONE",
                         cas_config_index: int | None = None, *,
                         network: Network | None = None) -> None:
    """Delete the replica of ``tablet_id`` on the server at ``address`` (Admin.DeleteTablet):
    TOMBSTONE keeps its cmeta and last OpId; refused when its committed config index is
    above ``cas_config_index``."""
    _checked([address])
    async with open_connections(ADMIN_SRC_UUID, network=network) as connections:
        await _uuid(connections, address)
        try:
            await connections.call(address, ADMIN_DELETE_TABLET,
                                   DeleteTablet(tablet_id, mode, cas_config_index), Ack)
        except ConnectionClosed as exc:
            raise ServerUnreachable(address, exc.reason, exc) from None
        except RpcError as exc:
            raise Rejected(address, exc) from None


async def _admin_call(address: str, method: str, request: msgspec.Struct, response: type,
                      *, network: Network | None = None) -> object:
    """One admin call to one server (handshake first); errors as ServerUnreachable or
    Rejected naming the server."""
    _checked([address])
    async with open_connections(ADMIN_SRC_UUID, network=network) as connections:
        await _uuid(connections, address)
        try:
            return await connections.call(address, method, request, response)
        except ConnectionClosed as exc:
            raise ServerUnreachable(address, exc.reason, exc) from None
        except RpcError as exc:
            raise Rejected(address, exc) from None


_EXPECTED = {"RUNNING": "READY", "FAILED": "READY", "TOMBSTONED": "DELETED"}


async def copy_replica(source: str, destination: str, tablet_id: str, *,
                       network: Network | None = None) -> str:
    """Have ``destination`` copy ``tablet_id`` from ``source`` now (StartTabletCopy on an
    operator's behalf: the caller's term is the source replica's term, the expected state
    what the destination reports). Returns the expected state it named. The copy runs in
    the background on the destination (``list_copies``)."""
    _checked([source, destination])
    async with open_connections(ADMIN_SRC_UUID, network=network) as connections:
        source_uuid = await _uuid(connections, source)
        await _uuid(connections, destination)
        try:
            src = await connections.call(source, ADMIN_CONSENSUS_STATE, TabletRef(tablet_id),
                                         ReplicaInfo)
            try:
                dst = await connections.call(destination, ADMIN_CONSENSUS_STATE,
                                             TabletRef(tablet_id), ReplicaInfo)
                expected = _EXPECTED.get(dst.state, dst.state)
            except TabletNotFound:
                expected = "DOES_NOT_EXIST"
            await connections.call(destination, ADMIN_START_TABLET_COPY, StartTabletCopy(
                tablet_id, ADMIN_SRC_UUID, src.term, source_uuid, source, expected), Ack)
        except ConnectionClosed as exc:
            raise ServerUnreachable(destination, exc.reason, exc) from None
        except RpcError as exc:
            raise Rejected(destination, exc) from None
    return expected


async def list_copies(address: str, *, network: Network | None = None) -> CopyList:
    """The tablet copies running on the server at ``address`` (it is the destination)."""
    reply = await _admin_call(address, ADMIN_LIST_COPIES, Empty(), CopyList, network=network)
    assert isinstance(reply, CopyList)
    return reply


async def cancel_copy(address: str, tablet_id: str, *, network: Network | None = None) -> None:
    """Cancel the copy of ``tablet_id`` running on ``address``: it becomes a tombstone."""
    await _admin_call(address, ADMIN_CANCEL_COPY, TabletRef(tablet_id), Ack, network=network)


@attrs.frozen
class CreatedTablet:
    tablet_id: str
    peers: list[Peer]


async def create_tablet(addresses: Sequence[str], replicas: int, tablet_id: str | None = None,
                        *, network: Network | None = None) -> CreatedTablet:
    """Create a tablet on the first `replicas` servers; its id and its peers."""
    chosen = _checked(addresses)
    if not 1 <= replicas <= len(chosen):
        raise InvalidRequest(f"{replicas} replicas asked for, but {len(chosen)} server"
                             f"{'s' if len(chosen) != 1 else ''} given")
    chosen = chosen[:replicas]
    tablet = uuid_module.uuid4().hex if tablet_id is None else tablet_id
    if not tablet:
        raise InvalidRequest("empty tablet id")
    async with open_connections(ADMIN_SRC_UUID, network=network) as connections:
        peers = [Peer(await _uuid(connections, address), address, VOTER)
                 for address in chosen]
        if len({peer.uuid for peer in peers}) != len(peers):
            raise InvalidRequest("two of the addresses reach the same server: "
                                 + ", ".join(f"{p.address}={p.uuid}" for p in peers))
        request = CreateTablet(tablet, peers)
        for peer in peers:
            try:
                await connections.call(peer.address, ADMIN_CREATE_TABLET, request,
                                       TabletCreated)
            except ConnectionClosed as exc:
                raise ServerUnreachable(peer.address, exc.reason, exc) from None
            except RpcError as exc:
                raise Rejected(peer.address, exc) from None
    return CreatedTablet(tablet, peers)


ANSWER_OK = "ok"
ANSWER_NOT_HOSTED = "not hosted"
ANSWER_UNREACHABLE = "unreachable"
ANSWER_NO_ANSWER = "no answer"
ANSWER_REFUSED = "refused"


@attrs.frozen
class ReplicaStatus:
    """What one server said about the tablet: its ReplicaInfo, or why there is none."""

    address: str
    uuid: str | None
    info: ReplicaInfo | None
    error: str | None  # "unreachable: ...", "no answer within 2s", "tablet not hosted", or
    #                    the server's refusal
    reachable: bool  # it answered (with the state, "not hosted" or a refusal)
    # ANSWER_OK (info is set), ANSWER_NOT_HOSTED, ANSWER_REFUSED, ANSWER_UNREACHABLE
    # (no connection), ANSWER_NO_ANSWER (connected, silent past the call timeout)
    answer: str = ANSWER_OK


@attrs.frozen
class TabletStatus:
    tablet_id: str
    replicas: list[ReplicaStatus]

    @property
    def leader(self) -> ReplicaStatus | None:
        """The replica that says LEADER in the highest term (None: no leader seen)."""
        leaders = [r for r in self.replicas if r.info is not None and r.info.role == LEADER]
        return max(leaders, key=lambda r: r.info.term if r.info else -1, default=None)

    @property
    def hosted(self) -> bool:
        """Whether any server answered with the tablet's state."""
        return any(r.info is not None for r in self.replicas)

    @property
    def reachable(self) -> bool:
        """Whether any server answered at all."""
        return any(r.reachable for r in self.replicas)

    @property
    def silent(self) -> list[ReplicaStatus]:
        """The servers that did not answer (unreachable, or no answer in time)."""
        return [r for r in self.replicas if not r.reachable]


async def tablet_status(addresses: Sequence[str], tablet_id: str, *,
                        network: Network | None = None, options: ClientOptions | None = None
                        ) -> TabletStatus:
    """Admin.ConsensusState of every server, all asked at once, each bounded by the call
    timeout (ClientOptions.call_timeout); one that fails or stays silent is a row saying
    why, so a stalled server costs one call timeout and hides nothing the others said."""
    checked = _checked(addresses)
    timeout = (options or ClientOptions()).call_timeout
    rows: dict[str, ReplicaStatus] = {}

    async def ask(connections: ServerConnections, address: str) -> None:
        uuid: str | None = None
        info: ReplicaInfo | None = None
        try:
            with trio.move_on_after(timeout):  # the handshake and the call together
                uuid = await connections.uuid_of(address)
                info = await connections.call(address, ADMIN_CONSENSUS_STATE,
                                              TabletRef(tablet_id), ReplicaInfo)
        except TabletNotFound:
            rows[address] = ReplicaStatus(address, uuid, None, "tablet not hosted", True,
                                          ANSWER_NOT_HOSTED)
        except ConnectionClosed as exc:
            rows[address] = ReplicaStatus(address, uuid, None, f"unreachable: {exc.reason}",
                                          False, ANSWER_UNREACHABLE)
        except RpcError as exc:
            rows[address] = ReplicaStatus(address, uuid, None, str(exc), True,
                                          ANSWER_REFUSED)
        else:
            if info is None:
                rows[address] = ReplicaStatus(address, uuid, None,
                                              NoAnswer(address, timeout,
                                                       maybe_sent=False).reason,
                                              False, ANSWER_NO_ANSWER)
            else:
                rows[address] = ReplicaStatus(address, uuid, info, None, True)

    async with open_connections(ADMIN_SRC_UUID, network=network) as connections, \
            trio.open_nursery() as nursery:
        for address in dict.fromkeys(checked):
            nursery.start_soon(ask, connections, address)
    return TabletStatus(tablet_id, [rows[address] for address in dict.fromkeys(checked)])


async def leader_info(addresses: Sequence[str], tablet_id: str, *,
                      network: Network | None = None, options: ClientOptions | None = None,
                      rng: random.Random | None = None) -> ReplicaInfo:
    """The tablet leader's ConsensusState (found and retried as a TabletClient does)."""
    async with open_tablet_client(_checked(addresses), tablet_id, network=network,
                                  options=options, rng=rng) as tablet:
        return await tablet.leader_info()


async def change_config(addresses: Sequence[str], tablet_id: str, change: ConfigChange,
                        cas_config_index: int | None = None, *,
                        network: Network | None = None, options: ClientOptions | None = None,
                        rng: random.Random | None = None) -> ConfigChanged:
    """One membership change at the leader, compare-and-set on the committed config index.

    None for `cas_config_index`: the leader's current committed config index, read first.
    ChangeRefused when the leader says no.
    """
    async with open_tablet_client(_checked(addresses), tablet_id, network=network,
                                  options=options, rng=rng) as tablet:
        return await tablet.change_config(change, cas_config_index)


async def step_down(addresses: Sequence[str], tablet_id: str, new_leader: str | None = None,
                    *, network: Network | None = None, options: ClientOptions | None = None,
                    rng: random.Random | None = None) -> str:
    """Ask the leader to step down (in favour of `new_leader`); the UUID of that leader."""
    async with open_tablet_client(_checked(addresses), tablet_id, network=network,
                                  options=options, rng=rng) as tablet:
        return await tablet.step_down(new_leader)


__all__ = [
    "ADMIN_SRC_UUID",
    "ANSWER_NOT_HOSTED",
    "ANSWER_NO_ANSWER",
    "ANSWER_OK",
    "ANSWER_REFUSED",
    "ANSWER_UNREACHABLE",
    "CreatedTablet",
    "ReplicaStatus",
    "TabletStatus",
    "change_config",
    "create_tablet",
    "leader_info",
    "server_status",
    "step_down",
    "tablet_status",
]
