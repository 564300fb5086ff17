"""The plan runner: a master operation, planned by the sans-I/O core, run as ONE replicated
catalog write (docs/architecture.md "The master core"; seed 004's ordering contract).

One catalog write is in flight at a time: the gate's write lock covers every catalog row,
so it holds whatever ``plan.locks`` names (a superset, never taken in a conflicting order);
``plan.reserve`` is held in ``reserved`` while the write is in flight so that a CreateTable
of the same name planned meanwhile is refused as NameReserved (retryable). Under the lock
the plan is checked fresh against the snapshot (else planned again, at most
``REPLAN_ATTEMPTS`` times), its write proposed to the local catalog replica as ONE
WriteBatch, and once the replica answers (committed and applied on this leader) the
snapshot advances by that batch's ops and ``plan.commit(snapshot)`` releases the reply and
the calls (``catalog_commit`` traced between the two; the calls go to delivery.py, each
traced ``master_call``, only after the lock is released).

Why the snapshot may be advanced by our ops alone: this master was the ready leader when
it planned and holds the write lock, so every entry between its last write and this one is
its own (or a no-op); an entry of another leader would be of a later term and come after
ours. A write that fails (lost leadership, timeout: KUDU-495) fails the operation with
CatalogWriteFailed, drops the plan, sends nothing, and marks the snapshot for a rebuild
(the write may still commit later under this or another leader): the gate then rebuilds
from the rows once the log is fully applied before anything is served again.

Every proposal carries a fresh (client id, seq) pair: the catalog store applies a pair at
most once. The client id is chosen per process (server.py), so seqs start at 0.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Final, Protocol, TypeVar

import trio

from revivify.impl.rpc import AppError

from . import api
from .calls import TabletServerCall
from .catalog import Catalog
from .counts import MasterMetrics
from .embedded import EmbeddedServer, master_logger
from .errors import MasterError
from .gate import ReadyGate
from .operations import Committed, Plan
from .tracing import commit_fact

logger = master_logger()

R = TypeVar("R")

REPLAN_ATTEMPTS: Final = 8  # a plan that keeps finding its rows changed gives up


class CallSender(Protocol):
    """Where committed calls go (delivery.py CallDelivery)."""

    def send_calls(self, calls: tuple[TabletServerCall, ...], term: int) -> None: ...


class PlanRunner:
    """Runs plans as one replicated catalog write each, in the contract's order."""

    def __init__(self, embedded: EmbeddedServer, gate: ReadyGate, calls: CallSender, *,
                 client_id: str, write_timeout: float,
                 metrics: MasterMetrics | None = None) -> None:
        self._embedded = embedded
        self._metrics = metrics
        self._gate = gate
        self._calls = calls
        self._client_id = client_id
        self._seq = 0
        self._write_timeout = write_timeout
        # Table names of the plans whose write is in flight (NameReserved for others).
        self.reserved: set[str] = set()

    async def run_plan(self, make: Callable[[Catalog], Plan[R] | MasterError]
                       ) -> Committed[R] | MasterError:
        """Plan on the current snapshot and run the plan (module docstring)."""
        for _ in range(REPLAN_ATTEMPTS):
            term = self._gate.require_ready()
            planned = make(self._gate.catalog)
            if isinstance(planned, MasterError):
                return planned
            plan = planned
            async with self._gate.write_lock:
                if self._gate.require_ready() != term or not plan.is_fresh(self._gate.catalog):
                    continue  # someone's write changed a row it read: plan again
                done = await self._commit(plan, term)
            self._calls.send_calls(done.calls, term)
            return done
        raise api.ServiceUnavailable("the catalog kept changing under the request; retry")

    async def run_or_refuse(self, make: Callable[[Catalog], Plan[R] | MasterError]) -> R:
        """``run_plan`` for an RPC handler: a refusal is raised as the typed error."""
        result = await self.run_plan(make)
        if isinstance(result, MasterError):
            raise api.refusal(result)
        return result.reply

    async def _commit(self, plan: Plan[R], term: int) -> Committed[R]:
        """Write a fresh plan's batch and release what it commits (the caller holds the
        write lock; an empty write commits on the snapshot as it is)."""
        assert self._gate.write_lock.locked()
        if plan.write.is_empty():
            return plan.commit(self._gate.catalog)
        replica = self._embedded.catalog_replica()
        assert replica is not None
        batch = plan.write.to_batch(self._client_id, self._seq)
        self._seq += 1
        self.reserved |= plan.reserve
        started = time.perf_counter()
        try:
            with trio.fail_after(self._write_timeout):
                written = await replica.write(batch)
        except (AppError, trio.TooSlowError) as exc:
            # KUDU-495: the operation fails, the master keeps running; the write may still
            # commit, so the snapshot is rebuilt from the rows.
            self._gate.mark_for_rebuild()
            self._count_write("failed", started)
            logger.warning("catalog write of %s failed (the snapshot will be rebuilt): %s",
                           plan.op, exc)
            raise api.CatalogWriteFailed(f"{plan.op}: {exc}") from None
        finally:
            self.reserved -= plan.reserve
        self._count_write("ok", started)
        self._gate.advance(batch.ops)
        self._embedded.tracer.event("catalog_commit", commit_fact(
            term, written.index, plan.op, plan.write.records()))
        return plan.commit(self._gate.catalog)


    def _count_write(self, result: str, started: float) -> None:
        if self._metrics is not None:
            self._metrics.catalog_writes[result].inc()
            self._metrics.catalog_write_seconds.observe(time.perf_counter() - started)


__all__ = ["REPLAN_ATTEMPTS", "CallSender", "PlanRunner"]
