"""Seeded bugs in a real master process, for tests/master_integration/test_master_mutants.py.

Python imports ``sitecustomize`` at start-up from the path; the test puts this directory on
``PYTHONPATH`` and names a mutant in ``REVIVIFY_MASTER_MUTANT``, so the master process it
starts runs with that one bug, and nothing in the product knows about it. Each mutant
breaks one rule of the masters' ordering contract the way a plausible bug would.
"""

from __future__ import annotations

import os
from typing import Any

_MUTANT = os.environ.get("REVIVIFY_MASTER_MUTANT", "")


def _calls_before_commit() -> None:
    """The calls a plan releases are sent as soon as it is planned, before its write
    commits (seed 004: "CreateTable state visible before replication")."""
    from revivify.impl.master import runner
    from revivify.impl.master.errors import MasterError

    original = runner.PlanRunner.run_plan

    async def run_plan(self: Any, make: Any) -> Any:
        def early(catalog: Any) -> Any:
            planned = make(catalog)
            term = self._gate.ready_term
            if not isinstance(planned, MasterError) and term is not None:
                self._calls.send_calls(planned._calls, term)
            return planned
        return await original(self, early)

    runner.PlanRunner.run_plan = run_plan  # type: ignore[method-assign]


def _table_before_tablets() -> None:
    """CreateTable commits the table row alone (its tablets "in a later write" that never
    comes): a table visible half-created."""
    import attrs

    from revivify.impl.master import operations, service
    from revivify.impl.master.catalog import CatalogWrite

    original = operations.plan_create_table

    def plan_create_table(*args: Any, **kwargs: Any) -> Any:
        plan = original(*args, **kwargs)
        if isinstance(plan, operations.Plan) and plan.write.tablets:
            return attrs.evolve(plan, write=CatalogWrite(tables=plan.write.tables))
        return plan

    setattr(service, "plan_create_table", plan_create_table)  # noqa: B010 (not exported)


def _rebuild_loses_rows() -> None:
    """The gate's rebuild reads a stale, empty view of the catalog tablet (as a scan of the
    flushed blocks alone would before the first flush) yet claims the index it applied:
    after a restart the master serves a catalog without the tables it committed
    (ReadyHoldsCommittedRecords; issue 32's first hole)."""
    from revivify.impl.master import gate
    from revivify.impl.master.catalog import Catalog

    class Lossy(Catalog):
        @classmethod
        def from_rows(cls, rows: Any) -> Catalog:
            return Catalog.from_rows(())

    setattr(gate, "Catalog", Lossy)  # noqa: B010 (the gate's own name for it)


def _gate_ignores_leadership() -> None:
    """The gate opens once the catalog replica has applied its whole log, leader or not:
    a follower (here the one master before its first election) passes as the ready
    leader of its term (ReadyLeaderElected; issue 32's second hole)."""
    import trio

    from revivify.impl.master import gate

    async def run(self: Any) -> None:
        while True:
            await trio.sleep(self._tick_seconds)
            replica = self._embedded.catalog_replica()
            if replica is None:
                continue
            status = replica.core.status()
            caught_up = replica.store.applied_index >= status.last_index  # BUG: no leader
            if (self.ready_term != status.term or self.needs_rebuild) and caught_up:
                async with self.write_lock:
                    self._open(replica)

    gate.ReadyGate.run = run  # type: ignore[method-assign]


if _MUTANT == "rebuild_loses_rows":
    _rebuild_loses_rows()
elif _MUTANT == "gate_ignores_leadership":
    _gate_ignores_leadership()
elif _MUTANT == "calls_before_commit":
    _calls_before_commit()
elif _MUTANT == "table_before_tablets":
    _table_before_tablets()
