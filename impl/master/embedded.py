"""The tablet server a master embeds, as the rooms of the master shell see it.

A master is a tablet server that hosts one tablet, the catalog (server.py). The master's
RPC methods are registered on that server's service while it starts
(``open_tserver(extend_service=...)``), so the rooms of the shell (gate.py, runner.py,
delivery.py, ...) are built before the server exists. ``EmbeddedServer`` is the one place
that is filled in once the process serves: ``start`` sets the tablet server, the
tablet-server map and the start time together, and until then ``require_started`` refuses
every master request as retryable. It answers only what every room asks of the process:
who this master is, the time, the catalog replica running here and whom it follows. Each
room keeps its own state.

Every room logs under one logger, ``MASTER_LOGGER``: the name of the module the rooms were
split from, so the log lines (``%(name)s`` in ``revivify master run``'s format) and the
filters that select them are what they were.
"""

from __future__ import annotations

import logging
from typing import Final, NamedTuple

import trio

from revivify.impl.rpc.transport import Network
from revivify.impl.tserver.replica import Replica, Tracer
from revivify.impl.tserver.server import TabletServer

from . import api
from .tserver_map import TabletServerMap

MASTER_LOGGER: Final = "revivify.impl.master.server"
CATALOG: Final = api.CATALOG_TABLET_ID


def master_logger() -> logging.Logger:
    """The master shell's one logger (module docstring)."""
    return logging.getLogger(MASTER_LOGGER)


class CatalogRole(NamedTuple):
    """The catalog replica's Raft role as this master sees it (a follower's hint)."""

    role: str  # "" without a running catalog replica
    term: int
    leader: str | None
    leader_address: str | None


class EmbeddedServer:
    """The embedded tablet server and the tablet-server map, once the process serves."""

    def __init__(self) -> None:
        self.ts: TabletServer | None = None
        self.tservers: TabletServerMap | None = None
        self.started_at: float | None = None

    def start(self, ts: TabletServer, dead_after: float) -> None:
        """The process serves: every master (leader or not) keeps a map of the tablet
        servers from their heartbeats (KUDU-1358: a new leader knows the live servers)."""
        self.ts = ts
        self.tservers = TabletServerMap(ts.uuid, dead_after)
        self.started_at = trio.current_time()

    def require_started(self) -> None:
        if self.ts is None or self.tservers is None:
            raise api.ServiceUnavailable("the master is starting")

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

    @property
    def network(self) -> Network | None:
        return self.server.network

    @property
    def tracer(self) -> Tracer:
        return self.server.tracer

    def tmap(self) -> TabletServerMap:
        assert self.tservers is not None
        return self.tservers

    def now(self) -> float:
        return trio.current_time()

    def catalog_replica(self) -> Replica | None:
        """The catalog tablet's replica here, if it is running (none before the catalog
        exists, while a joining master waits for its copy, or while it is being copied):
        the lifecycle slot says, as for every tablet."""
        if self.ts is None:
            return None
        return self.ts.tablets.running_replica(CATALOG)

    def role_of(self, replica: Replica | None) -> CatalogRole:
        """(role, term, leader uuid, leader address) of the catalog replica."""
        if replica is None:
            return CatalogRole("", 0, None, None)
        status = replica.core.status()
        leader = status.leader
        peer = status.active_config.peer(leader) if leader else None
        return CatalogRole(status.role.value, status.term, leader,
                           peer.address if peer else None)


__all__ = ["CATALOG", "MASTER_LOGGER", "CatalogRole", "EmbeddedServer", "master_logger"]
