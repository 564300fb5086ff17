"""The masters themselves: who they are at first start, the master list every answer
names, and masters joining and leaving. All of it is the catalog tablet's Raft config.

Bootstrap (first start). The catalog tablet is created on every master with the same
config at index 0: every configured master as a VOTER, in address order. Its members'
UUIDs are learnt over RPC from their addresses (a call naming no UUID is refused with
WrongServerUuid, which names the server's; tests/integration/helpers.py discover_uuid does
the same), retried until every master answered. From then on the config is in the
catalog's cmeta: a restart finds the tablet on disk (STARTING, then RUNNING) and discovers
nothing. A master whose directory is wiped gets a new UUID and is not a member any more:
remove its old UUID and add it again (below).

Masters join and leave (seed 004 "Master Raft configuration changes"): Master.AddMaster
proposes ADD(NON_VOTER, promote) of a master started with ``--join`` (it never creates a
catalog; the leader's Raft sees the tablet missing there and copies it, then promotes the
new member once caught up), Master.RemoveMaster proposes REMOVE; both on the local catalog
replica with the CAS on its committed config index, one at a time (the Raft core refuses
a second change while one is pending); the leader itself is never removed. These are Raft
config changes of the catalog tablet, traced by its Raft events, not catalog writes.

The master list (issue 19): every heartbeat answer and every Master.Status names the
catalog's committed config (``master_config``: member addresses and the config's index,
impl/tserver/master_api.py, "The master list"), so tablet servers start heartbeating a
master added later and stop calling a removed one (impl/tserver/heartbeat.py), and clients
ask the masters of the newest config they were told (impl/client/master.py).
"""

from __future__ import annotations

import trio

from revivify.impl.consensus.messages import NON_VOTER, Config, ConfigChange, Peer
from revivify.impl.rpc import RpcError, WrongServerUuid, open_rpc_client
from revivify.impl.rpc.address import parse_address
from revivify.impl.storage.values import ConsensusMeta
from revivify.impl.tserver import api as ts_api
from revivify.impl.tserver.manager.core import Kind
from revivify.impl.tserver.replica import config_to_storage

from . import api
from .delivery import CALL_RETRY
from .embedded import CATALOG, EmbeddedServer, master_logger
from .errors import IllegalState, InvalidArgument
from .gate import ReadyGate
from .options import MasterOptions, normalize

logger = master_logger()


