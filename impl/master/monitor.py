"""What an operator sees of a master: its metrics (added to the embedded tablet server's
registry, so one ``/metrics`` shows both) and the log lines of state that no single call
announces (tablet servers going dead or live again, heals starting and finishing).

Theory
------
Counted where they happen, by the shell's rooms that do them: catalog writes (runner.py,
with their latency), calls to tablet servers (delivery.py, by method and result).

Read at scrape time (``collect``), never maintained: the ready flag (the gate), tablet
servers live and dead (the tablet-server map, on every master), and, on the ready leader
only, tablets by health and tablets with a replica move in progress (the gate's catalog
snapshot with the healing policy's view of the servers). A follower's snapshot is not
meaningful (gate.py), so a follower exports no health: summing ``revivify_master_tablets``
over the masters counts each tablet once.

A tablet's health, over its voters in the catalog's config (``ServerView.healthy``: on a
live server and not reported FAILED):

    healthy            at least ``num_replicas`` healthy voters
    under_replicated   fewer, but a majority of its voters healthy (it still commits)
    unavailable        no healthy majority (it cannot commit until servers return)

``Watch.run`` compares, every ``interval``, the live servers and the moves in the catalog
with what it saw last, and logs (and counts) the differences: one line per server that
died or came back and per move that began or ended, whichever room or operator caused it.
"""

from __future__ import annotations

from collections.abc import Iterator

import trio
from prometheus_client.metrics_core import Metric

from revivify.impl.observe.metrics import gauge

from .catalog import Catalog, ReplicaMove, TabletRecord
from .counts import MasterMetrics
from .embedded import EmbeddedServer, master_logger
from .gate import ReadyGate
from .healing import Healer
from .replication import ServerView, majority

logger = master_logger()

HEALTH: tuple[str, ...] = ("healthy", "under_replicated", "unavailable")


def tablet_health(tablet: TabletRecord, num_replicas: int, view: ServerView) -> str:
    """One tablet's health (module docstring)."""
    voters = [p.uuid for p in tablet.consensus.config.peers if p.member_type == "VOTER"]
    healthy = sum(1 for uuid in voters if view.healthy(tablet.tablet_id, uuid))
    if healthy >= num_replicas:
        return "healthy"
    if healthy >= majority(len(voters)):
        return "under_replicated"
    return "unavailable"


def health_counts(catalog: Catalog, view: ServerView) -> dict[str, float]:
    counts = dict.fromkeys(HEALTH, 0.0)
    for tablet in catalog.tablets.values():
        table = catalog.tables.get(tablet.table_id)
        if tablet.live and table is not None:
            counts[tablet_health(tablet, table.num_replicas, view)] += 1
    return counts


class Watch:
    """Scrape-time gauges and the liveness and move watcher (module docstring)."""

    def __init__(self, embedded: EmbeddedServer, gate: ReadyGate, healer: Healer,
                 metrics: MasterMetrics) -> None:
        self._embedded = embedded
        self._gate = gate
        self._healer = healer
        self._metrics = metrics
        self._live: dict[str, bool] = {}  # server uuid -> live when last seen
        self._moves: dict[str, ReplicaMove] | None = None  # None: not the ready leader

    def collect(self) -> Iterator[Metric]:
        ready = self._gate.ready_term is not None and not self._gate.needs_rebuild
        yield gauge("revivify_master_ready", "1 while this master is the ready leader",
                    None, {"": 1.0 if ready else 0.0})
        if self._embedded.tservers is None:
            return
        servers = {"live": 0.0, "dead": 0.0}
        for info in self._embedded.tmap().describe(self._embedded.now()):
            servers["live" if info.live else "dead"] += 1
        yield gauge("revivify_master_tservers", "Tablet servers this master heard from, live "
                    "or dead (no heartbeat for --tserver-dead-after-ms)", "state", servers)
        if ready:
            catalog = self._gate.catalog
            yield gauge("revivify_master_tablets", "Live tablets by health (ready leader "
                        "only)", "health",
                        health_counts(catalog, self._healer.server_view(catalog)))
            moving = sum(1 for t in catalog.tablets.values() if t.move is not None)
            yield gauge("revivify_master_tablets_moving",
                        "Tablets with a replica move in progress (ready leader only)", None,
                        {"": float(moving)})

    async def run(self, interval: float) -> None:
        while True:
            await trio.sleep(interval)
            if self._embedded.tservers is not None:
                self._see_servers()
            self._see_moves()

    def _see_servers(self) -> None:
        for info in self._embedded.tmap().describe(self._embedded.now()):
            was = self._live.get(info.uuid)
            self._live[info.uuid] = info.live
            if was is None or was == info.live:
                continue
            if info.live:
                logger.info("tablet server %s at %s is live again", info.uuid, info.address)
            else:
                logger.warning("tablet server %s at %s is dead: no heartbeat for %.1f s",
                               info.uuid, info.address, info.seconds_since_heartbeat)

    def _see_moves(self) -> None:
        if self._gate.ready_term is None or self._gate.needs_rebuild:
            self._moves = None  # a new ready term starts from its own snapshot
            return
        now = {t.tablet_id: t.move for t in self._gate.catalog.tablets.values()
               if t.move is not None}
        before, self._moves = self._moves, now
        if before is None:
            return
        for tablet_id, move in sorted(now.items()):
            if before.get(tablet_id) != move:
                self._metrics.moves_started.inc()
                logger.info("tablet %s: replica move off %s started (%s)", tablet_id,
                            move.from_uuid, move.reason or
                            ("automatic" if move.automatic else "operator"))
        for tablet_id, move in sorted(before.items()):
            if tablet_id not in now:
                self._metrics.moves_finished.inc()
                logger.info("tablet %s: replica move off %s finished", tablet_id,
                            move.from_uuid)


__all__ = ["HEALTH", "Watch", "health_counts", "tablet_health"]
