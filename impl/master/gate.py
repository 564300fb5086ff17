"""The leader-ready gate: when this master may serve the catalog, and the snapshot it
serves (seed 004; issue 18).

A loop watches the catalog replica every tick:

    not leader                      ready_term = None; followers answer catalog requests
                                    with MasterNotLeader(hint), a leader not yet ready with
                                    ServiceUnavailable (retryable)
    leader, and it has committed an entry of its term (its no-op) and applied every entry
    of its log (no write of an earlier term still in flight)
                                    under the write lock: snapshot = Catalog.from_rows(the
                                    catalog tablet's rows); ready_term = term; the
                                    tablet-server map is told it leads (it asks every server
                                    for a full report: KUDU-1353/1374); ``opened`` counts up
                                    (the background's CreationWatch starts afresh)

``ReadyGate`` also holds what the gate guards, read by every room of the shell:
``catalog`` (the snapshot, meaningful while ready), ``ready_term``, ``needs_rebuild`` and
``write_lock``. Invariant: while ``ready_in(term)``, ``catalog`` is the committed catalog at
this leader's last write (runner.py says why advancing it by our own ops is enough); a
write that failed marks it for a rebuild (``mark_for_rebuild``: it may still commit), and
nothing is served or sent from it again until the gate has rebuilt it from the rows once
the log is fully applied. Only the runner changes the snapshot between openings
(``advance``), under the write lock.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

import trio

from revivify.impl.tablet.ops import RowOp
from revivify.impl.tserver.replica import Replica

from . import api
from .catalog import Catalog
from .embedded import EmbeddedServer, master_logger
from .tracing import ready_fact

logger = master_logger()


class ReadyGate:
    """The leader-ready gate and the snapshot it guards (module docstring)."""

    def __init__(self, embedded: EmbeddedServer, tick_seconds: float) -> None:
        self._embedded = embedded
        self._tick_seconds = tick_seconds
        self.catalog = Catalog()
        self.ready_term: int | None = None
        self.needs_rebuild = False
        # One catalog write in flight at a time: it covers every row, so it holds whatever
        # a plan's locks name (runner.py), and the gate's rebuild too.
        self.write_lock = trio.Lock()
        self.opened = 0  # how many times the gate opened (each time on a rebuilt snapshot)

    async def run(self) -> None:
        """The gate, every tick (module docstring)."""
        while True:
            await trio.sleep(self._tick_seconds)
            replica = self._embedded.catalog_replica()
            if replica is None:
                continue
            term = replica.core.status().term
            if not replica.core.is_leader():
                self._close(term)
            elif (self.ready_term != term or self.needs_rebuild) and _caught_up(replica):
                async with self.write_lock:
                    if _caught_up(replica):  # checked again: the lock may have waited
                        self._open(replica)

    def _close(self, term: int) -> None:
        if self.ready_term is not None:
            logger.info("master %s: no longer the ready leader (term %d)",
                        self._embedded.uuid, term)
        self.ready_term = None
        self._embedded.tmap().set_leadership(term, False)

    def _open(self, replica: Replica) -> None:
        """Rebuild the snapshot from the rows and open (the caller holds the write lock)."""
        assert self.write_lock.locked()
        status = replica.core.status()
        started = time.perf_counter()
        self.catalog = Catalog.from_rows(replica.store.scan())
        rebuild = time.perf_counter() - started
        self.ready_term = status.term
        self.needs_rebuild = False
        self._embedded.tracer.event("master_ready", ready_fact(
            status.term, replica.store.applied_index, self.catalog))
        self.opened += 1
        self._embedded.tmap().set_leadership(status.term, True)
        logger.info("master %s: ready leader in term %d (%d tables, %d tablets; catalog "
                    "rebuilt in %.3f s)", self._embedded.uuid, status.term,
                    len(self.catalog.tables), len(self.catalog.tablets), rebuild)

    def ready_in(self, term: int) -> bool:
        """Is this master the ready leader of ``term``, its snapshot valid?"""
        return self.ready_term == term and not self.needs_rebuild

    def require_ready(self) -> int:
        """The term this master leads in, ready; else the typed refusal."""
        replica = self._embedded.catalog_replica()
        _, term, leader, address = self._embedded.role_of(replica)
        if replica is None or not replica.core.is_leader():
            raise api.MasterNotLeader(leader, address, term)
        if not self.ready_in(term):
            raise api.ServiceUnavailable(f"leader in term {term}, not ready yet")
        return term

    def advance(self, ops: Iterable[RowOp]) -> None:
        """This leader's write committed and applied: the snapshot follows it (the caller
        holds the write lock)."""
        assert self.write_lock.locked()
        self.catalog = self.catalog.apply_ops(ops)

    def mark_for_rebuild(self) -> None:
        """A write failed but may still commit: serve nothing until the gate rebuilds."""
        self.needs_rebuild = True


def _caught_up(replica: Replica) -> bool:
    """Leader, committed an entry of its term, and applied its whole log."""
    status = replica.core.status()
    return (replica.core.is_leader() and replica.core.committed_in_term()
            and replica.store.applied_index >= status.last_index)


__all__ = ["ReadyGate"]