class Membership:
    """The catalog tablet's Raft config as the master list (module docstring)."""

    def __init__(self, embedded: EmbeddedServer, gate: ReadyGate,
                 options: MasterOptions) -> None:
        self._embedded = embedded
        self._gate = gate
        self._options = options
        self.bootstrapped = trio.Event()  # the catalog exists here, or a joiner waits for it

    def master_addresses(self) -> tuple[str, ...]:
        """The configured masters (``--masters``), or this one alone."""
        configured = tuple(sorted({normalize(a) for a in self._options.masters}))
        return configured or (self._embedded.address,)

    def master_config(self) -> tuple[int, list[str]]:
        """(index, member addresses) of the catalog's committed Raft config as this master
        knows it, or (-1, []) without a catalog here (impl/tserver/master_api.py, "The
        master list")."""
        if self._embedded.ts is None:
            return (-1, [])
        replica = self._embedded.ts.tablets.replica(CATALOG)
        if replica is None:
            return (-1, [])
        committed = replica.core.status().committed_config
        return (committed.opid_index, sorted(normalize(p.address) for p in committed.peers))

    def master_members(self) -> list[tuple[str, str, str]]:
        """(uuid, address, member type) of each member of the catalog's committed config
        as this master knows it, or [] without a catalog here (``master list``)."""
        if self._embedded.ts is None:
            return []
        replica = self._embedded.ts.tablets.replica(CATALOG)
        if replica is None:
            return []
        committed = replica.core.status().committed_config
        return sorted((p.uuid, normalize(p.address), p.member_type) for p in committed.peers)

    # ------------------------------------------------------------------ bootstrap

    async def discover_uuid(self, address: str) -> str:
        """The UUID of the server at ``address``, from its refusal of a call naming none."""
        host, port = parse_address(address)
        failures = 0
        while True:
            try:
                async with open_rpc_client(host, port, "", self._embedded.uuid,
                                           network=self._embedded.network) as client:
                    await client.call(api.MASTER_STATUS, api.Empty(), api.MasterStatus)
            except WrongServerUuid as exc:
                return exc.expected
            except (RpcError, OSError) as exc:
                logger.debug("master at %s: %s", address, exc)
            failures += 1
            await trio.sleep(CALL_RETRY.delay(failures))

    async def bootstrap(self) -> None:
        """Create the catalog if it is not here yet (it waits for the other masters); a
        joining master waits for the leader to copy it here instead."""
        if not self._options.join:
            await self._ensure_catalog()
        elif self._embedded.server.tablets.core.state(CATALOG).kind is Kind.ABSENT:
            logger.info("master %s joins: waiting for the catalog to be copied here",
                        self._embedded.uuid)
        self.bootstrapped.set()

    async def _ensure_catalog(self) -> None:
        """Create the catalog tablet here, once, with every master as a voter."""
        tablets = self._embedded.server.tablets
        if tablets.core.state(CATALOG).kind is not Kind.ABSENT:
            return
        me = self._embedded.address
        addresses = self.master_addresses()
        if me not in addresses:
            raise ValueError(f"this master's address {me} is not in --masters "
                             f"{','.join(addresses)}")
        peers = []
        for address in addresses:
            uuid = self._embedded.uuid if address == me else await self.discover_uuid(address)
            peers.append(Peer(uuid, address))
        config = Config(0, tuple(peers))
        cmeta = ConsensusMeta(CATALOG, 0, None, config_to_storage(config))
        logger.info("creating the catalog tablet with voters %s", [p.uuid for p in peers])
        if tablets.core.state(CATALOG).kind is Kind.ABSENT:
            await tablets.create(CATALOG, cmeta, sorted(config.voters()))

    # ------------------------------------------------------------------ join and leave

    async def add_master(self, address: str, cas: int | None) -> api.MasterChangeReply:
        """Master.AddMaster on the ready leader: ADD(NON_VOTER, promote), or already done."""
        self._gate.require_ready()
        try:
            address = normalize(address)
        except ValueError as exc:
            raise api.refusal(InvalidArgument(f"address: {exc}")) from None
        with trio.move_on_after(self._options.call_timeout):
            uuid = await self.discover_uuid(address)
            committed = self._committed_config()
            if committed.peer(uuid) is not None:
                return api.MasterChangeReply(uuid, address, committed.opid_index,
                                             already_done=True)
            # A NON_VOTER with promote: the leader copies the catalog to it (it has none:
            # `master run --join`), streams its WAL, and makes it a VOTER once caught up.
            return await self._change(
                ConfigChange("ADD", Peer(uuid, address, NON_VOTER, promote=True)), cas)
        raise api.refusal(InvalidArgument(f"no master answers at {address}"))

    async def remove_master(self, uuid: str, cas: int | None) -> api.MasterChangeReply:
        """Master.RemoveMaster on the ready leader: REMOVE, or already done; never the
        leader itself."""
        self._gate.require_ready()
        me = self._embedded.uuid
        if uuid == me:
            raise api.refusal(IllegalState(f"{me} is the leader master: it cannot "
                                           "be removed; make another master lead first"))
        committed = self._committed_config()
        peer = committed.peer(uuid)
        if peer is None:
            return api.MasterChangeReply(uuid, "", committed.opid_index, already_done=True)
        return await self._change(ConfigChange("REMOVE", peer), cas)

    def _committed_config(self) -> Config:
        replica = self._embedded.catalog_replica()
        assert replica is not None
        return replica.core.status().committed_config

    async def _change(self, change: ConfigChange, cas: int | None) -> api.MasterChangeReply:
        """One change of the catalog tablet's Raft config, proposed by this ready leader
        with the CAS on the committed config's index: one at a time (the core refuses a
        second one while one is pending)."""
        self._gate.require_ready()
        replica = self._embedded.catalog_replica()
        assert replica is not None
        committed = replica.core.status().committed_config
        cas_index = committed.opid_index if cas is None else cas
        try:
            with trio.fail_after(self._options.write_timeout):
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


__all__ = ["Membership"]
